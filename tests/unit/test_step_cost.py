"""Issue 29, the cost of a step: a tool call that answers without waiting arms no timer, and
the tool's timeout still means what it meant (counted from the call's start, cancelling the
tool where it waits)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

import amends
from amends import StepState
from amends._calls import invoke


def _call(tool: str = "t.x") -> amends.Call:
    return amends.Call(
        saga_id="saga_1",
        step_id="s1",
        tool=tool,
        phase="forward",
        idempotency_key="k",
        attempt=1,
    )


def _spy_loop(monkeypatch: pytest.MonkeyPatch, method: str) -> list[Any]:
    """The first argument of every call of the running loop's ``method`` from now on (the time
    of each ``call_at``, the callback of each ``call_soon``)."""
    loop = asyncio.get_running_loop()
    seen: list[Any] = []
    real = getattr(loop, method)

    def spy(first: Any, *args: Any, **kw: Any) -> Any:
        seen.append(first)
        return real(first, *args, **kw)

    monkeypatch.setattr(loop, method, spy)
    return seen


def _count_timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every timer armed on the running loop from now on (``loop.call_at``)."""
    return _spy_loop(monkeypatch, "call_at")


async def test_a_tool_that_answers_at_once_arms_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: the timeout's timer is armed only when the tool waits; the answer is the same."""

    async def at_once(call: amends.Call, n: int) -> dict[str, Any]:
        return {"n": n, "tool": call.tool}

    armed = _count_timers(monkeypatch)
    assert await invoke(at_once, _call(), {"n": 3}, 5.0) == {"n": 3, "tool": "t.x"}
    assert armed == []


async def test_a_tool_that_waits_is_cut_at_its_timeout_counted_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool that first blocks (synchronously) for most of its timeout, then waits: the
    deadline is the call's start plus the timeout, not the moment it first waited."""
    cut: list[str] = []

    async def blocks_then_waits(call: amends.Call) -> str:
        time.sleep(0.15)  # noqa: ASYNC251 -- a synchronous client inside an async tool
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            cut.append("cancelled where it waited")
            raise
        return "late"

    armed = _count_timers(monkeypatch)
    t0 = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        await invoke(blocks_then_waits, _call(), {}, 0.2)
    assert cut == ["cancelled where it waited"]
    # the tool's own sleep arms a timer too; the timeout's is the one at start + 0.2 s
    assert any(w == pytest.approx(t0 + 0.2, abs=0.05) for w in armed), armed


async def test_a_tool_waiting_past_its_timeout_is_in_doubt_and_says_so() -> None:
    """Rule 9 through the engine: the cut call is in doubt, the detail names the timeout, and
    a step answering at once in the same saga is done with its result."""
    catalog = amends.Catalog()
    effects: list[str] = []

    @catalog.tool("t.slow", reversibility="irreversible", timeout=0.05)
    async def slow(call: amends.Call) -> str:
        effects.append("slow started")
        await asyncio.sleep(5)
        effects.append("slow finished")
        return "never"

    @catalog.tool("t.fast", reversibility="irreversible", timeout=0.05)
    async def fast(call: amends.Call, n: int) -> int:
        effects.append("fast")
        return n + 1

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("timeouts") as saga:
        f = saga.call("t.fast", n=1)
        s = saga.call("t.slow")
        assert await f == 2
        with pytest.raises(amends.StepFailedError):
            await s
    report = await engine.undo(saga.id)
    await engine.close()
    assert effects == ["fast", "slow started"]
    assert report.step("s2").state is StepState.IN_DOUBT
    assert "t.slow timed out after 0.05 s" in report.step("s2").detail
    assert report.step("s1").state is StepState.ACKNOWLEDGED  # irreversible: it stands


async def test_a_failed_write_on_an_in_memory_log_leaves_no_trace_and_no_stale_head() -> None:
    """Issue 29: a write on a ``:memory:`` log runs alone in its transaction (no batch). A write
    that appends a record and then fails is rolled back whole: its SQLite error arrives as a
    LogError naming the log, any other error as it was raised, nothing of it stays, and the head
    it cached is not carried to the next write (the chain and the saga head still verify)."""
    import sqlite3

    from amends._log.sql import _append

    async def noop(call: amends.Call) -> None:
        return None

    catalog = amends.Catalog()
    catalog.tool("t.x", reversibility="irreversible")(noop)
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("fails midway") as saga:
        await saga.call("t.x")
        count = await log.db.read(lambda tx: tx.execute("SELECT count(*) FROM records"))

        def appends_then(exc: Exception) -> Any:
            def fn(tx: Any) -> None:
                _append(tx, log.signing_key, saga.id, "event", 1.0, '{"lost":true}')
                raise exc

            return fn

        with pytest.raises(amends.LogError, match="':memory:'"):
            await log.db.write(appends_then(sqlite3.IntegrityError("UNIQUE constraint failed")))
        with pytest.raises(KeyError, match="not sqlite"):
            await log.db.write(appends_then(KeyError("not sqlite")))
        assert await log.db.read(lambda tx: tx.execute("SELECT count(*) FROM records")) == count
        await saga.call("t.x")
    assert await log.verify() == []
    assert await log.verify(saga.id) == []
    record = await log.get_saga(saga.id)
    assert record is not None and [s.state for s in record.steps] == ["done", "done"]
    await engine.close()


@pytest.fixture
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """No saga span, whatever tracer provider an earlier test set: ``await step`` then waits on
    the future the step's task wakes (with a span it waits on a shield of the task)."""
    from amends import _saga
    from amends._telemetry import NO_SAGA_TRACE

    monkeypatch.setattr(_saga, "saga_trace", lambda saga_id, tenant: NO_SAGA_TRACE)


def _one_tool_engine(effects: list[str], *, wait: float = 0.0) -> amends.Engine:
    catalog = amends.Catalog()

    @catalog.tool("t.x", reversibility="irreversible")
    async def x(call: amends.Call, n: int) -> int:
        effects.append(f"started {n}")
        if wait:
            await asyncio.sleep(wait)
        effects.append(f"finished {n}")
        return n

    return amends.Engine(catalog, log=amends.SqliteLog(":memory:"))


async def test_cancelling_an_await_of_a_step_leaves_the_step_running_to_done(
    untraced: None,
) -> None:
    """Issue 29: ``await step`` waits on a future the step's task wakes, not on a shield; as
    with the shield, cancelling the wait cancels only the wait, and the step ends done."""
    effects: list[str] = []
    engine = _one_tool_engine(effects, wait=0.05)
    async with engine.saga("cancelled wait") as saga:
        step = saga.call("t.x", n=1)
        waiting = asyncio.ensure_future(step._wait())
        await asyncio.sleep(0.01)
        assert step._waiter is not None  # the wait is on the future the task wakes
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not step.task.done()  # type: ignore[union-attr]
        assert await step == 1  # a second await waits again, and sees the result
    assert effects == ["started 1", "finished 1"]
    assert step.state == "done"
    await engine.close()


@pytest.mark.parametrize(
    "how",
    [
        "the saga's _cancel, after the await began",
        "step.task.cancel(), after the await began",
        "step.task.cancel(), before the await",
    ],
)
async def test_a_step_cancelled_before_it_started_ends_the_await_of_it_cancelled(
    untraced: None, how: str
) -> None:
    """Issue 29: the step's task wakes the ``await step`` when its body ends; a task cancelled
    before its body started never runs it, so the task's end wakes the await (as the shield
    raised CancelledError then): the await ends, the tool is never called. However the cancel
    arrives: through the saga, or ``step.task.cancel()`` by anyone (which hung the await
    forever until 2026-12-05)."""
    effects: list[str] = []
    engine = _one_tool_engine(effects)
    loop = asyncio.get_running_loop()
    steps: list[amends.Step] = []

    def cancel() -> None:
        if how.startswith("the saga's"):
            steps[0]._cancel()
        else:
            assert steps[0].task is not None
            steps[0].task.cancel()

    async def run() -> None:
        async with engine.saga("cancelled before start") as saga:
            if how.endswith("after the await began"):
                loop.call_soon(cancel)  # runs before the step's task starts
            steps.append(saga.call("t.x", n=1))
            if how.endswith("before the await"):
                cancel()
            await steps[0]

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run(), 5)  # a TimeoutError here: the await was never woken
    assert effects == []
    assert steps[0].task is not None and steps[0].task.cancelled()
    await engine.close()


async def test_a_step_that_ran_schedules_no_callback_for_that_guard(
    untraced: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel-before-start guard of ``await step`` (the waiter's ``cancel`` as a done
    callback of the step's task) is taken off once the step's body ran: its end schedules no
    loop callback for it (issue 29's cost per step)."""
    effects: list[str] = []
    engine = _one_tool_engine(effects)
    async with engine.saga("plain") as saga:
        scheduled = _spy_loop(monkeypatch, "call_soon")
        step = saga.call("t.x", n=1)
        assert await step == 1
        await asyncio.sleep(0)  # the task's done callbacks, had there been any, ran by now
        monkeypatch.undo()
    guards = [
        cb
        for cb in scheduled
        if getattr(cb, "__name__", "") == "cancel" and hasattr(cb, "__self__")
    ]
    assert guards == []
    assert scheduled, "the loop's call_soon was not seen: the test measures nothing"
    assert effects == ["started 1", "finished 1"]
    await engine.close()


@contextlib.contextmanager
def _intents_refused(engine: amends.Engine) -> Iterator[None]:
    """The log refuses every step intent while this is open (a write that fails)."""
    real = engine.log.begin_step

    async def refuse(intent: Any) -> bool:
        raise amends.LogError("the log refused the intent")

    engine.log.begin_step = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        engine.log.begin_step = real  # type: ignore[method-assign]


async def test_an_awaited_step_whose_task_fails_raises_the_tasks_error(untraced: None) -> None:
    """Issue 29: the step's task ending with an error (its intent could not be written) hands
    that error to ``await step``, as the shield did."""
    effects: list[str] = []
    engine = _one_tool_engine(effects)
    async with engine.saga("log refuses") as saga:
        with _intents_refused(engine), pytest.raises(amends.LogError, match="refused the intent"):
            await saga.call("t.x", n=1)
        assert await saga.call("t.x", n=2) == 2
    assert effects == ["started 2", "finished 2"]
    await engine.close()


async def test_awaiting_a_step_whose_task_already_failed_raises_its_error_again(
    untraced: None,
) -> None:
    """A step awaited after its task ended with an error raises that error on every await,
    as awaiting the shield of the finished task did."""
    effects: list[str] = []
    engine = _one_tool_engine(effects)
    async with engine.saga("log refuses") as saga:
        with _intents_refused(engine):
            step = saga.call("t.x", n=1)
            await asyncio.sleep(0)
            assert step.task is not None and step.task.done()
            for _ in range(2):
                with pytest.raises(amends.LogError, match="refused the intent"):
                    await step
    assert effects == []
    await engine.close()
