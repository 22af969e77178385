"""``saga.pause()`` / ``engine.continue_saga(id)``: one saga, continued by any process.

Two engines on one log stand for two worker processes (each has its own owner id and its own
connections); tests/integrations/test_handoff.py drives real separate processes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import amends
from amends.sandbox import World, sandbox_catalog


def engines(log_url: str, n: int = 2) -> tuple[World, list[amends.Engine]]:
    world = World()
    return world, [amends.Engine(sandbox_catalog(world), log=log_url) for _ in range(n)]


async def paused_saga(engine: amends.Engine) -> str:
    async with engine.saga("Close ACME", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="acme", field="stage", value="closed_won")
        b = saga.call("payments.charge", customer="cus_acme", cents=5000, after=[a])
        await saga.gather(a, b)
        await saga.pause({"turn": ["t", 1], "seen": ["s2"]})
    return saga.id


async def close_all(es: list[amends.Engine]) -> None:
    for e in es:
        await e.close()


async def test_a_continued_saga_numbers_its_steps_after_the_log_and_undo_takes_back_all(
    log_url: str,
) -> None:
    world, (a, b) = engines(log_url)
    try:
        sid = await paused_saga(a)
        rec = await a.log.get_saga(sid)
        assert rec is not None and (rec.state, rec.owner, rec.lease_until) == (
            "running",
            "paused",
            None,
        )
        assert (await a.recover()).in_doubt == ()  # recovery leaves a paused saga alone
        async with b.continue_saga(sid) as saga:
            assert (saga.title, saga.tenant, saga.actor) == ("Close ACME", "acme", "agent:sales")
            assert saga.context == {"turn": ["t", 1], "seen": ["s2"]}
            assert [(s.id, s.state) for s in saga.steps] == [("s1", "done"), ("s2", "done")]
            assert (await saga.steps[1])["id"] == "ch_1"  # a read-back step gives its result
            c = saga.call("chat.post", channel="#sales", text="won", after=[saga.steps[1]])
            await c
        rec = await b.log.get_saga(sid)
        assert rec is not None and rec.state == "completed"
        assert [(s.step_id, s.tool, s.deps) for s in rec.steps] == [
            ("s1", "crm.update_field", ()),
            ("s2", "payments.charge", ("s1",)),
            ("s3", "chat.post", ("s2",)),
        ]
        assert await a.log.verify(sid) == []
        report = await a.undo(sid)
        assert [(s.step_id, s.state) for s in report.steps] == [
            ("s1", "reverted"),
            ("s2", "compensated"),
            ("s3", "compensated"),
        ]
        assert world.crm.read_field("acme", "stage") == "negotiation"
    finally:
        await close_all([a, b])


async def test_two_processes_continuing_one_pause_one_wins_the_other_is_told(
    log_url: str,
) -> None:
    _, (a, b, c) = engines(log_url, 3)
    try:
        sid = await paused_saga(a)
        got: list[Any] = []

        async def take(e: amends.Engine) -> None:
            try:
                async with e.continue_saga(sid) as saga:
                    await saga.call("chat.post", channel="#sales", text=e.owner)
                    got.append(e)
            except amends.SagaStateError as exc:
                got.append(str(exc))

        await asyncio.gather(take(b), take(c))
        [winner] = [g for g in got if isinstance(g, amends.Engine)]
        [told] = [g for g in got if isinstance(g, str)]
        assert told.startswith(f"saga {sid!r} is ")
        assert "is not paused: another process" in told or "is closed (completed)" in told
        rec = await a.log.get_saga(sid)
        assert rec is not None
        assert [(s.step_id, s.tool, s.args.get("text")) for s in rec.steps][2:] == [
            ("s3", "chat.post", winner.owner)
        ]
    finally:
        await close_all([a, b, c])


async def test_a_saga_undone_while_paused_takes_no_new_step(log_url: str) -> None:
    world, (a, b) = engines(log_url)
    try:
        sid = await paused_saga(a)
        await a.undo(sid)
        with pytest.raises(amends.SagaClosedError, match=f"saga '{sid}' is being undone"):
            async with b.continue_saga(sid):
                pytest.fail("entered a saga being undone")
        rec = await b.log.get_saga(sid)
        assert rec is not None and len(rec.steps) == 2
        assert "saga.continued" not in [e.kind for e in await b.log.events(sid)]
        assert world.items("chat.messages") == []
    finally:
        await close_all([a, b])


async def test_a_saga_that_was_never_paused_or_is_closed_is_not_continued(log_url: str) -> None:
    _, (a, b) = engines(log_url)
    try:
        async with a.saga("Running here") as saga:
            await saga.call("crm.update_field", record_id="acme", field="stage", value="won")
            with pytest.raises(amends.SagaStateError, match=r"is not paused: another process \("):
                async with b.continue_saga(saga.id):
                    pass
        with pytest.raises(amends.SagaStateError, match=r"is closed \(completed\)"):
            async with b.continue_saga(saga.id):
                pass
        with pytest.raises(amends.SagaNotFoundError, match="no saga 'saga_nope'"):
            async with b.continue_saga("saga_nope"):
                pass
        with pytest.raises(amends.ConfigError, match="saga id must be a non-empty string"):
            b.continue_saga("")
    finally:
        await close_all([a, b])


async def test_a_paused_saga_whose_lease_holder_died_before_pausing_is_recovered_not_continued(
    log_url: str,
) -> None:
    """A crash before the pause was written: the saga was never handed off; recovery closes it
    (its unfinished step in doubt) and a later continue is refused, naming the saga."""
    _, (a, b) = engines(log_url)
    try:
        saga = a.saga("Crashed")
        await saga.__aenter__()
        await saga.call("crm.update_field", record_id="acme", field="stage", value="won")
        saga._closed = True  # the process stops: no pause, no close
        if saga._heartbeat is not None:
            saga._heartbeat.cancel()
        a.live_sagas.pop(saga.id)
        await a.log.renew_saga_leases([saga.id], a.owner, time.time() - 1)
        await b.recover()
        with pytest.raises(amends.SagaStateError, match=r"is closed \(failed\).*amends recover"):
            async with b.continue_saga(saga.id):
                pass
    finally:
        await close_all([a, b])


async def test_pausing_waits_for_the_steps_in_flight_and_closes_the_saga_here(
    log_url: str,
) -> None:
    _, (a,) = engines(log_url, 1)
    try:
        async with a.saga("Slow") as saga:
            s = saga.call("crm.update_field", record_id="acme", field="stage", value="won")
            await saga.pause()
            assert s.state == "done"  # rule 1: nothing in flight is handed off
            with pytest.raises(amends.SagaClosedError, match="is not open"):
                saga.call("chat.post", channel="#x", text="late")
        rec = await a.log.get_saga(saga.id)
        assert rec is not None and rec.state == "running" and rec.owner == "paused"
    finally:
        await a.close()


async def test_doctor_says_a_paused_saga_waits_for_a_person_and_recover_leaves_it(
    log_url: str,
) -> None:
    """A paused saga has no worker and no lease: it is neither stale (doctor once said "its
    worker stopped": run recover) nor closed by ``amends recover``."""
    from amends.cli.ops import diagnose

    _, (a,) = engines(log_url, 1)
    try:
        sid = await paused_saga(a)
        found = await diagnose(log_url)
        assert [(f.level, f.what) for f in found if sid in f.what] == [
            (
                "info",
                f"saga {sid} is paused, waiting for a person's answer: no worker holds it; the "
                f"process that gets the answer continues it",
            )
        ]
        health = await a.log.health(time.time() + 3600)  # an hour later: still not stale
        assert [s[0] for s in health.stale_sagas] == []
        assert (await a.recover()).in_doubt == ()
        rec = await a.log.get_saga(sid)
        assert rec is not None and (rec.state, rec.owner) == ("running", "paused")
    finally:
        await a.close()


async def _set_owner(engine: amends.Engine, saga_id: str, owner: str) -> None:
    def fn(tx: Any) -> None:
        tx.execute("UPDATE sagas SET owner=? WHERE saga_id=?", (owner, saga_id))

    await engine.log.db.write(fn)  # type: ignore[attr-defined]


async def test_a_row_edited_to_look_paused_is_not_continued_rule_12(log_url: str) -> None:
    """Rule 12: the paused mark changes behaviour (any process may then take the saga), so it
    is checked against the history: a saga held by one process whose row someone edited to
    'paused' is refused as altered, and so is a paused saga whose row names a worker."""
    _, (a, b, c) = engines(log_url, 3)
    try:
        sid = await paused_saga(a)
        async with b.continue_saga(sid) as saga:
            await _set_owner(a, sid, "paused")  # forged: b holds it, its history says so
            with pytest.raises(amends.HistoryAlteredError) as altered:
                async with c.continue_saga(sid):
                    pytest.fail("continued a saga another process holds")
            assert "paused is True, its history says False" in str(altered.value)
            await _set_owner(a, sid, b.owner)
            await saga.pause()
        await _set_owner(a, sid, "vm:1:forged")
        problems = await a.log.verify(sid)
        assert [p.detail for p in problems] == [
            "its row was changed after it was written: paused is False, its history says True"
        ]
    finally:
        await close_all([a, b, c])


async def test_a_process_that_dies_after_continuing_leaves_its_step_in_doubt_for_recovery(
    log_url: str,
) -> None:
    """The continuing process holds the saga with its own lease: when it dies with a step in
    flight, recovery (in any process) marks that step in doubt and closes the saga, as for any
    crashed worker; the steps of the process that paused stay done, and undo reports both."""
    world, (a, b) = engines(log_url)
    try:
        sid = await paused_saga(a)
        saga = b.continue_saga(sid)
        await saga.__aenter__()
        entered, hang = asyncio.Event(), asyncio.Event()

        async def stuck(call: amends.Call, **_: Any) -> None:
            entered.set()  # the intent is durable: the tool is running
            await hang.wait()

        step = saga.call_with(stuck, "sms.send", {"to": "+15550100", "text": "hi"})
        await asyncio.wait_for(entered.wait(), 5)
        saga._closed = True  # the process dies: its step stays in flight, no outcome written
        if saga._heartbeat is not None:
            saga._heartbeat.cancel()
        b.live_sagas.pop(sid)
        await a.log.renew_saga_leases([sid], b.owner, time.time() - 1)
        rec = await a.recover()
        assert rec.in_doubt == ((sid, "s3"),)
        got = await a.log.get_saga(sid)
        assert got is not None and got.state == "failed"
        assert [(s.step_id, s.state) for s in got.steps] == [
            ("s1", "done"),
            ("s2", "done"),
            ("s3", "in_doubt"),
        ]
        report = await a.undo(sid)
        assert [(s.step_id, s.state) for s in report.steps] == [
            ("s1", "reverted"),
            ("s2", "compensated"),
            ("s3", "in_doubt"),
        ]
        assert world.crm.read_field("acme", "stage") == "negotiation"
        step.task.cancel()  # type: ignore[union-attr]
    finally:
        await close_all([a, b])
