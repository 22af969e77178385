"""Issue 29: a step hands its outcome record to the log and does not wait for it; rule 1 holds
where the outcome is used (a dependent's start, ``await step``, ``gather``, the saga's exit),
and a failure writing it surfaces there, with the same error as when the step waited."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import LogError

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fanout import budget  # noqa: E402


def _catalog(calls: list[str], gate: asyncio.Event | None = None) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("t.echo", reversibility="irreversible")
    async def echo(call: amends.Call, v: Any) -> Any:
        calls.append(call.step_id)
        if gate is not None and call.step_id == "s1":
            await gate.wait()
        return {"v": v}

    return catalog


def test_a_fan_out_step_wakes_the_event_loop_three_times_not_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted per step of a 300-step fan-out on a SQLite file (deterministic counts): the
    step's task starts, wakes once when its intent is durable, and gather hears it end; the
    outcome's durability is waited for once per committed batch, not by every step (4.01
    callbacks per step before, one of them the task's second wake-up). Tracing off (another
    test may have set a tracer provider for the whole process)."""
    monkeypatch.setattr("amends._telemetry.tracer", lambda: None)
    catalog = amends.Catalog()

    @catalog.tool("bench.noop", reversibility="read_only")
    async def noop(call: amends.Call, i: int) -> int:
        return i

    loop = asyncio.new_event_loop()
    try:
        engine = amends.Engine(catalog, log=amends.SqliteLog(tmp_path / "log.db"))
        counts = budget(loop, engine, 300)
        loop.run_until_complete(engine.close())
    finally:
        loop.close()
    assert counts["Tasks"] < 1.05, counts  # one per step (and the saga's heartbeat)
    assert counts["futures"] < 2.2  # the intent's and the outcome's write, and a few waits
    assert counts["loop callbacks"] < 3.5, counts


async def test_await_gather_and_a_dependent_wait_for_the_outcome_to_be_durable(
    tmp_path: Path,
) -> None:
    """Another process holds the log's write lock after a step's intent committed: the step's
    tool returns, but the agent's await, gather and the dependent step all wait until its
    outcome record is committed; then each sees it."""
    calls: list[str] = []
    gate = asyncio.Event()
    log = amends.SqliteLog(tmp_path / "log.db", busy_timeout=30)
    log.db.inline_when_idle = False  # type: ignore[attr-defined]  # every write via the writer
    engine = amends.Engine(_catalog(calls, gate), log=log)
    holder = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        async with engine.saga("durable before use") as saga:
            a = saga.call("t.echo", v=1)
            b = saga.call("t.echo", v=a["v"])
            while calls != ["s1"]:  # s1's intent is durable, its tool is running
                await asyncio.sleep(0.005)
            holder.execute("BEGIN IMMEDIATE")  # the lock another process would hold
            gate.set()
            awaited = asyncio.ensure_future(a._wait())
            gathered = asyncio.ensure_future(saga.gather(a))
            await asyncio.sleep(0.3)
            assert (a.state, awaited.done(), gathered.done(), calls) == (
                "intent",
                False,
                False,
                ["s1"],
            )
            holder.execute("COMMIT")
            assert await awaited == {"v": 1}
            assert await gathered == [{"v": 1}]
            assert await b == {"v": 1}
        assert calls == ["s1", "s2"] and a.state == b.state == "done"
        record = await log.get_saga(saga.id)
        assert record is not None
        assert [(s.step_id, s.state, s.result) for s in record.steps] == [
            ("s1", "done", {"v": 1}),
            ("s2", "done", {"v": 1}),
        ]
    finally:
        holder.close()
        await engine.close()


async def test_a_failed_outcome_write_surfaces_where_the_outcome_is_used(tmp_path: Path) -> None:
    """The log refuses a step's outcome record (a trigger on the real table): ``await step``,
    ``gather`` and the dependent step each raise the log's LogError, with the message the step's
    own task raised before issue 29; the step stays ``intent`` (in the log too: recovery calls it
    in doubt), and the dependent's tool never runs."""
    path = tmp_path / "log.db"
    calls: list[str] = []
    log = amends.SqliteLog(path)
    engine = amends.Engine(_catalog(calls), log=log)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TRIGGER refuse_done BEFORE INSERT ON records WHEN NEW.kind = 'step.done' AND "
        "NEW.step_id = 's1' BEGIN SELECT RAISE(ABORT, 'the disk refused it'); END"
    )
    conn.close()
    expected = f"saga log {str(path)!r}: the disk refused it"
    try:
        async with engine.saga("outcome refused") as saga:
            a = saga.call("t.echo", v=1)
            b = saga.call("t.echo", v=a["v"])
            c = saga.call("t.echo", v=3)
            for awaited in (a, saga.gather(c, a), b):
                with pytest.raises(LogError) as caught:
                    await awaited
                assert str(caught.value) == expected
            assert await c == {"v": 3}
        assert (a.state, b.state, c.state, calls) == ("intent", "pending", "done", ["s1", "s3"])
        record = await log.get_saga(saga.id)
        assert record is not None
        assert [(s.step_id, s.state) for s in record.steps] == [("s1", "intent"), ("s3", "done")]
    finally:
        await engine.close()
