"""The ``log_url`` fixture: every conformance test runs unchanged on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[pytest.mark.postgres, pytest.mark.slow]),
]


@pytest.fixture(params=BACKENDS)
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh, empty saga log on one backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'log.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url
