"""Schema v3 (issue 12): what a write costs in SQL statements, group commit without savepoints,
and current state derived from append-only records."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import amends
from amends._log import SqliteLog, open_log
from amends._log.base import CompensationWrite, StepFinish, StepIntent

NOW = 1_800_000_000.0


class _Statements:
    """Every statement the log's writer connection runs (sqlite3 trace callback)."""

    def __init__(self, log: SqliteLog) -> None:
        self.seen: list[str] = []
        log.db._conn.set_trace_callback(self.seen.append)  # type: ignore[attr-defined]

    def take(self) -> list[str]:
        out = [s for s in self.seen if s not in ("BEGIN IMMEDIATE", "COMMIT")]
        self.seen.clear()
        return out


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteLog]:
    lg = SqliteLog(tmp_path / "log.db")
    yield lg
    await lg.close()


async def _begin(log: SqliteLog, saga_id: str, step_id: str, seq: int) -> bool:
    return await log.begin_step(
        StepIntent(
            saga_id,
            step_id,
            seq=seq,
            tool="crm.update_field",
            args={"record_id": "r1", "value": "x" * 10},
            deps=[],
            resources=["crm:r1"],
            declared="reversible",
            now=NOW,
        )
    )


async def test_a_step_write_is_two_statements_and_a_compensation_event_two(
    log: SqliteLog,
) -> None:
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    sql = _Statements(log)
    await _begin(log, "s", "s1", 1)
    begin = sql.take()
    await log.finish_step("s", "s1", StepFinish("done", effective="reversible"), now=NOW)
    finish = sql.take()
    # issue 21 (rule 12): + the saga's head, one UPDATE per saga per transaction at commit
    assert len(begin) == 3, begin  # one read (reversal? chain head?) + one INSERT + the head
    assert len(finish) == 3, finish  # chain head + one INSERT + the head
    assert all("SAVEPOINT" not in s for s in begin + finish)
    assert [s for s in begin + finish if "UPDATE" in s] == [
        s for s in begin + finish if s.startswith("UPDATE sagas SET head=")
    ]
    await log.claim_reversal("s", reversal_id="r", budget={}, owner="w", lease_until=NOW, now=NOW)
    sql.take()
    await log.record_compensation(
        CompensationWrite("r", 1, "s1", state="reverted", attempts=1, detail="ok", data={},
                          calls_spent=1, tokens_spent=0, event="compensation.reverted", now=NOW)
    )  # fmt: skip
    comp = sql.take()
    # fencing + chain head + the sum of the log's tally of reversal records in one SELECT, one
    # INSERT, the tally's upsert (rule 12), the head
    assert len(comp) == 4, comp
    assert not any(s.startswith("UPDATE reversals") for s in comp)  # no hot reversal row
    rev = await log.get_reversal(reversal_id="r")
    assert rev is not None and rev.calls_spent == 1  # derived from the record


async def test_concurrent_writes_commit_in_one_batch_without_savepoints(log: SqliteLog) -> None:
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    sql = _Statements(log)
    started = await asyncio.gather(*(_begin(log, "s", f"s{i}", i) for i in range(1, 51)))
    assert started == [True] * 50
    statements = sql.seen
    assert not any("SAVEPOINT" in s for s in statements)
    assert statements.count("BEGIN IMMEDIATE") < 50  # group commit: fewer transactions
    rec = await log.get_saga("s")
    assert rec is not None and [s.seq for s in rec.steps] == list(range(1, 51))
    assert await log.verify("s") == []


async def test_a_failing_write_in_a_batch_takes_no_neighbour_down(log_url: str) -> None:
    """Both backends batch concurrent writes; a write that raises is rolled back alone."""
    log = open_log(log_url)
    try:
        await _failing_write_in_a_batch(log)  # type: ignore[arg-type]
    finally:
        await log.close()


async def _failing_write_in_a_batch(log: SqliteLog) -> None:
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    await _begin(log, "s", "s1", 1)
    await log.claim_reversal("s", reversal_id="r", budget={}, owner="w", lease_until=NOW, now=NOW)

    async def stale() -> None:  # generation 7 does not hold the lease: LeaseLostError
        await log.record_compensation(
            CompensationWrite("r", 7, "s1", state="reverted", attempts=1, detail=None, data={},
                              calls_spent=1, tokens_spent=0, event="compensation.reverted", now=NOW)
        )  # fmt: skip

    async def good(i: int) -> None:
        await log.append_event("s", "note.added", data={"i": i}, now=NOW)

    results = await asyncio.gather(good(1), stale(), good(2), good(3), return_exceptions=True)
    assert [type(r).__name__ for r in results] == [
        "NoneType",
        "LeaseLostError",
        "NoneType",
        "NoneType",
    ]
    notes = [e.data["i"] for e in await log.events("s") if e.kind == "note.added"]
    assert sorted(notes) == [1, 2, 3]
    assert await log.get_compensations("r") == {}
    assert await log.verify("s") == []


async def test_state_is_derived_from_append_only_records(tmp_path: Path) -> None:
    """A step that finishes twice (in_doubt by recovery, then done by its slow worker) shows its
    latest outcome; both records stay in the history; the steps view agrees."""
    path = tmp_path / "log.db"
    log = open_log(path)
    try:
        await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW,
                              now=NOW)  # fmt: skip
        await _begin(log, "s", "s1", 1)  # type: ignore[arg-type]
        assert await log.mark_in_doubt(NOW + 1) == [("s", "s1")]
        rec = await log.get_saga("s")
        assert rec is not None and rec.steps[0].state == "in_doubt"
        await log.finish_step("s", "s1", StepFinish("done", result={"ok": 1}), now=NOW + 2)
        rec = await log.get_saga("s")
        assert rec is not None
        assert (rec.steps[0].state, rec.steps[0].result) == ("done", {"ok": 1})
        kinds = [e.kind for e in await log.events("s")]
        assert kinds == [
            "saga.started",
            "step.intent",
            "step.in_doubt",
            "saga.interrupted",
            "step.done",
        ]
    finally:
        await log.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT step_id, state FROM steps").fetchall() == [("s1", "done")]
        with pytest.raises(sqlite3.OperationalError, match="view"):
            conn.execute("UPDATE steps SET state='reverted'")
    finally:
        conn.close()


async def test_the_engine_reads_a_saga_and_undoes_it_on_v3(tmp_path: Path) -> None:
    from core_world import fresh

    world, catalog = fresh()
    engine = amends.Engine(catalog, log=tmp_path / "log.db")
    try:
        async with engine.saga("deal", saga_id="d") as saga:
            a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
            saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        report = await engine.undo("d")
        assert [(s.step_id, s.state.value) for s in report.steps] == [
            ("s1", "reverted"),
            ("s2", "compensated"),
        ]
        assert world.crm["r1"]["stage"] == "lead"
        rev = await engine.log.get_reversal(saga_id="d")
        assert rev is not None and rev.calls_spent == report.tool_calls
        assert await engine.log.verify() == []
    finally:
        await engine.close()


async def test_a_damaged_record_is_a_clear_error_naming_the_step(log: SqliteLog) -> None:
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    await _begin(log, "s", "s1", 1)
    await log.db.write(  # type: ignore[attr-defined]
        lambda tx: tx.execute("UPDATE records SET body='{\"tool\":\"x\"}' WHERE phase='i'")
    )
    with pytest.raises(amends._errors.LogCorruptedError, match="step 's1' is damaged.*--verify"):
        await log.get_saga("s")
    assert [p.what for p in await log.verify("s")] == ["edited"]
