"""One suite, two backends: the saga log keeps the same semantics on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

import amends
from amends._log import open_log
from amends._log.base import CompensationWrite, StepIntent
from amends._log.sql import SCHEMA_VERSION
from core_world import fresh

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


async def _close_deal(engine: amends.Engine, saga_id: str = "deal") -> None:
    async with engine.saga("Close the ACME deal", saga_id=saga_id, tenant="acme") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        c = saga.call("mail.send", to="ceo@acme.test", subject="Won", after=[b])
        await saga.gather(a, b, c)


async def test_forward_is_logged_with_every_result_and_inverse(log_url: str) -> None:
    _world, catalog = fresh()
    engine = amends.Engine(catalog, log=log_url, retry=FAST)
    try:
        await _close_deal(engine)
        rec = await engine.log.get_saga("deal")
        assert rec is not None
        assert (rec.state, rec.tenant, rec.title) == ("completed", "acme", "Close the ACME deal")
        assert [(s.step_id, s.tool, s.state) for s in rec.steps] == [
            ("s1", "crm.update_field", "done"),
            ("s2", "pay.charge", "done"),
            ("s3", "mail.send", "done"),
        ]
        assert rec.steps[0].inverse is not None
        assert rec.steps[0].inverse["args"] == {
            "record_id": "r1",
            "field": "stage",
            "value": "lead",
        }
        assert rec.steps[1].deps == ("s1",)
        kinds = [(e.step_id, e.kind) for e in await engine.log.events("deal")]
        assert kinds == [
            (None, "saga.started"),
            ("s1", "step.intent"),
            ("s1", "step.done"),
            ("s2", "step.intent"),
            ("s2", "step.done"),
            ("s3", "step.intent"),
            ("s3", "step.done"),
            (None, "saga.completed"),
        ]
        assert [s.saga_id for s in await engine.log.list_sagas(tenant="acme")] == ["deal"]
        assert await engine.log.list_sagas(tenant="other") == []
        assert await engine.log.schema_version() == SCHEMA_VERSION
    finally:
        await engine.close()


async def test_undo_reports_the_same_truth_and_is_one_reversal(log_url: str) -> None:
    world, catalog = fresh()
    engine = amends.Engine(catalog, log=log_url, retry=FAST)
    other = amends.Engine(catalog, log=log_url, retry=FAST)  # a second worker, other owner
    try:
        await _close_deal(engine)
        reports = await asyncio.gather(
            engine.undo("deal"), other.undo("deal"), engine.undo("deal"), other.undo("deal")
        )
        assert len({r.reversal_id for r in reports}) == 1
        assert all(r.to_dict() == reports[0].to_dict() for r in reports)
        report = reports[0]
        assert report.status == "cannot_undo"  # the email stands
        assert [(s.step_id, s.state.value) for s in report.steps] == [
            ("s1", "reverted"),
            ("s2", "compensated"),
            ("s3", "acknowledged"),
        ]
        assert world.crm["r1"]["stage"] == "lead"
        assert world.charges["ch_1"]["refunded"] == 5000
        assert [op for op, _k, _i in world.effects].count("pay.refund") == 1
        stored = await other.report("deal")
        assert stored is not None and stored.to_dict() == report.to_dict()
    finally:
        await engine.close()
        await other.close()


async def test_claims_leases_and_fencing(log_url: str) -> None:
    log = open_log(log_url)
    try:
        now = time.time()
        await log.create_saga(
            "s", "t", tenant=None, actor=None, owner="w0", lease_until=now, now=now
        )
        await log.finish_saga("s", "done", now=now)
        first = await log.claim_reversal(
            "s", reversal_id="rev-a", budget={}, owner="w1", lease_until=now + 60, now=now
        )
        assert (first.outcome, first.reversal.generation) == ("new", 1)
        second = await log.claim_reversal(
            "s", reversal_id="rev-b", budget={}, owner="w2", lease_until=now + 60, now=now
        )
        assert (second.outcome, second.reversal.reversal_id) == ("running_elsewhere", "rev-a")
        later = now + 120  # w1's lease has expired
        taken = await log.claim_reversal(
            "s", reversal_id="rev-c", budget={}, owner="w2", lease_until=later + 60, now=later
        )
        assert (taken.outcome, taken.reversal.generation, taken.reversal.owner) == (
            "taken_over",
            2,
            "w2",
        )
        with pytest.raises(amends._errors.LeaseLostError, match="generation 2"):
            await log.record_compensation(
                CompensationWrite(
                    "rev-a",
                    1,
                    "s1",
                    state="dispatched",
                    attempts=1,
                    detail=None,
                    data={},
                    calls_spent=1,
                    tokens_spent=0,
                    event="compensation.dispatched",
                    now=later,
                )
            )
        await log.record_compensation(
            CompensationWrite(
                "rev-a",
                2,
                "s1",
                state="reverted",
                attempts=1,
                detail="ok",
                data={},
                calls_spent=1,
                tokens_spent=0,
                event="compensation.reverted",
                now=later,
            )
        )
        with pytest.raises(amends._errors.LeaseLostError):
            await log.finish_reversal("rev-a", 1, {"status": "fully_reversed"}, now=later)
        await log.finish_reversal("rev-a", 2, {"status": "fully_reversed"}, now=later)
        done = await log.claim_reversal(
            "s", reversal_id="rev-d", budget={}, owner="w3", lease_until=later, now=later
        )
        assert (done.outcome, done.reversal.report) == ("done", {"status": "fully_reversed"})
        comps = await log.get_compensations("rev-a")
        assert (comps["s1"].state, comps["s1"].generation) == ("reverted", 2)
        kinds = [e.kind for e in await log.events("s")]
        assert kinds == [
            "saga.started",
            "saga.done",
            "reversal.requested",
            "reversal.taken_over",
            "compensation.reverted",
            "reversal.done",
        ]
    finally:
        await log.close()


async def test_recovery_marks_unfinished_steps_in_doubt_only_after_the_lease(log_url: str) -> None:
    log = open_log(log_url)
    try:
        now = time.time()
        await log.create_saga(
            "s", "t", tenant=None, actor=None, owner="w", lease_until=now + 5, now=now
        )
        assert await log.begin_step(
            StepIntent(
                "s",
                "s1",
                seq=1,
                tool="x",
                args={"a": 1},
                deps=[],
                resources=[],
                declared="reversible",
                now=now,
            )
        )
        assert await log.mark_in_doubt(now) == []  # the worker's lease still holds
        assert await log.mark_in_doubt(now + 10) == [("s", "s1")]
        rec = await log.get_saga("s")
        assert rec is not None
        assert (rec.state, rec.steps[0].state) == ("failed", "in_doubt")
        assert await log.mark_in_doubt(now + 20) == []  # exactly once
    finally:
        await log.close()


async def test_a_newer_schema_is_refused_with_the_fix(log_url: str) -> None:
    log = open_log(log_url)
    await log.db.write(  # type: ignore[attr-defined]
        lambda tx: tx.execute("UPDATE amends_meta SET value='99' WHERE key='schema_version'")
    )
    await log.close()
    with pytest.raises(
        amends._errors.SchemaVersionError, match="schema version 99.*upgrade amends"
    ):
        open_log(log_url)


async def test_concurrent_opens_migrate_once(log_url: str) -> None:
    logs = await asyncio.gather(*(asyncio.to_thread(open_log, log_url) for _ in range(4)))
    try:
        assert [await lg.schema_version() for lg in logs] == [SCHEMA_VERSION] * 4
    finally:
        for lg in logs:
            await lg.close()
