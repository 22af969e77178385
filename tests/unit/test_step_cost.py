"""Issue 29, the cost of a step: a tool call that answers without waiting arms no timer, and
the tool's timeout still means what it meant (counted from the call's start, cancelling the
tool where it waits)."""

from __future__ import annotations

import asyncio
import time
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


def _count_timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every timer armed on the running loop from now on (``loop.call_at``)."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    real = loop.call_at

    def call_at(when: float, *args: Any, **kw: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return real(when, *args, **kw)

    monkeypatch.setattr(loop, "call_at", call_at)
    return armed


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
