"""The demo scene (twelve calls, a human edit, two Undo clicks) through the gateway and
``amends sandbox mcp`` gives the same report as in-process (issue 14, must deliver 6)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from amends.sandbox import World, run_demo_async
from amends.sandbox.demo import DEMO_TITLE, HUMAN_STAGE
from conftest import TREE_ENV

pytestmark = pytest.mark.slow

# The agent's twelve calls of amends.sandbox.demo._scene, in order; "$charge" is the charge id.
SCENE: list[tuple[str, dict[str, Any]]] = [
    ("crm.update_field", {"record_id": "acme", "field": "stage", "value": "closed_won"}),
    (
        "payments.charge",
        {"customer": "cus_acme", "cents": 1_200_000, "description": "ACME renewal 2027"},
    ),
    ("crm.update_field", {"record_id": "acme", "field": "last_charge", "value": "$charge"}),
    (
        "mail.send",
        {
            "to": "buyer@acme.example",
            "subject": "Your ACME renewal is confirmed",
            "body": "Thank you! Your renewal is active and your card was charged 12,000.00 USD.",
        },
    ),
    (
        "mail.send",
        {
            "to": "finance@example.com",
            "subject": "ACME renewal booked: 12,000.00 USD",
            "body": "Please recognise the renewal.",
        },
    ),
    (
        "calendar.create_event",
        {
            "title": "ACME renewal kickoff",
            "start": "2026-12-09T15:00:00Z",
            "attendees": ["buyer@acme.example", "dana@example.com"],
        },
    ),
    ("chat.post", {"channel": "#sales", "text": "ACME renewed for 12,000 USD!"}),
    ("crm.add_note", {"record_id": "acme", "text": "Renewal closed by the agent; kickoff booked."}),
    (
        "docs.create_draft",
        {"title": "ACME renewal summary", "text": "ACME renews for 2027 at 12,000 USD."},
    ),
    ("docs.share", {"doc_id": "$draft", "people": ["buyer@acme.example"]}),
    (
        "mail.send_delayed",
        {"to": "dana@example.com", "subject": "Reminder: prepare the ACME kickoff", "delay": 30.0},
    ),
    ("sms.send", {"to": "+1-555-0100", "text": "ACME renewal closed, card charged."}),
]


def sandbox_config(directory: Path, world: Path) -> Path:
    config = directory / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"
title = {json.dumps(DEMO_TITLE)}
actor = "agent:sales"
tenant = "acme"

[[upstream]]
name = "sandbox"
command = {json.dumps(sys.executable)}
args = ["-m", "amends.integrations.mcp", "sandbox", "mcp", "--world", {json.dumps(str(world))}]
contracts = ["builtin:sandbox"]
prefix = false
"""
    )
    return config


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without ids and timings (step ids differ: s1..s12 through MCP)."""
    return {
        "status": report["status"],
        "steps": sorted(
            (s["tool"], s["verb"], s["state"], s["reversibility"], s.get("violation"))
            for s in report["steps"]
        ),
        "residue": sorted(
            (r["what"], tuple(r["parties"]), r["settles_at"]) for r in report["residue"]
        ),
        "manual_actions": sorted(
            (m["who"], tuple(m["parties"]), m["draft"]) for m in report["manual_actions"]
        ),
    }


async def test_demo_scene_through_the_gateway_equals_the_in_process_report(
    tmp_path: Path,
) -> None:
    from mcp import Client, StdioServerParameters

    expected = await run_demo_async(":memory:")
    world_path = tmp_path / "saga.db.world"
    config = sandbox_config(tmp_path, world_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "amends.integrations.mcp", "serve", "--config", str(config)],
        cwd=str(tmp_path),
        env=TREE_ENV,
    )
    async with Client(params) as c:
        ids: dict[str, str] = {}
        for tool, args in SCENE:
            args = {
                k: ids.get(v[1:], v) if isinstance(v, str) and v.startswith("$") else v
                for k, v in args.items()
            }
            r = await c.call_tool(tool, args)
            assert not r.is_error, (tool, r.content)
            if tool == "payments.charge":
                ids["charge"] = r.structured_content["id"]
            if tool == "docs.create_draft":
                ids["draft"] = r.structured_content["id"]
            if tool == "chat.post":
                ids["chat"] = r.structured_content["id"]
        # Between forward and undo, as in the demo: the account owner edits the stage (drift),
        # a channel member reads the post, a few sandbox seconds pass.
        world = World(str(world_path))
        try:
            world.crm.human_edit("acme", "stage", HUMAN_STAGE)
            world.chat.member_reads(ids["chat"], "sam")
            world.advance(5.0)
        finally:
            world.close()
        first, second = await asyncio.gather(
            c.call_tool("amends_undo", {}), c.call_tool("amends_undo", {})
        )
    got = first.structured_content
    assert got["reversal_id"] == second.structured_content["reversal_id"]
    want = comparable(expected.report.to_dict())
    assert comparable(got) == want, _diff(comparable(got), want)
    world = World(str(world_path))
    try:
        assert world.crm.read_field("acme", "stage") == HUMAN_STAGE  # the person's edit stands
    finally:
        world.close()


def _diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    """A readable diff for the failure message (- through MCP, + in-process)."""
    import difflib

    return "\n".join(
        difflib.unified_diff(
            json.dumps(got, indent=1, default=str).splitlines(),
            json.dumps(want, indent=1, default=str).splitlines(),
            "through the gateway",
            "in-process",
            lineterm="",
        )
    )
