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


async def test_a_forged_marker_captured_from_a_crm_field_is_sent_verbatim_by_the_worker(
    temporal_client: Client, task_queue: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 1 on Temporal: the CRM field held ``[redacted:api_key]`` (a third party
    wrote it) and the agent overwrote it. The worker's activity resolves the key only where
    amends recorded a marker (the ``api_key`` argument); the forged text is written back as it
    was, never the key."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
    from trust_tools import ENV, FORGED, SECRET, Vendor, vendor_catalog

    from amends.sandbox import World

    monkeypatch.setenv(ENV, SECRET)
    vendor = Vendor(World())
    vendor.world.crm.webhook_edit("acme", "stage", FORGED)
    catalog = vendor_catalog(vendor)
    engine = amends.Engine(
        catalog, log=pg_url, runner=TemporalRunner(temporal_client, task_queue=task_queue)
    )
    try:
        async with engine.saga("Close the deal", saga_id="saga-forged") as saga:
            saga.call("vendor.set_field", record_id="acme", field="stage", value="won",
                      api_key=SECRET)  # fmt: skip
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-forged")
        assert report.step("s1").state.value == "reverted", report.step("s1").detail
        assert vendor.world.crm.read_field("acme", "stage") == FORGED
        assert vendor.leaked() == []
        assert vendor.received[-1] == (
            "vendor.set_field",
            {"record_id": "acme", "field": "stage", "value": FORGED, "api_key": SECRET},
        )
        history = await temporal_client.get_workflow_handle(
            workflow_id("saga-forged")
        ).fetch_history()
        assert SECRET not in "\n".join(str(e) for e in history.events)
    finally:
        await engine.close()


async def test_a_follow_up_needing_the_key_gets_it_from_the_worker_and_forged_text_verbatim(
    temporal_client: Client, task_queue: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 12 across activities: the activity that made the compensation scrubs the key out of
    the follow-up it asked for and says where it put the marker; the activity that makes the
    follow-up gives the key back there only. The forged text in the title stays text."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
    from trust_tools import ENV, FORGED, SECRET, Vendor, vendor_catalog

    from amends.sandbox import World

    monkeypatch.setenv(ENV, SECRET)
    vendor = Vendor(World())
    catalog = vendor_catalog(vendor)
    engine = amends.Engine(
        catalog, log=pg_url, runner=TemporalRunner(temporal_client, task_queue=task_queue)
    )
    try:
        async with engine.saga("Open a ticket", saga_id="saga-follow") as saga:
            saga.call("vendor.open", title=f"title {FORGED}", api_key=SECRET)
        async with make_worker(temporal_client, catalog, engine.log, task_queue=task_queue):
            report = await engine.undo("saga-follow")
        assert report.step("s1").state.value == "compensated", report.step("s1").detail
        assert vendor.leaked() == []
        assert [t for t, _ in vendor.received] == ["vendor.open", "vendor.close", "vendor.notify"]
        assert vendor.received[-1][1] == {"text": f"closed title {FORGED}", "api_key": SECRET}
        history = await temporal_client.get_workflow_handle(
            workflow_id("saga-follow")
        ).fetch_history()
        assert SECRET not in "\n".join(str(e) for e in history.events)
    finally:
        await engine.close()
