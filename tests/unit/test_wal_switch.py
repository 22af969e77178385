"""Every SQLite file shared between processes switches to WAL by waiting out its other openers.

SQLite does not consult the busy handler when it changes the journal mode of a file on which
another connection holds a write (RESERVED) lock: a second opener of a file another connection is
creating got ``database is locked`` at once, whatever ``busy_timeout`` said. CI on 2026-12-05
failed that way (a test polling a vendor file while a worker created it); the saga log had met it
earlier. One helper, ``switch_to_wal``, is the rule for the log, the sandbox world and the test
vendors.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from amends._log.sqlite import switch_to_wal
from amends.sandbox import World


def _hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE IF NOT EXISTS t (x)")
    holder.execute("BEGIN IMMEDIATE")  # RESERVED: the lock SQLite will not wait on
    holder.execute("INSERT INTO t VALUES (1)")

    def release() -> None:
        time.sleep(seconds)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_the_raw_pragma_fails_at_once_while_another_connection_creates_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    thread = _hold_write_lock(path, 0.3)
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    # had SQLite waited (busy_timeout is 60 s), the switch would succeed once the lock goes
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode = WAL")
    thread.join()
    conn.close()


def test_switch_to_wal_waits_out_the_other_opener(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    thread = _hold_write_lock(path, 0.3)
    conn = sqlite3.connect(path, isolation_level=None)
    assert switch_to_wal(conn, 10) == "wal"
    thread.join()
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    conn.close()


def test_switch_to_wal_gives_up_at_its_timeout_with_sqlite_s_own_error(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    thread = _hold_write_lock(path, 2.0)
    conn = sqlite3.connect(path, isolation_level=None)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        switch_to_wal(conn, 0.2)  # had it waited for the lock (2 s), it would have succeeded
    assert time.monotonic() - started >= 0.2
    thread.join()
    conn.close()


def test_a_sandbox_world_file_opens_while_another_process_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "world.db"
    thread = _hold_write_lock(path, 0.3)
    World(path=str(path)).close()
    thread.join()
    with closing(sqlite3.connect(path)) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
