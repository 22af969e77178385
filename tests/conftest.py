"""Shared fixtures. Sections owned by other areas are appended below, each clearly delimited."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import _ast_guard
import amends
from core_world import CoreWorld, fresh

_ast_guard.install()  # see tests/_ast_guard.py: CPython 3.11 parses are not thread-safe


@pytest.fixture
def world_and_catalog() -> tuple[CoreWorld, amends.Catalog]:
    return fresh()


@pytest.fixture
def world(world_and_catalog: tuple[CoreWorld, amends.Catalog]) -> CoreWorld:
    return world_and_catalog[0]


@pytest.fixture
def catalog(world_and_catalog: tuple[CoreWorld, amends.Catalog]) -> amends.Catalog:
    return world_and_catalog[1]


@pytest.fixture
async def engine(catalog: amends.Catalog) -> AsyncIterator[amends.Engine]:
    eng = amends.Engine(
        catalog,
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    yield eng
    await eng.close()


# ===== PostgreSQL fixtures (owner: postgres saga log, issue 5) ==================================
from collections.abc import Iterator as _PgIterator  # noqa: E402

import pg as _pg  # noqa: E402


@pytest.fixture(scope="session")
def pg_server() -> _PgIterator[_pg.PgServer]:
    """One real PostgreSQL 15 for the session (FAILS, never skips, if it cannot start)."""
    try:
        server = _pg.PgServer()
    except _pg.PgUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: _pg.PgServer) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL."""
    return pg_server.new_database()


# ===== end PostgreSQL fixtures ==================================================================
