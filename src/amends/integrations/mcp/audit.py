"""``amends audit --mcp-config`` (and ``amends mcp audit``): each upstream tool, its contract
class, and the server's annotations shown as hints only. A hint never upgrades a tool above
irreversible (issue 14): a server that says ``readOnlyHint`` is still irreversible until a
person writes a contract.

``--suggest`` writes a draft contract file for the tools without a contract. The draft starts
with ``reviewed = false``, which :func:`~.contracts.load_contracts` refuses, so nothing in it is
used until a person has reviewed it. Nothing is inferred from a tool's name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from amends import Catalog, Engine

from .config import load_config
from .gateway import Gateway

__all__ = ["audit_rows", "suggest"]


async def audit_rows(config_path: str) -> list[dict[str, Any]]:
    """One row per exported tool: names, ``class`` (the class value, e.g. ``irreversible``),
    ``label`` (how it reads, e.g. ``irreversible (no contract)``), whether a contract declares
    it, the server's hints."""
    config = load_config(config_path)
    engine = Engine(Catalog(), log=":memory:")
    rows: list[dict[str, Any]] = []
    async with Gateway(config, engine=engine, audit=True) as gw:
        for exp in gw.exported.values():
            spec = gw.catalog.get(exp.catalog_name)
            tool = exp.upstream.tools[exp.tool]
            ann = tool.annotations
            hints = {
                "read_only_hint": ann.read_only_hint if ann else None,
                "destructive_hint": ann.destructive_hint if ann else None,
                "idempotent_hint": ann.idempotent_hint if ann else None,
                "open_world_hint": ann.open_world_hint if ann else None,
            }
            note = ""
            if exp.contract is None:
                note = "not declared — treated as irreversible"  # issue 26
                if hints["read_only_hint"]:
                    note += " (the server hints read-only; a hint is not a contract)"
            elif hints["read_only_hint"] and spec.reversibility.value != "read_only":
                note = "the server hints read-only, the contract says otherwise: contract wins"
            rows.append(
                {
                    "upstream": exp.upstream.name,
                    "tool": exp.tool,
                    "agent_name": exp.agent_name,
                    "catalog_name": exp.catalog_name,
                    # issue 24 item 11: the class value itself; the words for people in "label"
                    "class": spec.reversibility.value,
                    "label": spec.reversibility.value
                    + ("" if exp.contract is not None else " (no contract)"),
                    "contract": exp.contract is not None,
                    "hints": hints,
                    "description": (tool.description or "").strip().split("\n")[0],
                    "arguments": sorted((tool.input_schema or {}).get("properties") or {}),
                    "note": note,
                }
            )
        # what the gateway would refuse at start-up (issue 24 item 4), one row each
        rows += [
            {
                "upstream": "",
                "tool": "",
                "agent_name": "(contract error)",
                "catalog_name": "",
                "class": "",
                "label": "",
                "contract": True,
                "hints": {},
                "description": "",
                "arguments": [],
                "note": f"{problem}; the gateway refuses to start",
                "problem": problem,
            }
            for problem in gw.problems
        ]
        await engine.close()
    return rows


def suggest(rows: list[dict[str, Any]]) -> str:
    """A draft contract file for the rows without a contract (see the module docstring)."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"# Draft contracts written by `amends audit --suggest` on {now}.",
        "# NOT USED until a person has reviewed every entry and deleted `reviewed = false`.",
        "# Every tool starts irreversible, the safe default: raise a class only with an inverse",
        "# and an expectation you have checked (see docs/mcp.md). Server hints are shown as",
        "# comments; they are the server's claims, not a contract.",
        "reviewed = false",
    ]
    for r in rows:
        if r["contract"]:
            continue
        hints = ", ".join(f"{k}={v}" for k, v in r["hints"].items() if v is not None) or "none"
        out += [
            "",
            f"# {r['upstream']}: {r['description'] or '(no description)'}",
            f"# server hints: {hints}",
            f"# arguments: {', '.join(r['arguments']) or 'none'}",
            "[[tool]]",
            f"name = {_q(r['tool'])}",
            'reversibility = "irreversible"',
        ]
        if r["hints"]["read_only_hint"]:
            out.append('# if it truly has no effect: reversibility = "read_only"')
        out.append('# acknowledge = { who = "...", parties = ["{args.<who>}"], draft = "..." }')
    return "\n".join(out) + "\n"


def _q(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
