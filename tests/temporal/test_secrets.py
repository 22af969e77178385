"""Rule 11 on Temporal: a secret an inverse needs is resolved by the worker right before the call
and never enters the workflow's history, the log or the report."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

import amends
from amends._secrets import SecretRequest
from amends.integrations.temporal import TemporalRunner, make_worker, workflow_id

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CARD = "4242424242424242"


async def test_secret_needed_by_an_inverse_never_enters_temporal_history(
    temporal_client: Client, task_queue: str, pg_url: str
) -> None:
    """The refund gets the real card number from the worker's resolver; the workflow's history,
    the saga log and the report hold only the redaction marker."""
    charges: dict[str, str] = {}
    refunded_with: list[str] = []
    asked: list[SecretRequest] = []

    def resolve(req: SecretRequest) -> str:
        asked.append(req)
        return CARD

    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return charges[charge_id]

    @catalog.tool(
        "pay.charge", reversibility="compensable", sensitive=["card_number"],
        resolve_secret=resolve,
    )  # fmt: skip
    async def charge(call: amends.Call, card_number: str, cents: int) -> dict[str, Any]:
        charges["ch_1"] = "captured"
        call.inverse("pay.refund", charge_id="ch_1", card_number=card_number, cents=cents)
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", reversibility="compensable")
    async def refund(call: amends.Call, charge_id: str, card_number: str, cents: int) -> Any:
        refunded_with.append(card_number)
        if card_number != CARD:
            raise amends.PermanentError(f"unknown card {card_number}")
        charges[charge_id] = "refunded"
        return {"refunded": cents, "card": card_number}

    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    engine = amends.Engine(catalog, log=pg_url, runner=runner)
    try:
        async with engine.saga("Charge", tenant="acme", saga_id="saga-secret") as saga:
            saga.call("pay.charge", card_number=CARD, cents=500)
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-secret")
        assert report.step("s1").state.value == "compensated", report.step("s1").detail
        assert refunded_with == [CARD] and charges == {"ch_1": "refunded"}
        assert [(r.name, r.tool, r.forward_tool, r.tenant) for r in asked] == [
            ("card_number", "pay.refund", "pay.charge", "acme")
        ]
        history = await temporal_client.get_workflow_handle(
            workflow_id("saga-secret")
        ).fetch_history()
        text = "\n".join(str(e) for e in history.events)  # payloads as (escaped) JSON text
        assert "[redacted:card_number]" in text  # the workflow saw the marker...
        assert CARD not in text  # ...and never the card
        assert CARD not in report.to_json()
        events = await engine.log.events("saga-secret")
        assert all(CARD not in str(e.data) for e in events)
    finally:
        await engine.close()
