"""The HTTP API against a real server: tenant isolation, rejected input, one reversal per saga."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import httpx
import pytest
from server_harness import REFUND_DELAY, Live, log_snapshot

pytestmark = pytest.mark.slow


def test_no_token_or_bad_token_is_401_with_json_error(live: Live) -> None:
    r = httpx.get(f"{live.url}/sagas")
    assert r.status_code == 401
    assert r.json()["error"] == "missing_token"
    r = httpx.get(f"{live.url}/sagas", headers={"Authorization": "Bearer amd_nope"})
    assert r.status_code == 401
    assert r.json()["error"] == "invalid_token"


def test_list_shows_only_the_tokens_tenant(live: Live) -> None:
    r = httpx.get(f"{live.url}/sagas", headers=live.auth("acme"))
    assert r.status_code == 200
    ids = {s["saga_id"] for s in r.json()["sagas"]}
    assert ids == {live.sagas["acme1"], live.sagas["acme2"], live.sagas["acme3"]}
    r = httpx.get(f"{live.url}/sagas", params={"tenant": "globex"}, headers=live.auth("acme"))
    assert r.json() == {"sagas": []}
    r = httpx.get(f"{live.url}/sagas", params={"status": "failed"}, headers=live.auth("acme"))
    assert r.json() == {"sagas": []}
    r = httpx.get(f"{live.url}/sagas", params={"until": 0}, headers=live.auth("acme"))
    assert r.json() == {"sagas": []}


def test_other_tenants_saga_is_404_and_cannot_be_undone(live: Live) -> None:
    theirs = live.sagas["globex1"]
    before = log_snapshot(live.db)
    for method, path in (
        ("GET", f"/sagas/{theirs}"),
        ("GET", f"/sagas/{theirs}/preview"),
        ("POST", f"/sagas/{theirs}/undo"),
    ):
        r = httpx.request(method, f"{live.url}{path}", headers=live.auth("acme"))
        assert r.status_code == 404, (path, r.text)
        assert r.json() == {
            "error": "saga_not_found",
            "detail": f"no saga {theirs!r} for this token",
        }
    assert log_snapshot(live.db) == before
    assert live.world.charges["ch_4"]["refunded"] == 0  # globex's charge untouched
    assert live.world.crm["g1"]["stage"] == "won"


def test_saga_detail_and_preview(live: Live) -> None:
    sid = live.sagas["acme1"]
    r = httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth())
    assert r.status_code == 200
    body = r.json()
    assert [(s["tool"], s["reversibility"], s["verb"]) for s in body["steps"]] == [
        ("crm.update_field", "reversible", "Revert"),
        ("pay.charge", "compensable", "Compensate"),
        ("mail.send", "irreversible", "Acknowledge"),
    ]
    assert body["reversal"] is None
    assert any(e["kind"].startswith("step") for e in body["history"])
    r = httpx.get(f"{live.url}/sagas/{sid}/preview", headers=live.auth())
    plan = r.json()
    assert plan["saga_id"] == sid
    by_tool = {p["tool"]: p for p in plan["steps"]}
    assert by_tool["pay.charge"]["expected_residue"] == [
        {
            "what": "Refund of 50.00 to cust-acme1",
            "parties": ["cust-acme1"],
            "settles_at": "2026-12-07",
        }
    ]
    assert by_tool["mail.send"]["needs_person"] is True
    assert by_tool["crm.update_field"]["needs_person"] is False
    assert live.world.crm["r1"]["stage"] == "won"  # a preview executes nothing


@pytest.mark.parametrize(
    ("body", "headers", "status", "error"),
    [
        ("not json", {"Content-Type": "application/json"}, 400, "malformed_json"),
        ('{"tool_calls": -1}', {"Content-Type": "application/json"}, 422, "invalid_budget"),
        ('{"calls": 3}', {"Content-Type": "application/json"}, 422, "invalid_budget"),
        ("[1, 2]", {"Content-Type": "application/json"}, 422, "invalid_budget"),
        ('{"seconds": NaN}', {"Content-Type": "application/json"}, 400, "malformed_json"),
        ('{"tool_calls": 5}', {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    ],
)
def test_rejected_undo_changes_nothing(
    live: Live, body: str, headers: dict[str, str], status: int, error: str
) -> None:
    sid = live.sagas["acme1"]
    before = log_snapshot(live.db)
    r = httpx.post(f"{live.url}/sagas/{sid}/undo", content=body, headers={**live.auth(), **headers})
    assert r.status_code == status, r.text
    assert r.json()["error"] == error
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    assert log_snapshot(live.db) == before
    assert live.world.crm["r1"]["stage"] == "won"


def test_unknown_saga_and_reversal_are_404(live: Live) -> None:
    r = httpx.post(f"{live.url}/sagas/saga_nope/undo", headers=live.auth())
    assert (r.status_code, r.json()["error"]) == (404, "saga_not_found")
    r = httpx.get(f"{live.url}/reversals/rev_nope", headers=live.auth())
    assert (r.status_code, r.json()["error"]) == (404, "reversal_not_found")
    r = httpx.get(f"{live.url}/reversals/rev_nope/events", headers=live.auth())
    assert (r.status_code, r.json()["error"]) == (404, "reversal_not_found")


async def test_eight_concurrent_undos_get_one_reversal(live: Live) -> None:
    """8 concurrent POSTs (same and different Idempotency-Keys): one reversal id, one refund."""
    sid = live.sagas["acme2"]
    async with httpx.AsyncClient(base_url=live.url, headers=live.auth(), timeout=30) as client:
        first = await asyncio.gather(
            *(
                client.post(
                    f"/sagas/{sid}/undo",
                    json={"tool_calls": 50},
                    headers={"Idempotency-Key": f"k{i % 2}"},
                )
                for i in range(8)
            )
        )
        codes = [r.status_code for r in first]
        # 202 while the slow refund runs; a request served after it finished gets 200 (same id)
        assert set(codes) <= {200, 202} and 202 in codes, [r.text for r in first]
        rev_ids = {r.json()["reversal_id"] for r in first}
        assert len(rev_ids) == 1
        (rev_id,) = rev_ids
        await asyncio.sleep(REFUND_DELAY + 0.5)
        done = await client.post(f"/sagas/{sid}/undo", headers={"Idempotency-Key": "k0"})
        assert done.status_code == 200
        report = done.json()["report"]
        assert report["reversal_id"] == rev_id
        assert report["status"] == "cannot_undo"
        assert report["headline"] == (
            "2 of 3 taken back (1 compensated, leaving a trace) · 1 needs your attention"
        )
        got = await client.get(f"/reversals/{rev_id}")
        assert got.json()["report"] == report
    refunds = [e for e in live.world.effects if e[0] == "pay.refund"]
    assert len(refunds) == 1
    assert live.world.charges["ch_2"]["refunded"] == 5000
    assert live.world.crm["r2"]["stage"] == "lead"
    conn = sqlite3.connect(live.db)
    try:
        n = conn.execute("SELECT count(*) FROM reversals WHERE saga_id = ?", (sid,)).fetchone()[0]
    finally:
        conn.close()
    assert n == 1


def test_idempotency_key_reused_for_another_saga_is_409(live: Live) -> None:
    """A key first used for one saga is refused for another; that saga gets no reversal."""
    key = {**live.auth(), "Idempotency-Key": "same-key"}
    r = httpx.post(f"{live.url}/sagas/{live.sagas['acme1']}/undo", headers=key, timeout=30)
    assert r.status_code == 202
    before = log_snapshot(live.db)
    r = httpx.post(f"{live.url}/sagas/{live.sagas['acme2']}/undo", headers=key, timeout=30)
    assert r.status_code == 409
    assert r.json()["error"] == "idempotency_key_reused"
    r = httpx.get(f"{live.url}/sagas/{live.sagas['acme2']}", headers=live.auth())
    assert r.json()["reversal"] is None
    assert live.world.crm["r2"]["stage"] == "won"
    assert log_snapshot(live.db)[1] == before[1]  # no new reversal row


async def test_sse_streams_each_step_then_the_report(live: Live) -> None:
    sid = live.sagas["acme3"]
    async with httpx.AsyncClient(base_url=live.url, headers=live.auth(), timeout=30) as client:
        r = await client.post(f"/sagas/{sid}/undo")
        assert r.status_code == 202
        rev_id = r.json()["reversal_id"]
        events: list[tuple[str, dict[str, object]]] = []
        async with client.stream("GET", f"/reversals/{rev_id}/events") as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            kind = ""
            async for line in resp.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line[6:])))
    steps = [d for k, d in events if k == "step"]
    assert sorted((s["tool"], s["state"]) for s in steps) == [
        ("crm.update_field", "reverted"),
        ("mail.send", "acknowledged"),
        ("pay.charge", "compensated"),
    ]
    assert events[-1][0] == "done"
    assert events[-1][1]["reversal_id"] == rev_id
    assert any(k == "log" for k, _ in events)
