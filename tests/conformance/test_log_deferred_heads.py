"""Issue 29: an in-memory log writes a saga's head (rule 12) when something next reads the log,
not at every commit -- and no reader can tell.

The same writes run on ``SqliteLog(":memory:")`` and on a log file with the same signing key;
whatever reads the in-memory log (every read of the log's API, ``verify``, ``check_history``, a
write that is not the log's own SQL, its connection handed out, ``close``) must find every
saga's head as the file log stores it. The stored heads are looked at through the private
connection (``db._connection``), which writes nothing; ``db._conn`` hands the connection out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._engine_api import check_history
from amends._log import SqliteLog
from amends._log.base import CompensationWrite, StepFinish, StepIntent
from amends._log.sql import _append

NOW = 1_800_000_000.0
KEY = b"k-deferred"


async def _writes(log: SqliteLog) -> None:
    """Two sagas, steps, a reversal with a compensation and its end, an event, an idempotency
    key, and a recovery appending to two sagas in one transaction."""
    for sid in ("s", "t", "u", "v"):
        await log.create_saga(sid, f"saga {sid}", tenant="acme", actor=None, owner="w",
                              lease_until=NOW if sid in "uv" else NOW + 600, now=NOW)  # fmt: skip
    for sid in ("s", "t", "u", "v"):
        for i in (1, 2):
            await log.begin_step(
                StepIntent(sid, f"{sid}{i}", seq=i, tool="crm.update_field", args={"v": i},
                           deps=[], resources=[f"crm:{i}"], declared="reversible", now=NOW)
            )  # fmt: skip
            if i == 1:
                await log.finish_step(sid, f"{sid}{i}", StepFinish("done", effective="reversible"),
                                      now=NOW)  # fmt: skip
    await log.finish_step("s", "s2", StepFinish("done", effective="reversible"), now=NOW)
    await log.finish_saga("s", "completed", now=NOW)
    await log.claim_reversal("s", reversal_id="r", budget={}, owner="w", lease_until=NOW + 60,
                             now=NOW)  # fmt: skip
    await log.record_compensation(
        CompensationWrite("r", 1, "s2", state="reverted", attempts=1, detail="ok", data={},
                          calls_spent=1, tokens_spent=0, event="compensation.reverted", now=NOW)
    )  # fmt: skip
    await log.finish_reversal("r", 1, {"status": "partially_reversed"}, now=NOW)
    await log.append_event("t", "note.added", data={"by": "ops"}, now=NOW)
    await log.idem_put("acme", "k", "h", {"ok": True}, NOW + 600, now=NOW)
    assert await log.mark_in_doubt(NOW + 1) == [("u", "u2"), ("v", "v2")]


def _stored(conn: sqlite3.Connection) -> dict[str, str | None]:
    return dict(conn.execute("SELECT saga_id, head FROM sagas ORDER BY saga_id").fetchall())


def _raw(log: SqliteLog) -> sqlite3.Connection:
    """The private connection, without the hand-out that writes the deferred heads."""
    conn: sqlite3.Connection = log.db._connection  # type: ignore[attr-defined]
    return conn


@pytest.fixture
async def mem() -> AsyncIterator[SqliteLog]:
    log = SqliteLog(":memory:", signing_key=KEY)
    yield log
    await log.close()


@pytest.fixture
async def heads(tmp_path: Path) -> dict[str, str | None]:
    """Every saga's head after :func:`_writes` on a log file (heads written at each commit)."""
    path = tmp_path / "log.db"
    log = SqliteLog(path, signing_key=KEY)
    try:
        await _writes(log)
    finally:
        await log.close()
    with closing(sqlite3.connect(path)) as conn:  # sqlite3's own `with` commits, never closes
        stored = _stored(conn)
    assert len(stored) == 4 and all(stored.values())
    return stored


READS: dict[str, Callable[[SqliteLog], Awaitable[Any]]] = {
    "get_saga": lambda log: log.get_saga("t"),
    "get_reversal_of_saga": lambda log: log.get_reversal(saga_id="s"),
    "get_reversal_by_id": lambda log: log.get_reversal(reversal_id="r"),
    "get_compensations": lambda log: log.get_compensations("r"),
    "events": lambda log: log.events("t"),
    "list_sagas": lambda log: log.list_sagas(),
    "expired_reversals": lambda log: log.expired_reversals(NOW),
    "reversal_heads": lambda log: log.reversal_heads(),
    "health": lambda log: log.health(NOW),
    "idem_get": lambda log: log.idem_get("acme", "k", NOW),
    "schema_version": lambda log: log.schema_version(),
    "verify_log": lambda log: log.verify(),
    "verify_saga": lambda log: log.verify("s"),
    "check_history": lambda log: check_history(log, "t"),
}


@pytest.mark.parametrize("read", sorted(READS))
async def test_every_read_of_a_memory_log_finds_each_sagas_head_as_a_file_log_stores_it(
    mem: SqliteLog, heads: dict[str, str | None], read: str
) -> None:
    await _writes(mem)
    assert _stored(_raw(mem)) == dict.fromkeys(heads)  # deferred: no head written yet
    await READS[read](mem)
    assert _stored(_raw(mem)) == heads


async def test_a_memory_logs_append_is_one_insert_and_the_next_read_writes_the_head(
    mem: SqliteLog,
) -> None:
    """An append is its own transaction (autocommit): no BEGIN IMMEDIATE, no COMMIT."""
    await _writes(mem)
    await mem.verify()
    seen: list[str] = []
    _raw(mem).set_trace_callback(seen.append)
    for i in (1, 2):
        await mem.append_event("t", "note.added", data={"i": i}, now=NOW)
    assert [s.split(" (")[0] for s in seen] == ["INSERT INTO records"] * 2
    seen.clear()
    events = await mem.events("t")
    assert [s.split("=")[0] for s in seen[:3]] == [
        "BEGIN IMMEDIATE",
        "UPDATE sagas SET head",
        "COMMIT",
    ]
    assert len(seen) == 4  # and the read itself
    assert [e.data.get("i") for e in events[-2:]] == [1, 2]
    assert await mem.verify() == []


def _kinds(seen: list[str]) -> list[str]:
    """Each traced statement's first two words (``INSERT INTO``, ``SELECT 1``, ``BEGIN ...``)."""
    return [" ".join(s.split()[:2]) for s in seen]


async def _steps_and_undo(log: SqliteLog, seen: list[str]) -> dict[str, list[str]]:
    """The statements of each kind of write, traced into ``seen``."""
    out: dict[str, list[str]] = {}

    async def traced(name: str, write: Callable[[], Awaitable[Any]]) -> None:
        seen.clear()  # finish_step writes when called: the call is traced too
        await write()
        out[name] = _kinds(seen)

    await log.create_saga("w", "saga w", tenant="acme", actor=None, owner="w",
                          lease_until=NOW + 600, now=NOW)  # fmt: skip
    for i in (1, 2):  # the first reads whether a reversal exists; the second knows
        intent = StepIntent("w", f"w{i}", seq=i, tool="crm.update_field", args={"v": i}, deps=[],
                            resources=[], declared="reversible", now=NOW)  # fmt: skip
        await traced(f"begin_step{i}", lambda: log.begin_step(intent))  # noqa: B023
    finish = StepFinish("done", effective="reversible")
    await traced("finish_step", lambda: log.finish_step("w", "w1", finish, now=NOW))
    await traced("finish_saga", lambda: log.finish_saga("w", "completed", now=NOW))
    await log.claim_reversal("w", reversal_id="rw", budget={}, owner="w", lease_until=NOW + 60,
                             now=NOW)  # fmt: skip
    comp = CompensationWrite("rw", 1, "w1", state="reverted", attempts=1, detail="ok", data={},
                             calls_spent=1, tokens_spent=0, event="compensation.reverted",
                             now=NOW, first=True)  # fmt: skip
    await traced("record_compensation", lambda: log.record_compensation(comp))
    await traced("resolve_step", lambda: log.resolve_step("w", "w2", by="ok", note="", now=NOW))
    await traced("append_event", lambda: log.append_event("w", "note.added", data={}, now=NOW))
    return out


async def test_every_append_of_a_memory_log_is_its_one_insert_and_other_writes_keep_begin_commit(
    mem: SqliteLog,
) -> None:
    """Issue 29: the appends run their reads and their one INSERT in autocommit; a write with
    more than one change (ending a saga: its row and a record; a reversal's record and the
    log's tally of them) stays one transaction."""
    seen: list[str] = []
    _raw(mem).set_trace_callback(seen.append)
    traced = await _steps_and_undo(mem, seen)
    insert = ["INSERT INTO"]
    comp = ["SELECT r.generation,", "SELECT 1", *insert]
    assert traced == {
        "begin_step1": ["SELECT (SELECT", *insert],
        "begin_step2": insert,
        "finish_step": insert,
        "finish_saga": ["BEGIN IMMEDIATE", "UPDATE sagas", *insert, "COMMIT"],
        # rule 12: a reversal's record and its count in the log's tally, one transaction
        "record_compensation": ["BEGIN IMMEDIATE", *comp, *insert, "COMMIT"],
        "resolve_step": ["SELECT 1", "SELECT step_id", *insert],
        "append_event": insert,
    }
    seen.clear()
    assert await mem.verify() == []


async def test_a_file_logs_appends_keep_their_transaction_and_write_their_head(
    tmp_path: Path,
) -> None:
    """A file log may have other writers and readers: each append is BEGIN, the INSERT, the
    saga's head, COMMIT, as before (``one_change`` is for the private in-memory log only)."""
    log = SqliteLog(tmp_path / "log.db", signing_key=KEY)
    try:
        seen: list[str] = []
        log.db._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
        traced = await _steps_and_undo(log, seen)
    finally:
        await log.close()
    last, head = ["SELECT hash", "INSERT INTO"], ["UPDATE sagas", "COMMIT"]
    comp = ["SELECT r.generation,", "SELECT 1", "INSERT INTO", "INSERT INTO"]
    assert traced == {
        "begin_step1": ["BEGIN IMMEDIATE", "SELECT (SELECT", "INSERT INTO", *head],
        "begin_step2": ["BEGIN IMMEDIATE", "SELECT (SELECT", "INSERT INTO", *head],
        "finish_step": ["BEGIN IMMEDIATE", *last, *head],
        "finish_saga": ["BEGIN IMMEDIATE", "UPDATE sagas", *last, *head],
        "record_compensation": ["BEGIN IMMEDIATE", *comp, *head],
        "resolve_step": ["BEGIN IMMEDIATE", "SELECT 1", "SELECT step_id", *last, *head],
        "append_event": ["BEGIN IMMEDIATE", *last, *head],
    }


def _records(log: SqliteLog) -> list[tuple[Any, ...]]:
    return _raw(log).execute("SELECT rec_id, saga_id, kind, hash FROM records").fetchall()


@pytest.mark.parametrize("append", ["append_event", "begin_step", "record_compensation"])
async def test_an_append_refused_by_the_database_leaves_nothing_and_the_heads_right(
    mem: SqliteLog, heads: dict[str, str | None], append: str
) -> None:
    """The INSERT fails (here a trigger aborts it, as a constraint would): the error is the
    log's, no record was added, every deferred head is still that of the last record stored,
    and the next append chains onto that record."""
    await _writes(mem)
    before = _records(mem)
    _raw(mem).execute(
        "CREATE TEMP TRIGGER refuse BEFORE INSERT ON records BEGIN "
        "SELECT RAISE(ABORT, 'refused by the test'); END"
    )
    intent = StepIntent("t", "t3", seq=3, tool="crm.update_field", args={}, deps=[],
                        resources=[], declared="reversible", now=NOW)  # fmt: skip
    comp = CompensationWrite("r", 1, "s1", state="reverted", attempts=1, detail="ok", data={},
                             calls_spent=1, tokens_spent=0, event="compensation.reverted",
                             now=NOW)  # fmt: skip
    refused: dict[str, Callable[[], Awaitable[Any]]] = {
        "append_event": lambda: mem.append_event("s", "note.added", data={}, now=NOW),
        "begin_step": lambda: mem.begin_step(intent),
        "record_compensation": lambda: mem.record_compensation(comp),
    }
    with pytest.raises(amends.LogError, match="refused by the test"):
        await refused[append]()
    _raw(mem).execute("DROP TRIGGER refuse")
    assert not _raw(mem).in_transaction
    assert _records(mem) == before
    assert _stored(_raw(mem)) == dict.fromkeys(heads)  # still deferred, none written wrong
    await mem.append_event("t", "note.added", data={}, now=NOW)
    await mem.append_event("s", "note.added", data={}, now=NOW)
    assert await mem.verify() == []


@pytest.mark.parametrize("announced", [True, False], ids=["appended_to", "silent"])
async def test_an_append_that_raises_after_its_insert_keeps_the_record_and_its_head(
    mem: SqliteLog, announced: bool
) -> None:
    """Autocommit: the INSERT stood before the write raised, so its record stays and the
    saga's head is that record's (read back from the log, even when the write raised before
    it told the cursor it appended); the write's error reaches its caller, and the next
    append chains onto the record."""
    from amends._log.integrity import head_of

    await _writes(mem)
    await mem.append_event("s", "note.added", data={}, now=NOW)  # a head deferred for "s" too
    n = len(_records(mem))

    def appends_then_fails(tx: Any) -> None:
        _append(tx, KEY, "t", "note.added", NOW, '{"kept":true}')
        if not announced:
            tx.appended.discard("t")
        raise RuntimeError("after the insert")

    appends_then_fails.__module__ = "amends._log.sql"  # as the log's own appends are
    with pytest.raises(RuntimeError, match="after the insert"):
        await mem.db.write(appends_then_fails, one_change=True)
    records = _records(mem)
    assert len(records) == n + 1 and records[-1][1:3] == ("t", "note.added")
    assert not _raw(mem).in_transaction
    assert await mem.verify() == []
    assert _stored(_raw(mem))["t"] == head_of(KEY, "t", records[-1][3])
    await mem.append_event("t", "note.added", data={"next": True}, now=NOW)
    assert await mem.verify() == []
    events = await mem.events("t")
    assert [e.data for e in events[-2:]] == [{"kept": True}, {"next": True}]


async def test_the_heads_are_written_before_the_log_closes(
    mem: SqliteLog, heads: dict[str, str | None]
) -> None:
    await _writes(mem)
    seen: list[str] = []
    _raw(mem).set_trace_callback(seen.append)
    await mem.close()
    assert sorted(s.split("WHERE saga_id=")[1] for s in seen if s.startswith("UPDATE sagas")) == [
        f"'{sid}'" for sid in sorted(heads)
    ]


async def test_a_connection_handed_out_has_every_head_and_gets_each_new_one_at_commit(
    mem: SqliteLog, heads: dict[str, str | None]
) -> None:
    await _writes(mem)
    conn: sqlite3.Connection = mem.db._conn  # type: ignore[attr-defined]
    assert _stored(conn) == heads
    await mem.append_event("t", "note.added", data={}, now=NOW)
    (last,) = conn.execute("SELECT hash FROM records ORDER BY rec_id DESC LIMIT 1").fetchone()
    from amends._log.integrity import head_of

    assert _stored(conn)["t"] == head_of(KEY, "t", last)  # no longer private: at commit


async def test_a_write_that_is_not_the_logs_own_sql_finds_the_heads_written(
    mem: SqliteLog, heads: dict[str, str | None]
) -> None:
    await _writes(mem)
    seen = await mem.db.write(lambda tx: tx.execute("SELECT saga_id, head FROM sagas"))
    assert dict(seen) == heads


async def test_a_write_that_fails_after_appending_leaves_the_deferred_heads_right(
    mem: SqliteLog, heads: dict[str, str | None]
) -> None:
    """The failing write appended to two sagas, one with a head waiting: both heads stay
    those of the last committed records, and the chains verify."""
    await _writes(mem)

    def appends_then_fails(tx: Any) -> None:
        _append(tx, KEY, "t", "note.added", NOW, "{}")
        _append(tx, KEY, "s", "note.added", NOW, "{}")
        raise sqlite3.IntegrityError("UNIQUE constraint failed")

    appends_then_fails.__module__ = "amends._log.sql"  # as the log's own writes are
    with pytest.raises(amends.LogError):
        await mem.db.write(appends_then_fails)
    stale = CompensationWrite("r", 7, "s1", state="reverted", attempts=1, detail="ok", data={},
                              calls_spent=1, tokens_spent=0, event="compensation.reverted",
                              now=NOW)  # fmt: skip
    with pytest.raises(amends.LeaseLostError):
        await mem.record_compensation(stale)
    assert _stored(_raw(mem)) == dict.fromkeys(heads)  # still deferred, none written wrong
    assert await mem.verify() == []
    assert _stored(_raw(mem)) == heads
