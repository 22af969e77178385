"""Issue 10 over HTTP: the preview is engine.preview (drift probed), ``POST .../undo?continue=true``
continues a reversal that stopped short (rule 6), ``POST .../steps/{step}/resolve`` records that
a person handled a manual action. In-process app, fast tier."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_harness import _seed, log_snapshot, sign_in

import amends
from amends.server import ServerSettings, TokenStore, create_app
from core_world import CoreWorld, fresh, without

BASE = "http://127.0.0.1:8000"


class Ctx:
    def __init__(self, client: TestClient, db: str, world: CoreWorld, sagas: dict[str, str]):
        self.client, self.db, self.world, self.sagas = client, db, world, sagas
        self.auth: dict[str, str] = {}

    def wait_done(self, saga_id: str) -> dict[str, object]:
        deadline = time.monotonic() + 20
        while True:
            body = self.client.get(f"/sagas/{saga_id}", headers=self.auth).json()
            if body["reversal"] and body["reversal"]["state"] == "done":
                rev = self.client.get(
                    f"/reversals/{body['reversal']['reversal_id']}", headers=self.auth
                ).json()
                return dict(rev)
            assert time.monotonic() < deadline, body
            time.sleep(0.05)


def app_ctx(tmp_path: Path, name: str) -> Iterator[Ctx]:
    """An in-process app over a seeded log ``tmp_path/name``, signed in as tenant acme."""
    db = str(tmp_path / name)
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    tokens = TokenStore(":memory:")
    token = tokens.create("acme")
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(tokens=tokens))
    with TestClient(app, base_url=BASE) as client:
        c = Ctx(client, db, world, sagas)
        c.auth = {"Authorization": f"Bearer {token}"}
        yield c
    tokens.close()


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Ctx]:
    yield from app_ctx(tmp_path, "c.db")


def test_preview_probes_expectations_and_shows_a_drifted_step_as_needing_review(ctx: Ctx) -> None:
    sid = ctx.sagas["acme1"]
    ctx.world.human_edit("r1", "stage", "lost")  # someone changed it since the agent acted
    before = log_snapshot(ctx.db)
    plan = ctx.client.get(f"/sagas/{sid}/preview", headers=ctx.auth).json()
    by_tool = {p["tool"]: p for p in plan["steps"]}
    assert by_tool["crm.update_field"]["needs_review"] is True
    assert plan["needs_review"] == [by_tool["crm.update_field"]["step_id"]]
    assert by_tool["pay.charge"]["needs_review"] is False
    assert log_snapshot(ctx.db) == before  # probes only: nothing written
    assert ctx.world.crm["r1"]["stage"] == "lost"
    calls = {(tool, phase) for tool, phase, _ in ctx.world.calls}
    assert ("crm.update_field", "compensate") not in calls
    assert ("pay.refund", "compensate") not in calls


def test_continue_attempts_what_the_budget_cut_off_in_the_same_reversal(ctx: Ctx) -> None:
    sid = ctx.sagas["acme1"]
    r = ctx.client.post(f"/sagas/{sid}/undo", json={"tool_calls": 1}, headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    first = ctx.wait_done(sid)
    states = {s["tool"]: s["state"] for s in first["report"]["steps"]}  # type: ignore[index]
    assert "over_budget" in states.values(), states
    rev_id = first["reversal_id"]
    r = ctx.client.post(
        f"/sagas/{sid}/undo?continue=true", json={"tool_calls": 50}, headers=ctx.auth
    )
    assert r.status_code in (200, 202), r.text
    assert r.json()["reversal_id"] == rev_id
    deadline = time.monotonic() + 20
    while True:
        done = ctx.client.get(f"/reversals/{rev_id}", headers=ctx.auth).json()
        if done["state"] == "done" and done["continuations"] == 1:
            break
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    states = {s["tool"]: s["state"] for s in done["report"]["steps"]}
    assert states == {
        "crm.update_field": "reverted",
        "pay.charge": "compensated",
        "mail.send": "acknowledged",
    }
    assert ctx.world.crm["r1"]["stage"] == "lead"
    assert ctx.world.charges["ch_1"]["refunded"] == 5000
    assert len([e for e in ctx.world.effects if e[0] == "pay.refund"]) == 1


def test_continue_without_a_finished_reversal_is_409_and_runs_nothing(ctx: Ctx) -> None:
    sid = ctx.sagas["acme2"]
    before = log_snapshot(ctx.db)
    r = ctx.client.post(f"/sagas/{sid}/undo?continue=true", headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "nothing_to_continue")
    assert log_snapshot(ctx.db) == before


def test_resolve_records_who_handled_a_manual_action_and_the_page_shows_it(ctx: Ctx) -> None:
    sid = ctx.sagas["acme3"]
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    done = ctx.wait_done(sid)
    (mail,) = [s for s in done["report"]["steps"] if s["tool"] == "mail.send"]  # type: ignore[index]
    r = ctx.client.post(
        f"/sagas/{sid}/steps/{mail['step_id']}/resolve",
        json={"note": "sent the draft"},
        headers=ctx.auth,
    )
    assert r.status_code == 200, r.text
    # rule 12 (issue 23): who is the token's identity, never a name in the body
    who = r.json()["by"]
    assert who.startswith("token tok_")
    assert (r.json()["note"], r.json()["step_id"]) == ("sent the draft", mail["step_id"])
    body = ctx.client.get(f"/sagas/{sid}", headers=ctx.auth).json()
    assert body["resolutions"][mail["step_id"]]["by"] == who
    assert any(e["kind"] == "step.resolved" for e in body["history"])
    before = log_snapshot(ctx.db)
    r = ctx.client.post(
        f"/sagas/{sid}/steps/{mail['step_id']}/resolve",
        json={"by": "ann@acme", "note": "n"},
        headers=ctx.auth,
    )
    assert (r.status_code, r.json()["error"]) == (422, "invalid_resolution")
    assert "identity of the token" in r.json()["detail"]
    assert log_snapshot(ctx.db) == before


@pytest.mark.parametrize(
    ("step", "body", "status", "error"),
    [
        ("s9", {"note": "x"}, 404, "step_not_found"),
        ("s1", {"note": "x", "extra": 1}, 422, "invalid_resolution"),
        ("s1", {"by": 5}, 422, "invalid_resolution"),
        ("s1", {"note": "n" * 2001}, 422, "invalid_resolution"),
        ("s1", {"note": " "}, 422, "invalid_resolution"),
        ("s1", {}, 422, "invalid_resolution"),
        ("s1", [1], 422, "invalid_resolution"),
        ("s1", {"note": "no reversal yet"}, 409, "not_resolvable"),
    ],
)
def test_a_bad_resolve_is_refused_and_writes_nothing(
    ctx: Ctx, step: str, body: object, status: int, error: str
) -> None:
    sid = ctx.sagas["acme1"]
    before = log_snapshot(ctx.db)
    r = ctx.client.post(f"/sagas/{sid}/steps/{step}/resolve", json=body, headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert log_snapshot(ctx.db) == before


def test_the_saga_page_probes_each_expectation_once_and_dispatches_nothing_else(
    ctx: Ctx,
) -> None:
    sid = ctx.sagas["acme1"]
    sign_in(ctx.client, ctx.auth["Authorization"][7:], BASE)
    before = len(ctx.world.calls)
    page = ctx.client.get(f"/ui/sagas/{sid}")
    assert page.status_code == 200
    made = ctx.world.calls[before:]
    assert sorted(tool for tool, _, _ in made) == ["crm.read_field", "pay.get_charge"]
    assert {phase for _, phase, _ in made} == {"probe"}
    assert "Checked: the world still shows the agent" in page.text


# --- issue 23: every reversal can be finished over HTTP --------------------------------------


def _states(body: dict[str, object]) -> dict[str, str]:
    return {s["tool"]: s["state"] for s in body["report"]["steps"]}  # type: ignore[index]


def _wait_continued(ctx: Ctx, rev_id: str, n: int) -> dict[str, object]:
    deadline = time.monotonic() + 20
    while True:
        done = ctx.client.get(f"/reversals/{rev_id}", headers=ctx.auth).json()
        if done["state"] == "done" and done["continuations"] == n:
            return dict(done)
        assert time.monotonic() < deadline, done
        time.sleep(0.05)


def test_retry_tries_a_failed_refund_again_after_the_cause_is_fixed(ctx: Ctx) -> None:
    sid = ctx.sagas["acme1"]
    ctx.world.faults["pay.refund"] = [amends.PermanentError("vendor API key expired")]
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    first = ctx.wait_done(sid)
    assert _states(first)["pay.charge"] == "failed"
    assert _states(first)["crm.update_field"] == "blocked"
    charge = next(s["step_id"] for s in first["report"]["steps"] if s["tool"] == "pay.charge")  # type: ignore[index]
    crm = next(s["step_id"] for s in first["report"]["steps"] if s["tool"] == "crm.update_field")  # type: ignore[index]
    before = log_snapshot(ctx.db)
    for body, status, error in (
        ({"steps": [crm]}, 409, "not_retryable"),
        ({"steps": ["s9"]}, 404, "step_not_found"),
        ({"steps": []}, 422, "invalid_retry"),
        ({"steps": [charge], "by": "x"}, 422, "invalid_retry"),
        ({"steps": [charge], "budget": {"tool_calls": -1}}, 422, "invalid_budget"),
    ):
        r = ctx.client.post(f"/sagas/{sid}/retry", json=body, headers=ctx.auth)
        assert (r.status_code, r.json()["error"]) == (status, error), r.text
    r = ctx.client.post(f"/sagas/{sid}/undo?continue=true", headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "nothing_to_continue")  # failed != stuck
    assert log_snapshot(ctx.db) == before
    r = ctx.client.post(f"/sagas/{sid}/retry", json={"steps": [charge]}, headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    assert r.json()["reversal_id"] == first["reversal_id"]
    done = _wait_continued(ctx, str(first["reversal_id"]), 1)
    assert _states(done) == {
        "crm.update_field": "reverted",
        "pay.charge": "compensated",
        "mail.send": "acknowledged",
    }
    assert ctx.world.charges["ch_1"]["refunded"] == 5000
    report = done["report"]
    assert report["tool_calls"] == sum(r["tool_calls"] for r in report["runs"])  # type: ignore[index]
    history = ctx.client.get(f"/sagas/{sid}", headers=ctx.auth).json()["history"]
    asked = [e for e in history if e["kind"] == "retry.asked"]
    assert asked and asked[0]["data"]["steps"] == [charge]
    assert asked[0]["data"]["by"].startswith("token tok_")


def test_resolve_is_refused_for_an_undone_step_kept_when_repeated_and_withdrawn_on_request(
    ctx: Ctx,
) -> None:
    sid = ctx.sagas["acme3"]
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    done = ctx.wait_done(sid)
    steps = {s["tool"]: s["step_id"] for s in done["report"]["steps"]}  # type: ignore[index]
    before = log_snapshot(ctx.db)
    url = f"/sagas/{sid}/steps/{steps['pay.charge']}/resolve"
    r = ctx.client.post(url, json={"note": "refunded by hand"}, headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "not_resolvable")
    assert "is compensated: its effect no longer stands" in r.json()["detail"]
    r = ctx.client.post(
        f"/sagas/{sid}/steps/{steps['mail.send']}/withdraw", json={"note": "n"}, headers=ctx.auth
    )
    assert (r.status_code, r.json()["error"]) == (409, "no_resolution")
    assert log_snapshot(ctx.db) == before
    mail = f"/sagas/{sid}/steps/{steps['mail.send']}"
    first = ctx.client.post(f"{mail}/resolve", json={"note": "sent the draft"}, headers=ctx.auth)
    again = ctx.client.post(f"{mail}/resolve", json={"note": "sent the draft"}, headers=ctx.auth)
    assert first.json() == again.json()  # the same request again writes nothing
    second = ctx.client.post(f"{mail}/resolve", json={"note": "they replied"}, headers=ctx.auth)
    assert [e["note"] for e in second.json()["earlier"]] == ["sent the draft"]
    r = ctx.client.post(f"{mail}/withdraw", json={"note": "wrong saga"}, headers=ctx.auth)
    assert r.status_code == 200 and r.json()["withdrawn"] is True
    body = ctx.client.get(f"/sagas/{sid}", headers=ctx.auth).json()
    assert body["resolutions"] == {}
    kinds = [(e["kind"], e["data"].get("withdrawn", False)) for e in body["history"]]
    assert kinds.count(("step.resolved", False)) == 2 and ("step.resolved", True) in kinds


def test_allow_missing_tools_undoes_the_rest_over_http(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    upgraded = without(catalog, "pay.refund")  # renamed away by an upgrade
    tokens = TokenStore(":memory:")
    auth = {"Authorization": f"Bearer {tokens.create('acme')}"}
    app = create_app(lambda: amends.Engine(upgraded, log=db), ServerSettings(tokens=tokens))
    with TestClient(app, base_url=BASE) as client:
        sid = sagas["acme1"]
        before = log_snapshot(db)
        # rule 10: the preview says undo will refuse for this tool (it said nothing before)
        preview = client.get(f"/sagas/{sid}/preview", headers=auth).json()
        assert preview["missing_tools"] == ["pay.refund"]
        r = client.post(f"/sagas/{sid}/undo", headers=auth)
        assert (r.status_code, r.json()["error"]) == (409, "catalog_mismatch")
        assert "allow_missing_tools=true" in r.json()["detail"]
        assert log_snapshot(db) == before
        r = client.post(f"/sagas/{sid}/undo?allow_missing_tools=true", headers=auth)
        assert r.status_code in (200, 202), r.text
        ctx = Ctx(client, db, world, sagas)
        ctx.auth = auth
        states = _states(ctx.wait_done(sid))
    tokens.close()
    assert states == {
        "crm.update_field": "blocked",  # it waits for the refund, which is left to a person
        "pay.charge": "failed",
        "mail.send": "acknowledged",
    }
    assert world.charges["ch_1"]["refunded"] == 0


def test_a_step_a_person_resolved_is_not_continued_over_http_until_withdrawn(ctx: Ctx) -> None:
    """The refund stopped for the budget; a person refunded by bank transfer (the ledger shows
    nothing) and resolved it. Before: continue refunded a second time."""
    sid = ctx.sagas["acme1"]
    r = ctx.client.post(f"/sagas/{sid}/undo", json={"tool_calls": 0}, headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    first = ctx.wait_done(sid)
    assert _states(first)["pay.charge"] == "over_budget"
    r = ctx.client.post(
        f"/sagas/{sid}/steps/s2/resolve", json={"note": "refunded by bank transfer"},
        headers=ctx.auth,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    r = ctx.client.post(f"/sagas/{sid}/undo?continue=true", headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    done = _wait_continued(ctx, str(first["reversal_id"]), 1)
    assert _states(done) == {
        "crm.update_field": "reverted",
        "pay.charge": "over_budget",
        "mail.send": "acknowledged",
    }
    assert ctx.world.charges["ch_1"]["refunded"] == 0
    assert not [e for e in ctx.world.effects if e[0] == "pay.refund"]
    before = log_snapshot(ctx.db)
    r = ctx.client.post(f"/sagas/{sid}/undo?continue=true", headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "nothing_to_continue")
    assert log_snapshot(ctx.db) == before
    r = ctx.client.post(
        f"/sagas/{sid}/steps/s2/withdraw", json={"note": "the transfer bounced"}, headers=ctx.auth
    )
    assert r.status_code == 200, r.text
    r = ctx.client.post(f"/sagas/{sid}/undo?continue=true", headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    again = _wait_continued(ctx, str(first["reversal_id"]), 2)
    assert _states(again)["pay.charge"] == "compensated"
    assert ctx.world.charges["ch_1"]["refunded"] == 5000


def test_a_drift_check_the_vendor_could_not_answer_is_retried_over_http(ctx: Ctx) -> None:
    sid = ctx.sagas["acme1"]
    ctx.world.faults["pay.get_charge"] = [ConnectionError("connection refused")] * 10
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    first = ctx.wait_done(sid)
    assert _states(first)["pay.charge"] == "drifted"
    (s2,) = [s for s in first["report"]["steps"] if s["step_id"] == "s2"]  # type: ignore[index]
    assert s2["detail"].startswith("could not check the world before undoing (")
    sign_in(ctx.client, ctx.auth["Authorization"][7:], BASE)
    page = ctx.client.get(f"/ui/sagas/{sid}")
    assert page.text.count('class="retry secondary" data-step-id="s2"') == 1
    ctx.world.faults.clear()  # the vendor is back
    r = ctx.client.post(f"/sagas/{sid}/retry", json={"steps": ["s2"]}, headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    done = _wait_continued(ctx, str(first["reversal_id"]), 1)
    assert _states(done) == {
        "crm.update_field": "reverted",
        "pay.charge": "compensated",
        "mail.send": "acknowledged",
    }
    assert ctx.world.charges["ch_1"]["refunded"] == 5000
    assert len([e for e in ctx.world.effects if e[0] == "pay.refund"]) == 1


def test_observed_drift_is_not_retried_over_http(ctx: Ctx) -> None:
    sid = ctx.sagas["acme1"]
    ctx.world.charges["ch_1"]["refunded"] = 100  # someone refunded part of it by hand
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    assert _states(ctx.wait_done(sid))["pay.charge"] == "drifted"
    sign_in(ctx.client, ctx.auth["Authorization"][7:], BASE)
    assert 'class="retry secondary"' not in ctx.client.get(f"/ui/sagas/{sid}").text
    before = log_snapshot(ctx.db)
    r = ctx.client.post(f"/sagas/{sid}/retry", json={"steps": ["s2"]}, headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "not_retryable")
    assert log_snapshot(ctx.db) == before
    assert ctx.world.charges["ch_1"]["refunded"] == 100


def test_two_concurrent_continue_requests_join_one_continuation(ctx: Ctx) -> None:
    """Rule 6: two people click "Continue undo" at once (or a client retries). Before: the
    request that decided while the first continuation was running got 409 "has no finished
    reversal to continue; POST /sagas/.../undo without ?continue first". Now it joins: both get
    the same reversal, one continuation runs, the refund is sent once, and only the request that
    started it is in the history (joining records nothing)."""
    import threading

    sid = ctx.sagas["acme1"]
    assert ctx.client.post(f"/sagas/{sid}/undo", json={"tool_calls": 0}, headers=ctx.auth)
    rev_id = ctx.wait_done(sid)["reversal_id"]
    ctx.world.delay["pay.refund"] = 0.6  # the continuation is still running when the other decides
    answers: list[tuple[int, dict[str, object]]] = []

    def click() -> None:
        r = ctx.client.post(
            f"/sagas/{sid}/undo?continue=true", json={"tool_calls": 50}, headers=ctx.auth
        )
        answers.append((r.status_code, r.json()))

    clicks = [threading.Thread(target=click) for _ in range(2)]
    for t in clicks:
        t.start()
    for t in clicks:
        t.join()
    assert sorted(code for code, _ in answers) in ([200, 200], [202, 202], [200, 202]), answers
    assert {body["reversal_id"] for _, body in answers} == {rev_id}
    done = ctx.wait_done(sid)
    assert done["continuations"] == 1
    states = {s["tool"]: s["state"] for s in done["report"]["steps"]}  # type: ignore[index]
    assert states == {
        "crm.update_field": "reverted",
        "pay.charge": "compensated",
        "mail.send": "acknowledged",
    }
    assert len([e for e in ctx.world.effects if e[0] == "pay.refund"]) == 1
    conn = sqlite3.connect(ctx.db)
    try:
        asked = conn.execute(
            "SELECT data FROM events WHERE saga_id = ? AND kind = 'undo.asked' ORDER BY event_id",
            (sid,),
        ).fetchall()
    finally:
        conn.close()
    assert [json.loads(row[0])["continue"] for row in asked] == [False, True]


def test_two_concurrent_retry_requests_join_one_continuation(ctx: Ctx) -> None:
    """Rule 6: "Retry…" clicked twice once the key is renewed. Before: the request that decided
    while the first retry ran got 409 not_retryable ("has no finished reversal ... wait for it
    to finish"). Now it joins: the same reversal, one refund, one "retry.asked"."""
    import threading

    sid = ctx.sagas["acme1"]
    fixed: list[bool] = []

    def expired() -> None:
        if not fixed:
            raise amends.PermanentError("vendor API key expired")

    ctx.world.hooks["pay.refund"] = expired
    assert ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth).status_code in (200, 202)
    rev_id = ctx.wait_done(sid)["reversal_id"]
    fixed.append(True)
    ctx.world.delay["pay.refund"] = 0.6  # the retry is still running when the other decides
    answers: list[tuple[int, dict[str, object]]] = []

    def click() -> None:
        r = ctx.client.post(f"/sagas/{sid}/retry", json={"steps": ["s2"]}, headers=ctx.auth)
        answers.append((r.status_code, r.json()))

    clicks = [threading.Thread(target=click) for _ in range(2)]
    for t in clicks:
        t.start()
    for t in clicks:
        t.join()
    assert all(code in (200, 202) for code, _ in answers), answers
    assert {body["reversal_id"] for _, body in answers} == {rev_id}
    done = ctx.wait_done(sid)
    assert done["continuations"] == 1
    states = {s["tool"]: s["state"] for s in done["report"]["steps"]}  # type: ignore[index]
    assert states == {
        "crm.update_field": "reverted",
        "pay.charge": "compensated",
        "mail.send": "acknowledged",
    }
    assert len([e for e in ctx.world.effects if e[0] == "pay.refund"]) == 1
    conn = sqlite3.connect(ctx.db)
    try:
        (asked,) = conn.execute(
            "SELECT count(*) FROM events WHERE saga_id = ? AND kind = 'retry.asked'", (sid,)
        ).fetchone()
    finally:
        conn.close()
    assert asked == 1
