"""Issue 29, the fan-out step's event-loop cost: what a finished fan-out leaves to the cyclic
garbage collector (nothing), and what ``saga.gather`` costs the loop per step (no done callback
of each step's task), with gather's outcomes unchanged where a step ends some other way."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import amends


def _catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("t.noop", reversibility="reversible")
    async def noop(call: amends.Call, i: int) -> int:
        call.inverse("t.noop", i=i)
        call.no_drift_check(reason="a test no-op: nothing anyone could change")
        return i

    @catalog.tool("t.slow")
    async def slow(call: amends.Call, i: int) -> int:
        await asyncio.sleep(0.05)
        return i

    @catalog.tool("t.refused")
    async def refused(call: amends.Call, i: int) -> int:
        raise amends.PermanentError("the vendor said no")

    return catalog


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


async def test_a_finished_fan_outs_saga_and_steps_are_freed_without_a_cyclic_collection(
    tmp_path: Path, no_cyclic_gc: None
) -> None:
    """The saga and its steps do not hold each other (a step's saga is a weak reference; the
    saga's heartbeat task is let go at its end), so once the agent drops the saga and the step
    handles, reference counting frees them with their Tasks: nothing waits for a cyclic
    collection, which walks every live object (issue 29: ~19 % of a 1,000-step fan-out's wall
    time went to the collector). The steps' outcomes are durable and the saga completed."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(str(tmp_path / "f.db")))
    refs: list[weakref.ref[Any]] = []

    async def fan_out() -> str:
        async with engine.saga("fan-out") as saga:
            steps = [saga.call("t.noop", i=i) for i in range(50)]
            assert await saga.gather(*steps) == list(range(50))
        assert steps[0].saga is saga  # while the agent holds the saga
        refs.extend(weakref.ref(o) for o in (saga, *steps, *(s.task for s in steps)))
        return saga.id

    saga_id = await fan_out()
    for _ in range(3):  # the heartbeat task's cancellation runs on a later loop pass
        await asyncio.sleep(0)
    alive = [r() for r in refs if r() is not None]
    assert alive == [], f"{len(alive)} objects wait for the cyclic collector: {alive[:3]}"
    record = await engine.log.get_saga(saga_id)
    assert record is not None and record.state == "completed"
    assert [s.state for s in record.steps] == ["done"] * 50
    await engine.close()


async def test_a_step_outlives_its_saga_with_its_id_and_outcome(
    tmp_path: Path, no_cyclic_gc: None
) -> None:
    """A step handle kept after the saga is gone still says what it was and what it returned;
    only its ``saga`` (a weak reference) is then ``None``."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(":memory:"))

    async def one() -> amends.Step:
        async with engine.saga("one step") as saga:
            step = saga.call("t.noop", i=7)
            assert await step == 7
        return step

    step = await one()
    for _ in range(3):
        await asyncio.sleep(0)
    assert step.saga is None
    assert (step.id, step.state, step.result) == ("s1", "done", 7)
    assert step.saga_id.startswith("saga_")
    await engine.close()


_CALLBACKS = """
import asyncio, sys
import amends

catalog = amends.Catalog()

@catalog.tool("t.noop")
async def noop(call, i):
    return i

async def fan_out(engine):
    async with engine.saga("fan-out") as saga:
        return await saga.gather(*(saga.call("t.noop", i=i) for i in range(200)))

async def main():
    engine = amends.Engine(catalog, log=amends.SqliteLog(sys.argv[1]))
    await fan_out(engine)  # warm-up
    loop = asyncio.get_running_loop()
    real, scheduled = loop.call_soon, []
    def counted(callback, *args, **kwargs):
        scheduled.append(callback)
        return real(callback, *args, **kwargs)
    loop.call_soon = counted
    try:
        results = await fan_out(engine)
    finally:
        del loop.call_soon
    await engine.close()
    print(len(scheduled), results == list(range(200)))

asyncio.run(main())
"""


def test_a_fan_out_step_schedules_no_done_callback_of_its_task(tmp_path: Path) -> None:
    """``saga.gather`` is told by each step's task as its last act, not by a done callback the
    loop schedules when the task ends: per step of a 200-step fan-out on a SQLite file, the loop
    runs the Task's start and its wake-up when its intent is durable, and (a few per fan-out)
    the writer thread's hand-backs and the gather's own wake-up; 3.02 per step before. In a
    fresh interpreter (OpenTelemetry imported by another test would wrap each step in a span,
    which keeps the done callbacks). Every step's result is returned."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "AMENDS_LOG_KEY"}
    out = subprocess.run(
        [sys.executable, "-c", _CALLBACKS, str(tmp_path / "fan.db")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout.split()
    assert out[1] == "True"
    per_step = int(out[0]) / 200
    assert per_step < 2.2, f"{per_step:.2f} loop callbacks per step"


async def test_gather_raises_the_first_failure_while_other_steps_still_run() -> None:
    """A step that fails wakes the gather at once (its task's last act), with its error, while
    the slower steps still run; a second gather over the same steps then waits for them all."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("fail fast") as saga:
        slow = [saga.call("t.slow", i=i) for i in range(3)]
        bad = saga.call("t.refused", i=9)
        with pytest.raises(amends.StepFailedError, match="the vendor said no"):
            await saga.gather(*slow, bad)
        assert [s.task is not None and s.task.done() for s in slow] == [False] * 3
        assert await saga.gather(*slow) == [0, 1, 2]
    await engine.close()


async def test_two_gathers_over_the_same_running_steps_both_get_every_result() -> None:
    """Concurrent gathers share the steps: one is told by the steps' tasks, the other by their
    done callbacks; both return every result in order."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("two gathers") as saga:
        steps = [saga.call("t.slow", i=i) for i in range(4)]
        first, second = await asyncio.gather(saga.gather(*steps), saga.gather(*steps[::-1]))
        assert (first, second) == ([0, 1, 2, 3], [3, 2, 1, 0])
    await engine.close()


async def test_a_gather_cancelled_midway_leaves_the_steps_running_and_gatherable() -> None:
    """Cancelling a gather (the agent's wait) cancels no step; the steps finish, and a later
    gather over them returns their results (no step keeps telling the cancelled gather)."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("cancelled wait") as saga:
        steps = [saga.call("t.slow", i=i) for i in range(3)]
        wait = asyncio.ensure_future(saga.gather(*steps))
        await asyncio.sleep(0.01)
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait
        assert all(s._waiter is None for s in steps)
        assert await saga.gather(*steps) == [0, 1, 2]
        assert [s.state for s in steps] == ["done"] * 3
    await engine.close()


async def test_a_gather_over_a_step_cancelled_before_it_started_raises_cancelled() -> None:
    """A step's task cancelled before its code ran never reaches its last act; the gather is
    told by the task's done callback and raises CancelledError, as before, instead of waiting
    for ever."""
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("cancelled step") as saga:
        ok = saga.call("t.slow", i=1)
        gone = saga.call("t.slow", i=2)
        assert gone.task is not None
        gone.task.cancel()  # before its first step ran
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(saga.gather(ok, gone), timeout=5)
        assert await ok == 1
    assert (ok.state, gone.state) == ("done", "pending")  # its tool was never called
    await engine.close()
