"""Rule 7 (issue 24, item 7): a budget is spent so that it completes steps. Five independent
steps each need a drift check and an inverse; with three tool calls, one step is reverted and
the other four are over budget and continuable, never three checks made and nothing reverted."""

from __future__ import annotations

import pytest

import amends
from amends import StepState
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio

RECORDS = ("r1", "r2", "r3", "r4", "r5")


async def five_independent_updates(engine: amends.Engine, world: CoreWorld) -> amends.Saga:
    for r in RECORDS:
        world.crm[r] = {"stage": "lead", "version": 1}
    async with engine.saga("Update five deals", actor="agent:sales") as saga:
        steps = [
            saga.call("crm.update_field", record_id=r, field="stage", value="won") for r in RECORDS
        ]
        await saga.gather(*steps)
    return saga


async def test_three_calls_on_five_independent_steps_revert_one_and_leave_four_continuable(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await five_independent_updates(engine, world)
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=3))
    states = sorted(s.state.value for s in report.steps)
    assert states == ["over_budget"] * 4 + ["reverted"]
    assert report.tool_calls == 2  # one check and one inverse; the third call could finish nothing
    assert [world.crm[r]["stage"] for r in RECORDS].count("lead") == 1
    probes = [c for c in world.calls if c[0] == "crm.read_field"]
    assert len(probes) == 1  # no check of a step the budget could not finish
    for s in report.steps:
        if s.state is StepState.OVER_BUDGET:
            assert s.detail == (
                "tool-call budget of 3 leaves 1 call(s), too few for a step that needs 2 (its "
                "check and its inverse) before crm.read_field could run"
            )
            assert s.manual_action is not None
            assert f"amends undo {saga.id} --continue" in s.manual_action.what

    more = await engine.resume(saga.id, budget=amends.Budget(tool_calls=8))
    assert sorted(s.state.value for s in more.steps) == ["reverted"] * 5
    assert [world.crm[r]["stage"] for r in RECORDS] == ["lead"] * 5


async def test_the_continue_hint_is_the_engines(catalog: amends.Catalog, world: CoreWorld) -> None:
    """Where a person undoes from says how to continue (the MCP gateway: amends_undo)."""
    engine = amends.Engine(
        catalog,
        log=amends.SqliteLog(":memory:"),
        continue_hint='amends_undo {"saga_id": "{saga_id}", "continue": true}',
    )
    try:
        saga = await five_independent_updates(engine, world)
        report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=2))
    finally:
        await engine.close()
    waiting = [s for s in report.steps if s.state is StepState.OVER_BUDGET]
    assert len(waiting) == 4
    for s in waiting:
        assert s.manual_action is not None
        assert f'amends_undo {{"saga_id": "{saga.id}", "continue": true}}' in s.manual_action.what
        assert "amends undo" not in s.manual_action.what
