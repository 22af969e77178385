"""Migrating real logs written by older amends: data/log_v1.db was written by schema-v1 code
(an undone deal, a kept saga, an interrupted step). SQLite opens the file itself; PostgreSQL gets
the same rows loaded into the schema-v1 tables, then both are opened by this amends."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import amends
from amends._log import open_log
from amends._log.sql import MIGRATIONS, SCHEMA_VERSION

DATA = Path(__file__).with_name("data")
TABLES = {
    1: ("amends_meta", "sagas", "steps", "reversals", "compensations", "events"),
    2: (
        "amends_meta",
        "sagas",
        "steps",
        "reversals",
        "compensations",
        "events",
        "resolutions",
        "idem_keys",
    ),
    3: ("amends_meta", "sagas", "reversals", "records", "idem_keys"),
}


def _copy(version: int, tmp_path: Path) -> Path:
    path = tmp_path / f"log_v{version}.db"
    shutil.copy(DATA / f"log_v{version}.db", path)
    return path


def _load_into_postgres(version: int, url: str) -> None:
    """The fixture's rows in a PostgreSQL log at schema ``version`` (its own DDL)."""
    import psycopg

    src = sqlite3.connect(DATA / f"log_v{version}.db")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for v in range(1, version + 1):
                for stmt in MIGRATIONS[v]("postgres"):
                    conn.execute(stmt)
            if version >= 3:  # v3's data step left views where the v1 tables were
                from amends._log.schema import _finish_v3

                _finish_v3(conn, "postgres")  # type: ignore[arg-type]
            for table in TABLES[version]:
                cur = src.execute(f"SELECT * FROM {table}")
                cols = [d[0] for d in cur.description]
                marks = ", ".join(["%s"] * len(cols))
                for row in cur.fetchall():
                    conn.execute(
                        f"INSERT INTO {table} ({', '.join(cols)}) OVERRIDING SYSTEM VALUE "
                        f"VALUES ({marks})",
                        row,
                    )
            table, col = ("records", "rec_id") if version >= 3 else ("events", "event_id")
            conn.execute(  # as if the rows had been written one by one
                f"SELECT setval(pg_get_serial_sequence('{table}', '{col}'), "
                f"(SELECT max({col}) FROM {table}))"
            )
    finally:
        src.close()


def _url(request: pytest.FixtureRequest, tmp_path: Path, version: int) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{_copy(version, tmp_path)}"
    url: str = request.getfixturevalue("pg_url")
    _load_into_postgres(version, url)
    return url


_BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow]),
]


@pytest.fixture(params=_BACKENDS)
def v1_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a schema-v1 log holding the v1 fixture's sagas."""
    return _url(request, tmp_path, 1)


@pytest.fixture(params=_BACKENDS)
def v2_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a schema-v2 log holding the v2 fixture's sagas."""
    return _url(request, tmp_path, 2)


async def test_a_v1_log_migrates_and_keeps_every_saga_report_and_event(v1_url: str) -> None:
    log = open_log(v1_url)
    try:
        assert await log.schema_version() == SCHEMA_VERSION
        deal = await log.get_saga("deal")
        assert deal is not None
        assert (deal.title, deal.tenant, deal.actor, deal.state) == (
            "Close the ACME deal",
            "acme",
            "agent:sales",
            "completed",
        )
        assert [(s.step_id, s.tool, s.state) for s in deal.steps] == [
            ("s1", "crm.update_field", "done"),
            ("s2", "pay.charge", "done"),
            ("s3", "mail.send", "done"),
        ]
        assert deal.meta == {} and deal.resolutions == {}
        assert deal.reversal is not None and deal.reversal.continuations == 0
        assert deal.reversal.report is not None
        assert deal.reversal.report["status"] == "cannot_undo"
        comps = await log.get_compensations(deal.reversal.reversal_id)
        assert {k: c.state for k, c in comps.items()} == {"s1": "reverted", "s2": "compensated"}
        assert len(await log.events("deal")) > 8
        assert [s.saga_id for s in await log.list_sagas()] == ["stuck", "kept", "deal"] or {
            s.saga_id for s in await log.list_sagas()
        } == {"stuck", "kept", "deal"}
        # the migrated history is hash-chained: verify finds it intact
        assert await log.verify() == []
        # new API on migrated sagas
        await log.resolve_step("deal", "s3", by="alice", note="sent the draft", now=2e9)
        cont = await log.continue_reversal(
            "deal", budget={}, owner="w", lease_until=2e9 + 60, now=2e9, after_continuation=0
        )
        assert (cont.outcome, cont.reversal.continuations) == ("claimed", 1)
        assert await log.verify() == []
        # the interrupted step of the v1 log is still found by recovery
        assert await log.mark_in_doubt(2e9) == [("stuck", "s1")]
    finally:
        await log.close()


async def test_an_engine_undoes_a_saga_recorded_by_v1(v1_url: str) -> None:
    from core_world import fresh

    world, catalog = fresh()
    world.crm["r2"] = {"stage": "won", "version": 2}
    engine = amends.Engine(catalog, log=v1_url)
    try:
        report = await engine.undo("kept")
        assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "reverted")]
        assert world.crm["r2"]["stage"] == "lead"
        old = await engine.report("deal")
        assert old is not None and old.status == "cannot_undo"
        assert await engine.log.verify() == []
    finally:
        await engine.close()


@pytest.fixture(params=_BACKENDS)
def v3_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a schema-v3 log holding the v3 fixture's sagas (written by the amends of before
    issue 21: no saga heads, no log shards)."""
    return _url(request, tmp_path, 3)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_fixtures_are_real_logs_of_their_version(version: int) -> None:
    conn = sqlite3.connect(f"file:{DATA / f'log_v{version}.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT value FROM amends_meta").fetchall() == [(str(version),)]
        cols = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
        assert ("hash" in cols) is (version >= 2)
    finally:
        conn.close()


async def test_a_v2_log_migrates_with_meta_resolutions_continuations_and_keys(
    v2_url: str,
) -> None:
    log = open_log(v2_url)
    try:
        assert await log.schema_version() == SCHEMA_VERSION
        meta = await log.get_saga("meta")
        assert meta is not None and meta.meta == {
            "catalog": {
                "fingerprint": "f1",
                "ref": "amends.sandbox:demo_catalog",
                "tools": ["crm.update_field"],
            }
        }
        deal = await log.get_saga("deal")
        assert deal is not None
        assert {k: (r.by, r.note) for k, r in deal.resolutions.items()} == {
            "s3": ("alice", "sent the draft")
        }
        rev = deal.reversal
        assert rev is not None
        assert (rev.state, rev.continuations, rev.generation) == ("done", 1, 2)
        assert rev.report is not None and rev.report["continued"] is True
        comps = await log.get_compensations(rev.reversal_id)
        assert {k: c.state for k, c in comps.items()} == {"s1": "reverted", "s2": "compensated"}
        key = await log.idem_get("acme", "k1", 1_700_000_100.0)
        assert key is not None and (key.request_hash, key.response) == ("h1", {"status": 200})
        kinds = [e.kind for e in await log.events("deal")]
        assert kinds.count("reversal.done") == 2 and "reversal.continued" in kinds
        assert "step.resolved" in kinds
        assert await log.verify() == []
        # and it keeps working: a second continuation joins nothing stale
        again = await log.continue_reversal(
            "deal", budget={}, owner="w", lease_until=2e9, now=2e9, after_continuation=1
        )
        assert (again.outcome, again.reversal.continuations) == ("claimed", 2)
        assert (again.reversal.calls_spent, again.reversal.tokens_spent) == (0, 0)
    finally:
        await log.close()


async def test_a_v3_log_keeps_verifying_after_the_v4_migration_and_then_catches_tampering(
    v3_url: str,
) -> None:
    """Issue 21 item 3: a log written before saga heads and log shards existed migrates to v4
    (and on to the current version) with its history untouched: it verifies clean, keeps
    working, and from then on a deleted tail or a deleted saga is caught."""
    log = open_log(v3_url)
    try:
        assert await log.schema_version() == SCHEMA_VERSION == 6
        assert await log.verify() == []
        deal = await log.get_saga("deal")
        assert deal is not None and deal.reversal is not None
        assert (deal.reversal.state, deal.reversal.continuations) == ("done", 1)
        assert {k: r.by for k, r in deal.resolutions.items()} == {"s3": "alice"}
        crashed = await log.get_saga("crashed")
        assert crashed is not None and crashed.steps[0].state == "in_doubt"
        await log.resolve_step("deal", "s2", by="bob", note="checked", now=2e9)
        assert await log.verify() == []
        db = log.db  # type: ignore[attr-defined]
        await db.write(lambda tx: tx.execute("DELETE FROM records WHERE kind='step.resolved'"))
        await db.write(lambda tx: tx.execute("DELETE FROM records WHERE saga_id='kept'"))
        await db.write(lambda tx: tx.execute("DELETE FROM sagas WHERE saga_id='kept'"))
        found = {(p.saga_id, p.what) for p in await log.verify()}
        assert ("deal", "deleted") in found  # its tail (the resolutions) was cut off
        assert ("(log)", "deleted") in found  # a whole saga is gone
    finally:
        await log.close()
