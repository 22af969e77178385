"""The saga-log API others build on (briefs/log-api.md A-G), on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

import amends
from amends._log import SagaLog, open_log
from amends._log.base import CompensationWrite, StepIntent

NOW = 1_800_000_000.0


@pytest.fixture
async def log(log_url: str) -> AsyncIterator[SagaLog]:
    lg = open_log(log_url)
    yield lg
    await lg.close()


async def _saga(log: SagaLog, saga_id: str = "s", *, steps: int = 2, **kw: object) -> None:
    await log.create_saga(
        saga_id, "t", tenant="acme", actor=None, owner="w0", lease_until=NOW, now=NOW, **kw
    )  # type: ignore[arg-type]
    for i in range(1, steps + 1):
        await log.begin_step(
            StepIntent(
                saga_id,
                f"s{i}",
                seq=i,
                tool="crm.update_field",
                args={"i": i},
                deps=[],
                resources=[],
                declared="reversible",
                now=NOW,
            )
        )
    await log.finish_saga(saga_id, "completed", now=NOW)


async def _finished_reversal(log: SagaLog, saga_id: str = "s") -> amends._log.base.Claim:
    claim = await log.claim_reversal(
        saga_id,
        reversal_id="rev-1",
        budget={"tool_calls": 1},
        owner="w1",
        lease_until=NOW + 60,
        now=NOW,
    )
    await log.record_compensation(
        CompensationWrite(
            "rev-1",
            1,
            "s1",
            state="over_budget",
            attempts=0,
            detail="budget spent",
            data={},
            calls_spent=1,
            tokens_spent=7,
            event="compensation.over_budget",
            now=NOW,
        )
    )
    await log.finish_reversal("rev-1", 1, {"status": "cannot_undo"}, now=NOW + 1)
    return claim


# --- A: saga metadata ------------------------------------------------------------------------
async def test_saga_metadata_is_stored_listed_and_in_the_history(log: SagaLog) -> None:
    meta = {"catalog": {"ref": "myapp.tools:catalog", "fingerprint": "abc", "tools": ["a", "b"]}}
    await _saga(log, "with", meta=meta)
    await _saga(log, "without")
    rec = await log.get_saga("with")
    assert rec is not None and rec.meta == meta
    bare = await log.get_saga("without")
    assert bare is not None and bare.meta == {}
    listed = {s.saga_id: s.meta for s in await log.list_sagas()}
    assert listed == {"with": meta, "without": {}}
    first = (await log.events("with"))[0]
    assert (first.kind, first.data["meta"]) == ("saga.started", meta)


# --- B: resolutions --------------------------------------------------------------------------
async def test_resolve_step_keeps_the_latest_resolution_per_step_and_logs_each(
    log: SagaLog,
) -> None:
    """The latest resolution speaks for the step; the earlier ones stay with it (issue 23: a
    second resolution never erases the first)."""
    await _saga(log)
    first = await log.resolve_step("s", "s1", by="alice", note="checked the PSP", now=NOW + 5)
    assert first == amends._log.base.Resolution("s1", "alice", "checked the PSP", NOW + 5)
    await log.resolve_step("s", "s1", by="bob", note=None, now=NOW + 9)
    await log.resolve_step("s", "s2", by="carol", note="sent the draft", now=NOW + 7)
    rec = await log.get_saga("s")
    assert rec is not None
    assert {k: v.to_dict() for k, v in rec.resolutions.items()} == {
        "s1": {
            "step_id": "s1",
            "by": "bob",
            "note": None,
            "at": NOW + 9,
            "earlier": [{"step_id": "s1", "by": "alice", "note": "checked the PSP", "at": NOW + 5}],
        },
        "s2": {"step_id": "s2", "by": "carol", "note": "sent the draft", "at": NOW + 7},
    }
    assert (
        amends._log.base.Resolution.from_dict(rec.resolutions["s2"].to_dict())
        == (rec.resolutions["s2"])
    )
    resolved = [(e.step_id, e.data) for e in await log.events("s") if e.kind == "step.resolved"]
    assert resolved == [
        ("s1", {"by": "alice", "note": "checked the PSP"}),
        ("s1", {"by": "bob", "note": None}),
        ("s2", {"by": "carol", "note": "sent the draft"}),
    ]


async def test_resolve_step_names_an_unknown_saga_or_step(log: SagaLog) -> None:
    await _saga(log)
    with pytest.raises(amends.SagaNotFoundError, match="no saga 'nope'"):
        await log.resolve_step("nope", "s1", by="a", note=None, now=NOW)
    with pytest.raises(amends.ContractError, match="no step 's9'; its steps are s1, s2"):
        await log.resolve_step("s", "s9", by="a", note=None, now=NOW)
    with pytest.raises(amends.ConfigError, match="by=''"):
        await log.resolve_step("s", "s1", by="", note=None, now=NOW)
    rec = await log.get_saga("s")
    assert rec is not None and rec.resolutions == {}


# --- C: continuations ------------------------------------------------------------------------
async def test_continue_reversal_reopens_a_finished_reversal_once(log: SagaLog) -> None:
    await _saga(log)
    await _finished_reversal(log)
    claim = await log.continue_reversal(
        "s",
        budget={"tool_calls": 9},
        owner="w2",
        lease_until=NOW + 100,
        now=NOW + 10,
        after_continuation=0,
    )
    rev = claim.reversal
    assert claim.outcome == "claimed"
    assert (rev.reversal_id, rev.state, rev.owner, rev.generation) == ("rev-1", "running", "w2", 2)
    assert (rev.budget, rev.calls_spent, rev.tokens_spent, rev.continuations) == (
        {"tool_calls": 9},
        0,
        0,
        1,
    )
    assert rev.finished_at is None
    # a second request that also saw 0 continuations joins the running continuation
    joined = await log.continue_reversal(
        "s", budget={}, owner="w3", lease_until=NOW + 100, now=NOW + 11, after_continuation=0
    )
    assert (joined.outcome, joined.reversal.generation) == ("running_elsewhere", 2)
    # the continuation keeps the compensations logged before it; old generations are fenced
    with pytest.raises(amends._errors.LeaseLostError):
        await log.renew_reversal_lease("rev-1", 1, NOW + 200)
    await log.finish_reversal("rev-1", 2, {"status": "fully_reversed"}, now=NOW + 12)
    late = await log.continue_reversal(
        "s", budget={}, owner="w3", lease_until=NOW + 100, now=NOW + 13, after_continuation=0
    )
    assert (late.outcome, late.reversal.report) == ("done", {"status": "fully_reversed"})
    assert late.reversal.continuations == 1
    comps = await log.get_compensations("rev-1")
    assert comps["s1"].state == "over_budget"
    kinds = [e.kind for e in await log.events("s") if e.reversal_id]
    assert kinds == [
        "reversal.requested",
        "compensation.over_budget",
        "reversal.done",
        "reversal.continued",
        "reversal.done",
    ]


async def test_concurrent_continuations_claim_exactly_one(log: SagaLog) -> None:
    await _saga(log)
    await _finished_reversal(log)
    claims = await asyncio.gather(
        *(
            log.continue_reversal(
                "s",
                budget={},
                owner=f"w{i}",
                lease_until=NOW + 100,
                now=NOW + 10,
                after_continuation=0,
            )
            for i in range(5)
        )
    )
    assert sorted(c.outcome for c in claims) == ["claimed"] + ["running_elsewhere"] * 4
    rev = await log.get_reversal(saga_id="s")
    assert rev is not None and (rev.continuations, rev.generation) == (1, 2)


async def test_continue_without_a_reversal_claims_a_new_one(log: SagaLog) -> None:
    await _saga(log)
    claim = await log.continue_reversal(
        "s", budget={"seconds": 5}, owner="w1", lease_until=NOW + 60, now=NOW, reversal_id="r0"
    )
    assert (claim.outcome, claim.reversal.reversal_id, claim.reversal.continuations) == (
        "new",
        "r0",
        0,
    )
    with pytest.raises(amends.SagaNotFoundError):
        await log.continue_reversal("nope", budget={}, owner="w", lease_until=NOW, now=NOW)


async def test_continue_takes_over_a_running_reversal_whose_lease_expired(log: SagaLog) -> None:
    await _saga(log)
    await log.claim_reversal(
        "s", reversal_id="rev-1", budget={}, owner="w1", lease_until=NOW + 5, now=NOW
    )
    live = await log.continue_reversal("s", budget={}, owner="w2", lease_until=NOW + 60, now=NOW)
    assert live.outcome == "running_elsewhere"
    dead = await log.continue_reversal(
        "s", budget={}, owner="w2", lease_until=NOW + 60, now=NOW + 10
    )
    assert (dead.outcome, dead.reversal.owner, dead.reversal.continuations) == (
        "taken_over",
        "w2",
        0,
    )


# --- G: HTTP idempotency keys ----------------------------------------------------------------
async def test_idempotency_keys_per_tenant_first_writer_wins_and_expire(log: SagaLog) -> None:
    put = await log.idem_put(
        "acme", "k1", "h1", {"status": 200, "body": {"a": 1}}, NOW + 60, now=NOW
    )
    assert (put.request_hash, put.response) == ("h1", {"status": 200, "body": {"a": 1}})
    again = await log.idem_put("acme", "k1", "h2", {"status": 500}, NOW + 60, now=NOW + 1)
    assert (again.request_hash, again.response) == ("h1", {"status": 200, "body": {"a": 1}})
    got = await log.idem_get("acme", "k1", NOW + 2)
    assert got is not None and (got.tenant, got.key, got.expires_at) == ("acme", "k1", NOW + 60)
    assert await log.idem_get("beta", "k1", NOW + 2) is None  # per tenant
    assert await log.idem_get("acme", "k1", NOW + 61) is None  # expired
    fresh = await log.idem_put("acme", "k1", "h3", {"status": 201}, NOW + 200, now=NOW + 61)
    assert fresh.request_hash == "h3"
    got = await log.idem_get("acme", "k1", NOW + 62)
    assert got is not None and got.response == {"status": 201}


async def test_concurrent_idempotency_puts_store_one_response(log: SagaLog) -> None:
    records = await asyncio.gather(
        *(log.idem_put("t", "k", f"h{i}", {"i": i}, NOW + 60, now=NOW) for i in range(6))
    )
    assert len({r.request_hash for r in records}) == 1
    stored = await log.idem_get("t", "k", NOW)
    assert stored is not None and stored.request_hash == records[0].request_hash


# --- D: opening ------------------------------------------------------------------------------
async def test_read_only_log_reads_and_refuses_every_write(log_url: str) -> None:
    log = open_log(log_url)
    await _saga(log)
    await log.close()
    ro = open_log(log_url, read_only=True)
    try:
        assert ro.read_only is True
        rec = await ro.get_saga("s")
        assert rec is not None and [s.step_id for s in rec.steps] == ["s1", "s2"]
        with pytest.raises(amends._errors.LogReadOnlyError, match="opened read-only"):
            await ro.resolve_step("s", "s1", by="a", note=None, now=NOW)
        with pytest.raises(amends._errors.LogReadOnlyError, match="opened read-only"):
            await _saga(ro, "other")
    finally:
        await ro.close()
    rw = open_log(log_url)
    try:
        assert rw.read_only is False
        assert [s.saga_id for s in await rw.list_sagas()] == ["s"]
    finally:
        await rw.close()


# --- F: tamper-evident history ---------------------------------------------------------------
async def test_an_untouched_history_verifies_clean(log: SagaLog) -> None:
    await _saga(log)
    await _saga(log, "s-2")
    await _finished_reversal(log)
    await log.resolve_step("s", "s2", by="a", note=None, now=NOW + 3)
    assert await log.verify() == []
    assert await log.verify("s") == []
    events = await log.events("s")
    done = next(e for e in events if e.kind == "reversal.done")
    assert len(done.data["report_hash"]) == 64


async def _tamper(log: SagaLog, sql: str, *params: object) -> None:
    await log.db.write(lambda tx: tx.execute(sql, params))  # type: ignore[attr-defined]


async def test_verify_names_an_edited_a_deleted_and_an_inserted_event(log: SagaLog) -> None:
    for sid in ("edited", "deleted", "inserted", "clean"):
        await _saga(log, sid)
    ids = {sid: [e.event_id for e in await log.events(sid)] for sid in ("edited", "deleted")}
    await _tamper(
        log, "UPDATE records SET body=? WHERE rec_id=?", '{"args":{"i":99}}', ids["edited"][1]
    )
    await _tamper(log, "DELETE FROM records WHERE rec_id=?", ids["deleted"][2])
    await _tamper(
        log,
        "INSERT INTO records (saga_id, step_id, kind, phase, at, body) VALUES "
        "(?, 's1', 'step.done', 'f', ?, '{\"state\":\"done\"}')",
        "inserted",
        NOW,
    )
    problems = await log.verify()
    assert [(p.saga_id, p.event_id, p.what) for p in problems] == [
        ("deleted", ids["deleted"][3], "deleted"),
        ("edited", ids["edited"][1], "edited"),
        ("inserted", problems[2].event_id, "inserted"),
    ]
    assert "changed after it was written" in problems[1].detail
    assert await log.verify("clean") == []


async def test_verify_catches_an_edited_report_and_a_deleted_tail(log: SagaLog) -> None:
    await _saga(log)
    await _finished_reversal(log)
    await _tamper(
        log, "UPDATE reversals SET report=? WHERE saga_id='s'", '{"status":"fully_reversed"}'
    )
    problems = await log.verify("s")
    assert [p.what for p in problems] == ["report mismatch"]
    await _saga(log, "t")
    await _tamper(log, "DELETE FROM records WHERE saga_id='t'")
    assert [(p.saga_id, p.event_id, p.what) for p in await log.verify("t")] == [
        ("t", None, "deleted")
    ]


async def test_a_signing_key_makes_a_reforged_chain_fail(log_url: str, tmp_path: object) -> None:
    keyed = open_log(log_url, signing_key=b"k1")
    try:
        await _saga(keyed)
        assert await keyed.verify() == []
    finally:
        await keyed.close()
    other = open_log(log_url, signing_key=b"k2")
    try:
        problems = await other.verify()
        assert problems and {p.what for p in problems} == {"edited"}
    finally:
        await other.close()


async def test_health_lists_in_doubt_steps_and_stuck_reversals(log: SagaLog) -> None:
    now = time.time()
    await log.create_saga(
        "dead", "t", tenant=None, actor=None, owner="w", lease_until=now - 5, now=now - 10
    )
    await log.begin_step(
        StepIntent(
            "dead",
            "s1",
            seq=1,
            tool="x",
            args={},
            deps=[],
            resources=[],
            declared="reversible",
            now=now - 10,
        )
    )
    health = await log.health(now)
    # issue 21.11: leases live on the database's clock; read back on ours to within its tick
    assert health.stale_sagas == [("dead", "w", pytest.approx(now - 5, abs=0.05))]
    assert health.in_doubt == [] and health.live_sagas == []
    await log.mark_in_doubt(now)
    await log.claim_reversal(
        "dead", reversal_id="r", budget={}, owner="w2", lease_until=now - 1, now=now - 2
    )
    health = await log.health(now)
    assert health.in_doubt == [("dead", "s1", "x")]
    assert health.stuck_reversals == [("r", "dead", "w2", 1, pytest.approx(now - 1, abs=0.05))]
