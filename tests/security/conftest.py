"""Fixtures of the trust-boundary tests (issue 21): the helpers of this directory importable."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import amends

sys.path.insert(0, str(Path(__file__).parent))

BACKENDS = ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])]


@pytest.fixture(params=BACKENDS)
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh saga log: a SQLite file, or a database of the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'log.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def mem() -> AsyncIterator[tuple[amends.Engine, Any]]:
    """An engine on an in-memory log over ``test_tamper_evidence``'s card processor, and the
    processor (the saga-history tests: rule 12's skip, the incremental read)."""
    from test_tamper_evidence import Psp, psp_catalog

    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=amends.SqliteLog(":memory:"))
    yield engine, psp
    await engine.close()
