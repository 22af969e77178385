"""A catalog for ``test_hints_paste``: ``paste_tools:CATALOG``, loaded by the CLI from
``--catalog`` (rule 12). Its world is this module's: a settings store. It holds what a new
user's own project holds: a reversible setting, a tool nobody declared (a lookup) and a
reversible tool that records no expectation (a contract violation)."""

from __future__ import annotations

from typing import Any

import amends

SETTINGS: dict[str, Any] = {}
CATALOG = amends.Catalog()


def reset() -> None:
    SETTINGS.clear()


@CATALOG.tool("settings.read", reversibility="read_only")
async def read(call: amends.Call, key: str) -> Any:
    return SETTINGS.get(key)


@CATALOG.tool(
    "settings.set",
    reversibility="reversible",
    resources=lambda args: [f"settings:{args['key']}"],
    describe="Set {key} to '{value}'",
)
async def set_value(call: amends.Call, key: str, value: Any) -> None:
    call.inverse("settings.set", key=key, value=SETTINGS.get(key))
    SETTINGS[key] = value
    call.expect("settings.read", {"key": key}, equals=value)


@CATALOG.tool("lookup.weather")  # not declared: treated as irreversible
async def weather(call: amends.Call, city: str) -> dict[str, int]:
    return {"celsius": 12}


@CATALOG.tool("settings.flag", reversibility="reversible", describe="Flag {key}")
async def flag(call: amends.Call, key: str) -> None:  # records no expectation: a violation
    SETTINGS[f"flag:{key}"] = True
    call.inverse("settings.unflag", key=key)


@CATALOG.tool("settings.unflag", reversibility="irreversible")
async def unflag(call: amends.Call, key: str) -> None:
    SETTINGS.pop(f"flag:{key}", None)
