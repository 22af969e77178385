"""The worker interceptor: a Temporal workflow of agent tool activities is recorded as a saga,
undone honestly, and its cancellation does not skip compensation."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import ledger
import pytest
from agent_flow import AgentWorkflow
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

import amends
from amends.integrations.temporal import AmendsInterceptor, TemporalRunner, make_worker
from amends.integrations.temporal._workflow import workflow_id

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def agent_activities(catalog: amends.Catalog, *, charged: asyncio.Event | None = None) -> list[Any]:
    """Plain activities, as an agent team writes them: they call the vendor and tell amends
    their inverse through amends.current_call(). With ``charged``, the charge then waits for
    its vendor's answer (heartbeating) until it is cancelled, and sets ``charged`` first."""

    @activity.defn(name="kv.put")
    async def put(k: str, v: str) -> dict[str, Any]:
        call = amends.current_call()
        assert call is not None, "the interceptor runs the activity as a step"
        return await catalog.get("kv.put").fn(call, k=k, v=v)  # type: ignore[no-any-return]

    @activity.defn(name="pay.charge")
    async def charge(customer: str, cents: int) -> dict[str, Any]:
        call = amends.current_call()
        assert call is not None
        out = await catalog.get("pay.charge").fn(call, customer=customer, cents=cents)
        if charged is not None:  # the vendor charged; its answer takes its time
            charged.set()
            for _ in range(600):
                activity.heartbeat()
                await asyncio.sleep(0.1)
        return out  # type: ignore[no-any-return]

    return [put, charge]


@pytest.fixture
async def setup(
    pg_url: str, ledger_path: Path
) -> AsyncIterator[tuple[amends.Catalog, amends.Engine]]:
    catalog = ledger.make_catalog(ledger_path)
    engine = amends.Engine(catalog, log=pg_url)
    try:
        yield catalog, engine
    finally:
        await engine.close()


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    conn = ledger.connect(path)
    conn.execute("INSERT INTO kv VALUES ('k0', 'before0')")
    conn.close()
    return path


async def test_agent_workflow_is_recorded_as_a_saga_and_undone(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Each tool activity of the workflow is a step of the saga named by the workflow id, with
    the inverse the activity recorded; undo through Temporal restores the world, in reverse
    order, and the report says so."""
    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentWorkflow],
            activities=agent_activities(catalog),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        out = await temporal_client.execute_workflow(
            AgentWorkflow.run, args=[["k0", "k1"], 0.0], id=wid, task_queue=task_queue
        )
        assert out == "done"
        saga = await engine.log.get_saga(wid)
        assert saga is not None
        assert [(s.tool, s.args, s.state) for s in saga.steps] == [
            ("kv.put", {"k": "k0", "v": "agent0"}, "done"),
            ("kv.put", {"k": "k1", "v": "agent1"}, "done"),
            ("pay.charge", {"customer": "c0@acme.test", "cents": 1500}, "done"),
        ]
        assert saga.steps[2].deps == (saga.steps[0].step_id, saga.steps[1].step_id)
        report = await TemporalRunner(temporal_client, task_queue=task_queue + "-rev").undo(
            engine, wid, amends.Budget()
        )
    await icpt.close()  # closes the saga this process held open
    assert [s.state.value for s in report.steps] == ["reverted", "reverted", "compensated"]
    assert report.status == "partially_reversed"  # the refund leaves residue
    world = ledger.state(ledger_path)
    assert world["kv"] == {"k0": "before0", "k1": ""}
    assert world["charges"] == {f"ch_{saga.steps[2].step_id}": {"cents": 1500, "refunded": 1500}}


async def test_cancelling_the_agent_workflow_does_not_skip_compensation(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Cancel the agent's workflow after its tool calls: the interceptor starts the saga's
    reversal, which outlives the cancelled workflow and undoes every step."""
    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentWorkflow],
            activities=agent_activities(catalog),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, args=[["k0"], 300.0], id=wid, task_queue=task_queue
        )
        for _ in range(200):  # until the charge is logged done
            saga = await engine.log.get_saga(wid)
            if saga is not None and len(saga.steps) == 2 and saga.steps[1].state == "done":
                break
            await asyncio.sleep(0.05)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        report = None
        for _ in range(400):
            report = await engine.report(wid)
            if report is not None:
                break
            await asyncio.sleep(0.05)
    await icpt.close()  # closes the saga this process held open
    assert report is not None, "no reversal ran after the cancellation"
    assert [s.state.value for s in report.steps] == ["reverted", "compensated"]
    # the reversal got the settings a TemporalRunner gives: the engine's retry policy, local
    # batches (no regular activity scheduled), the heartbeat timeout
    history = await temporal_client.get_workflow_handle(workflow_id(wid)).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    given = json.loads(started.input.payloads[0].data)
    assert given["retry"] == dataclasses.asdict(engine.retry_policy)
    assert (given["local_batch_seconds"], given["heartbeat_timeout"]) == (300.0, 5.0)
    assert started.workflow_task_timeout.ToSeconds() == 5
    scheduled = [
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == []
    world = ledger.state(ledger_path)
    assert world["kv"] == {"k0": "before0"}
    assert all(c["refunded"] == c["cents"] for c in world["charges"].values())


async def test_cancelling_the_workflow_while_a_tool_activity_runs_starts_the_reversal(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Issue 25 item 11: cancel the agent's workflow while its charge activity is still running
    (the charge made, its inverse recorded): the SDK hands the workflow the cancellation as
    ActivityError(cause=CancelledError), and the reversal starts anyway; the kv write and the
    charge are undone (no reversal ran, the saga stayed running, charge and write stood)."""
    from agent_flow import AgentChargesSlowly

    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    charged = asyncio.Event()
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentChargesSlowly],
            activities=agent_activities(catalog, charged=charged),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        handle = await temporal_client.start_workflow(
            AgentChargesSlowly.run, "k0", id=wid, task_queue=task_queue
        )
        await asyncio.wait_for(charged.wait(), 30)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        report = None
        for _ in range(600):
            report = await engine.report(wid)
            if report is not None:
                break
            await asyncio.sleep(0.05)
    await icpt.close()
    assert report is not None, "no reversal ran after the cancellation"
    assert [(s.tool, s.state.value) for s in report.steps] == [
        ("kv.put", "reverted"),
        ("pay.charge", "compensated"),
    ]
    world = ledger.state(ledger_path)
    assert world["kv"] == {"k0": "before0"}
    assert [(c["cents"], c["refunded"]) for c in world["charges"].values()] == [(1500, 1500)]


async def wait_for_report(engine: amends.Engine, saga_id: str) -> amends.UndoReport | None:
    for _ in range(400):
        report = await engine.report(saga_id)
        if report is not None:
            return report
        await asyncio.sleep(0.05)
    return None


async def test_a_workflow_that_continues_as_new_is_one_saga_and_its_cancel_undoes_every_run(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """The agent's workflow continues as new after each tool call and is cancelled in a run
    that has called no tool yet: every run's step is in the one saga (the later run's activity
    id restarts at 1, and its call failed as a duplicate step id "a1" before its tool ran), and
    the cancellation starts the reversal (it started none: that run had called no tool)."""
    from more_flows import AgentContinues

    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentContinues],
            activities=agent_activities(catalog),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        handle = await temporal_client.start_workflow(
            AgentContinues.run, args=[["k0", "k1"], 300.0], id=wid, task_queue=task_queue
        )
        for _ in range(200):  # until the third run waits: both writes logged done
            desc = await handle.describe()
            saga = await engine.log.get_saga(wid)
            done = saga is not None and [s.state for s in saga.steps] == ["done", "done"]
            if done and desc.run_id != handle.result_run_id:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the third run's first workflow task is done
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result(follow_runs=True)
        report = await wait_for_report(engine, wid)
    await icpt.close()
    saga = await engine.log.get_saga(wid)
    assert saga is not None
    assert [(s.step_id, s.args, s.deps) for s in saga.steps] == [
        ("a1", {"k": "k0", "v": "agent"}, ()),
        ("r2.a1", {"k": "k1", "v": "agent"}, ("a1",)),
    ]
    assert report is not None, "no reversal ran after the cancellation"
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("a1", "reverted"),
        ("r2.a1", "reverted"),
    ]
    assert ledger.state(ledger_path)["kv"] == {"k0": "before0", "k1": ""}


@pytest.mark.parametrize("how", ["terminate", "execution_timeout"])
async def test_a_terminated_or_timed_out_workflow_is_undone_on_request(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
    how: str,
) -> None:
    """Terminating the agent's workflow, or its execution timeout, while its charge activity
    runs: Temporal runs no workflow code then, so no reversal starts by itself (the docs say
    so); the saga keeps both steps, and engine.undo through Temporal takes both back."""
    from datetime import timedelta

    from agent_flow import AgentChargesSlowly

    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    charged = asyncio.Event()
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentChargesSlowly],
            activities=agent_activities(catalog, charged=charged),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        limit = {"execution_timeout": timedelta(seconds=3)} if how != "terminate" else {}
        handle = await temporal_client.start_workflow(
            AgentChargesSlowly.run, "k0", id=wid, task_queue=task_queue, **limit
        )
        await asyncio.wait_for(charged.wait(), 30)
        if how == "terminate":
            await handle.terminate("the agent went astray")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert await engine.report(wid) is None  # no reversal started by itself
        runner = TemporalRunner(temporal_client, task_queue=task_queue + "-rev")
        report = await runner.undo(engine, wid, amends.Budget(seconds=30))
    await icpt.close()
    assert [(s.tool, s.state.value) for s in report.steps] == [
        ("kv.put", "reverted"),
        ("pay.charge", "compensated"),
    ]
    world = ledger.state(ledger_path)
    assert world["kv"] == {"k0": "before0"}
    assert [(c["cents"], c["refunded"]) for c in world["charges"].values()] == [(1500, 1500)]


async def test_an_activity_parameter_named_call_is_the_activitys_own(
    temporal_client: Client,
    task_queue: str,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Issue 25 item 1 on Temporal: a tool activity whose parameter is named ``call`` runs with
    its own argument, recorded as given (the step's forward function took ``call`` for amends'
    Call: "got multiple values for argument 'call'", and the tool never ran)."""
    from more_flows import AgentCallsOne

    catalog, engine = setup
    got: list[tuple[str, str]] = []

    @catalog.tool("meet.book", reversibility="irreversible")
    async def book_contract(c: amends.Call, call: str, room: str) -> str:
        raise AssertionError("the activity is the tool; this only declares its contract")

    @activity.defn(name="meet.book")
    async def book(call: str, room: str) -> str:
        got.append((call, room))
        return f"booked {room} for {call}"

    icpt = AmendsInterceptor(engine, tools=["meet.book"], undo_on_cancel=False)
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        workflows=[AgentCallsOne],
        activities=[book],
        interceptors=[icpt],
    ):
        out = await temporal_client.execute_workflow(
            AgentCallsOne.run, args=["meet.book", ["kickoff", "r1"]], id=wid, task_queue=task_queue
        )
    await icpt.close()
    assert out == "booked r1 for kickoff"
    assert got == [("kickoff", "r1")]
    saga = await engine.log.get_saga(wid)
    assert saga is not None
    assert [(s.step_id, s.tool, s.args, s.state) for s in saga.steps] == [
        ("a1", "meet.book", {"call": "kickoff", "room": "r1"}, "done")
    ]


async def test_tool_calls_run_as_local_activities_are_steps_and_undone(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """The agent's workflow runs its tools as local activities, then is cancelled: each call
    is a step of the saga (``l1``, ``l2``, ``l3``) and the reversal the cancellation starts
    takes all three back. Before, local activities passed through unrecorded: no saga, no
    reversal, the writes and the charge stood."""
    from more_flows import AgentCallsLocally

    catalog, engine = setup
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            temporal_client,
            task_queue=task_queue,
            workflows=[AgentCallsLocally],
            activities=agent_activities(catalog),
            interceptors=[icpt],
        ),  # fmt: skip
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):
        handle = await temporal_client.start_workflow(
            AgentCallsLocally.run, args=[["k0", "k1"], 300.0], id=wid, task_queue=task_queue
        )
        for _ in range(200):  # until the charge is logged done
            saga = await engine.log.get_saga(wid)
            if saga is not None and [s.state for s in saga.steps] == ["done"] * 3:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the workflow task that recorded the charge is complete
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        report = await wait_for_report(engine, wid)
    await icpt.close()
    saga = await engine.log.get_saga(wid)
    assert saga is not None
    assert [(s.step_id, s.tool, s.deps) for s in saga.steps] == [
        ("l1", "kv.put", ()),
        ("l2", "kv.put", ("l1",)),
        ("l3", "pay.charge", ("l1", "l2")),
    ]
    assert report is not None, "no reversal ran after the cancellation"
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("l1", "reverted"),
        ("l2", "reverted"),
        ("l3", "compensated"),
    ]
    world = ledger.state(ledger_path)
    assert world["kv"] == {"k0": "before0", "k1": ""}
    assert [(c["cents"], c["refunded"]) for c in world["charges"].values()] == [(1500, 1500)]


async def _cancel_while_waiting(
    temporal_client: Client,
    task_queue: str,
    catalog: amends.Catalog,
    engine: amends.Engine,
    flow: Any,
    keys: list[str],
    **start: Any,
) -> tuple[str, Any]:
    """Run ``flow`` with ``keys`` under the interceptor; once a run of it waits (its tool calls
    done, or none), cancel it; returns the workflow id and the workflow's outcome."""
    icpt = AmendsInterceptor(engine, reversal_task_queue=task_queue + "-rev")
    wid = f"agent-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            temporal_client, task_queue=task_queue, workflows=[flow],
            activities=agent_activities(catalog), interceptors=[icpt],
        ),
        make_worker(temporal_client, catalog, engine.log, task_queue=task_queue + "-rev"),
    ):  # fmt: skip
        handle = await temporal_client.start_workflow(
            flow.run, args=[keys, 300.0], id=wid, task_queue=task_queue, **start
        )
        for _ in range(400):  # until a run waits: retried, or every write logged done
            desc = await handle.describe()
            saga = await engine.log.get_saga(wid)
            states = [s.state for s in saga.steps] if saga is not None else []
            rerun = "retry_policy" not in start or desc.run_id != handle.result_run_id
            if states == ["done"] * len(keys) and rerun:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the waiting run's first workflow task is done
        await handle.cancel()
        try:
            outcome: Any = await handle.result(follow_runs=True)
        except WorkflowFailureError as exc:
            outcome = exc
        if keys:
            await wait_for_report(engine, wid)
        else:  # nothing to wait for: the reversal workflow, if any, ends at once
            await asyncio.sleep(2.0)
    await icpt.close()
    return wid, outcome


async def test_a_retried_workflow_run_cancelled_before_its_own_tool_call_undoes_the_earlier_run(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Lane temporal2 item 2: the agent's first run writes k0 then fails; the workflow's retry
    policy runs it again, and that run is cancelled before it calls a tool. The cancellation
    starts the reversal (it started none: only a continue-as-new handed the "tools called"
    header on), and k0 is undone."""
    from more_flows import AgentRetried
    from temporalio.common import RetryPolicy

    catalog, engine = setup
    again = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2)
    wid, outcome = await _cancel_while_waiting(
        temporal_client, task_queue, catalog, engine, AgentRetried, ["k0"], retry_policy=again
    )
    assert isinstance(outcome, WorkflowFailureError)
    report = await engine.report(wid)
    assert report is not None, "no reversal ran after the cancellation"
    assert [(s.step_id, s.state.value) for s in report.steps] == [("a1", "reverted")]
    assert ledger.state(ledger_path)["kv"] == {"k0": "before0"}


async def test_a_retried_run_that_never_called_a_tool_cancelled_ends_its_reversal_quietly(
    temporal_client: Client,
    task_queue: str,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Its first run called no tool: the retried run cannot tell, so the cancellation starts the
    reversal workflow, which finds no saga in the log and completes with nothing to undo (it
    failed with "no saga" before, or never started); nothing is written to the log."""
    from more_flows import AgentRetried
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.common import RetryPolicy

    catalog, engine = setup
    again = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2)
    wid, outcome = await _cancel_while_waiting(
        temporal_client, task_queue, catalog, engine, AgentRetried, [], retry_policy=again
    )
    assert isinstance(outcome, WorkflowFailureError)
    assert await engine.log.get_saga(wid) is None
    rev = temporal_client.get_workflow_handle(workflow_id(wid))
    assert (await rev.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert await rev.result() == {}


async def test_a_workflow_that_catches_its_cancellation_and_returns_is_undone_too(
    temporal_client: Client,
    task_queue: str,
    ledger_path: Path,
    setup: tuple[amends.Catalog, amends.Engine],
) -> None:
    """Lane temporal2 item 2: the agent's workflow catches the cancellation a person sent and
    returns normally ("stopped"): the person still asked to stop it, so the reversal starts, as
    when the workflow re-raises or fails with another error (it started none)."""
    from more_flows import AgentCatchesCancel

    catalog, engine = setup
    wid, outcome = await _cancel_while_waiting(
        temporal_client, task_queue, catalog, engine, AgentCatchesCancel, ["k0", "k1"]
    )
    assert outcome == "stopped"
    report = await engine.report(wid)
    assert report is not None, "no reversal ran after the cancellation"
    assert sorted((s.step_id, s.state.value) for s in report.steps) == [
        ("a1", "reverted"),
        ("a2", "reverted"),
    ]
    assert ledger.state(ledger_path)["kv"] == {"k0": "before0", "k1": ""}
