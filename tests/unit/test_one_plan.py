"""Issue 23 item 1: one plan, one truth. The preview is the undo's own run, simulated (rule 10):
each entry carries the state undo will report, and with the world unchanged in between, undo
reports exactly those states — for same-resource chains, drift behind a gate, and budget cuts."""

from __future__ import annotations

from typing import Any

import amends
from amends import StepState
from core_world import CoreWorld


def states(report: amends.UndoReport | amends.Preview) -> dict[str, StepState | None]:
    if isinstance(report, amends.Preview):
        return {p.step_id: p.predicted for p in report.steps}
    return {s.step_id: s.state for s in report.steps}


async def two_writes(engine: amends.Engine, *values: Any) -> str:
    async with engine.saga("stage twice") as saga:
        for v in values:
            await saga.call("crm.update_field", record_id="r1", field="stage", value=v)
    return saga.id


async def test_the_same_field_written_twice_is_predicted_reverted_twice_as_undo_does_it(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """The agent's own second write is not "someone changed it": s2's inverse puts 'won' back
    before s1 is checked. Before, the preview said s1 needs review and undo reverted both."""
    saga_id = await two_writes(engine, "won", "closed")
    before = list(world.effects)
    preview = await engine.preview(saga_id)
    assert world.effects == before  # nothing but probes ran
    assert [c[1] for c in world.calls[-2:]] == ["probe", "probe"]
    s1 = preview["s1"]
    assert (s1.action, s1.verb, s1.needs_review) == ("revert", "Revert", False)
    assert states(preview) == {"s1": StepState.REVERTED, "s2": StepState.REVERTED}
    assert s1.check == (
        "the world shows 'closed', written by s2 of this saga; undo reverts s2 first, then "
        "finds 'won' again"
    )
    assert preview.needs_review == []
    assert preview.tool_calls == 4  # two probes and two inverses
    report = await engine.undo(saga_id)
    assert states(report) == states(preview)
    assert world.crm["r1"]["stage"] == "lead"


async def test_a_drifted_later_write_is_predicted_to_block_the_earlier_one_as_undo_does(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Two writes to one record (resource crm:r1), the later one drifted: s1 must wait for s2
    (one resource, rule 3). The preview said s1 would be reverted (its own field is as the
    agent left it); undo said blocked. Now both say blocked."""
    world.crm["r1"]["owner"] = "sam"
    async with engine.saga("deal") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r1", field="owner", value="ann")
    world.human_edit("r1", "owner", "bob")
    preview = await engine.preview(saga.id)
    assert preview["s1"].verb == "Acknowledge"  # a person must follow up; it was "Revert"
    assert states(preview) == {"s1": StepState.BLOCKED, "s2": StepState.DRIFTED}
    assert preview["s1"].detail == (
        "not attempted: it must wait for s2 (crm.update_field) to be undone first, and that "
        "step is drifted"
    )
    assert preview["s1"].to_dict()["needs_person"] is True
    assert preview["s2"].check == (
        "someone changed it since the agent acted: expected 'ann', found 'bob'"
    )
    report = await engine.undo(saga.id)
    assert states(report) == states(preview)
    assert report.step("s1").detail == preview["s1"].detail
    assert (world.crm["r1"]["stage"], world.crm["r1"]["owner"]) == ("won", "bob")  # rule 4


async def test_a_budget_cut_is_predicted_for_exactly_the_steps_undo_cuts(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Which steps a tool-call budget covers is decided once, in undo order, so the preview
    (the same decision) predicts it: three writes to one record, budget for two checks and
    inverses."""
    async with engine.saga("three fields") as saga:
        for rid in ("r1", "r2", "r3"):
            world.crm.setdefault(rid, {"stage": "lead", "version": 1})
            saga.call("crm.update_field", record_id=rid, field="stage", value="won")
    budget = amends.Budget(tool_calls=4)
    preview = await engine.preview(saga.id, budget=budget)
    assert states(preview) == {
        "s1": StepState.REVERTED,
        "s2": StepState.REVERTED,
        "s3": StepState.OVER_BUDGET,
    }
    assert preview.tool_calls == 4 and preview.budget["tool_calls"] == 4
    assert preview.retry_reserve == 0 and preview.to_dict()["retry_reserve"] == 0
    report = await engine.undo(saga.id, budget=budget)
    assert states(report) == states(preview)
    assert report.step("s3").detail == preview["s3"].detail
    assert [world.crm[r]["stage"] for r in ("r1", "r2", "r3")] == ["lead", "lead", "won"]


async def test_a_step_waiting_on_one_predicted_failed_is_predicted_blocked(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Gating in the preview is undo's gating: the charge was refunded by hand since (drift), so
    the CRM write that must wait for its refund is predicted blocked, as undo blocks it."""
    async with engine.saga("deal") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
    world.charges["ch_1"]["refunded"] = 5000  # refunded by hand since
    preview = await engine.preview(saga.id)
    assert preview["s1"].verb == "Acknowledge"  # it was "Revert"
    assert states(preview) == {"s1": StepState.BLOCKED, "s2": StepState.DRIFTED}
    report = await engine.undo(saga.id)
    assert states(report) == states(preview)
    assert world.charges["ch_1"]["refunded"] == 5000  # never refunded twice
