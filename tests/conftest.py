"""Shared fixtures. Sections owned by other areas are appended below, each clearly delimited."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import amends
from core_world import CoreWorld, fresh


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
