"""Workers that open one fresh PostgreSQL log at once: none mistakes another's schema, being
created, for an edited one (tests/faults/test_load.py's 4 workers failed so under load)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import amends

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


async def test_a_snapshot_taken_before_another_worker_created_the_log_reads_it_as_absent(
    pg_url: str,
) -> None:
    """The version check runs in a REPEATABLE READ transaction. Its snapshot can predate the
    commit of another worker's migration while a catalog look-up (``to_regclass``) sees the
    tables that commit made: the tables were there, the version row was not, and the log was
    refused as "its schema version was edited". Every part of the check must read one snapshot:
    a log created after it is absent (0), and the worker then migrates under the lock, where it
    finds the version the other wrote."""
    import psycopg

    from amends._log.postgres import _BEGIN_READ, _Cursor

    first = amends.PostgresLog(pg_url)  # the worker that creates the schema
    db: Any = first.db
    await first.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to an empty database
        conn.execute("DROP TABLE " + ", ".join(_tables(conn)) + " CASCADE")
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.cursor() as cur:
        tx = _Cursor(conn, cur, _BEGIN_READ)
        tx.execute("SELECT 1")  # the snapshot: before the log exists
        other = amends.PostgresLog(pg_url)  # another worker creates it meanwhile, commits
        try:
            assert db._version(tx) == 0
        finally:
            cur.execute("COMMIT")
            await other.close()


async def test_four_workers_open_one_fresh_log_at_once(pg_server: Any) -> None:
    """Four logs opened on four threads at the same moment, on five fresh databases in turn:
    each opens (no SchemaVersionError) and reads the empty log they share."""

    def open_close(url: str) -> int:
        log = amends.PostgresLog(url)
        try:
            return len(asyncio.run(log.list_sagas()))
        finally:
            asyncio.run(log.close())

    for _ in range(5):
        url = pg_server.new_database()
        results = await asyncio.gather(*(asyncio.to_thread(open_close, url) for _ in range(4)))
        assert results == [0, 0, 0, 0]


def _tables(conn: Any) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    ).fetchall()
    assert rows, "the first log made no tables"
    return [str(r[0]) for r in rows]
