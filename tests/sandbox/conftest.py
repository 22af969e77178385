"""Fixtures for the sandbox tests: a fresh in-memory world and an engine over its catalog."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import amends
from amends.sandbox import World, sandbox_catalog


@pytest.fixture
def sw() -> World:
    """A fresh in-memory sandbox world (seeded records, customers and channels)."""
    return World(seed=7)


@pytest.fixture
async def sandbox_engine(sw: World) -> AsyncIterator[amends.Engine]:
    """An engine over the sandbox catalog of ``sw``, logging to an in-memory SQLite log."""
    eng = amends.Engine(
        sandbox_catalog(sw, timeout=2.0),
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    yield eng
    await eng.close()
