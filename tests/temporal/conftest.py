"""Fixtures of the Temporal tests: one dev server per session, a client and workers per test."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import ledger
from devserver import DevServer, DevServerUnavailable
from temporalio.client import Client
from worker_procs import Workers


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A Temporal dev server on a free loopback port (FAILS, never skips, if it cannot start)."""
    try:
        server = DevServer(tmp_path_factory.mktemp("temporal"))
    except DevServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def temporal_client(temporal_server: DevServer) -> Client:
    return await Client.connect(temporal_server.target)


@pytest.fixture
def task_queue() -> str:
    """A queue of its own per test, so one test's workers never pick up another's workflows."""
    return f"amends-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def pg_log_url(pg_url: str) -> AsyncIterator[str]:
    yield pg_url


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    ledger.connect(path).close()
    return path


@pytest.fixture
def workers(
    temporal_server: DevServer, pg_url: str, ledger_path: Path, task_queue: str
) -> Iterator[Workers]:
    w = Workers(temporal_server, pg_url, ledger_path, task_queue)
    try:
        yield w
    finally:
        w.stop()
