"""One contract, two transports, one truth: the same contract file runs through the MCP gateway
(a real gateway process in front of ``upstream_plain.py``, an ordinary mcp 2.x server) and
through ``amends.load_toml_catalog`` (the same tools behind a loopback HTTP vendor that calls
the very same functions on a world of its own). The forward calls, the undo, the worlds they
leave and every word of the two reports -- states, verbs, details, residue, manual actions --
are the same."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import amends
from contract_setup import PLAIN_SERVER, Vendor, http_vendor, plain_gateway, reply, text_of

pytestmark = pytest.mark.slow

CONTRACTS = """
[errors]
refused = "Refused:"

[[tool]]
name = "note_get"
reversibility = "read_only"

[[tool]]
name = "note_delete"
reversibility = "irreversible"

[[tool]]
name = "note_set"
describe = "Write the note {key}"
reversibility = "reversible"
resources = ["note:{args.key}"]
[[tool.capture]]
name = "old"
tool = "note_get"
args = { key = "{args.key}" }
path = "text"
absent_when = "no note named"
[tool.inverse]
tool = "note_set"
args = { key = "{args.key}", text = "{capture.old}" }
[tool.expect]
probe = "note_get"
args = { key = "{args.key}" }
path = "text"
equals = "{args.text}"
[tool.if_absent]
capture = "old"
inverse = { tool = "note_delete", args = { key = "{args.key}" } }
[tool.if_absent.expect]
probe = "note_get"
args = { key = "{args.key}" }
path = "text"
equals = "{args.text}"

[[tool]]
name = "get_charge"
reversibility = "read_only"

[[tool]]
name = "refund"
reversibility = "irreversible"
idempotent = true

[[tool]]
name = "charge"
describe = "Charge {cents} cents to {customer}"
reversibility = "compensable"
idempotent = true
[tool.inverse]
tool = "refund"
args = { charge_id = "{result.id}" }
[tool.expect]
probe = "get_charge"
args = { charge_id = "{result.id}" }
path = "refunded"
equals = 0
[tool.residue]
what = "Refund of {args.cents|money} to {result.customer} is pending"
parties = ["{result.customer}"]
settles_in_business_days = 3

[[tool]]
name = "send_email"
describe = "Email '{subject}' to {to}"
[tool.acknowledge]
who = "the sender"
parties = ["{args.to}"]
draft = "Please disregard my email '{args.subject}'."
"""

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("note_set", {"key": "n1", "text": "bye"}),
    ("note_set", {"key": "n2", "text": "new"}),
    ("charge", {"customer": "c1", "cents": 120000}),
    ("send_email", {"to": "bob@acme.test", "subject": "Won", "body": "hello"}),
]


def _plain(state: Path) -> ModuleType:
    """``upstream_plain.py``'s tool functions, on the world file ``state``."""
    os.environ["PLAIN_STATE"] = str(state)
    try:
        spec = importlib.util.spec_from_file_location(f"plain_{state.parent.name}", PLAIN_SERVER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del os.environ["PLAIN_STATE"]
    return module


def _vendor(plain: ModuleType) -> Any:
    """An HTTP vendor whose ``POST /<tool>`` runs that tool of ``plain``; an error the tool
    raises is a 400 with its words (as the SDK's error is an MCP ``isError`` with them)."""

    def handle(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        with vendor.lock:
            body = vendor.bodies[-1] or {}
        try:
            result = getattr(plain, req.path.strip("/"))(**body)
        except Exception as exc:
            return reply(req, 400, str(exc))
        return reply(req, 200, result)

    return handle


def _words(report: dict[str, Any]) -> dict[str, Any]:
    """What a person reads in a report, without its ids, times and counters."""
    steps = [(s["step_id"], s["tool"], s["verb"], s["state"], s["detail"]) for s in report["steps"]]
    residue = [(r["what"], r["parties"], r["settles_at"]) for r in report["residue"]]
    manual = [(m["what"], m["who"], m["draft"]) for m in report["manual_actions"]]
    return {"status": report["status"], "steps": steps, "residue": residue, "manual": manual}


async def _through_mcp(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from mcp import Client

    setup = plain_gateway(tmp_path, CONTRACTS)
    setup.seed(notes={"n1": "hello"})
    async with Client(setup.gateway()) as c:
        for tool, args in CALLS:
            r = await c.call_tool(tool, args)
            assert not r.is_error, (tool, text_of(r))
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content is not None, text_of(undo)
    return undo.structured_content, setup.world()


async def _through_http(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    state = tmp_path / "plain.json"
    plain = _plain(state)
    plain._save({**plain._load(), "notes": {"n1": "hello"}})
    with http_vendor(_vendor(plain)) as (base, _vendor_record):
        path = tmp_path / "contracts.toml"
        path.write_text(
            re.sub(
                r'^\[\[tool\]\]\nname = "(\w+)"$',
                lambda m: f'{m.group(0)}\nhttp = {{ url = "{base}/{m.group(1)}" }}',
                CONTRACTS,
                flags=re.M,
            )
        )
        engine = amends.Engine(amends.load_toml_catalog(path), log=str(tmp_path / "saga.db"))
        async with engine.saga("plain session") as saga:
            for tool, args in CALLS:
                await saga.call(tool, **args)
        report = await engine.undo(saga.id)
        await engine.close()
    return report.to_dict(), json.loads(state.read_text())


async def test_the_same_contract_through_http_and_mcp_says_the_same_words(tmp_path: Path) -> None:
    (tmp_path / "mcp").mkdir()
    (tmp_path / "http").mkdir()
    mcp_report, mcp_world = await _through_mcp(tmp_path / "mcp")
    http_report, http_world = await _through_http(tmp_path / "http")
    assert _words(http_report) == _words(mcp_report)
    # independent branches are undone in parallel (rule 3): the journal's order may differ
    journals = [sorted(map(str, w.pop("journal"))) for w in (http_world, mcp_world)]
    assert journals[0] == journals[1]
    assert http_world == mcp_world
    assert mcp_world["notes"] == {"n1": "hello"}
    assert mcp_world["charges"]["ch_1"]["refunded"] == 120000
    assert _words(mcp_report)["steps"] == [
        ("s1", "note_set", "Revert", "reverted", "reverted with note_set"),
        ("s2", "note_set", "Revert", "reverted", "reverted with note_delete"),
        ("s3", "charge", "Compensate", "compensated", "compensated with refund"),
        ("s4", "send_email", "Acknowledge", "acknowledged", _words(mcp_report)["steps"][3][4]),
    ]
