"""Selective undo on Temporal (issue 27): ``engine.undo(saga_id, steps=[...])`` / ``since=`` with
a ``TemporalRunner`` undoes the closure the local engine would, as one reversal per saga; two
callers racing overlapping selections never compensate a step twice (in-process workers sharing
one world, and worker processes against a vendor ledger outside every process); a later
whole-saga undo through Temporal skips what the selections already neutralised."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import ledger
import pytest
from devserver import DevServer
from temporalio.client import Client
from test_reversal import comparable
from worker_procs import Workers

import amends
from amends.integrations.temporal import TemporalRunner, make_worker, workflow_id
from core_world import CoreWorld, fresh

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01, jitter=0.0)
DONE = {"compensated", "reverted"}
WHOLE = {
    "s1": "reverted",
    "s2": "compensated",
    "s3": "reverted",
    "s4": "acknowledged",
    "s5": "reverted",
}
"""The deal's steps after a whole-saga undo: the mail (s4) is acknowledged, the rest undone."""


async def deal(engine: amends.Engine, world: CoreWorld, saga_id: str) -> None:
    """s1 wins deal r1; s2 charges c1; s3 writes the charge id into r2 (uses s2's output); s4
    mails (independent); s5 notes on r1 after s1 (after=)."""
    world.crm["r2"]["charge"] = None
    async with engine.saga("Close the ACME deal", actor="agent:sales", saga_id=saga_id) as saga:
        s1 = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        s2 = saga.call("pay.charge", customer="c1", cents=5000)
        saga.call("crm.update_field", record_id="r2", field="charge", value=s2["id"])
        saga.call("mail.send", to="ann@x.test", subject="Welcome")
        saga.call("crm.note", record_id="r1", text="closed", after=[s1])


async def dealt(
    log: amends.SagaLog | str, saga_id: str, runner: TemporalRunner | None = None
) -> tuple[CoreWorld, amends.Catalog, amends.Engine]:
    """A fresh world and an engine on ``log`` (on Temporal with ``runner``) that ran the deal."""
    world, catalog = fresh()
    engine = amends.Engine(catalog, log=log, retry=FAST, runner=runner)
    try:
        await deal(engine, world, saga_id)
    except BaseException:
        await engine.close()
        raise
    return world, catalog, engine


def world_state(world: CoreWorld) -> dict[str, Any]:
    return {"crm": copy.deepcopy(world.crm), "charges": copy.deepcopy(world.charges)}


def compensations(world: CoreWorld) -> list[str]:
    """The tools the reversal called to take steps back, one entry per call that reached the
    vendor (probes excluded), sorted."""
    return sorted(c[0] for c in world.calls if c[1] == "compensate")


def states(report: amends.UndoReport) -> dict[str, str]:
    return {s.step_id: s.state.value for s in report.steps}


async def test_a_selection_on_temporal_undoes_the_closure_the_local_engine_does(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Take back the charge, keep the meeting: steps=["s2"] through Temporal compensates s2 and
    the CRM field that recorded its id (s3), nothing else, with the local engine's report and
    world; asked again it is the same run's report; since= is the same selection; a later
    whole-saga undo through Temporal continues the one reversal and never refunds twice."""
    local_world, _, local = await dealt(amends.SqliteLog(":memory:"), "saga-sel")
    local_sel = await local.undo("saga-sel", steps=["s2"])
    local_whole = await local.undo("saga-sel")
    await local.close()

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    world, catalog, engine = await dealt(pg_url, "saga-sel", runner)
    try:
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-sel", steps=["s2"])
            sel_world = world_state(world)
            sel_calls = compensations(world)
            again = await engine.undo("saga-sel", steps=["s2"])
            covered = await engine.undo("saga-sel", steps=["s3"])  # inside s2's closure
            whole = await engine.undo("saga-sel")

        assert states(report) == {"s2": "compensated", "s3": "reverted"}
        assert report.status == "partially_reversed"
        assert report.selection == {
            "asked": ["s2"],
            "steps": ["s2", "s3"],
            "added": [
                {
                    "step_id": "s3",
                    "because_of": "s2",
                    "why": "output",
                    "reason": "undoing s2 (pay.charge) also undoes s3 (crm.update_field): it "
                    "used s2's result ('ch_1')",
                }
            ],
            "kept": ["s1", "s4", "s5"],
        }
        assert report.headline.endswith("3 other steps kept as they are")
        assert comparable(report) == comparable(local_sel)
        # the charge refunded and its id taken out of r2; the deal, the note and the mail stand
        assert sel_world["charges"]["ch_1"]["refunded"] == 5000
        assert sel_world["crm"]["r2"]["charge"] is None
        assert sel_world["crm"]["r1"]["stage"] == "won"
        assert sel_world["crm"]["r1"]["notes"] == ["closed"]
        assert sel_calls == ["crm.update_field", "pay.refund"]
        # rule 6: the same selection again, or one it covers, gets that run's report
        assert again.to_dict() == report.to_dict()
        assert covered.to_dict() == report.to_dict()
        wid = workflow_id("saga-sel", ["s2"])
        assert wid == "amends-reversal:saga-sel/steps=s2"
        runs = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{wid}'")]
        assert len(runs) == 2  # the undo, then a short run that found its report in the log

        # the whole saga: the same reversal continued; s2 and s3 taken from the log, not redone
        assert whole.reversal_id == report.reversal_id and whole.continuations == 1
        assert whole.selection is None
        assert states(whole) == WHOLE
        assert comparable(whole) == comparable(local_whole)
        assert world_state(world) == world_state(local_world)
        assert compensations(world) == [
            "crm.delete_note", "crm.update_field", "crm.update_field", "pay.refund",
        ]  # fmt: skip
        assert world.crm["r1"] == {"stage": "lead", "owner": "ann", "version": 3, "notes": []}
        kinds = [(e.step_id, e.kind) for e in await engine.log.events("saga-sel")]
        assert kinds.count(("s2", "compensation.compensated")) == 1
        assert kinds.count(("s3", "compensation.reverted")) == 1
    finally:
        await engine.close()


async def test_since_on_temporal_is_the_selection_of_every_later_step(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """since="s3" through Temporal undoes s4 and s5 only, as the workflow of that selection."""
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    world, catalog, engine = await dealt(pg_url, "saga-since", runner)
    try:
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-since", since="s3")
        assert states(report) == {"s4": "acknowledged", "s5": "reverted"}
        assert report.selection is not None and report.selection["asked"] == ["s4", "s5"]
        assert world.crm["r1"]["notes"] == [] and world.crm["r1"]["stage"] == "won"
        assert world.charges["ch_1"]["refunded"] == 0 and world.crm["r2"]["charge"] == "ch_1"
        desc = await temporal_client.get_workflow_handle(
            workflow_id("saga-since", ["s4", "s5"])
        ).describe()
        assert desc.status is not None
    finally:
        await engine.close()


async def test_resume_of_a_selection_on_temporal_stays_inside_it(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """A selection cut short by its budget, continued with engine.resume through Temporal:
    the continuation finishes the selection's closure and never goes beyond it (the deal, the
    note and the mail stand), as the local engine's does."""
    local_world, _, local = await dealt(amends.SqliteLog(":memory:"), "saga-cut")
    local_cut = await local.undo("saga-cut", steps=["s2"], budget=amends.Budget(tool_calls=2))
    local_done = await local.resume("saga-cut", budget=amends.Budget())
    await local.close()

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    world, catalog, engine = await dealt(pg_url, "saga-cut", runner)
    try:
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            cut = await engine.undo("saga-cut", steps=["s2"], budget=amends.Budget(tool_calls=2))
            done = await engine.resume("saga-cut", budget=amends.Budget())
        assert states(cut) == {"s2": "over_budget", "s3": "reverted"}
        assert states(done) == {"s2": "compensated", "s3": "reverted"}
        assert done.reversal_id == cut.reversal_id and done.continuations == 1
        assert done.selection is not None and done.selection["kept"] == ["s1", "s4", "s5"]
        assert comparable(cut) == comparable(local_cut)
        assert comparable(done) == comparable(local_done)
        assert world_state(world) == world_state(local_world)
        assert world.crm["r1"]["stage"] == "won" and world.crm["r1"]["notes"] == ["closed"]
        assert compensations(world) == ["crm.update_field", "pay.refund"]
    finally:
        await engine.close()


async def test_overlapping_selections_racing_on_temporal_compensate_each_step_once(
    temporal_client: Client, temporal_server: DevServer, task_queue: str, pg_url: str
) -> None:
    """Three callers, each its own engine and Temporal client, at once: s2 twice (closure s2,
    s3) and s3,s5 (closure s3, s5), served by one worker (one per process: the next test has
    two worker processes). One reversal; the charge refunded
    once, s3's field written back once; each report covers its own closure, all honest; the
    deal (s1) and the mail (s4) stand. Then the whole saga: only s1 is left to take back."""
    world, catalog = fresh()
    world.delay["pay.refund"] = 1.0  # the runs overlap in time
    world.delay["crm.delete_note"] = 1.0
    engines = []
    for _ in range(3):
        client = await Client.connect(temporal_server.target)
        runner = TemporalRunner(client, task_queue=task_queue)
        engines.append(amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner))
    try:
        await deal(engines[0], world, "saga-race")
        async with make_worker(temporal_client, catalog, engines[0].log, task_queue=task_queue):
            a, b, c = await asyncio.gather(
                engines[0].undo("saga-race", steps=["s2"]),
                engines[1].undo("saga-race", steps=["s3", "s5"]),
                engines[2].undo("saga-race", steps=["s2"]),
            )
            race_calls = compensations(world)
            race_world = world_state(world)
            whole = await engines[0].undo("saga-race")

        assert race_calls == ["crm.delete_note", "crm.update_field", "pay.refund"]
        assert a.reversal_id == b.reversal_id == c.reversal_id
        assert a.to_dict() == c.to_dict()  # the same selection: one workflow, one report
        wid = workflow_id("saga-race", ["s2"])
        assert len([w async for w in temporal_client.list_workflows(f"WorkflowId = '{wid}'")]) == 1
        for report, closure in ((a, {"s2", "s3"}), (b, {"s3", "s5"})):
            assert closure <= set(states(report)), report.to_dict()
            assert set(states(report).values()) <= DONE, report.to_dict()
            residue = "s2" in states(report)  # the refund settles later
            assert report.status == ("partially_reversed" if residue else "fully_reversed")
            assert not {"s1", "s4"} & set(states(report))
        last = max((a, b), key=lambda r: r.continuations)
        assert last.continuations == 1
        assert last.selection is not None
        assert last.selection["steps"] == ["s2", "s3", "s5"]
        assert last.selection["kept"] == ["s1", "s4"]
        assert race_world["charges"]["ch_1"]["refunded"] == 5000
        assert race_world["crm"]["r2"]["charge"] is None
        assert race_world["crm"]["r1"]["stage"] == "won"
        assert race_world["crm"]["r1"]["notes"] == []

        assert whole.reversal_id == a.reversal_id and whole.selection is None
        assert states(whole) == WHOLE
        assert compensations(world) == [
            "crm.delete_note", "crm.update_field", "crm.update_field", "pay.refund",
        ]  # fmt: skip
        assert world.crm["r1"]["stage"] == "lead"
        assert world.charges["ch_1"]["refunded"] == 5000
    finally:
        for e in engines:
            await e.close()


async def test_a_selection_no_worker_takes_up_is_recorded_over_budget_and_resumed_inside_it(
    temporal_server: DevServer, temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Issue 23 for a selection: no worker serves the queue, the budget's seconds run out; the
    report covers the selection's closure only, nothing attempted, naming the queue;
    the workflow a worker then picks up finds the reversal done; resume finishes the closure."""
    runner = TemporalRunner(temporal_client, task_queue=task_queue, heartbeat_timeout=1.0)
    world, catalog, engine = await dealt(pg_url, "saga-idle", runner)
    try:
        report = await asyncio.wait_for(
            engine.undo("saga-idle", steps=["s2"], budget=amends.Budget(seconds=1)), 60
        )
        # s3's inverse is not attempted; s2's waits for it (rule 3)
        assert states(report) == {"s2": "blocked", "s3": "over_budget"}
        assert report.selection is not None and report.selection["kept"] == ["s1", "s4", "s5"]
        assert f"no worker serves Temporal task queue {task_queue!r}" in report.step("s3").detail
        assert compensations(world) == []
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            queued = temporal_client.get_workflow_handle(workflow_id("saga-idle", ["s2"]))
            got = await asyncio.wait_for(queued.result(), 60)
            assert got["reversal_id"] == report.reversal_id
            final = await engine.resume("saga-idle", budget=amends.Budget(seconds=30))
        assert states(final) == {"s2": "compensated", "s3": "reverted"}
        assert compensations(world) == ["crm.update_field", "pay.refund"]
        assert world.crm["r1"]["stage"] == "won"
    finally:
        await engine.close()


def undo_requests(path: Path) -> list[str]:
    """The idempotency keys of every compensation request that reached the vendor, sorted."""
    conn = ledger.connect(path)
    try:
        rows = conn.execute("SELECT idem FROM requests WHERE phase='compensate'").fetchall()
    finally:
        conn.close()
    return sorted(str(r[0]) for r in rows)


async def test_overlapping_selections_on_two_worker_processes_compensate_each_step_once(
    temporal_server: DevServer, workers: Workers, ledger_path: Path, pg_url: str
) -> None:
    """Two worker processes (``amends worker``'s code), the vendor a ledger outside every
    process; callers ask s2 (closure s2, s3) and s3,s4 (closure s3, s4, s5), two of each, at
    once. Every compensation reaches the vendor once; s1 and s6 stand; then the whole saga."""
    catalog = ledger.make_catalog(ledger_path)
    engines = []
    for _ in range(4):
        runner = TemporalRunner(temporal_server.target, task_queue=workers.queue)
        await runner.client()  # connected before the callers ask at once
        engines.append(amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner))
    try:
        async with engines[0].saga("six changes", saga_id="saga-procs") as saga:
            saga.call("kv.put", k="k0", v="v0")
            s2 = saga.call("kv.put", k="k1", v="v1")
            saga.call("pay.charge", customer="c@acme.test", cents=200, after=[s2])
            s4 = saga.call("kv.put", k="k3", v="v3")
            saga.call("kv.put", k="k4", v="v4", after=[s4])
            saga.call("kv.put", k="k5", v="v5")
        workers.start(AMENDS_TEST_DELAY="1.0")  # the runs overlap in time
        workers.start(AMENDS_TEST_DELAY="1.0")
        asks = (["s2"], ["s3", "s4"], ["s2"], ["s3", "s4"])
        reports = await asyncio.gather(
            *(e.undo("saga-procs", steps=steps) for e, steps in zip(engines, asks, strict=True))
        )
        key = "amends:saga-procs:{}:undo".format
        assert undo_requests(ledger_path) == sorted(key(s) for s in ("s2", "s3", "s4", "s5"))
        effects = ledger.effects(ledger_path)
        assert len({e[2] for e in effects}) == len(effects), "no effect applied twice"
        now = ledger.state(ledger_path)
        assert now["kv"]["k0"] == "v0" and now["kv"]["k5"] == "v5"  # nobody asked for these
        assert now["kv"]["k1"] == now["kv"]["k3"] == now["kv"]["k4"] == ""  # reverted
        assert now["charges"]["ch_s3"] == {"cents": 200, "refunded": 200}
        assert len({r.reversal_id for r in reports}) == 1
        assert reports[0].to_dict() == reports[2].to_dict()
        assert reports[1].to_dict() == reports[3].to_dict()
        for report, closure in zip(reports, ({"s2", "s3"}, {"s3", "s4", "s5"}) * 2, strict=True):
            assert closure <= set(states(report)) <= {"s2", "s3", "s4", "s5"}
            assert set(states(report).values()) <= DONE, report.to_dict()
        last = max(reports, key=lambda r: r.continuations)
        assert last.selection is not None and last.selection["kept"] == ["s1", "s6"]

        whole = await engines[0].undo("saga-procs")
        assert states(whole) == {
            "s1": "reverted",
            "s2": "reverted",
            "s3": "compensated",
            "s4": "reverted",
            "s5": "reverted",
            "s6": "reverted",
        }
        assert undo_requests(ledger_path) == sorted(key(f"s{i}") for i in range(1, 7))
        assert ledger.state(ledger_path)["charges"]["ch_s3"]["refunded"] == 200
    finally:
        for e in engines:
            await e.close()


async def test_a_bad_selection_on_temporal_is_refused_before_anything_starts(
    pg_url: str,
) -> None:
    """An unknown step or since= the last step: the engine's own error, nothing in the log,
    no workflow started (the runner's address is never reached)."""
    _, _, engine = await dealt(pg_url, "saga-bad", TemporalRunner("127.0.0.1:1"))
    try:
        before = await engine.log.events("saga-bad")
        with pytest.raises(amends.ContractError, match=r"has no step 's9'; its steps are s1, s2"):
            await engine.undo("saga-bad", steps=["s9"])
        with pytest.raises(amends.ConfigError, match=r"nothing to undo after 's5'"):
            await engine.undo("saga-bad", since="s5")
        assert await engine.log.events("saga-bad") == before
        assert await engine.log.get_reversal(saga_id="saga-bad") is None
    finally:
        await engine.close()
