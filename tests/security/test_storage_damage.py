"""Issue 21 item 12: ``amends doctor`` (without ``--verify``) and ``amends recover`` find a log
whose storage is damaged — a page the day-to-day queries never read — instead of saying
"healthy" and "nothing to recover"."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

import amends
from amends.cli import main


async def _write_log(url: str) -> None:
    catalog = amends.Catalog()
    catalog.register("note.add", lambda call, text: None, reversibility="irreversible")
    engine = amends.Engine(catalog, log=url)
    try:
        async with engine.saga("Many notes") as saga:
            for i in range(60):  # enough records for many leaf pages
                saga.call("note.add", text=f"{i:03d} " + "x" * 1500)
    finally:
        await engine.close()


def _corrupt_a_records_leaf(db: Path) -> int:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    leaves = [
        r[0]
        for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name='records' AND pagetype='leaf' ORDER BY pageno"
        )
    ]
    conn.close()
    page = leaves[len(leaves) // 2]
    with open(db, "r+b") as f:  # two cell pointers of the page: the b-tree still opens
        f.seek((page - 1) * size + 8)
        f.write(b"\xff" * 8)
    return int(page)


def test_doctor_and_recover_report_a_damaged_page_of_a_sqlite_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "log.db"
    asyncio.run(_write_log(str(db)))
    page = _corrupt_a_records_leaf(db)
    assert main(["doctor", "--db", str(db), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    damaged = [f for f in out["findings"] if f["what"].startswith("the log's storage is damaged")]
    shown = " ".join(f["what"] for f in damaged)
    # SQLite names the page, or stops at it ("malformed") when another connection holds the log
    assert damaged and (f"page {page}" in shown or "malformed" in shown), out
    assert out["ok"] is False
    assert main(["recover", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and "nothing was recovered" in err


@pytest.mark.slow
@pytest.mark.postgres
def test_doctor_and_recover_report_a_damaged_page_of_a_postgres_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    from pg import PgServer, PgUnavailable

    try:
        server = PgServer()  # its own: the test stops it to write a data file
    except PgUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        url = server.new_database()
        asyncio.run(_write_log(url))
        with psycopg.connect(url) as conn:
            rel = conn.execute("SELECT pg_relation_filepath('records')").fetchone()
        assert rel is not None
        server.pg_ctl("stop", "-m", "fast")
        path = server.data / rel[0]
        assert path.stat().st_size >= 3 * 8192
        with open(path, "r+b") as f:  # block 1's header: PostgreSQL refuses to read it
            f.seek(8192)
            f.write(b"\xff" * 64)
        server.start()
        assert main(["doctor", "--db", url, "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        damaged = [f for f in out["findings"] if "storage is damaged" in f["what"]]
        assert damaged and "table records" in damaged[0]["what"], out
        assert main(["recover", "--db", url]) == 2
        assert "nothing was recovered" in capsys.readouterr().err
    finally:
        server.stop()
