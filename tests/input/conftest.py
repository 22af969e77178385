"""Fixtures for the bad-input tests (issue 11): a saga on a real SQLite file, and the log's rows.

Every test here asserts that refused input leaves the log's rows byte-identical.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import amends

sys.path.insert(0, str(Path(__file__).parent))
from input_tools import CATALOG, WORLD


def log_rows(db: str) -> list[str]:
    """Every row of every table of the SQLite log, as SQL text (read-only, no checkpoint)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture
def rows() -> Callable[[str], list[str]]:
    return log_rows


@pytest.fixture
async def saga_db(tmp_path: Path) -> tuple[str, str]:
    """A finished saga (CRM update + an email) in a fresh SQLite log; (db path, saga id)."""
    db = str(tmp_path / "input.db")
    WORLD.crm["r1"] = {"stage": "lead", "owner": "ann", "version": 1}  # shared module world
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("mail.send", to="bob@acme.test", subject="Won", after=[a])
    await engine.close()
    return db, saga.id
