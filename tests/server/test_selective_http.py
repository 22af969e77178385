"""Issue 27 over HTTP: ``GET .../preview?steps=`` and ``POST .../undo?steps=`` / ``?since=``
undo only a selection and its closure; a later whole undo extends the same reversal; a bad
selection is a 422 that writes nothing. In-process app, fast tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server_harness import log_snapshot
from test_continue_resolve import Ctx, app_ctx


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Ctx]:
    yield from app_ctx(tmp_path, "sel.db")


def test_undo_steps_over_http_keeps_the_rest_and_a_later_undo_extends_it(ctx: Ctx) -> None:
    """Saga: s1 wins r1, s2 charges after s1, s3 mails after s2. Undo s2: s2 and s3 only."""
    sid = ctx.sagas["acme1"]
    before = log_snapshot(ctx.db)
    plan = ctx.client.get(f"/sagas/{sid}/preview?steps=s2", headers=ctx.auth).json()
    assert [p["step_id"] for p in plan["steps"]] == ["s2", "s3"]
    assert plan["selection"]["kept"] == ["s1"]
    assert plan["selection"]["added"][0]["why"] == "after"
    assert log_snapshot(ctx.db) == before
    r = ctx.client.post(f"/sagas/{sid}/undo?steps=s2", headers=ctx.auth)
    assert r.status_code in (200, 202), r.text
    first = ctx.wait_done(sid)
    report = first["report"]
    assert [s["step_id"] for s in report["steps"]] == ["s2", "s3"]  # type: ignore[index]
    assert report["selection"]["asked"] == ["s2"]  # type: ignore[index]
    assert ctx.world.crm["r1"]["stage"] == "won"
    assert ctx.world.charges["ch_1"]["refunded"] == 5000
    # the same selection again: the same reversal's report, nothing new
    again = ctx.client.post(f"/sagas/{sid}/undo?steps=s2", headers=ctx.auth)
    assert again.status_code == 200 and again.json()["report"] == report
    whole = ctx.client.post(f"/sagas/{sid}/undo", headers=ctx.auth)
    assert whole.status_code in (200, 202), whole.text
    done = ctx.wait_done(sid)
    assert done["reversal_id"] == first["reversal_id"]
    assert [s["step_id"] for s in done["report"]["steps"]] == ["s1", "s2", "s3"]  # type: ignore[index]
    assert done["report"]["selection"] is None  # type: ignore[index]
    assert ctx.world.crm["r1"]["stage"] == "lead"
    refunds = [c for c in ctx.world.calls if c[:2] == ("pay.refund", "compensate")]
    assert len(refunds) == 1, "the charge is refunded once"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("steps=s9", "has no step 's9'"),
        ("steps=", "steps= is empty"),
        ("since=s3", "nothing to undo after 's3'"),
        ("steps=s2&since=s1", "give steps= or since=, not both"),
        ("steps=s2&continue=true", "?continue=true keeps the reversal's selection"),
    ],
)
def test_a_bad_selection_is_a_422_and_writes_nothing(ctx: Ctx, query: str, words: str) -> None:
    sid = ctx.sagas["acme1"]
    before = log_snapshot(ctx.db)
    r = ctx.client.post(f"/sagas/{sid}/undo?{query}", headers=ctx.auth)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_selection"
    assert words in r.json()["detail"]
    assert log_snapshot(ctx.db) == before
    assert not [c for c in ctx.world.calls if c[1] == "compensate"]


def test_a_selection_of_a_saga_still_running_is_a_409_that_writes_nothing(ctx: Ctx) -> None:
    """The agent's process is still running the saga (its lease live): ``?steps=`` and
    ``?since=`` are refused before anything is written, and the preview too — the steps it has
    not run yet could depend on the chosen ones."""
    import asyncio

    import amends
    from core_world import make_catalog

    async def half_run() -> str:
        eng = amends.Engine(make_catalog(ctx.world), log=ctx.db, lease_seconds=600)
        saga = eng.saga("Still running", tenant="acme")
        await saga.__aenter__()
        await saga.call("crm.update_field", record_id="r2", field="stage", value="won")
        await eng.log.close()  # the agent goes on elsewhere; its saga stays running
        return saga.id

    sid = asyncio.run(half_run())
    before = log_snapshot(ctx.db)
    for query in ("steps=s1", "since=s1"):
        r = ctx.client.post(f"/sagas/{sid}/undo?{query}", headers=ctx.auth)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == "saga_running"
        assert r.json()["detail"].startswith(f"saga {sid!r} is still running")
    r = ctx.client.get(f"/sagas/{sid}/preview?steps=s1", headers=ctx.auth)
    assert r.status_code == 409 and r.json()["error"] == "saga_running", r.text
    assert log_snapshot(ctx.db) == before
    assert ctx.world.crm["r2"]["stage"] == "won"
