"""Issue 23 (every reversal that stops can be finished): an inverse cut off in flight by the
budget — the seconds ran out while it ran, or its answer was lost with no call left to ask
again — and no budget left to look with its probes. The reversal stopped short for want of
budget, so the step stays ``in_doubt`` but can be continued (rules 6, 7): a continuation
with a new budget checks whether it landed before anything is sent again (rule 5), and the steps
it gated follow. Before, the step was ``in_doubt`` ("its probes could not tell", though none
had run), ``resume`` answered "nothing to continue", and the reversal could not be finished."""

from __future__ import annotations

import asyncio

import amends
from amends import StepState
from core_world import CoreWorld


def states(report: amends.UndoReport) -> dict[str, StepState]:
    return {s.step_id: s.state for s in report.steps}


async def three_writes(engine: amends.Engine) -> str:
    async with engine.saga("stage three times") as saga:
        for v in ("a", "b", "c"):
            await saga.call("crm.update_field", record_id="r1", field="stage", value=v)
    return saga.id


async def test_an_inverse_cut_off_by_the_time_budget_is_continued_not_left_in_doubt(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga_id = await three_writes(engine)

    async def slow_on_b() -> None:  # the vendor is slow when undoing s2 (stage is 'b')
        if world.crm["r1"]["stage"] == "b":
            await asyncio.sleep(5)

    world.hooks["crm.update_field"] = slow_on_b
    report = await engine.undo(saga_id, budget=amends.Budget(seconds=0.5))
    assert states(report) == {
        "s1": StepState.BLOCKED,
        "s2": StepState.IN_DOUBT,
        "s3": StepState.REVERTED,
    }
    detail = report.step("s2").detail
    assert detail.startswith("the time budget of 0.5 s ran out while crm.update_field was ")
    assert detail.endswith(
        "whether it took effect is unknown; no budget was left to look with its probes (time "
        "budget of 0.5s spent before crm.read_field could run): continuing with a new budget "
        "checks whether it took effect before anything is sent again"
    )
    manual = report.step("s2").manual_action
    assert manual is not None and manual.what.endswith(
        f"Or continue with a new budget, which looks first: amends undo {saga_id} --continue "
        f"--budget-calls N --budget-seconds S"
    )
    assert await engine.continuable(saga_id) == ["s2"]  # s1 follows it
    assert world.crm["r1"]["stage"] == "b"
    del world.hooks["crm.update_field"]  # the vendor is fast again
    preview = await engine.preview(saga_id)  # rule 10: what the continuation will do
    assert {p.step_id: p.predicted for p in preview.steps} == {
        "s1": StepState.REVERTED,
        "s2": StepState.REVERTED,
        "s3": StepState.REVERTED,
    }
    done = await engine.resume(saga_id, budget=amends.Budget())
    assert done.reversal_id == report.reversal_id
    assert states(done) == dict.fromkeys(("s1", "s2", "s3"), StepState.REVERTED)
    assert done.status == "fully_reversed"
    assert world.crm["r1"]["stage"] == "lead"
    undos = [e for e in world.effects if e[2].endswith(":undo")]
    assert [e[1] for e in undos] == ["r1.stage=b", "r1.stage=a", "r1.stage=lead"]


async def test_a_lost_inverse_answer_with_no_call_left_is_continued_not_left_in_doubt(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga_id = await three_writes(engine)

    def lost_on_b() -> None:  # the connection drops once when undoing s2
        if world.crm["r1"]["stage"] == "b" and "lost" not in world.seen_keys:
            world.seen_keys["lost"] = True
            raise ConnectionResetError("connection reset by peer")

    world.hooks["crm.update_field"] = lost_on_b
    report = await engine.undo(saga_id, budget=amends.Budget(tool_calls=4))
    assert states(report) == {
        "s1": StepState.BLOCKED,
        "s2": StepState.IN_DOUBT,
        "s3": StepState.REVERTED,
    }
    assert report.step("s2").detail == (
        "crm.update_field raised ConnectionResetError: connection reset by peer (its answer was "
        "lost) and the budget leaves no call to ask again (tool-call budget of 4 spent); whether "
        "it took effect is unknown; no budget was left to look with its probes (tool-call budget "
        "of 4 spent before crm.read_field could run): continuing with a new budget checks "
        "whether it took effect before anything is sent again"
    )
    done = await engine.resume(saga_id, budget=amends.Budget())
    assert states(done) == dict.fromkeys(("s1", "s2", "s3"), StepState.REVERTED)
    assert world.crm["r1"]["stage"] == "lead"
    undos = [e for e in world.effects if e[2].endswith(":undo")]
    assert [e[1] for e in undos] == ["r1.stage=b", "r1.stage=a", "r1.stage=lead"]


async def test_a_cut_off_inverse_a_person_resolved_is_not_looked_at_again(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """The person checked it and handled it by hand (rule 6): a continuation does not send or
    look at it again; the steps it gated follow."""
    saga_id = await three_writes(engine)

    async def slow_on_b() -> None:
        if world.crm["r1"]["stage"] == "b":
            await asyncio.sleep(5)

    world.hooks["crm.update_field"] = slow_on_b
    await engine.undo(saga_id, budget=amends.Budget(seconds=0.5))
    del world.hooks["crm.update_field"]
    world.human_edit("r1", "stage", "a")  # the person put 'a' back by hand
    await engine.resolve(saga_id, "s2", by="ops@acme", note="set the stage back to 'a' by hand")
    assert await engine.continuable(saga_id) == ["s1"]
    done = await engine.resume(saga_id, budget=amends.Budget())
    assert states(done)["s2"] is StepState.IN_DOUBT
    assert states(done)["s1"] is StepState.REVERTED
    assert world.crm["r1"]["stage"] == "lead"
    undos = [e for e in world.effects if e[2].endswith(":undo")]
    assert [e[1] for e in undos] == ["r1.stage=b", "r1.stage=lead"]


async def test_a_step_still_running_when_the_budget_ran_out_is_undone_by_a_continuation(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Rule 7 bounds waiting for a forward step still in flight: undo reports it ``in_doubt``.
    Once it has finished (the charge went through, its refund recorded), a continuation undoes
    it, as the preview predicts. Before, the preview said "compensated" while ``resume``
    answered "nothing to continue" and ``undo`` kept "in_doubt": the charge stood for good."""
    release = asyncio.Event()

    async def held() -> None:  # the processor answers the charge late
        world.hooks.pop("pay.charge")
        await release.wait()

    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def agent() -> None:
        async with engine.saga("deal") as saga:
            started.set_result(saga.id)
            await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
            world.hooks["pay.charge"] = held
            await saga.call("pay.charge", customer="c1", cents=5000)

    forward = asyncio.create_task(agent())
    saga_id = await started
    while not world.calls or world.calls[-1][0] != "pay.charge":  # the charge is in flight
        await asyncio.sleep(0.01)
    report = await engine.undo(saga_id, budget=amends.Budget(seconds=0.3))
    assert states(report) == {"s1": StepState.REVERTED, "s2": StepState.IN_DOUBT}
    assert report.step("s2").detail == (
        "the call's outcome is unknown (it was still running when the time budget of 0.3 s ran "
        "out; once it has finished, continuing the reversal undoes it); check whether it happened"
    )
    release.set()
    await forward  # the charge went through after all
    assert world.charges["ch_1"]["refunded"] == 0
    assert await engine.continuable(saga_id) == ["s2"]
    preview = await engine.preview(saga_id)
    assert preview["s2"].predicted is StepState.COMPENSATED
    done = await engine.resume(saga_id)
    assert states(done) == {"s1": StepState.REVERTED, "s2": StepState.COMPENSATED}
    assert done.reversal_id == report.reversal_id
    assert world.charges["ch_1"]["refunded"] == 5000
    again = await engine.undo(saga_id)
    assert states(again) == states(done)
