"""Rule 10 with a catalog that lost some of a saga's tools (issue 23): undo refuses unless asked
with ``allow_missing_tools=True``. The preview predicted that undo's states and said nothing of
the refusal, so a confirm screen built on it promised an undo that would raise; now
``Preview.missing_tools`` names the tools (library and HTTP API alike)."""

from __future__ import annotations

import pytest

import amends
from amends import StepState
from core_world import CoreWorld, without


async def test_the_preview_names_the_tools_undo_will_refuse_for(
    catalog: amends.Catalog, world: CoreWorld
) -> None:
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("deal") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    upgraded = amends.Engine(without(catalog, "pay.refund"), log=log)
    try:
        preview = await upgraded.preview(saga.id)
        assert preview.missing_tools == ("pay.refund",)
        assert preview.to_dict()["missing_tools"] == ["pay.refund"]
        predicted = {p.step_id: p.predicted for p in preview.steps}
        assert predicted == {
            "s1": StepState.BLOCKED,
            "s2": StepState.FAILED,
            "s3": StepState.REVERTED,
        }
        with pytest.raises(amends.ContractError, match="pay.refund"):
            await upgraded.undo(saga.id)  # as the preview says: refused by default
        assert world.crm["r2"]["stage"] == "won"  # nothing was done
        report = await upgraded.undo(saga.id, allow_missing_tools=True)
        assert {s.step_id: s.state for s in report.steps} == predicted
        assert (await engine.preview(saga.id)).missing_tools == ()  # the catalog that ran it
    finally:
        await upgraded.close()
        await engine.close()
