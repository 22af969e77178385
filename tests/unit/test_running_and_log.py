"""Undo of a saga that is still running; the SQLite log's durability settings, schema and errors."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import amends
from amends import StepState
from core_world import CoreWorld


async def test_undo_while_running_cancels_unstarted_steps_and_compensates_finishing_ones(
    catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Issue 2 #4: a step in flight when undo is asked finishes and is compensated; steps that had
    not started are cancelled (verb Cancel) and never call their tool."""
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    gate = asyncio.Event()
    in_flight = asyncio.Event()

    async def slow_charge() -> None:
        in_flight.set()
        await gate.wait()

    world.hooks["pay.charge"] = slow_charge
    report_task: asyncio.Task[amends.UndoReport] | None = None
    async with engine.saga("busy") as saga:
        a = saga.call("pay.charge", customer="c1", cents=300)
        b = saga.call("mail.send", to="x@y.test", subject="receipt", after=[a])
        await in_flight.wait()
        report_task = asyncio.create_task(engine.undo(saga.id))
        await asyncio.sleep(0.05)  # the reversal is claimed while the charge is in flight
        gate.set()
        with pytest.raises(amends.StepFailedError, match="cancelled"):
            await b
        late = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.StepFailedError, match="cancelled"):
            await late
    report = await report_task
    assert [(s.step_id, s.verb, s.state) for s in report.steps] == [
        ("s1", "Compensate", StepState.COMPENSATED),
        ("s2", "Cancel", StepState.CANCELLED),
    ]
    # s3 was asked for after the reversal was planned: refused, logged cancelled, never ran
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None and [s.state for s in logged.steps] == [
        "done",
        "cancelled",
        "cancelled",
    ]
    assert world.outbox == []
    assert world.crm["r1"]["stage"] == "lead"
    assert world.charges["ch_1"]["refunded"] == 300
    assert report.status == "partially_reversed"
    await engine.close()


async def test_sqlite_log_uses_wal_full_sync_and_a_schema_version(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    log = amends.SqliteLog(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    from amends._log.sql import SCHEMA_VERSION

    assert conn.execute("SELECT value FROM amends_meta WHERE key='schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    writer = log.db._conn  # type: ignore[attr-defined]
    assert writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    relaxed = amends.SqliteLog(tmp_path / "n.db", synchronous="NORMAL")
    assert relaxed.db._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # type: ignore[attr-defined]
    conn.close()
    await log.close()
    await relaxed.close()


async def test_reading_one_saga_uses_indexes_not_scans(tmp_path: Path) -> None:
    await amends.SqliteLog(tmp_path / "q.db").close()
    conn = sqlite3.connect(tmp_path / "q.db")
    queries = [
        "SELECT * FROM steps WHERE saga_id=? ORDER BY seq",
        "SELECT * FROM events WHERE saga_id=? AND event_id>? ORDER BY event_id",
        "SELECT * FROM reversals WHERE saga_id=?",
        "SELECT * FROM compensations WHERE reversal_id=?",
    ]
    for q in queries:
        plan = " ".join(
            r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {q}", ("x", 0)[: q.count("?")])
        )
        assert "SCAN" not in plan, (q, plan)
        assert "USING" in plan, (q, plan)
    conn.close()


async def test_history_is_append_only_one_row_per_event(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Path
) -> None:
    engine = amends.Engine(catalog, log=tmp_path / "h.db")
    async with engine.saga("deal") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5, after=[a])
    await engine.undo(saga.id)
    kinds = [(e.kind, e.step_id) for e in await engine.log.events(saga.id)]
    assert kinds == [
        ("saga.started", None),
        ("step.intent", "s1"),
        ("step.done", "s1"),
        ("step.intent", "s2"),
        ("step.done", "s2"),
        ("saga.completed", None),
        ("reversal.requested", None),
        ("compensation.dispatched", "s2"),
        ("compensation.compensated", "s2"),
        ("compensation.dispatched", "s1"),
        ("compensation.reverted", "s1"),
        ("reversal.done", None),
    ]
    await engine.close()


def test_corrupted_file_gives_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(amends.LogCorruptedError, match="is damaged or is not an amends log") as e:
        amends.SqliteLog(bad)
    assert str(bad) in str(e.value)
    assert bad.read_bytes() == b"this is not a database at all" * 100  # untouched


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    await amends.SqliteLog(db).close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE amends_meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(amends.SchemaVersionError, match="schema version 99, newer than"):
        amends.SqliteLog(db)


def test_missing_directory_and_bad_options_are_clear(tmp_path: Path) -> None:
    with pytest.raises(amends.LogError, match="does not exist; create it"):
        amends.SqliteLog(tmp_path / "nope" / "x.db")
    with pytest.raises(amends.LogError, match="synchronous='FAST' is not a SQLite level"):
        amends.SqliteLog(tmp_path / "x.db", synchronous="FAST")  # type: ignore[arg-type]
    with pytest.raises(amends.ConfigError, match="scheme 'mysql' is not supported"):
        amends.open_log("mysql://x")


async def test_locked_database_gives_a_clear_error_and_loses_nothing(
    catalog: amends.Catalog, tmp_path: Path
) -> None:
    db = tmp_path / "locked.db"
    log = amends.SqliteLog(db, busy_timeout=0.2)
    engine = amends.Engine(catalog, log=log)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(amends.LogLockedError, match="stayed locked by another process"):
        async with engine.saga("blocked"):
            pass
    holder.execute("ROLLBACK")
    holder.close()
    assert await log.list_sagas() == []  # nothing half-written
    async with engine.saga("after") as saga:
        pass
    assert [s.saga_id for s in await log.list_sagas()] == [saga.id]
    await engine.close()


async def test_sqlite_url_forms(tmp_path: Path) -> None:
    log = amends.open_log(f"sqlite:///{tmp_path}/u.db")
    assert isinstance(log, amends.SqliteLog)
    assert log.path == f"{tmp_path}/u.db"
    await log.close()
    mem = amends.open_log("sqlite:///:memory:")
    assert isinstance(mem, amends.SqliteLog) and mem.path == ":memory:"
    await mem.close()


async def test_group_commit_isolates_a_failing_write_from_its_batch(tmp_path: Path) -> None:
    """Concurrent writes share transactions; one that raises is rolled back alone."""
    log = amends.SqliteLog(tmp_path / "g.db")
    db = log.db

    def put(i: int) -> object:
        def fn(tx: object) -> int:
            tx.execute(  # type: ignore[attr-defined]
                "INSERT INTO amends_meta (key, value) VALUES (?, ?)", (f"k{i}", str(i))
            )
            if i == 7:
                raise RuntimeError("this write fails after writing")
            return i

        return fn

    results = await asyncio.gather(*(db.write(put(i)) for i in range(40)), return_exceptions=True)
    assert [r.args for r in results if isinstance(r, Exception)] == [
        ("this write fails after writing",)
    ]
    assert [r for r in results if not isinstance(r, Exception)] == [i for i in range(40) if i != 7]
    conn = sqlite3.connect(tmp_path / "g.db")
    keys = {k for (k,) in conn.execute("SELECT key FROM amends_meta WHERE key LIKE 'k%'")}
    conn.close()
    assert keys == {f"k{i}" for i in range(40) if i != 7}
    await log.close()
