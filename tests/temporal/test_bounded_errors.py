"""Rule 12 on Temporal: a tool that fails with a 5 MB message on a worker is reported with its
first words, as the local engine reports it (``tests/security/test_bounded_words.py``): the
compensation's record, the stored report and the manual action kept all 5 MB before. The
workflow's caller cuts the detail after the scrub, so the step is ``failed`` with the vendor's
words and a bounded report."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
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
