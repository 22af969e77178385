"""The SQLite log's file: created 0600, never created by a read, never written when it is not an
amends log, readable read-only on a read-only mount (briefs/log-api.md D, E; rule 11)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import amends
from amends._log import file_permission_problems, open_log

NOW = 1_800_000_000.0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_log_and_its_wal_and_shm_are_created_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask would give 0644
    try:
        db = tmp_path / "log.db"
        log = open_log(db)
        try:
            await log.create_saga(
                "s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW
            )
            modes = {name: _mode(tmp_path / name) for name in os.listdir(tmp_path)}
            assert modes == {"log.db": 0o600, "log.db-wal": 0o600, "log.db-shm": 0o600}
            assert file_permission_problems(db) == []
        finally:
            await log.close()
    finally:
        os.umask(old)


async def test_file_permission_problems_names_each_open_file_and_the_fix(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    log = open_log(db)
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    try:
        os.chmod(db, 0o644)
        os.chmod(f"{db}-wal", 0o660)
        problems = file_permission_problems(f"sqlite:///{db}")
        assert problems == [
            f"{db} can be read or written by users other than its owner (mode 0644); run "
            f"`chmod 600 {db}` (rule 11: a saga log is for its owner only)",
            f"{db}-wal can be read or written by users other than its owner (mode 0660); run "
            f"`chmod 600 {db}-wal` (rule 11: a saga log is for its owner only)",
        ]
    finally:
        await log.close()
    assert file_permission_problems(":memory:") == []
    assert file_permission_problems("postgresql://u@h/db") == []


def test_must_exist_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    for kw in ({"must_exist": True}, {"read_only": True}):
        with pytest.raises(amends._errors.LogError, match=f"{missing}.*does not exist"):
            open_log(missing, **kw)
    assert list(tmp_path.iterdir()) == []


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_of_another_app_is_refused_and_left_untouched(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before, mode = _digest(other), _mode(other)
    for kw in ({}, {"must_exist": True}, {"read_only": True}):
        with pytest.raises(amends._errors.LogError, match="is not an amends log.*users.*untouched"):
            open_log(other, **kw)
    assert _digest(other) == before and _mode(other) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm


def test_an_empty_database_is_not_an_amends_log_for_a_read(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(amends._errors.LogError, match="not an amends log"):
        open_log(empty, read_only=True)
    assert empty.stat().st_size == 0


@pytest.fixture
def ro_mount(tmp_path: Path) -> Iterator[Path]:
    """A directory that can be made read-only: a tmpfs remounted ``ro`` as root (root ignores
    file modes, a mount does not), else plain file modes (which bind a normal user)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = os.geteuid() == 0
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)], check=True)
        else:
            os.chmod(mnt, 0o755)


def _remount_read_only(mnt: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    else:
        for name in os.listdir(mnt):
            os.chmod(mnt / name, 0o400)
        os.chmod(mnt, 0o555)


async def test_read_only_opens_a_log_on_a_read_only_mount(ro_mount: Path) -> None:
    db = ro_mount / "log.db"
    log = open_log(db)
    await log.create_saga("s", "t", tenant="a", actor=None, owner="w", lease_until=NOW, now=NOW)
    await log.close()
    assert os.listdir(ro_mount) == ["log.db"]  # clean close: no -wal
    _remount_read_only(ro_mount)
    ro = open_log(db, read_only=True)
    try:
        assert [s.saga_id for s in await ro.list_sagas()] == ["s"]
        with pytest.raises(amends._errors.LogReadOnlyError, match="opened read-only"):
            await ro.finish_saga("s", "completed", now=NOW)
    finally:
        await ro.close()


async def test_read_only_takes_no_write_lock(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    log = open_log(db)
    await log.create_saga("s", "t", tenant=None, actor=None, owner="w", lease_until=NOW, now=NOW)
    await log.close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process is writing
    try:
        ro = open_log(db, read_only=True, busy_timeout=0.2)
        try:
            rec = await ro.get_saga("s")
            assert rec is not None and rec.title == "t"
        finally:
            await ro.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_read_only_asks_to_upgrade_an_old_log_first(tmp_path: Path) -> None:
    import shutil

    db = tmp_path / "v1.db"
    shutil.copy(Path(__file__).parents[1] / "conformance" / "data" / "log_v1.db", db)
    before = _digest(db)
    with pytest.raises(amends._errors.LogError, match="schema version 1.*amends recover"):
        open_log(db, read_only=True)
    assert _digest(db) == before
