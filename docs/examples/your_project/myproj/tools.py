"""My project's tools and their contracts, in an importable module (myproj.tools), so the
amends CLI and server can load the catalog by name: --catalog myproj.tools:catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import amends

STORE = Path("settings.json")  # the "vendor": a settings file in the project directory
catalog = amends.Catalog()


def _load() -> dict[str, Any]:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


@catalog.tool("settings.read", reversibility="read_only")
async def read(call: amends.Call, key: str) -> Any:
    return _load().get(key)


@catalog.tool(
    "settings.set",
    reversibility="reversible",
    resources=lambda args: [f"settings:{args['key']}"],  # later sets of a key are undone first
    describe="Set {key} to {value}",
)
async def set_value(call: amends.Call, key: str, value: Any) -> dict[str, Any]:
    data = _load()
    before = data.get(key)
    data[key] = value
    STORE.write_text(json.dumps(data))
    call.inverse("settings.set", key=key, value=before)  # the value seen now, stored as data
    call.expect("settings.read", {"key": key}, equals=value)  # undo only if still ours
    return {"key": key, "value": value}
