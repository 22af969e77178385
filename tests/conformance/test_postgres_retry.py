"""PostgresLog retries a write whose connection died at COMMIT without applying it twice."""

from __future__ import annotations

from typing import Any

import pytest

import amends

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


async def test_connection_lost_at_commit_is_looked_up_and_rerun_once(pg_url: str) -> None:
    import psycopg

    log = amends.PostgresLog(pg_url, retry_seconds=20)
    runs = []

    def fn(tx: Any) -> str:
        tx.execute(
            "INSERT INTO records (saga_id, kind, phase, at, body) "
            "VALUES ('s', 'probe.event', '', 0, '{}')"
        )
        pid = tx.execute("SELECT pg_backend_pid()")[0][0]
        runs.append(pid)
        if len(runs) == 1:  # kill our own server process just before COMMIT goes out
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return "written"

    looked_up: list[str | None] = []
    real = log.db._xact_status  # type: ignore[attr-defined]

    def spy(xid: int) -> str | None:
        looked_up.append(real(xid))
        return looked_up[-1]

    log.db._xact_status = spy  # type: ignore[attr-defined]
    try:
        assert await log.db.write(fn) == "written"
        assert looked_up == ["aborted"], "the unknown COMMIT outcome is looked up by xid"
        assert len(runs) == 2, "the write is re-run once, on a new connection"
        assert runs[0] != runs[1]
        kinds = [e.kind for e in await log.events("s")]
        assert kinds == ["probe.event"], "the event was written exactly once"
    finally:
        await log.close()
