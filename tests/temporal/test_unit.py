"""Fast checks of the Temporal integration that need no server: idempotent log writes, lazy
imports, clear errors for bad input."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

import amends
from amends._budget import BudgetMeter
from amends._planner import plan
from amends._reversal import CallLost, ReversalPorts, RunInput, run_plan
from amends.cli.worker import register
from amends.integrations.temporal import TemporalRunner, connect, make_worker
from amends.integrations.temporal._activities import (
    CallBatch,
    CallBatchResult,
    CallOutcome,
    ClaimResult,
    FinishInput,
    RecordBatch,
    RecordInput,
    ReversalActivities,
    ToolCallInput,
    ToolCallResult,
)
from amends.integrations.temporal._codec import saga_from_dict, to_dict
from core_world import fresh


async def test_a_log_write_retried_by_temporal_records_its_event_once() -> None:
    """amends.record run again after it committed (its worker died before reporting back)
    writes no second event; a new write of the same step does."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    acts = ReversalActivities(catalog, engine.log)
    first = RecordInput(
        "rev_1", claim.reversal.generation, "s1", "dispatched", 0, "dispatching", {"key": "k"},
        1, 0, "compensation.dispatched", time.time(), event_key="run-a:1",
    )  # fmt: skip
    env = ActivityEnvironment()
    await env.run(acts.record, first)
    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal's retry of the same write
    await env.run(acts.record, first)
    second = dataclasses.replace(
        first, state="reverted", event="compensation.reverted", event_key="run-a:2"
    )
    await env.run(acts.record, second)
    kinds = [e.kind for e in await engine.log.events("s") if e.kind.startswith("compensation.")]
    assert kinds == ["compensation.dispatched", "compensation.reverted"]
    comps = await engine.log.get_compensations("rev_1")
    assert comps["s1"].state == "reverted"
    await engine.close()


async def test_a_batch_of_log_writes_retried_after_it_committed_writes_each_event_once() -> None:
    """amends.record_many (one workflow activation's writes) run again after it committed:
    a step with two writes in the batch ("dispatched" then its outcome) gets neither twice,
    and the other step's write is not repeated either."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won", after=[a])
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    gen = claim.reversal.generation
    acts = ReversalActivities(catalog, engine.log)

    def write(step: str, state: str, n: int) -> RecordInput:
        return RecordInput(
            "rev_1", gen, step, state, 1, state, {}, n, 0, f"compensation.{state}", time.time(),
            event_key=f"run-a:{n}",
        )  # fmt: skip

    batch = RecordBatch(
        [write("s1", "dispatched", 1), write("s2", "dispatched", 2), write("s1", "reverted", 3)]
    )
    env = ActivityEnvironment()
    await env.run(acts.record_many, batch)
    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal's retry of the same batch
    await env.run(acts.record_many, batch)
    events = [
        (e.step_id, e.kind) for e in await engine.log.events("s")
        if e.kind.startswith("compensation.")
    ]  # fmt: skip
    assert sorted(events) == [
        ("s1", "compensation.dispatched"),
        ("s1", "compensation.reverted"),
        ("s2", "compensation.dispatched"),
    ]
    comps = await engine.log.get_compensations("rev_1")
    assert {k: v.state for k, v in comps.items()} == {"s1": "reverted", "s2": "dispatched"}
    await engine.close()


async def test_finish_writes_the_carried_outcome_events_before_the_report_once() -> None:
    """amends.finish carrying the last steps' outcome events writes them, then the report;
    run again after it committed, it writes neither twice and returns the stored report."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    gen = claim.reversal.generation
    acts = ReversalActivities(catalog, engine.log)
    env = ActivityEnvironment()
    await env.run(acts.record, RecordInput(
        "rev_1", gen, "s1", "dispatched", 0, "dispatching", {"key": "k"}, 0, 0,
        "compensation.dispatched", time.time(), event_key="run-a:1",
    ))  # fmt: skip
    outcome = RecordInput(
        "rev_1", gen, "s1", "reverted", 1, "reverted with crm.update_field", {"residue": []}, 1,
        0, "compensation.reverted", time.time(), event_key="run-a:2",
    )  # fmt: skip
    report = amends.UndoReport(
        saga_id="s", reversal_id="rev_1", title="t", steps=(), tool_calls=1, tokens=0,
        seconds=0.1, budget={}, requested_at=time.time(), finished_at=time.time(),
    )  # fmt: skip
    finish = FinishInput("rev_1", gen, report.to_dict(), "s", [outcome])
    first = await env.run(acts.finish, finish)
    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal's retry after it committed
    again = await env.run(acts.finish, finish)
    stored = report.with_resolutions(first["resolutions"]).to_dict()
    assert again == {"report": stored}  # the report the first run stored, not a second one
    kinds = [e.kind for e in await engine.log.events("s") if e.kind.startswith(("comp", "rev"))]
    assert kinds == [
        "reversal.requested",
        "compensation.dispatched",
        "compensation.reverted",
        "reversal.done",
    ]
    rev = await engine.log.get_reversal(reversal_id="rev_1")
    assert rev is not None and rev.state == "done"
    assert (await engine.log.get_compensations("rev_1"))["s1"].state == "reverted"
    await engine.close()


async def test_finish_stores_only_the_resolutions_that_still_speak_for_each_outcome() -> None:
    """amends.finish reads the report as every reader does (reversal.current_report): a person's
    resolution older than the step's latest outcome (the step was attempted again since) does
    not mark that outcome handled (rule 8); a resolution newer than the outcome does."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    gen = claim.reversal.generation
    t0 = time.time()
    await engine.log.resolve_step("s", "s1", by="ann", note="checked by hand", now=t0)

    def failed(step: str, at: float, n: int) -> RecordInput:
        return RecordInput(
            "rev_1", gen, step, "failed", 1, "crm.update_field failed permanently", {}, n, 0,
            "compensation.failed", at, event_key=f"run-a:{n}",
        )  # fmt: skip

    acts = ReversalActivities(catalog, engine.log)
    env = ActivityEnvironment()
    await env.run(acts.record, failed("s1", t0 + 1, 1))  # attempted again after ann resolved it
    await env.run(acts.record, failed("s2", t0 + 1, 2))
    await engine.log.resolve_step("s", "s2", by="bob", note=None, now=t0 + 2)
    report = amends.UndoReport(
        saga_id="s", reversal_id="rev_1", title="t", steps=(), tool_calls=2, tokens=0,
        seconds=0.1, budget={}, requested_at=t0, finished_at=t0 + 3,
    )  # fmt: skip
    stored = await env.run(acts.finish, FinishInput("rev_1", gen, report.to_dict(), "s", []))
    assert set(stored["resolutions"]) == {"s2"}
    assert stored["resolutions"]["s2"]["by"] == "bob"
    await engine.close()


async def test_a_batch_of_calls_logs_dispatched_before_each_compensation_and_answers_each() -> None:
    """amends.call_tools: a compensation's "dispatched" is committed before its call leaves
    (rule 5: the vendor sees the call only once the log says it may have landed); each call of
    the batch gets its own answer (one refused call does not fail the other)."""
    world, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=100)
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    seen_at_call: list[str] = []

    async def look() -> None:
        comps = await engine.log.get_compensations("rev_1")
        seen_at_call.append(comps["s1"].state if "s1" in comps else "nothing")

    world.hooks["crm.update_field"] = look
    world.faults["pay.refund"] = [amends.PermanentError("card closed")]
    dispatched = RecordInput(
        "rev_1", claim.reversal.generation, "s1", "dispatched", 0, "dispatching", {"key": "k1"},
        0, 0, "compensation.dispatched", time.time(), event_key="run-a:1",
    )  # fmt: skip
    calls = CallBatch(
        [
            ToolCallInput(
                "crm.update_field", {"record_id": "r1", "field": "stage", "value": "lead"}, "s",
                "s1", "compensate", "k1", 1, timeout=5.0, dispatched=dispatched,
            ),
            ToolCallInput(
                "pay.refund", {"charge_id": "ch_1", "cents": 100}, "s", "s2", "compensate", "k2",
                1, timeout=5.0,
            ),
        ]
    )  # fmt: skip
    acts = ReversalActivities(catalog, engine.log)
    out = CallBatchResult.from_wire(await ActivityEnvironment().run(acts.call_tools, calls))
    assert seen_at_call == ["dispatched"]
    assert world.crm["r1"]["stage"] == "lead"
    assert out.results[0].error == "" and out.results[0].result is not None
    assert (out.results[1].result, out.results[1].error) == (None, "PermanentError")
    assert out.results[1].message == "card closed"
    assert world.charges["ch_1"]["refunded"] == 0
    kinds = [e.kind for e in await engine.log.events("s") if e.kind.startswith("compensation.")]
    assert kinds == ["compensation.dispatched"]
    await engine.close()


async def test_a_local_batch_run_again_answers_calls_it_dispatched_lost_and_writes_nothing_twice(
) -> None:  # fmt: skip
    """A local activity is run again from the start (as attempt 1) when its workflow task is
    retried on another worker. amends.call_tools run again: a compensation whose "dispatched" an
    earlier run committed is not sent again (rule 5) but answered Lost, for the crash rules; a
    call it had not dispatched is made. amends.record_many run again writes no event twice."""
    world, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    gen = claim.reversal.generation

    def dispatched(step: str, n: int) -> RecordInput:
        return RecordInput(
            "rev_1", gen, step, "dispatched", 0, "dispatching", {"key": f"k{n}"}, n, 0,
            "compensation.dispatched", time.time(), event_key=f"run-a:{n}",
        )  # fmt: skip

    def undo(step: str, record: str, n: int) -> ToolCallInput:
        return ToolCallInput(
            "crm.update_field", {"record_id": record, "field": "stage", "value": "lead"}, "s",
            step, "compensate", f"k{n}", 1, timeout=5.0, dispatched=dispatched(step, n),
        )  # fmt: skip

    acts = ReversalActivities(catalog, engine.log)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=True, attempt=1)
    # the first run dispatched s1's compensation, then its worker died
    await env.run(acts.record_many, RecordBatch([dispatched("s1", 1)]))
    batch = CallBatch([undo("s1", "r1", 1), undo("s2", "r2", 2)])
    out = CallBatchResult.from_wire(await env.run(acts.call_tools, batch))
    assert (
        out.results[0].error == "Lost" and "whether it landed is unknown" in out.results[0].message
    )
    assert world.crm["r1"]["stage"] == "won"  # not sent again: the crash rules decide
    assert out.results[1].error == "" and world.crm["r2"]["stage"] == "lead"
    outcome = dataclasses.replace(
        dispatched("s2", 3), state="reverted", event="compensation.reverted"
    )
    await env.run(acts.record_many, RecordBatch([outcome]))
    await env.run(acts.record_many, RecordBatch([outcome]))  # its workflow task retried
    events = [
        (e.step_id, e.kind) for e in await engine.log.events("s")
        if e.kind.startswith("compensation.")
    ]  # fmt: skip
    assert sorted(events) == [
        ("s1", "compensation.dispatched"),
        ("s2", "compensation.dispatched"),
        ("s2", "compensation.reverted"),
    ]
    await engine.close()


async def test_a_call_lost_with_its_worker_goes_through_the_crash_rules_never_a_resend() -> None:
    """The seam the workflow runs the local engine's rules through: a tool call that raises
    reversal.CallLost (its worker died after the vendor applied it) makes run_plan re-read the
    records through its log port and re-run the step as after a crash: the refund, whose vendor
    ignores idempotency keys and has no probe, is not sent again and the step is in_doubt
    (rule 5), never taken for a failed call."""
    applied: list[int] = []
    catalog = amends.Catalog()

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> str:
        call.inverse("pay.refund", cents=cents)
        call.no_drift_check(reason="a test charge only this saga can see")
        return "ch_1"

    @catalog.tool("pay.refund")
    async def refund(call: amends.Call, cents: int) -> None:
        applied.append(cents)
        raise CallLost("the worker making pay.refund stopped")

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))

    async def undo(saga_id: str) -> list[amends.StepOutcome]:
        async with engine.saga("t", saga_id=saga_id) as saga:
            saga.call("pay.charge", cents=5000)
        rev = f"rev_{saga_id}"
        claim = await engine.log.claim_reversal(
            saga_id, reversal_id=rev, budget={}, owner="temporal:x",
            lease_until=time.time() + 60, now=time.time(),
        )  # fmt: skip
        rec = await engine.log.get_saga(saga_id)
        assert rec is not None
        return await run_plan(
            RunInput(
                ReversalPorts(engine.log, catalog), rec, claim.reversal, plan(rec, catalog),
                BudgetMeter(amends.Budget()), amends.RetryPolicy(),
            )
        )  # fmt: skip

    (outcome,) = await undo("s1")
    assert outcome.state == amends.StepState.IN_DOUBT, outcome.detail
    assert "was not sent again" in outcome.detail
    assert applied == [5000]  # the refund in flight when its worker died is never re-sent
    await engine.close()


async def test_saga_records_survive_the_json_round_trip_of_a_temporal_payload() -> None:
    """What an activity returns about a saga is rebuilt exactly in the workflow."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s", actor="a") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=100, after=[a])
    rec = await engine.log.get_saga("s")
    assert rec is not None
    import json

    assert saga_from_dict(json.loads(json.dumps(to_dict(rec)))) == rec
    await engine.close()


def test_activity_payloads_are_rebuilt_exactly_from_their_json_form() -> None:
    """Activities and the workflow take their payloads as Temporal delivers them (JSON objects)
    and rebuild the dataclasses themselves, nested records included; a dataclass passed as is
    (a test's ActivityEnvironment) is used as it is."""
    import json

    from temporalio.converter import DataConverter

    conv = DataConverter.default.payload_converter
    rec = RecordInput(
        "rev_1", 1, "s1", "dispatched", 0, "dispatching", {"key": "k"}, 1, 0,
        "compensation.dispatched", 1.5, event_key="run:1",
    )  # fmt: skip
    values = [
        CallBatch(
            [
                ToolCallInput("t", {"a": [1]}, "s", "s1", "compensate", "k", 1, None, 2.0, rec),
                ToolCallInput("p", {}, "s", "s2", "probe", "k2", 1, {"probe": "p"}, 1.0),
            ]
        ),
        CallBatchResult(
            [
                CallOutcome(ToolCallResult({"ok": True}, 3, [{"what": "x"}], [])),
                CallOutcome(None, "PermanentError", "no", {"tokens": 1}),
            ]
        ),
        RecordBatch([rec, dataclasses.replace(rec, event_key="run:2")]),
        FinishInput("rev_1", 1, {"steps": []}, "s", [rec]),
        ClaimResult("new", {"reversal_id": "rev_1"}, {"saga_id": "s"}, {}, [{"name": "t"}], 2.0),
    ]
    for value in values:
        wire = conv.from_payloads(conv.to_payloads([value]))[0]  # what an activity receives
        assert isinstance(wire, dict)
        assert type(value).from_wire(json.loads(json.dumps(wire))) == value
        assert type(value).from_wire(value) is value
        # what the workflow sends: the same JSON object, built without the SDK's deep copy
        assert json.loads(json.dumps(value.to_wire())) == wire


def test_import_amends_does_not_import_temporalio() -> None:
    """The Temporal SDK is an optional extra, imported only with the integration."""
    code = "import sys, amends; sys.exit('temporalio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


async def test_bad_temporal_address_is_a_clear_error() -> None:
    """An address that is not HOST:PORT names the value and an example."""
    with pytest.raises(amends.ConfigError, match=r"'localhost' is not HOST:PORT; e\.g\."):
        await connect("localhost")


def test_bad_heartbeat_is_a_clear_error() -> None:
    with pytest.raises(amends.ConfigError, match="heartbeat_timeout must be positive, got 0"):
        TemporalRunner("127.0.0.1:7233", heartbeat_timeout=0)


def test_worker_command_refuses_a_non_positive_heartbeat() -> None:
    """``amends worker --heartbeat 0`` says what is wrong before connecting anywhere."""
    parser = argparse.ArgumentParser(prog="amends")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["worker", "--temporal", "127.0.0.1:1", "--db", "x.db", "--heartbeat", "0"]
    )
    with pytest.raises(amends.ConfigError, match="--heartbeat must be a positive number"):
        args.handler(args)


def test_budget_meter_measures_time_on_the_clock_it_is_given() -> None:
    """BudgetMeter(clock=...) is the seam the workflow uses for workflow time: its time cap,
    remaining seconds and the 'spent' sentence follow that clock, not the machine's."""
    now = [1_000_000.0]
    meter = BudgetMeter(amends.Budget(seconds=10), clock=lambda: now[0])
    assert meter.remaining_seconds() == 10.0 and meter.exhausted() is None
    now[0] += 4
    assert meter.remaining_seconds() == 6.0
    now[0] += 6
    assert meter.exhausted() == "time budget of 10s spent"
    assert meter.take_call() == "time budget of 10s spent" and meter.calls == 0


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"heartbeat_timeout": math.inf}, "heartbeat_timeout must be positive, got inf"),
        ({"heartbeat_timeout": math.nan}, "heartbeat_timeout must be positive, got nan"),
        ({"task_timeout": math.nan}, "task_timeout must be positive, got nan"),
        ({"task_timeout": -1.0}, "task_timeout must be positive, got -1.0"),
        ({"lease_seconds": math.inf}, "lease_seconds must be positive, got inf"),
        ({"task_queue": " "}, "task_queue must name a Temporal task queue, got ' '"),
    ],
)
def test_a_runner_refuses_a_duration_or_queue_it_cannot_use_when_it_is_made(
    options: dict[str, Any], said: str
) -> None:
    """An infinite heartbeat timeout raised OverflowError (a NaN task timeout ValueError) from
    engine.undo, a negative one a refusal from the server, and a blank queue was refused only
    when a reversal started: each is a ConfigError naming the value, before anything runs."""
    with pytest.raises(amends.ConfigError, match=re.escape(said)):
        TemporalRunner("127.0.0.1:7233", **options)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"heartbeat_seconds": math.inf}, "heartbeat_seconds must be positive, got inf"),
        ({"heartbeat_seconds": 0}, "heartbeat_seconds must be positive, got 0"),
        ({"task_queue": ""}, "task_queue must name a Temporal task queue, got ''"),
    ],
)
def test_make_worker_refuses_a_heartbeat_or_queue_it_cannot_use(
    options: dict[str, Any], said: str
) -> None:
    """A worker that never heartbeats (inf) has every tool call taken for lost, one that
    heartbeats without pause (0) floods the server, and one on a blank queue serves nothing:
    make_worker refuses them before opening the log or polling."""
    with pytest.raises(amends.ConfigError, match=re.escape(said)):
        make_worker(object(), amends.Catalog(), "sqlite:///never-opened.db", **options)  # type: ignore[arg-type]
    assert not Path("never-opened.db").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--heartbeat", "inf"], "--heartbeat must be a positive number of seconds, got inf"),
        (["--heartbeat", "nan"], "--heartbeat must be a positive number of seconds, got nan"),
        (["--task-queue", ""], "--task-queue must name a Temporal task queue, got ''"),
    ],
)
def test_worker_command_refuses_a_heartbeat_or_queue_it_cannot_use(
    flags: list[str], said: str
) -> None:
    """``amends worker --heartbeat inf`` (or nan, or an empty --task-queue) started serving and
    then never heartbeat, or served nothing; it says what is wrong before connecting."""
    parser = argparse.ArgumentParser(prog="amends")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["worker", "--temporal", "127.0.0.1:1", "--db", "x.db", *flags])
    with pytest.raises(amends.ConfigError, match=re.escape(said)):
        args.handler(args)


def test_a_large_list_argument_crosses_temporal_by_reference_and_resolves_from_the_saga() -> None:
    """Issue 25 item 13's class: an inverse argument that is a 1 MB list of short names becomes
    a short reference in the saga the workflow gets (it crossed whole: three such failed the
    workflow task with TMPRL1103), and resolves to the list from the saga as logged; a reference
    the saga does not hold is refused, and a small argument crosses as it is."""
    from amends.integrations.temporal._refs import (
        REF_JSON_CHARS,
        expand,
        has_refs,
        shrink_saga,
        values_of,
    )

    people = [f"p-{i:06d}" for i in range(70_000)]
    step = {
        "step_id": "s1",
        "args": {"team": "t1", "people": ["new"]},
        "inverse": {"tool": "roster.set", "args": {"team": "t1", "people": people}},
        "expectation": {"probe": "roster.get", "args": {"team": "t1"}, "equals": ["new"]},
    }
    saga = {"saga_id": "x", "steps": [step]}
    sent = shrink_saga(saga)
    crossing = sent["steps"][0]["inverse"]["args"]
    assert crossing["team"] == "t1" and has_refs(crossing)
    assert len(json.dumps(sent)) < 1024 < REF_JSON_CHARS
    assert sent["steps"][0]["args"] == step["args"]  # small: as it is
    assert saga["steps"][0]["inverse"]["args"]["people"] is people  # the logged saga unchanged
    table = values_of(saga)
    assert expand(crossing, lambda d, n: table.get((d, n))) == {"team": "t1", "people": people}
    other = values_of({"steps": [{"args": {"people": [*people[:-1], "someone else"]}}]})
    with pytest.raises(LookupError, match="the saga log does not hold"):
        expand(crossing, lambda d, n: other.get((d, n)))


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"engine": None}, "AmendsInterceptor needs an amends.Engine, got None"),
        ({"tools": "crm.update_field"}, "tools must be a list of activity types, got 'crm."),
        ({"tools": [1, 2]}, "tools must be a list of activity types, got [1, 2]"),
        ({"budget": 30}, "budget must be an amends.Budget, got 30"),
    ],
)
def test_the_interceptor_refuses_options_that_would_record_nothing(
    options: dict[str, Any], said: str
) -> None:
    """``tools="crm.update_field"`` was taken as the set of its characters (no activity
    recorded, silently), no engine was an AttributeError, and a budget that is no Budget failed
    only when the worker started: each is a ConfigError naming the value."""
    from amends.integrations.temporal import AmendsInterceptor

    engine = amends.Engine(amends.Catalog(), log=amends.SqliteLog(":memory:"))
    given = {"engine": engine, **options}
    try:
        with pytest.raises(amends.ConfigError, match=re.escape(said)):
            AmendsInterceptor(given.pop("engine"), **given)
    finally:
        asyncio.run(engine.close())  # 3.13: an unclosed connection is a ResourceWarning
