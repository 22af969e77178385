"""A SQLite file log's reader connections (one per thread that reads) are all closed: a thread's
once the thread has ended, the rest by the log's ``close``. Python 3.13 warns about a sqlite3
connection collected unclosed; each one amends forgot was an open file in a long-running process."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import amends


def _is_open(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return False
    return True


def _tracked(log: amends.SqliteLog, monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """Every connection ``log`` opens from now on."""
    opened: list[sqlite3.Connection] = []
    connect = log.db._connect  # type: ignore[attr-defined]

    def tracking() -> sqlite3.Connection:
        conn = connect()
        opened.append(conn)
        return conn

    monkeypatch.setattr(log.db, "_connect", tracking)
    return opened


async def test_each_asyncio_run_reads_on_threads_that_end_and_their_connections_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten ``asyncio.run`` in a row read the log (as ``engine.undo_sync`` and ``run_agent_sync``
    do): each read runs on a worker of that loop's executor, which ends with the loop. The
    connection of a thread that ended is closed when the next thread opens one, so the log
    holds one per live reading thread, not one per thread that ever read; ``close`` closes
    the rest, including the one of this loop's worker thread, still alive."""
    log = amends.SqliteLog(tmp_path / "r.db")
    await log.create_saga("s", "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0)
    opened = _tracked(log, monkeypatch)

    def ten_runs() -> None:
        for _ in range(10):
            assert asyncio.run(log.get_saga("s")) is not None

    await asyncio.to_thread(ten_runs)
    assert len(opened) == 10
    assert [_is_open(c) for c in opened] == [False] * 9 + [True]  # the last thread's: no next
    assert await log.get_saga("s") is not None  # this loop's worker: a new thread, alive
    assert len(opened) == 11 and [_is_open(c) for c in opened[-2:]] == [False, True]
    await log.close()
    assert not any(_is_open(c) for c in opened)


async def test_close_waits_for_a_read_running_on_another_thread_then_closes_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read in progress when ``close`` is called finishes on its connection (sqlite3 would
    crash the process if another thread closed it under the read), then ``close`` closes it;
    a read asked for after ``close`` began is refused."""
    log = amends.SqliteLog(tmp_path / "r.db")
    await log.create_saga("s", "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0)
    opened = _tracked(log, monkeypatch)
    inside, release = threading.Event(), threading.Event()

    def slow(tx: Any) -> int:
        inside.set()
        release.wait(10)
        return len(tx.execute("SELECT saga_id FROM sagas"))

    reading = asyncio.ensure_future(log.db.read(slow))  # type: ignore[attr-defined]
    await asyncio.to_thread(inside.wait, 10)
    closing = asyncio.ensure_future(log.close())
    await asyncio.sleep(0.05)
    assert not closing.done() and _is_open(opened[0])
    with pytest.raises(amends.LogError, match="closed"):
        await log.get_saga("s")
    release.set()
    assert await reading == 1
    await closing
    assert len(opened) == 1 and not _is_open(opened[0])
