"""Issue 23: a resolution stands for the step while it stands, and a drift check that could not
run can be finished (rules 4, 6, 8). On the real engine with a SQLite file log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import amends
from amends import StepState
from core_world import CoreWorld, close_deal, refunds


@pytest.fixture
async def file_engine(
    tmp_path: Path, world_and_catalog: tuple[CoreWorld, amends.Catalog]
) -> AsyncIterator[amends.Engine]:
    eng = amends.Engine(
        world_and_catalog[1],
        log=amends.SqliteLog(str(tmp_path / "amends.db")),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    yield eng
    await eng.close()


async def test_a_resolved_over_budget_step_is_not_attempted_until_the_resolution_is_withdrawn(
    file_engine: amends.Engine, world: CoreWorld
) -> None:
    """s2's refund stops for the budget; a person refunds by bank transfer (the ledger's
    ``refunded`` stays 0, so no drift check can see it) and resolves it. Before: resume sent
    the refund anyway (a second refund). Now: not attempted while the resolution stands; s1,
    which waited for it, is reverted; after a withdrawal a continuation refunds."""
    engine = file_engine
    saga = await close_deal(engine)
    first = await engine.undo(saga.id, budget=amends.Budget(tool_calls=0))
    assert first.step("s2").state is StepState.OVER_BUDGET
    assert first.step("s1").state is StepState.BLOCKED
    await engine.resolve(saga.id, "s2", by="ann", note="refunded by bank transfer, ref 8812")
    assert await engine.continuable(saga.id) == ["s1"]
    preview = await engine.preview(saga.id)
    assert {p.step_id: p.predicted for p in preview.steps} == {
        "s1": StepState.REVERTED,
        "s2": StepState.OVER_BUDGET,
    }
    report = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert refunds(world) == 0 and world.charges["ch_1"]["refunded"] == 0
    assert world.crm["r1"]["stage"] == "lead"
    s2 = report.step("s2")
    assert (s2.state, s2.attempts) == (StepState.OVER_BUDGET, 0)
    assert s2.detail == first.step("s2").detail
    assert report.step("s1").state is StepState.REVERTED
    assert report.resolutions["s2"]["by"] == "ann"
    assert report.headline == "1 of 2 taken back · 1 handled by a person"
    assert report.open_manual_actions == []
    assert [r["tool_calls"] for r in report.runs] == [0, 2]  # s1's probe and write-back
    with pytest.raises(amends.SagaStateError, match="nothing to continue"):
        await engine.resume(saga.id)
    await engine.withdraw_resolution(saga.id, "s2", by="ann", note="the bank bounced it")
    assert await engine.continuable(saga.id) == ["s2"]
    again = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert again.step("s2").state is StepState.COMPENSATED
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000
    assert again.headline == "2 of 2 taken back (1 compensated, leaving a trace)"


async def test_a_resolved_blocked_step_is_not_attempted_when_what_it_waited_for_clears(
    file_engine: amends.Engine, world: CoreWorld
) -> None:
    """s1 blocked behind an over-budget s2; a person reverts s1 by hand in a way the probe does
    not see (here: nothing to see, the stage is back as the agent wrote it after a detour) and
    resolves it. A continuation refunds s2 and leaves s1 to the person."""
    engine = file_engine
    saga = await close_deal(engine)
    await engine.undo(saga.id, budget=amends.Budget(tool_calls=0))
    await engine.resolve(saga.id, "s1", by="ann", note="handled in the CRM by hand")
    assert await engine.continuable(saga.id) == ["s2"]
    report = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert report.step("s2").state is StepState.COMPENSATED
    s1 = report.step("s1")
    assert (s1.state, s1.attempts) == (StepState.BLOCKED, 0)
    assert world.crm["r1"]["stage"] == "won"  # untouched by amends: the person's
    assert [e[0] for e in world.effects].count("crm.update_field") == 1  # the agent's only
    assert report.headline == (
        "1 of 2 taken back (1 compensated, leaving a trace) · 1 handled by a person"
    )


async def test_a_drift_check_the_vendor_could_not_answer_is_unchecked_and_can_be_retried(
    file_engine: amends.Engine, world: CoreWorld
) -> None:
    """The payment vendor is unreachable when undo checks the charge. Before: ``drifted`` and
    retry refused it ("not failed"), so nobody could finish it. Now: the detail says the check
    could not run, retry accepts it once the vendor is back and checks again."""
    engine = file_engine
    saga = await close_deal(engine)
    world.faults["pay.get_charge"] = [ConnectionError("connection refused")] * 10
    first = await engine.undo(saga.id)
    s2 = first.step("s2")
    assert s2.state is StepState.DRIFTED
    assert s2.detail == (
        "could not check the world before undoing (pay.get_charge raised ConnectionError: "
        "connection refused; no value was read); not touched, needs review"
    )  # rule 8: never "someone changed it", nor a read "that may have taken effect"
    assert s2.manual_action is not None and "someone changed" not in s2.manual_action.what
    assert refunds(world) == 0
    world.faults.clear()  # the vendor is back
    report = await engine.retry(saga.id, ["s2"], by="ann")
    assert (report.step("s2").state, report.step("s1").state) == (
        StepState.COMPENSATED,
        StepState.REVERTED,
    )
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000
    assert world.crm["r1"]["stage"] == "lead"


async def test_a_retried_unchecked_step_that_really_drifted_is_left_as_it_is(
    file_engine: amends.Engine, world: CoreWorld
) -> None:
    engine = file_engine
    saga = await close_deal(engine)
    world.faults["pay.get_charge"] = [ConnectionError("connection refused")] * 10
    await engine.undo(saga.id)
    world.faults.clear()
    world.charges["ch_1"]["refunded"] = 5000  # meanwhile someone refunded in the vendor's UI
    report = await engine.retry(saga.id, ["s2"])
    s2 = report.step("s2")
    assert s2.state is StepState.DRIFTED
    assert s2.detail == (
        "someone changed it since the agent acted: expected 0, found 5000; left as it is"
    )
    assert refunds(world) == 0 and world.charges["ch_1"]["refunded"] == 5000
    with pytest.raises(amends.SagaStateError, match="not failed"):
        await engine.retry(saga.id, ["s2"])  # observed drift is never retried blindly


async def test_observed_drift_is_still_not_retryable(
    file_engine: amends.Engine, world: CoreWorld
) -> None:
    engine = file_engine
    saga = await close_deal(engine)
    world.charges["ch_1"]["refunded"] = 100
    first = await engine.undo(saga.id)
    assert first.step("s2").state is StepState.DRIFTED
    with pytest.raises(amends.SagaStateError, match="not failed"):
        await engine.retry(saga.id, ["s2"])
    assert refunds(world) == 0
