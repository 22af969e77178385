"""PostgresLog under issue 12: pipeline mode and REPEATABLE READ with a claim on each saga row.

A write costs its round trips (pinned), a statement that fails when it reaches the server late
(held back for the pipeline) fails only its own write in a group commit, and concurrent writers
to one saga still keep one hash chain and "no step after a claim" (rule 11, issue 2 #4).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import amends
from amends._log import postgres
from amends._log.base import CompensationWrite, StepFinish, StepIntent

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LEASE = 10**10


class _Counted(postgres._Cursor):
    seen: list[_Counted] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Counted.seen.append(self)


def _trips(monkeypatch: pytest.MonkeyPatch) -> list[_Counted]:
    _Counted.seen = []
    monkeypatch.setattr(postgres, "_Cursor", _Counted)
    return _Counted.seen


async def _saga(log: amends.PostgresLog, saga_id: str) -> None:
    await log.create_saga(
        saga_id, "t", tenant=None, actor=None, owner="w", lease_until=LEASE, now=time.time()
    )


async def _intent(log: amends.PostgresLog, saga_id: str, step_id: str, seq: int) -> bool:
    return await log.begin_step(
        StepIntent(
            saga_id,
            step_id,
            seq=seq,
            tool="kv.put",
            args={"k": step_id},
            deps=[],
            resources=[],
            declared="reversible",
            now=time.time(),
        )
    )


async def test_a_step_intent_result_and_compensation_record_cost_two_round_trips_each(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intent, result and compensation record: [BEGIN + xid + the one SELECT] then [INSERT +
    the saga-row claim + COMMIT] (were 4 round trips each: BEGIN, SELECT, INSERT, COMMIT)."""
    log = amends.PostgresLog(pg_url)
    try:
        await _saga(log, "s1")
        seen = _trips(monkeypatch)
        assert await _intent(log, "s1", "a", 1)
        await log.finish_step("s1", "a", StepFinish("done", result=1), now=time.time())
        claim = await log.claim_reversal(
            "s1", reversal_id="r1", budget={}, owner="w", lease_until=LEASE, now=time.time()
        )
        assert claim.outcome == "new"
        del seen[:]
        await log.record_compensation(
            CompensationWrite(
                "r1",
                claim.reversal.generation,
                "a",
                state="dispatched",
                attempts=1,
                detail=None,
                data={},
                calls_spent=1,
                tokens_spent=0,
                event="compensation.dispatched",
                now=time.time(),
            )
        )
        assert [c.round_trips for c in seen] == [2]
        kinds = [e.kind for e in await log.events("s1")]
        assert kinds == [
            "saga.started",
            "step.intent",
            "step.done",
            "reversal.requested",
            "compensation.dispatched",
        ]
    finally:
        await log.close()


async def test_intent_and_result_round_trips(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sequential step (intent, then result) is 4 round trips on two transactions."""
    log = amends.PostgresLog(pg_url)
    try:
        await _saga(log, "s2")
        seen = _trips(monkeypatch)
        assert await _intent(log, "s2", "a", 1)
        await log.finish_step("s2", "a", StepFinish("done", result=1), now=time.time())
        assert [c.round_trips for c in seen] == [2, 2]
        assert [c.xid is not None for c in seen] == [True, True]
    finally:
        await log.close()


async def test_a_held_back_insert_that_fails_at_commit_fails_only_its_own_write(
    pg_url: str,
) -> None:
    """Group commit: the duplicate INSERT reaches the server with COMMIT; the batch is run again
    one savepoint per write, so the writes before and after it commit and it alone fails."""
    log = amends.PostgresLog(pg_url)
    try:
        await _saga(log, "dup")

        def insert(saga_id: str) -> Any:
            def fn(tx: Any) -> str:
                tx.execute(
                    "INSERT INTO sagas (saga_id, title, state, created_at) "
                    "VALUES (?, 't', 'running', 0)",
                    (saga_id,),
                )
                return saga_id

            return fn

        db: Any = log.db
        jobs = [(insert(s), None, None, 0) for s in ("x1", "dup", "x2")]
        out = await asyncio.to_thread(db._commit, jobs)
        assert [ok for _job, ok, _v in out] == [True, False, True]
        assert [out[0][2], out[2][2]] == ["x1", "x2"]
        assert "duplicate key" in str(out[1][2])
        names = {s.saga_id for s in await log.list_sagas()}
        assert names == {"dup", "x1", "x2"}
    finally:
        await log.close()


async def test_two_processes_appending_to_one_saga_keep_one_hash_chain(pg_url: str) -> None:
    """Two logs (two writer threads, two connection pools, as two workers would) append to the
    same saga at once: every record chains to the one before it; none is lost or forked."""
    a, b = amends.PostgresLog(pg_url), amends.PostgresLog(pg_url)
    try:
        await _saga(a, "shared")
        n = 40

        async def burst(log: amends.PostgresLog, who: str) -> None:
            await asyncio.gather(
                *(
                    log.append_event("shared", "probe.note", data={"who": who, "i": i}, now=i)
                    for i in range(n)
                )
            )

        await asyncio.gather(burst(a, "a"), burst(b, "b"))
        events = await a.events("shared")
        assert len(events) == 1 + 2 * n
        assert await a.verify("shared") == []
    finally:
        await a.close()
        await b.close()


async def test_a_claim_racing_step_intents_from_another_process_admits_no_step_after_it(
    pg_url: str,
) -> None:
    """issue 2 #4 across processes: every intent recorded as started precedes the claim in the
    history; the ones that lost the race are recorded as cancelled and reported refused."""
    a, b = amends.PostgresLog(pg_url), amends.PostgresLog(pg_url)
    try:
        await _saga(a, "race")

        async def steps() -> list[bool]:
            return list(await asyncio.gather(*(_intent(a, "race", f"s{i}", i) for i in range(60))))

        async def claim() -> None:
            await asyncio.sleep(0.005)
            await b.claim_reversal(
                "race", reversal_id="rr", budget={}, owner="b", lease_until=LEASE, now=time.time()
            )

        started, _ = await asyncio.gather(steps(), claim())
        events = await a.events("race")
        kinds = [e.kind for e in events]
        claimed_at = kinds.index("reversal.requested")
        assert "step.intent" not in kinds[claimed_at:]
        assert kinds.count("step.intent") == sum(started)
        assert kinds.count("step.cancelled") == len(started) - sum(started)
        assert await a.verify("race") == []
    finally:
        await a.close()
        await b.close()


async def test_a_statement_failing_mid_pipeline_raises_its_own_error_and_logs_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The duplicate key is what the write reports (not "pipeline aborted"), psycopg logs no
    "error ignored" warning, and the connection is clean for the next write."""
    log = amends.PostgresLog(pg_url, max_size=1)
    try:
        await _saga(log, "dup")

        def fn(tx: Any) -> None:
            tx.execute(
                "INSERT INTO sagas (saga_id, title, state, created_at) "
                "VALUES ('dup', 't', 'running', 0)"
            )
            for i in range(300):  # results come back while these are still being queued
                tx.execute("INSERT INTO amends_meta (key, value) VALUES (?, 'x')", (f"k{i}",))
            tx.execute("SELECT 1")

        with pytest.raises(amends.AmendsError, match="duplicate key"):
            await log.db.write(fn)
        assert not [r for r in caplog.records if r.name.startswith("psycopg")]
        await _saga(log, "after")
        assert {s.saga_id for s in await log.list_sagas()} == {"dup", "after"}
        keys = {
            k for (k,) in await log.db.read(lambda tx: tx.execute("SELECT key FROM amends_meta"))
        }
        assert "k0" not in keys
    finally:
        await log.close()


async def test_a_group_commit_reads_what_its_writes_need_in_its_first_round_trip(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain heads of sagas this process wrote lately are prefetched with BEGIN: a batch of
    appends to 4 such sagas is 2 round trips (was one SELECT each + COMMIT), and every chain
    still verifies."""
    from amends._log.sql import _append

    log = amends.PostgresLog(pg_url)
    db: Any = log.db
    try:
        sagas = [f"p{i}" for i in range(4)]
        for saga_id in sagas:
            await _saga(log, saga_id)

        def append(saga_id: str, i: int) -> Any:
            return lambda tx: _append(tx, None, saga_id, "probe.note", float(i), "{}")

        first = [(append(s, 1), None, None, 0) for s in sagas]
        assert all(ok for _j, ok, _v in await asyncio.to_thread(db._commit, first))
        seen = _trips(monkeypatch)
        second = [(append(s, 2), None, None, 0) for s in sagas]
        assert all(ok for _j, ok, _v in await asyncio.to_thread(db._commit, second))
        assert [c.round_trips for c in seen] == [2]
        for saga_id in sagas:
            assert [e.kind for e in await log.events(saga_id)] == [
                "saga.started",
                "probe.note",
                "probe.note",
            ]
            assert await log.verify(saga_id) == []
    finally:
        await log.close()


async def test_a_connection_used_within_a_second_is_handed_out_without_a_check_round_trip(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's liveness check (an empty query) runs for a connection idle for over a second,
    not before every transaction; a write still commits either way."""
    import psycopg_pool

    checks: list[object] = []
    real = psycopg_pool.ConnectionPool.check_connection

    def spy(conn: Any) -> None:
        checks.append(conn)
        real(conn)

    monkeypatch.setattr(psycopg_pool.ConnectionPool, "check_connection", staticmethod(spy))
    log = amends.PostgresLog(pg_url, max_size=1)
    try:
        await _saga(log, "c1")
        first = len(checks)
        for i in range(5):
            await log.append_event("c1", "probe.note", now=float(i))
        assert len(checks) == first, "a connection just used is not checked again"
        await asyncio.sleep(1.2)
        await log.append_event("c1", "probe.note", now=9.0)
        assert len(checks) == first + 1, "an idle connection is checked before use"
        assert len(await log.events("c1")) == 7
    finally:
        await log.close()
