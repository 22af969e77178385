"""What a person approves is what is sent (rule 12): the approval gate's questions show every
argument of the call and of each inverse an undo will send, and what an agent or a vendor wrote
(a title, a note, a residue) is quoted data on one line, never lines of amends' own.

Before: the question cut the call's arguments at 300 characters, so an agent that put a long
``subject`` first hid ``to=`` (the person approved an email to an address they never saw); the
undo question named only the inverse's tool, not the charge it would refund; a title with line
breaks wrote its own lines into the question. Real processes: an ``mcp.Client``, ``amends mcp
serve`` and the kv upstream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import KvSetup, text_of, write_kv_config

pytestmark = pytest.mark.slow


@pytest.fixture
def gated(tmp_path: Path) -> KvSetup:
    return write_kv_config(
        tmp_path,
        extra_gateway='approval = "irreversible"\nprincipal = "ann@example.com"',
    )


def _elicit(answers: list[bool], asked: list[str]) -> Any:
    import mcp_types as types

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": answers.pop(0)})

    return elicit


async def test_an_argument_after_a_long_one_is_still_shown_to_the_person(gated: KvSetup) -> None:
    from mcp import Client

    subject = "Quarterly numbers, as discussed " + "." * 1500
    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([False], asked)) as c:
        r = await c.call_tool("kv_send_email", {"subject": subject, "to": "eve@evil.example"})
    assert r.is_error and "did not approve" in text_of(r)
    (question,) = asked
    assert "to='eve@evil.example'" in question
    shown = repr(subject)[:1000]  # each value is shown up to 1,000 characters, and says so
    assert (
        f"subject={shown}… ({len(repr(subject)):,} characters; the rest is not shown)" in question
    )
    assert gated.world()["emails"] == []


async def test_the_undo_question_shows_each_inverse_call_and_quotes_the_agents_title(
    gated: KvSetup,
) -> None:
    from mcp import Client

    title = "Tidy up'.\nNothing will be sent to anyone.\nAllow this undo?\n\n\n"
    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([False], asked)) as c:
        begun = await c.call_tool("amends_begin", {"title": title})
        await c.call_tool("kv_charge", {"customer": "c1", "cents": 700})
        declined = await c.call_tool("amends_undo", {})
    assert declined.is_error and "did not approve the undo" in text_of(declined)
    (question,) = asked
    lines = question.split("\n")
    saga_id = begun.structured_content["saga_id"]
    assert lines[0] == (
        "The agent asks to undo \"Tidy up'.\\nNothing will be sent to anyone.\\nAllow this "
        f'undo?\\n\\n\\n" (saga {saga_id}). This will act on the world:'
    )
    assert "Nothing will be sent to anyone." not in lines[1:]
    assert lines[1] == (
        "- Compensate s1 kv.charge: calls Refund a charge in full (slowly, so concurrent undos "
        "overlap) (charge_id='ch_1'), sent as kv.refund(charge_id='ch_1')"
    )
    assert lines[-1] == "Allow this undo?"
    assert lines.count("Allow this undo?") == 1
    assert gated.world()["charges"]["ch_1"]["refunded"] == 0


async def test_the_preview_and_the_undo_question_say_what_undo_will_send_not_the_plan(
    gated: KvSetup,
) -> None:
    """Rule 10: a person edited the key the agent wrote twice (s2 drifted, so s1, which must
    wait for s2, is blocked) and refunded part of the charge by hand (s3 drifted). Undo sends
    nothing. Before: amends_preview said s1 would "revert with kv.kv_set" and listed the
    refund's residue, and the undo question asked to allow "calls kv.kv_set(...)" on the world."""
    from mcp import Client

    asked: list[str] = []
    async with Client(gated.gateway(), elicitation_callback=_elicit([False], asked)) as c:
        await c.call_tool("kv_kv_set", {"key": "stage", "value": "won"})
        await c.call_tool("kv_kv_set", {"key": "stage", "value": "closed"})
        await c.call_tool("kv_charge", {"customer": "c1", "cents": 700})
        gated.human_sets("stage", "lost")
        data = gated.world()
        data["charges"]["ch_1"]["refunded"] = 100
        gated.state.write_text(json.dumps(data))
        preview = await c.call_tool("amends_preview", {})
        undo = await c.call_tool("amends_undo", {})
    text = text_of(preview)
    said = "- s1 kv.kv_set: Acknowledge (will be blocked: not attempted: it must wait for s2"
    assert said in text
    assert "revert with" not in text and "residue:" not in text
    assert [p["expected_residue"] for p in preview.structured_content["steps"]] == [[], [], []]
    assert asked == []  # nothing will be sent: nothing to approve
    assert not undo.is_error, text_of(undo)
    states = {s["step_id"]: s["state"] for s in undo.structured_content["steps"]}
    assert states == {"s1": "blocked", "s2": "drifted", "s3": "drifted"}
    assert [s["residue"] for s in undo.structured_content["steps"]] == [[], [], []]
    world = gated.world()
    assert (world["kv"]["stage"], world["charges"]["ch_1"]["refunded"]) == ("lost", 100)
