"""Rule 12 on Temporal: a tool that fails with a 5 MB message on a worker is reported with its
first words, as the local engine reports it (``tests/security/test_bounded_words.py``): the
compensation's record, the stored report and the manual action kept all 5 MB before. The
workflow's caller cuts the detail after the scrub, so the step is ``failed`` with the vendor's
words and a bounded report."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import amends
from amends.integrations.temporal import TemporalRunner, make_worker

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

HUGE = 5_000_000


async def test_a_huge_refusal_on_a_worker_is_a_failed_step_with_its_first_words(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> dict[str, Any]:
        call.inverse("pay.refund", charge_id="ch_1")
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> Any:
        raise amends.PermanentError("card_declined " + "E" * HUGE)

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, runner=runner)
    try:
        async with engine.saga("Charge", saga_id="saga-huge") as saga:
            saga.call("pay.charge", cents=500)
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await asyncio.wait_for(engine.undo("saga-huge"), 120)
        step = report.step("s1")
        assert step.state.value == "failed", step.detail
        assert "card_declined EEEE" in step.detail
        assert "characters; the rest was not kept" in step.detail
        assert len(report.to_json()) < 100_000
    finally:
        await engine.close()


async def test_a_huge_residue_an_inverse_records_on_a_worker_is_bounded_before_the_history(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Lane temporal2 item 3: an inverse on a worker records a residue filled from a vendor's
    answer (5 MB of words, 300 parties). It crossed Temporal's history whole (bounded only when
    the workflow recorded it), past the payload limit: the activity's result was refused
    (TMPRL1103) and the reversal never finished. Its words are bounded on the worker, after the
    scrub, and the workflow's own bound keeps the first count (never "4,045 characters")."""
    sid = f"saga-residue-{uuid.uuid4().hex[:8]}"
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> dict[str, Any]:
        call.inverse("pay.refund", charge_id="ch_1")
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> Any:
        call.residue("fee " + "F" * HUGE, parties=[f"p{i}@acme.test" for i in range(300)])
        return {"refunded": True}

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, runner=runner)
    try:
        async with engine.saga("Charge", saga_id=sid) as saga:
            saga.call("pay.charge", cents=500)
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await asyncio.wait_for(engine.undo(sid), 60)
        step = report.step("s1")
        assert step.state.value == "compensated", step.detail
        [left] = report.residue
        assert left.what == "fee " + "F" * 3996 + (
            f"… ({HUGE + 4:,} characters; the rest was not kept)"
        )
        assert list(left.parties) == [f"p{i}@acme.test" for i in range(100)] + [
            "… and 200 more (not kept)"
        ]
        stored = await engine.report(sid)
        assert stored is not None and stored.to_dict() == report.to_dict()
        assert len(report.to_json()) < 100_000
        assert await task_failures(temporal_client, sid) == ([], True)
    finally:
        await engine.close()


async def task_failures(client: Client, sid: str) -> tuple[list[str], bool]:
    """The failures of the workflow tasks of every run of ``sid``'s reversal workflow, and
    whether each of its history events is under 100 kB. The workflow task that got the tools'
    answers must complete: it failed (payload too large), and only its retry found the report
    its local activities had written."""
    query = f"WorkflowId = 'amends-reversal:{sid}'"
    runs = [r.run_id async for r in client.list_workflows(query)]
    assert runs
    events = []
    for run_id in runs:
        handle = client.get_workflow_handle(f"amends-reversal:{sid}", run_id=run_id)
        events += (await handle.fetch_history()).events
    failed = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    return failed, max(len(e.SerializeToString()) for e in events) < 100_000


async def test_an_inverse_that_answers_a_huge_list_on_a_worker_does_not_fail_the_workflow_task(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """Lane temporal2 item 3, the answer: an inverse on a worker answers 4 MB of short values
    (the vendor's whole ledger). Long strings went back by reference, a long list did not: the
    workflow task failed with TMPRL1103. The workflow does not compare an inverse's answer, so
    each long list or object in it goes back by reference (its ids stay, for a follow-up's
    reference)."""
    sid = f"saga-answer-{uuid.uuid4().hex[:8]}"
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> dict[str, Any]:
        call.inverse("pay.refund", charge_id="ch_1")
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> Any:
        return {"id": "re_1", "ledger": [f"r{i}" for i in range(400_000)]}

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, runner=runner)
    try:
        async with engine.saga("Charge", saga_id=sid) as saga:
            saga.call("pay.charge", cents=500)
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await asyncio.wait_for(engine.undo(sid), 60)
        assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "compensated")]
        stored = await engine.report(sid)
        assert stored is not None and stored.to_dict() == report.to_dict()
        assert await task_failures(temporal_client, sid) == ([], True)
    finally:
        await engine.close()
