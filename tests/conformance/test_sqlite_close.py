"""Closing a SQLite log while reads are in flight on its reader threads.

Python's sqlite3 closes a connection even while another thread is inside ``execute`` on it, and
the C library then crashes the whole process (a segfault seen in CI when a server shut down
while a request was still reading). ``SqliteLog.close`` waits for the reads in flight to finish
before it closes their connections, and refuses reads that start after it began.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import LogError


async def test_close_waits_for_a_read_in_flight_and_refuses_reads_after_it(
    tmp_path: Path,
) -> None:
    log = amends.SqliteLog(str(tmp_path / "l.db"))
    await log.create_saga(
        "saga_1", "t", tenant=None, actor=None, owner="me", lease_until=1.0, now=0.0
    )
    inside = threading.Event()
    release = threading.Event()

    def slow(tx: Any) -> list[tuple[Any, ...]]:
        inside.set()
        release.wait(5)  # the read holds its connection, as a long query does
        return tx.execute("SELECT count(*) FROM records")

    reading = asyncio.ensure_future(log.db.read(slow))
    await asyncio.to_thread(inside.wait, 5)
    closing = asyncio.ensure_future(log.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # close waits: the reader's connection is still in use
    with pytest.raises(LogError, match="is closed"):
        await log.db.read(lambda tx: tx.execute("SELECT 1"))
    release.set()
    rows = await reading
    await closing
    assert rows[0][0] >= 1  # the read in flight finished on an open connection
