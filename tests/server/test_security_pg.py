"""Issue 13 on the PostgreSQL saga log: idempotency keys per tenant shared by two servers, and a
forged report marked and refused — the same protections as on SQLite."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest
from fastapi.testclient import TestClient
from server_harness import _seed

# imported at collection: inside a test, `test_secrets` may name tests/temporal/test_secrets.py
from test_secrets import Ledger, leaks, run_secret_saga, secret_catalog

import amends
from amends.server import ServerSettings, TokenStore, create_app
from core_world import fresh

pytestmark = pytest.mark.slow

BASE = "http://127.0.0.1:8000"


def test_postgres_log_keys_per_tenant_across_servers_and_a_forged_report_is_marked(
    pg_url: str,
) -> None:
    world, catalog = fresh()
    sagas = asyncio.run(_seed(pg_url, catalog, world))
    tokens = TokenStore(":memory:")
    acme = {"Authorization": f"Bearer {tokens.create('acme')}"}
    globex = {"Authorization": f"Bearer {tokens.create('globex')}"}
    settings = ServerSettings(tokens=tokens, verify_interval=0)
    one = create_app(lambda: amends.Engine(catalog, log=pg_url), settings)
    two = create_app(lambda: amends.Engine(catalog, log=pg_url), settings)
    key = {"Idempotency-Key": "pg-key"}
    with TestClient(one, base_url=BASE) as a, TestClient(two, base_url=BASE) as b:
        r = a.post(f"/sagas/{sagas['acme1']}/undo", headers={**acme, **key})
        assert r.status_code in (200, 202), r.text
        r = b.post(f"/sagas/{sagas['acme2']}/undo", headers={**acme, **key})
        assert (r.status_code, r.json()["error"]) == (409, "idempotency_key_reused")
        r = b.post(f"/sagas/{sagas['globex1']}/undo", headers={**globex, **key})
        assert r.status_code in (200, 202), r.text
        deadline = time.monotonic() + 30
        while a.get(f"/sagas/{sagas['acme1']}", headers=acme).json()["reversal"]["state"] != (
            "done"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = a.get(f"/sagas/{sagas['acme1']}", headers=acme).json()
        assert body["integrity"]["verified"] is True
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (raw,) = conn.execute(
                "SELECT report FROM reversals WHERE saga_id = %s", (sagas["acme1"],)
            ).fetchone()  # type: ignore[misc]
            report = json.loads(raw) if isinstance(raw, str) else dict(raw)
            report["status"] = "fully_reversed"
            conn.execute(
                "UPDATE reversals SET report = %s WHERE saga_id = %s",
                (json.dumps(report), sagas["acme1"]),
            )
        body = b.get(f"/sagas/{sagas['acme1']}", headers=acme).json()
        assert body["integrity"]["verified"] is False
        assert body["reversal"]["status"] == "unverified"
        assert "fully_reversed" not in json.dumps(body)
        r = b.post(f"/sagas/{sagas['acme1']}/undo", headers=acme)
        assert (r.status_code, r.json()["error"]) == (409, "history_does_not_verify")
    assert world.crm["r2"]["stage"] == "won"  # the refused key ran nothing
    tokens.close()


def test_postgres_tables_hold_no_secret_bytes(pg_url: str) -> None:

    ledger = Ledger()

    async def go() -> None:
        engine = amends.Engine(secret_catalog(ledger), log=pg_url)
        try:
            sid = await run_secret_saga(engine)
            await engine.undo(sid)
        finally:
            await engine.close()

    asyncio.run(go())
    assert ledger.refunds_with == ["4111111111111111"]  # the resolver gave the card back
    dump = []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        assert {"sagas", "steps", "events", "reversals", "compensations"} <= set(tables)
        for t in tables:
            dump.extend(repr(row) for row in conn.execute(f'SELECT * FROM "{t}"'))
    text = "\n".join(dump)
    assert leaks(text) == []
    assert "[redacted:card_number]" in text


def test_postgres_log_caps_each_tenants_idempotency_keys(pg_url: str) -> None:
    """Issue 21.14 on PostgreSQL: twenty undo requests with twenty keys leave the tenant's five
    newest keys (max_idempotency_keys=5), and the newest is still enforced across servers."""
    world, catalog = fresh()
    sagas = asyncio.run(_seed(pg_url, catalog, world))
    tokens = TokenStore(":memory:")
    acme = {"Authorization": f"Bearer {tokens.create('acme')}"}
    settings = ServerSettings(tokens=tokens, verify_interval=0, max_idempotency_keys=5)
    one = create_app(lambda: amends.Engine(catalog, log=pg_url), settings)
    two = create_app(lambda: amends.Engine(catalog, log=pg_url), settings)
    with TestClient(one, base_url=BASE) as a, TestClient(two, base_url=BASE) as b:
        for i in range(20):
            client = a if i % 2 else b
            r = client.post(
                f"/sagas/{sagas['acme1']}/undo", headers={**acme, "Idempotency-Key": f"k{i}"}
            )
            assert r.status_code in (200, 202), r.text
        with psycopg.connect(pg_url, autocommit=True) as conn:
            keys = [
                r[0] for r in conn.execute("SELECT key FROM idem_keys ORDER BY created_at, key")
            ]
        assert keys == [f"k{i}" for i in range(15, 20)]
        r = a.post(f"/sagas/{sagas['acme2']}/undo", headers={**acme, "Idempotency-Key": "k19"})
        assert (r.status_code, r.json()["error"]) == (409, "idempotency_key_reused")
    tokens.close()
