"""Disk full, read-only and corrupted logs: a clear error naming the file and the fix, and
nothing half-written (every step the log holds has exactly the events its state implies)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import amends

pytestmark = pytest.mark.slow

FILL = r"""
import asyncio, json, resource, signal, sys
import amends
path, limit = sys.argv[1], int(sys.argv[2])
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
catalog = amends.Catalog()

@catalog.tool("blob.put", reversibility="read_only")
async def put(call, data):
    return {"n": len(data)}

async def main():
    engine = amends.Engine(catalog, log=amends.SqliteLog(path))
    try:
        for i in range(100000):
            async with engine.saga(f"fill {i}", saga_id=f"fill-{i}") as saga:
                saga.call("blob.put", data="x" * 4000)
                saga.call("blob.put", data="y" * 4000)
    except amends.AmendsError as exc:
        print(json.dumps({"type": type(exc).__name__, "message": str(exc), "sagas": i}))
    finally:
        try:
            await engine.close()
        except Exception:
            pass

asyncio.run(main())
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A 1 MiB tmpfs (real ENOSPC) when mounting works, else RLIMIT_FSIZE of 1 MiB in the child."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mnt, 0 if mounted else 1 << 20
    finally:
        busy = mounted and subprocess.run(["umount", str(mnt)], capture_output=True).returncode
        if busy:  # something still holds a file there: detach it lazily
            subprocess.run(["umount", "-l", str(mnt)], check=True)


def _nothing_half_written(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        per_state = {"intent": 1, "done": 2}
        rows = conn.execute(
            "SELECT st.saga_id, st.step_id, st.state, "
            "(SELECT count(*) FROM events e WHERE e.saga_id=st.saga_id AND e.step_id=st.step_id) "
            "FROM steps st"
        ).fetchall()
        for saga_id, step_id, state, n in rows:
            assert n == per_state[state], (saga_id, step_id, state, n)
        sagas = conn.execute("SELECT count(*) FROM sagas").fetchone()[0]
        started = conn.execute("SELECT count(*) FROM events WHERE kind='saga.started'").fetchone()
        assert started == (sagas,)
        return int(sagas)
    finally:
        conn.close()


def test_disk_full_is_a_clear_error_and_nothing_is_half_written(
    small_disk: tuple[Path, int],
) -> None:
    mnt, limit = small_disk
    db = mnt / "log.db"
    proc = subprocess.run(
        [sys.executable, "-c", FILL, str(db), str(limit)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["type"] == "LogReadOnlyError", out
    assert str(db) in out["message"] and "free disk space" in out["message"], out
    assert "Nothing was half-written" in out["message"]
    assert out["sagas"] > 5  # it filled the disk first
    assert _nothing_half_written(db) >= out["sagas"] - 1


def test_read_only_file_is_a_clear_error(small_disk: tuple[Path, int]) -> None:
    mnt, limit = small_disk
    db = mnt / "log.db"
    amends.run(amends.SqliteLog(db).close())
    if limit == 0:  # a real tmpfs: remount it read-only (root ignores file modes)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    else:
        os.chmod(db, stat.S_IRUSR)
        os.chmod(mnt, stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(amends._errors.LogError) as info:
            log = amends.SqliteLog(db)
            amends.run(log.close())
        msg = str(info.value)
        assert str(db) in msg, msg
        assert isinstance(info.value, amends._errors.LogReadOnlyError), repr(info.value)
        assert "writable" in msg, msg
    finally:
        if limit == 0:
            subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        else:
            os.chmod(mnt, stat.S_IRWXU)
            os.chmod(db, stat.S_IRUSR | stat.S_IWUSR)


def test_corrupted_file_is_a_clear_error_naming_the_fix(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    amends.run(amends.SqliteLog(db).close())
    with open(db, "r+b") as f:
        f.write(b"this is no longer SQLite!")  # overwrite the 16-byte magic header and more
    with pytest.raises(amends._errors.LogCorruptedError) as info:
        amends.SqliteLog(db)
    msg = str(info.value)
    assert str(db) in msg and "restore it from a backup" in msg and "--db NEW.db" in msg


@pytest.mark.postgres
async def test_postgres_read_only_database_is_a_clear_error(pg_url: str) -> None:
    import psycopg

    await amends.PostgresLog(pg_url).close()  # migrate while writable
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
    log = amends.PostgresLog(pg_url)
    try:
        with pytest.raises(amends._errors.LogReadOnlyError, match="read-only.*primary"):
            await log.create_saga(
                "s", "t", tenant=None, actor=None, owner="w", lease_until=0.0, now=0.0
            )
        assert await log.get_saga("s") is None
    finally:
        await log.close()
