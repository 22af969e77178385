"""Shared fixtures. Sections owned by other areas are appended below, each clearly delimited."""

from __future__ import annotations

import ast
import functools
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import amends
from core_world import CoreWorld, fresh


# CPython 3.11.7 (the CI's Python) keeps ast.parse's recursion-depth bookkeeping in state shared
# by all threads: two threads parsing at once (a thread switch inside one parse, e.g. while the
# garbage collector runs a finalizer) fail with "SystemError: AST constructor recursion
# depth mismatch". Under pytest every first import of a module it rewrites (test modules and the
# packages of installed pytest plugins, e.g. anyio's lazily imported submodules) is an ast.parse,
# on whichever thread imports it; a CI run failed that way in an MCP test. One parse at a time.
def _one_parse_at_a_time(parse: Any) -> Any:
    lock = threading.RLock()

    @functools.wraps(parse)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return parse(*args, **kwargs)

    return locked


if sys.version_info < (3, 12) and not hasattr(ast.parse, "__wrapped__"):
    ast.parse = _one_parse_at_a_time(ast.parse)


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
