"""A reversal run as a Temporal workflow: same plan, same rules, same report as the local engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from temporalio.client import Client

import amends
from amends._planner import plan
from amends.integrations.temporal import TemporalRunner, make_worker, workflow_id
from core_world import CoreWorld, fresh

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01, jitter=0.0)


def comparable(report: amends.UndoReport) -> dict[str, Any]:
    """A report without what differs between two runs of one reversal (ids, clocks)."""
    d = report.to_dict()
    for k in ("reversal_id", "seconds", "requested_at", "finished_at", "saga_id"):
        d.pop(k, None)
    # each run's clock too (issue 23: a continued reversal keeps each run's figures)
    d["runs"] = [{k: v for k, v in r.items() if k not in ("seconds", "finished_at")}
                 for r in d["runs"]]  # fmt: skip
    return d


async def forward(engine: amends.Engine, saga_id: str) -> None:
    async with engine.saga("Close the ACME deal", actor="agent:sales", saga_id=saga_id) as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        c = saga.call("crm.update_field", record_id="r2", field="owner", value="zoe")
        d = saga.call("mail.send", to="c1@acme.test", subject="Welcome")
        e = saga.call("crm.note", record_id="r2", text="called", after=[c])
        await saga.gather(a, b, c, d, e)


def world_state(world: CoreWorld) -> dict[str, Any]:
    return {"crm": copy.deepcopy(world.crm), "charges": copy.deepcopy(world.charges)}


async def test_temporal_reversal_gives_the_local_report_and_world(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """The same saga undone locally and on Temporal: identical reports and final worlds, and the
    PostgreSQL log holds every compensation event of the Temporal reversal exactly once."""
    local_world, local_catalog = fresh()
    local = amends.Engine(local_catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    await forward(local, "saga-1")
    local_world.human_edit("r2", "owner", "yan")  # drift: the owner change must not be reverted
    local_report = await local.undo("saga-1")
    await local.close()

    world, catalog = fresh()
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner)
    try:
        await forward(engine, "saga-1")
        world.human_edit("r2", "owner", "yan")
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-1")  # Engine(runner=...): same call, on Temporal
            again = await engine.undo("saga-1")

        assert comparable(report) == comparable(local_report)
        assert report.status == "cannot_undo"
        assert {s.step_id: s.state.value for s in report.steps} == {
            "s1": "reverted",
            "s2": "compensated",
            "s3": "drifted",
            "s4": "acknowledged",
            "s5": "reverted",  # s3's inverse waits for s5's (rule 3); s3 then finds drift
        }
        assert world_state(world) == world_state(local_world)
        assert world.crm["r1"]["stage"] == "lead" and world.charges["ch_1"]["refunded"] == 5000
        assert again.to_dict() == report.to_dict()  # rule 6: a second undo gets the same report
        stored = await engine.report("saga-1")
        assert stored is not None and stored.to_dict() == report.to_dict()
        history = await engine.log.events("saga-1")
        events = [e for e in history if e.kind.startswith("compensation.")]
        assert sorted((e.step_id, e.kind) for e in events) == [
            ("s1", "compensation.dispatched"),
            ("s1", "compensation.reverted"),
            ("s2", "compensation.compensated"),
            ("s2", "compensation.dispatched"),
            ("s3", "compensation.drifted"),
            ("s5", "compensation.dispatched"),
            ("s5", "compensation.reverted"),
        ]
        desc = await temporal_client.get_workflow_handle(workflow_id("saga-1")).describe()
        assert desc.status is not None
    finally:
        await engine.close()


async def resume_scenario(engine: amends.Engine) -> tuple[amends.UndoReport, amends.UndoReport]:
    """Undo that stops short (one compensation over budget), then a continuation."""
    async with engine.saga("Two stage changes", actor="agent:sales", saga_id="saga-r") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won", after=[a])
    first = await engine.undo("saga-r", budget=amends.Budget(tool_calls=2))  # s2 only
    second = await engine.resume("saga-r", budget=amends.Budget(tool_calls=10))
    return first, second


async def test_resume_on_temporal_continues_the_reversal_as_the_local_engine_does(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """engine.resume with a TemporalRunner continues on Temporal, as a new run of the saga's
    one workflow id: it attempts only the step left over budget, belongs to the same reversal,
    and gives the local engine's reports and world."""
    local_world, local_catalog = fresh()
    local = amends.Engine(local_catalog, log=amends.SqliteLog(":memory:"), retry=FAST)
    local_first, local_second = await resume_scenario(local)
    await local.close()

    world, catalog = fresh()
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner)
    try:
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            first, second = await resume_scenario(engine)

        assert {s.step_id: s.state.value for s in first.steps} == {
            "s1": "over_budget",
            "s2": "reverted",
        }
        assert {s.step_id: s.state.value for s in second.steps} == {
            "s1": "reverted",
            "s2": "reverted",
        }
        assert second.reversal_id == first.reversal_id and second.continuations == 1
        assert comparable(first) == comparable(local_first)
        assert comparable(second) == comparable(local_second)
        assert world_state(world) == world_state(local_world)
        wid = workflow_id("saga-r")
        runs = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{wid}'")]
        assert len(runs) == 2  # the undo, then the continuation: one workflow id
        kinds = [e.kind for e in await engine.log.events("saga-r") if e.step_id == "s1"]
        assert kinds.count("compensation.reverted") == 1
    finally:
        await engine.close()


async def test_a_custom_planner_is_refused_on_temporal_not_ignored(pg_url: str) -> None:
    """Engine(planner=...) with a TemporalRunner: undo and resume raise a ConfigError naming the
    fix before anything starts (the workflow plans on the workers and could not use it)."""
    _, catalog = fresh()
    runner = TemporalRunner("127.0.0.1:1")  # never reached: refused before connecting
    engine = amends.Engine(
        catalog, log=pg_url, planner=lambda saga, cat: plan(saga, cat), runner=runner
    )
    try:
        await forward(engine, "saga-p")
        for ask in (engine.undo, engine.resume):
            with pytest.raises(amends.ConfigError, match=r"drop planner= or run this engine"):
                await ask("saga-p")
        assert await engine.log.get_reversal(saga_id="saga-p") is None
    finally:
        await engine.close()


async def test_retry_on_temporal_tries_a_failed_refund_again_in_the_same_reversal(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Issue 23: engine.retry with a TemporalRunner: the retry is asked in the log (fenced by the
    finished run's generation) and the continuation runs as the saga's workflow, through the
    drift check, the blocked CRM write following; nothing in the workflow knows about retries
    but the runner's own rule (a step asked to be retried is attempted again)."""
    world, catalog = fresh()
    world.crm["r1"] = {"stage": "lead", "version": 1}
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner)
    try:
        async with engine.saga("deal", saga_id="saga-retry") as saga:
            a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
            saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        world.faults["pay.refund"] = [amends.PermanentError("vendor API key expired")]
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            first = await engine.undo(saga.id)
            assert {s.step_id: s.state.value for s in first.steps} == {
                "s1": "blocked",
                "s2": "failed",
            }
            report = await engine.retry(saga.id, ["s2"], by="ann")
        assert report.reversal_id == first.reversal_id and report.continuations == 1
        assert {s.step_id: s.state.value for s in report.steps} == {
            "s1": "reverted",
            "s2": "compensated",
        }
        assert world.charges["ch_1"]["refunded"] == 5000 and world.crm["r1"]["stage"] == "lead"
        assert report.tool_calls == sum(r["tool_calls"] for r in report.runs)
    finally:
        await engine.close()


async def test_on_temporal_a_resolved_step_is_left_and_an_unchecked_one_is_retried(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Issue 23 on Temporal, as locally: the refund stopped for the budget and a person resolved
    it (refunded by bank transfer, invisible to the probe): the continuation leaves it and
    reverts the CRM write; a second saga's drift check could not reach the payment vendor: once
    it answers, retry checks again and refunds."""
    world, catalog = fresh()
    world.crm["r1"] = {"stage": "lead", "version": 1}
    world.crm["r2"] = {"stage": "lead", "version": 1}
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner)
    try:
        for sid, rec in (("saga-res", "r1"), ("saga-unc", "r2")):
            async with engine.saga("deal", saga_id=sid) as saga:
                a = saga.call("crm.update_field", record_id=rec, field="stage", value="won")
                saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            first = await engine.undo("saga-res", budget=amends.Budget(tool_calls=0))
            assert first.step("s2").state is amends.StepState.OVER_BUDGET
            await engine.resolve("saga-res", "s2", by="ann", note="refunded by bank transfer")
            resumed = await engine.resume("saga-res", budget=amends.Budget())
            world.faults["pay.get_charge"] = [ConnectionError("connection refused")] * 10
            unchecked = await engine.undo("saga-unc")
            world.faults.clear()
            retried = await engine.retry("saga-unc", ["s2"], by="ann")
        assert {s.step_id: s.state.value for s in resumed.steps} == {
            "s1": "reverted",
            "s2": "over_budget",
        }
        assert world.charges["ch_1"]["refunded"] == 0 and world.crm["r1"]["stage"] == "lead"
        assert unchecked.step("s2").state is amends.StepState.DRIFTED
        assert unchecked.step("s2").detail.startswith("could not check the world before undoing")
        assert {s.step_id: s.state.value for s in retried.steps} == {
            "s1": "reverted",
            "s2": "compensated",
        }
        assert world.charges["ch_2"]["refunded"] == 5000 and world.crm["r2"]["stage"] == "lead"
    finally:
        await engine.close()


async def test_follow_ups_the_budget_stopped_continue_on_temporal(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Issue 27 re-checked on Temporal: a person's follow-up spent the reversal's budget; the
    reversal is continued there with a new budget (one workflow id, nothing undone twice) and
    the next follow-up is sent; the report counts both follow-ups' calls."""
    world, catalog = fresh()
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, retry=FAST, runner=runner)
    try:
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            async with engine.saga("Mail two", saga_id="saga-fu") as saga:
                saga.call("mail.send", to="a@acme.test", subject="Hi")
                saga.call("mail.send", to="b@acme.test", subject="Hi")
            await engine.undo("saga-fu", budget=amends.Budget(tool_calls=1))
            mail = {"to": "a@acme.test", "subject": "Sorry"}
            sent = await engine.send_follow_up(
                "saga-fu", "s1", tool="mail.send", args=mail, by="ann"
            )
            assert sent.state == "sent"
            assert await engine.continuable("saga-fu") == ["s2"]
            more = await engine.resume("saga-fu", budget=amends.Budget(tool_calls=3))
            assert more.continuations == 1
            mail = {"to": "b@acme.test", "subject": "Sorry"}
            sent = await engine.send_follow_up(
                "saga-fu", "s2", tool="mail.send", args=mail, by="ann"
            )
            assert sent.state == "sent"
        report = await engine.report("saga-fu")
        assert report is not None and report.tool_calls == 2 and report.open_manual_actions == []
        assert [m["to"] for m in world.outbox] == [
            "a@acme.test", "b@acme.test", "a@acme.test", "b@acme.test",
        ]  # fmt: skip
        wid = workflow_id("saga-fu")
        runs = [w async for w in temporal_client.list_workflows(f"WorkflowId = '{wid}'")]
        assert len(runs) == 2  # the undo, then the continuation: one workflow id
    finally:
        await engine.close()
