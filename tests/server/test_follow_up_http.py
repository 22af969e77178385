"""Issue 27 part 2 over HTTP: ``POST /sagas/{id}/steps/{step}/follow-up`` sends a manual action's
draft through a catalog tool as a follow-up of the reversal (the sender is the token's identity),
``GET /sagas/{id}/follow-ups`` lists it. In-process app, fast tier."""

from __future__ import annotations

import pytest
from server_harness import log_snapshot
from test_continue_resolve import Ctx
from test_continue_resolve import ctx as ctx  # the same app, tokens and seeded sagas


def undone(ctx: Ctx) -> str:
    sid = ctx.sagas["acme1"]
    r = ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    report = ctx.wait_done(sid)["report"]
    assert report["manual_actions"][0]["step_id"] == "s3"  # type: ignore[index]
    return sid


def test_a_follow_up_sent_over_http_is_recorded_with_the_tokens_identity(ctx: Ctx) -> None:
    sid = undone(ctx)
    outbox = len(ctx.world.outbox)
    r = ctx.client.post(
        f"/sagas/{sid}/steps/s3/follow-up",
        json={"tool": "mail.send", "args": {"to": "acme1@example.com", "subject": "Sorry"}},
        headers=ctx.auth,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["follow_up_id"], body["state"], body["parties"]) == (
        "s3+f1", "sent", ["acme1@example.com"],
    )  # fmt: skip
    assert (
        body["by"] != ""
        and body["by"]
        == ctx.client.get(f"/sagas/{sid}", headers=ctx.auth).json()["resolutions"]["s3"]["by"]
    )
    assert ctx.world.outbox[outbox:] == [{"to": "acme1@example.com", "subject": "Sorry"}]
    listed = ctx.client.get(f"/sagas/{sid}/follow-ups", headers=ctx.auth).json()
    assert [(f["follow_up_id"], f["state"]) for f in listed] == [("s3+f1", "sent")]
    again = ctx.client.post(
        f"/sagas/{sid}/steps/s3/follow-up",
        json={"tool": "mail.send", "args": {"to": "acme1@example.com", "subject": "Sorry"}},
        headers=ctx.auth,
    )
    assert again.status_code == 409 and again.json()["error"] == "not_sendable", again.text
    assert len(ctx.world.outbox) == outbox + 1


@pytest.mark.parametrize(
    ("step", "body", "status", "error", "says"),
    [
        (
            "s3",
            {"tool": "mail.send", "args": {}, "by": "mallory"},
            422,
            "invalid_follow_up",
            "'by' is not taken from the body",
        ),
        ("s3", {"tool": "mail.send"}, 422, "invalid_follow_up", '{"tool": "mail.send", "args"'),
        ("s3", {"tool": "fax.send", "args": {}}, 404, "not_found", "no tool 'fax.send'"),
        # a list of objects is no set of field names: a 422, never a 500 (it was a TypeError)
        ("s3", [{"tool": "mail.send"}], 422, "invalid_follow_up", "got [{'tool': 'mail.send'}]"),
        ("s3", [["tool", "args"]], 422, "invalid_follow_up", "got [['tool', 'args']]"),
        ("s1", {"tool": "mail.send", "args": {}}, 409, "not_sendable", "no longer stands"),
    ],
)
def test_a_bad_follow_up_request_gets_a_clear_error_and_writes_nothing(
    ctx: Ctx, step: str, body: object, status: int, error: str, says: str
) -> None:
    sid = undone(ctx)
    before = log_snapshot(ctx.db)
    outbox = len(ctx.world.outbox)
    r = ctx.client.post(f"/sagas/{sid}/steps/{step}/follow-up", json=body, headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert says in r.json()["detail"]
    assert log_snapshot(ctx.db) == before and len(ctx.world.outbox) == outbox


def test_the_follow_ups_of_an_edited_saga_are_refused_409_never_shown(ctx: Ctx) -> None:
    """Rule 12: a saga whose history does not verify lists no follow-ups as if they were the
    record; the answer names the problem and nothing is written."""
    import json
    import sqlite3

    sid = undone(ctx)
    r = ctx.client.post(
        f"/sagas/{sid}/steps/s3/follow-up",
        json={"tool": "mail.send", "args": {"to": "acme1@example.com", "subject": "Sorry"}},
        headers=ctx.auth,
    )
    assert r.status_code == 200, r.text
    conn = sqlite3.connect(ctx.db)
    try:  # someone edits the stored report
        (raw,) = conn.execute("SELECT report FROM reversals WHERE saga_id = ?", (sid,)).fetchone()
        report = {**json.loads(raw), "status": "fully_reversed"}
        conn.execute("UPDATE reversals SET report = ? WHERE saga_id = ?", (json.dumps(report), sid))
        conn.commit()
    finally:
        conn.close()
    before = log_snapshot(ctx.db)
    r = ctx.client.get(f"/sagas/{sid}/follow-ups", headers=ctx.auth)
    assert (r.status_code, r.json()["error"]) == (409, "history_does_not_verify"), r.text
    assert "this saga's history was altered" in r.json()["detail"], r.text
    assert "report" in r.json()["detail"] and "s3+f1" not in r.text
    assert log_snapshot(ctx.db) == before
