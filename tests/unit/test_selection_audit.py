"""Issue 27, re-checked: a selective undo asked while the agent is still running. Its closure
needs the saga's every step (a step the agent has not run yet may depend on a chosen one), and a
reversal claimed now would stop the agent's later steps — the kept ones too. So it is refused,
nothing written, the agent runs on; once the saga finished, the same selection undoes exactly
its closure."""

from __future__ import annotations

import asyncio

import pytest

import amends
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio


async def test_a_selection_asked_while_the_saga_runs_is_refused_and_the_agent_runs_on(
    engine: amends.Engine, world: CoreWorld
) -> None:
    world.crm["r2"]["charge"] = None
    started = asyncio.Event()
    ids: list[str] = []

    async def agent() -> None:
        async with engine.saga("Charge and record") as saga:
            ids.append(saga.id)
            charge = saga.call("pay.charge", customer="c1", cents=5000)
            await charge
            started.set()
            await asyncio.sleep(0.1)  # the person clicks "Undo only this" on the charge now
            saga.call("crm.update_field", record_id="r2", field="charge", value=charge["id"])
            saga.call("crm.update_field", record_id="r1", field="stage", value="won")

    running = asyncio.ensure_future(agent())
    await started.wait()
    sid = ids[0]
    before = await engine.log.events(sid)
    for ask in ({"steps": ["s1"]}, {"since": "s1"}):
        with pytest.raises(amends.SagaStateError) as err:
            await engine.undo(sid, **ask)  # type: ignore[arg-type]
        assert str(err.value) == (
            f"saga {sid!r} is still running: undoing only some steps takes back what depends "
            f"on them, and a step the agent has not run yet may; wait until it finishes (if "
            f"its process stopped, `amends recover` ends it), or undo the whole saga now (what "
            f"it has not run yet is then cancelled)"
        )
        with pytest.raises(amends.SagaStateError):
            await engine.preview(sid, **ask)  # type: ignore[arg-type]
    assert await engine.log.events(sid) == before, "nothing written"
    await running
    saga = await engine.log.get_saga(sid)
    assert saga is not None and [s.state for s in saga.steps] == ["done", "done", "done"]
    assert world.crm["r1"]["stage"] == "won" and world.crm["r2"]["charge"] == "ch_1"
    report = await engine.undo(sid, steps=["s1"])  # finished: the closure is known
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "compensated"),
        ("s2", "reverted"),
    ]
    assert report.selection is not None and report.selection["kept"] == ["s3"]
    assert world.crm["r2"]["charge"] is None and world.crm["r1"]["stage"] == "won"
    assert world.charges["ch_1"]["refunded"] == 5000
