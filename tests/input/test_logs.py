"""Issue 11 item 4: a mistyped --db is an error naming the path; a foreign file is untouched."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from input_tools import CATALOG, SPEC

import amends
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


def _edit_version(url: str, value: str | None) -> None:
    """Set (``None``: delete) the schema version a log's ``amends_meta`` row stores."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("DELETE FROM amends_meta WHERE key='schema_version'")
            if value is not None:
                pg.execute("INSERT INTO amends_meta VALUES ('schema_version', %s)", (value,))
        return
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        conn.execute("DELETE FROM amends_meta WHERE key='schema_version'")
        if value is not None:
            conn.execute("INSERT INTO amends_meta VALUES ('schema_version', ?)", (value,))
        conn.commit()
    finally:
        conn.close()


def _dump(url: str) -> list[Any]:
    """Every row of the log's tables (proof nothing was written)."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as pg:
            tables = [r[0] for r in pg.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            )]  # fmt: skip
            return [
                (t, sorted(map(repr, pg.execute(f'SELECT * FROM "{t}"').fetchall())))
                for t in tables
            ]
    conn = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.mark.parametrize(
    "backend",
    ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])],
)
@pytest.mark.parametrize(
    ("stored", "says"),
    [
        ("abc", "stores schema version 'abc', which is no version amends ever wrote"),
        ("5.0", "stores schema version '5.0', which is no version amends ever wrote"),
        ("-1", "stores schema version '-1', which is no version amends ever wrote"),
        ("0", "stores schema version '0', which is no version amends ever wrote"),
        ("9" * 5000, "which is no version amends ever wrote"),
        ("1", "stores schema version 1, but has the table 'log_tally' that version 6 created"),
        ("3", "stores schema version 3, but has the table 'log_tally' that version 6 created"),
        ("99", "has schema version 99, newer than this amends understands (6); upgrade amends"),
        (None, "stores no schema version but has amends' tables"),
    ],
    ids=[
        "text",
        "decimal",
        "negative",
        "zero",
        "5000-digits",
        "lower-1",
        "lower-3",
        "newer",
        "deleted",
    ],
)
async def test_an_edited_schema_version_is_named_as_such_never_a_traceback_and_nothing_written(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    backend: str,
    stored: str | None,
    says: str,
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'v.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )
    engine = amends.Engine(CATALOG, log=url)
    async with engine.saga("Close the ACME deal", tenant="acme") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    await engine.close()
    _edit_version(url, stored)
    before = _dump(url)
    for read_only in (False, True):
        with pytest.raises(amends.SchemaVersionError, match="schema version") as err:
            await asyncio.to_thread(amends.open_log, url, read_only=read_only)
        assert says in str(err.value) and str(err.value).count("\n") == 0
        assert ("restore the log from a backup" in str(err.value)) != (stored == "99")
    code = await asyncio.to_thread(main, ["show", saga.id, "--db", url])
    out = capsys.readouterr()
    assert code == 2 and says in out.err and "Traceback" not in out.err + out.out
    assert _dump(url) == before
