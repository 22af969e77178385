"""The scripted scene through every adapter (sync and async) and plain amends: the exact saga,
report and final world, and the agreement of all of them (issue 15, "Done when")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_scene import (
    PLAYERS,
    STREAMERS,
    TITLE,
    human_edit,
    neutral_report,
    new_engine,
    saga_shape,
    step_tools,
)

CASES = (
    [("plain", False)]
    + [(name, sync) for name in PLAYERS if name != "plain" for sync in (False, True)]
    + [(name, False) for name in STREAMERS]
)
IDS = [f"{name}-{'sync' if sync else 'async'}" for name, sync in CASES]

EXPECTED_STEPS = {
    # tool: (state after the run, dependencies by tool)
    "crm.update_field": ("done", ()),
    "payments.charge": ("done", ()),
    # turn 2 depends on what the model had seen: both results of turn 1
    "chat.post": ("done", ("crm.update_field", "payments.charge")),
    "lookup_weather": ("done", ("crm.update_field", "payments.charge")),
}


async def play(name: str, sync: bool) -> dict[str, Any]:
    world, engine = new_engine()
    saga_id = await {**PLAYERS, **STREAMERS}[name](engine, sync=sync)
    shape = await saga_shape(engine, saga_id)
    human_edit(world)  # between forward and undo
    preview = await engine.preview(saga_id)  # rule 10: same planner, probes only
    tool_of = {p.step_id: p.step.tool for p in preview.steps}
    first = await engine.undo(saga_id)
    second = await engine.undo(saga_id)
    tools = await step_tools(engine, saga_id)
    await engine.close()
    return {
        "shape": shape,
        "first": first,
        "second": second,
        "report": neutral_report(first, tools),
        "preview": {tool_of[p.step_id]: (p.verb, p.needs_review) for p in preview.steps},
        "world": world.snapshot(),
        "effects": neutral_effects(world.effects(), tools),
    }


def neutral_effects(effects: list[dict[str, Any]], tools: dict[str, str]) -> list[str]:
    """The world's effects without ids that differ per saga, step ids named by tool, sorted
    (parallel calls of one turn have no order)."""
    out = []
    for e in effects:
        # the idempotency key holds the saga id; "call" counts vendor calls process-wide
        e = {k: v for k, v in e.items() if k not in ("idempotency_key", "call")}
        if isinstance(e.get("tag"), str) and ":" in e["tag"]:
            sid, rest = e["tag"].split(":", 1)
            e["tag"] = f"{tools.get(sid, sid)}:{rest}"
        out.append(json.dumps(e, sort_keys=True))
    return sorted(out)


@pytest.mark.parametrize(("name", "sync"), CASES, ids=IDS)
async def test_scene_gives_the_exact_saga_report_and_world(name: str, sync: bool) -> None:
    """Two parallel calls in turn 1, two dependent calls in turn 2, a human edit, undo twice:
    one saga with the right dependencies, one reversal, the exact report and final world."""
    out = await play(name, sync)
    assert out["shape"].title == TITLE
    assert out["shape"].steps == EXPECTED_STEPS

    assert out["preview"] == {
        "crm.update_field": ("Acknowledge", True),  # drifted: needs review, not "Revert"
        "payments.charge": ("Compensate", False),
        "chat.post": ("Compensate", False),
        "lookup_weather": ("Acknowledge", False),
    }
    first, second = out["first"], out["second"]
    assert second.reversal_id == first.reversal_id  # rule 6: undo twice -> one reversal
    assert second.to_dict() == first.to_dict()
    assert first.status == "cannot_undo"
    states = {s.tool: (s.verb, s.state.value) for s in first.steps}
    assert states == {
        "crm.update_field": ("Acknowledge", "drifted"),  # rule 8: the verb never claims more
        "payments.charge": ("Compensate", "compensated"),
        "chat.post": ("Compensate", "compensated"),
        "lookup_weather": ("Acknowledge", "acknowledged"),
    }
    report = out["report"]
    assert [r["what"] for r in report["residue"]] == [
        "Refund of 50.00 USD for charge ch_1 to cus_acme is pending; the original charge stays "
        "on their statement",
        "Members of #sales (dana, sam, lee) were already notified of the post; deleting it does "
        "not unsend the notification",
    ]
    assert [(m["step_id"], m["who"]) for m in report["manual_actions"]] == [
        ("<crm.update_field>", "the person who asked the agent"),
        # issue 26: a framework tool with no contract is "not declared"; its owner declares it
        ("<lookup_weather>", "the owner of the tool lookup_weather"),
    ]
    assert [s["step_id"] for s in report["steps"] if not s["declared"]] == ["<lookup_weather>"]

    world = out["world"]
    # the owner's edit stands (rule 4), the charge is refunded once, the post is deleted
    assert world["crm"]["records"]["acme"]["fields"]["stage"] == "contract_sent"
    charge = world["payments"]["charges"]["ch_1"]
    assert (charge["cents"], charge["refunded"]) == (5000, 5000)
    assert len(world["payments"]["refunds"]) == 1
    assert world["chat"]["messages"]["chat_1"]["status"] == "deleted"
    refunds = [e for e in out["effects"] if json.loads(e)["op"] == "refund"]
    assert len(refunds) == 1  # one reversal, one refund, however often undo is asked


@pytest.mark.parametrize(("name", "sync"), CASES[1:], ids=IDS[1:])
async def test_every_adapter_agrees_with_plain_amends(name: str, sync: bool) -> None:
    """The same scene gives the same report (to_dict minus ids and timings), preview, saga and
    final world in LangChain, LangGraph, Pydantic AI, OpenAI Agents and plain amends."""
    reference = await play("plain", False)
    out = await play(name, sync)
    assert out["shape"] == reference["shape"]
    assert out["report"] == reference["report"]
    assert out["preview"] == reference["preview"]
    assert out["world"] == reference["world"]
    assert out["effects"] == reference["effects"]
