"""Issue 29: a reversal's steps run without a task each while none waits for the world
(``amends._reversal.inline``), in the order their tasks would have run them; a step that waits
(a vendor, a stall) gets the others their tasks at once, and the budget's seconds still cut a
stalled inverse off where it waits."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Coroutine
from typing import Any

import pytest

import amends
from amends import StepState

_TAG: contextvars.ContextVar[str] = contextvars.ContextVar("_TAG", default="")


def _notes(stall: set[str] | None = None) -> tuple[amends.Catalog, dict[str, str], list[str]]:
    """A reversible note tool; the inverse of a note in ``stall`` waits 30 s at its vendor. A
    delete leaves a context variable set (a careless tool): no other step may see it."""
    catalog = amends.Catalog()
    notes: dict[str, str] = {}
    undone: list[str] = []
    stalled = stall or set()

    @catalog.tool("note.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> str | None:
        return notes.get(key)

    @catalog.tool("note.put", reversibility="reversible")
    async def put(call: amends.Call, key: str) -> None:
        notes[key] = "x"
        call.inverse("note.delete", key=key)
        call.expect("note.get", {"key": key}, equals="x")

    @catalog.tool("note.delete", reversibility="reversible")
    async def delete(call: amends.Call, key: str) -> None:
        assert _TAG.get() == "", f"{key} saw {_TAG.get()!r} from another step"
        _TAG.set(key)
        if key in stalled:
            await asyncio.sleep(30)
        notes.pop(key, None)
        undone.append(key)

    return catalog, notes, undone


def _count_tasks() -> list[str]:
    """The coroutine name of every task the running loop creates from now on; each must be a
    native coroutine (``async def``): since Python 3.12 a task refuses a generator-based one
    (``create_task`` raised TypeError in an undo whose steps left the lead task)."""
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        assert inspect.iscoroutine(coro), f"a task of {coro!r}: not a native coroutine"
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    return made


async def _saga(engine: amends.Engine, n: int, chain: bool) -> str:
    async with engine.saga("notes") as saga:
        prev: amends.Step | None = None
        for i in range(n):
            after = [prev] if chain and prev is not None else []
            prev = saga.call("note.put", key=f"k{i}", after=after)
            await prev
    return saga.id


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "independent"])
async def test_an_undo_on_an_in_memory_log_makes_no_task_per_step(chain: bool) -> None:
    """The tasks an undo makes do not grow with its steps (none per planned step), and every
    step is undone, a chain in undo order."""
    made_by: dict[int, list[str]] = {}
    for n in (2, 12):
        catalog, notes, undone = _notes()
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        saga_id = await _saga(engine, n, chain)
        made = _count_tasks()
        try:
            report = await engine.undo(saga_id)
        finally:
            asyncio.get_running_loop().set_task_factory(None)
        await engine.close()
        assert report.status == "fully_reversed"
        assert [s.state for s in report.steps] == [StepState.REVERTED] * n
        assert notes == {}
        if chain:
            assert undone == [f"k{i}" for i in reversed(range(n))]
        else:
            assert sorted(undone) == sorted(f"k{i}" for i in range(n))
        made_by[n] = made
    assert made_by[2] == made_by[12]
    assert "_Runner._one" not in made_by[12] and "_in_task" not in made_by[12]


async def test_preview_makes_no_task_per_step_and_predicts_the_undo() -> None:
    """The preview runs the same runner (rule 10): one task for its run, none per step."""
    catalog, _, _ = _notes()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga_id = await _saga(engine, 6, chain=False)
    made = _count_tasks()
    try:
        preview = await engine.preview(saga_id)
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert [s.predicted for s in preview.steps] == [StepState.REVERTED] * 6
    assert made == ["lead"]  # the run's one task
    await engine.close()


@pytest.mark.parametrize("stalled", ["k2", "k0"], ids=["first-in-undo-order", "last"])
async def test_a_stalled_inverse_run_inline_is_cut_off_by_the_budget(stalled: str) -> None:
    """A chain k0 <- k1 <- k2 (undo order k2, k1, k0). The stalled inverse runs in the run's one
    task, where its timeout was armed: the budget's seconds cut it off there (in doubt, the
    cause named), the steps waiting for it are blocked, the others reverted."""
    catalog, notes, undone = _notes(stall={stalled})
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga_id = await _saga(engine, 3, chain=True)
    made = _count_tasks()
    try:
        report = await engine.undo(saga_id, budget=amends.Budget(seconds=0.3))
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    states = {s.step_id: s.state for s in report.steps}
    cut = report.step("s3" if stalled == "k2" else "s1")
    assert cut.state is StepState.IN_DOUBT
    assert "the time budget of 0.3 s ran out while note.delete was running" in cut.detail
    if stalled == "k2":
        assert states == {"s1": StepState.BLOCKED, "s2": StepState.BLOCKED, "s3": cut.state}
        assert undone == []
        assert made.count("_in_task") == 2  # the steps waiting for it, in their own tasks
    else:
        assert states == {"s1": cut.state, "s2": StepState.REVERTED, "s3": StepState.REVERTED}
        assert undone == ["k2", "k1"]
        assert "_in_task" not in made  # nothing else was left to run
    assert report.status == "cannot_undo"
    assert set(notes) == {"k0", "k1", "k2"} - set(undone)
    await engine.close()


async def test_a_stalled_inverse_leaves_independent_steps_to_run_in_parallel() -> None:
    """Independent steps: once one inverse waits at its vendor, the others run in tasks of
    their own at once (rule 3) and are reverted while it stalls; the budget cuts the stall."""
    catalog, notes, undone = _notes(stall={"k0"})
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga_id = await _saga(engine, 4, chain=False)
    report = await engine.undo(saga_id, budget=amends.Budget(seconds=0.3))
    states = [s.state for s in report.steps]
    assert states == [StepState.IN_DOUBT] + [StepState.REVERTED] * 3
    assert sorted(undone) == ["k1", "k2", "k3"]
    assert notes == {"k0": "x"}
    await engine.close()


async def test_an_error_in_a_step_run_inline_stops_the_run_and_leaves_no_coroutine() -> None:
    """A step whose run raises (here: the log refuses every write) fails the undo with that
    error, as a task's error failed the run's ``gather``; no step is left half run."""
    catalog, _, undone = _notes()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga_id = await _saga(engine, 3, chain=False)

    async def refuse(write: Any) -> None:
        raise RuntimeError("the disk is gone")

    engine.log.record_compensation = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the disk is gone"):
        await engine.undo(saga_id)
    assert undone == []
    await engine.close()


@pytest.mark.parametrize("waits", [False, True], ids=["inline", "after-a-wait"])
async def test_a_progress_hook_that_raises_fails_the_undo_and_never_hangs_it(waits: bool) -> None:
    """A hook's error is the run's, whether its step ran in the run's task or in a task of its
    own once another step waited at its vendor: the run ends with it at once, as ``gather``
    ended it, the stalled inverse cancelled (not waited for until the budget's 60 s)."""
    catalog, _, _ = _notes(stall={"k0"} if waits else set())
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga_id = await _saga(engine, 3, chain=False)

    def hook(reversal_id: str, outcome: amends.StepOutcome) -> None:
        raise ValueError(f"hook refused {outcome.step_id}")

    engine.progress_hooks.append(hook)
    with pytest.raises(ValueError, match=r"hook refused s\d"):
        await asyncio.wait_for(engine.undo(saga_id, budget=amends.Budget(seconds=60)), 10)
    await engine.close()
