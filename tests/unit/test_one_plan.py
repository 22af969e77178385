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


def residue_of(report: amends.UndoReport | amends.Preview) -> dict[str, list[dict[str, Any]]]:
    """Each step's residue: what the preview says undo will leave, what the report says it left."""
    if isinstance(report, amends.Preview):
        return {p.step_id: [r.to_dict() for r in p.expected_residue] for p in report.steps}
    return {s.step_id: [r.to_dict() for r in s.residue] for s in report.steps}


async def test_a_step_predicted_to_stand_is_previewed_leaving_no_residue_as_undo_leaves_none(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Rule 10: the residue the preview lists is the residue undo leaves. A charge someone
    partly refunded by hand since (drift) and one the budget cuts are not refunded, so no refund
    is pending. Before: the preview listed "Refund of 50.00 to c1" under both (the CLI's
    "leaves:", the web page's "Leaves:", amends_preview's "residue:") and the report had none."""
    async with engine.saga("deal") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        saga.call("pay.charge", customer="c2", cents=700)
    world.charges["ch_1"]["refunded"] = 100  # refunded in part by hand since
    budget = amends.Budget(tool_calls=2)  # s2's check, then too few for s3's check and refund
    preview = await engine.preview(saga.id, budget=budget)
    assert states(preview) == {
        "s1": StepState.BLOCKED,
        "s2": StepState.DRIFTED,
        "s3": StepState.OVER_BUDGET,
    }
    assert residue_of(preview) == {"s1": [], "s2": [], "s3": []}
    report = await engine.undo(saga.id, budget=budget)
    assert states(report) == states(preview)
    assert residue_of(report) == residue_of(preview)
    assert [c["refunded"] for c in world.charges.values()] == [100, 0]
    # the continuation's preview: s3's refund will leave its residue, exactly as undo then does
    preview = await engine.preview(saga.id)
    assert residue_of(preview)["s3"] == [
        {"what": "Refund of 7.00 to c2", "parties": ["c2"], "settles_at": "2026-12-07"}
    ]
    assert residue_of(preview)["s2"] == []
    report = await engine.resume(saga.id, budget=amends.Budget())
    assert states(report)["s3"] is StepState.COMPENSATED
    assert residue_of(report) == residue_of(preview)
    assert world.charges["ch_2"]["refunded"] == 700
