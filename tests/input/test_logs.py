"""Issue 11 item 4: a mistyped --db is an error naming the path; a foreign file is untouched."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from input_tools import SPEC

from amends.cli import main

Rows = Callable[[str], list[str]]


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "saga_x"],
        ["show"],
        ["undo", "saga_x", "--catalog", SPEC],
        ["doctor"],
        ["recover", "--catalog", SPEC],
        ["serve", "--catalog", SPEC, "--port", "1"],
        ["resolve", "saga_x", "s1", "--by", "ann", "--note", "checked"],
    ],
)
def test_read_commands_on_a_missing_log_name_the_path_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    db = str(tmp_path / "typo.db")
    code = main([*argv, "--db", db])
    out = capsys.readouterr()
    assert code == 2
    assert db in out.err + out.out
    assert "does not exist" in out.err + out.out
    assert "Traceback" not in out.err
    assert os.listdir(tmp_path) == []


def test_a_sqlite_file_of_another_application_is_refused_and_left_untouched(
    tmp_path: Path, rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "app.db")
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO steps (name) VALUES ('theirs')")
    conn.commit()
    conn.close()
    before, raw = rows(db), Path(db).read_bytes()
    for argv in (["show", "--db", db], ["undo", "s", "--db", db, "--catalog", SPEC]):
        assert main(argv) == 2
        assert "not an amends log" in capsys.readouterr().err
    assert main(["doctor", "--db", db]) == 2
    assert "not an amends log" in capsys.readouterr().out
    assert rows(db) == before
    assert Path(db).read_bytes() == raw


async def test_show_and_doctor_work_on_a_read_only_log_in_a_read_only_directory(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    folder = Path(db).parent
    for p in folder.iterdir():
        p.chmod(stat.S_IRUSR)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        before = rows(db)
        assert await asyncio.to_thread(main, ["show", saga_id, "--db", db]) == 0
        assert "Close the ACME deal" in capsys.readouterr().out
        code = await asyncio.to_thread(main, ["doctor", "--db", db])
        out = capsys.readouterr().out
        assert code in (0, 1), out
        assert "read-only" in out
        assert rows(db) == before
    finally:
        folder.chmod(stat.S_IRWXU)
        for p in folder.iterdir():
            p.chmod(stat.S_IRUSR | stat.S_IWUSR)


async def test_read_commands_need_no_write_lock_on_a_current_log(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process holds the write lock: show and doctor still answer at once."""
    db, saga_id = saga_db
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"]) == 0
        assert saga_id in capsys.readouterr().out
        assert await asyncio.to_thread(main, ["doctor", "--db", db]) in (0, 1)
        assert "schema version" in capsys.readouterr().out
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_directory_given_as_the_log_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "--db", str(tmp_path)]) == 2
    assert (
        f"--db {str(tmp_path)!r} is a directory; give the saga log file" in capsys.readouterr().err
    )
    assert os.listdir(tmp_path) == []
