"""Agents that start together open one new SQLite log together.

Switching a fresh file to WAL takes an exclusive lock, and SQLite answers "database is locked" at
once there (its busy handler is not consulted) while another connection opens the same file: one
of several processes starting at the same moment got a LogLockedError although nobody held the
log for anywhere near the busy timeout (seen as a flaky `test_concurrent_opens_migrate_once`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import amends
from amends._log.sql import SCHEMA_VERSION

ROUNDS = 200  # the race is rare per round (old code: ~1 round in 60 failed)
OPENERS = 3


def _open_together(path: str) -> tuple[list[amends.SqliteLog], list[str]]:
    """OPENERS threads open the new log ``path`` at the same instant."""
    start = threading.Barrier(OPENERS)
    logs: list[amends.SqliteLog] = []
    errors: list[str] = []
    lock = threading.Lock()

    def open_one() -> None:
        start.wait(10)
        try:
            log = amends.SqliteLog(path)
        except amends.AmendsError as exc:
            with lock:
                errors.append(str(exc))
            return
        with lock:
            logs.append(log)

    threads = [threading.Thread(target=open_one) for _ in range(OPENERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return logs, errors


@pytest.mark.slow
async def test_simultaneous_opens_of_a_new_log_all_succeed(tmp_path: Path) -> None:
    failures: list[str] = []
    for round_no in range(ROUNDS):
        logs, errors = _open_together(str(tmp_path / f"log{round_no}.db"))
        failures += [f"round {round_no}: {e}" for e in errors]
        versions = [await log.schema_version() for log in logs]
        for log in logs:
            await log.close()
        assert versions == [SCHEMA_VERSION] * len(logs)
    assert failures == []
