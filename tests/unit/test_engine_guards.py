"""The engine refuses to undo with a catalog that lacks the saga's tools, and recovery carries on
past a reversal it cannot resume (issue 11: the right catalog, always; one bad saga never stops
the others)."""

from __future__ import annotations

import time

import pytest

import amends
from core_world import CoreWorld, fresh

pytestmark = pytest.mark.asyncio


async def close_deal(engine: amends.Engine) -> amends.Saga:
    async with engine.saga("Close the ACME deal", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        await saga.call("pay.charge", customer="c1", cents=5000, after=[a])
    return saga


def catalog_without(catalog: amends.Catalog, *names: str) -> amends.Catalog:
    other = amends.Catalog()
    for spec in catalog:
        if spec.name not in names:
            other.register(
                spec.name,
                spec.fn,
                reversibility=spec.reversibility if spec.explicit else None,
                idempotent=spec.idempotent,
            )
    return other


async def test_undo_with_a_catalog_missing_the_sagas_tools_is_refused_and_starts_nothing(
    world: CoreWorld, catalog: amends.Catalog
) -> None:
    log = amends.SqliteLog(":memory:")
    saga = await close_deal(amends.Engine(catalog, log=log))
    wrong = amends.Engine(catalog_without(catalog, "pay.refund"), log=log)
    with pytest.raises(amends.ContractError, match=r"needs tools .*pay\.refund"):
        await wrong.undo(saga.id)
    assert await log.get_reversal(saga_id=saga.id) is None  # no reversal was claimed
    assert [c["refunded"] for c in world.charges.values()] == [0]  # nothing was sent
    with pytest.raises(amends.ContractError, match=r"pay\.refund"):
        await wrong.resume(saga.id)
    # the right catalog still undoes it: the refusal left nothing stuck (rule 6)
    report = await amends.Engine(catalog, log=log).undo(saga.id)
    assert report.status == "partially_reversed"
    await log.close()


async def test_a_finished_reversals_report_is_readable_with_any_catalog(
    catalog: amends.Catalog,
) -> None:
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log)
    saga = await close_deal(engine)
    first = await engine.undo(saga.id)
    again = await amends.Engine(catalog_without(catalog, "pay.refund"), log=log).undo(saga.id)
    assert again.reversal_id == first.reversal_id
    assert again.to_dict()["steps"] == first.to_dict()["steps"]
    await log.close()


async def test_recover_carries_on_past_a_reversal_it_cannot_resume() -> None:
    world, catalog = fresh()
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log)
    deal = await close_deal(engine)  # its undo needs pay.refund
    async with engine.saga("Move r2 to won") as crm_only:
        await crm_only.call("crm.update_field", record_id="r2", field="stage", value="won")
    for s in (deal, crm_only):  # two reversals whose worker died: leases already expired
        claim = await log.claim_reversal(
            s.id,
            reversal_id=f"rev_{s.id}",
            budget=amends.Budget().to_dict(),
            owner="dead-worker",
            lease_until=time.time() - 1,
            now=time.time() - 2,
        )
        assert claim.outcome == "new"
    partial = amends.Engine(catalog_without(catalog, "pay.refund"), log=log)
    result = await partial.recover()
    assert [s for s, _ in result.failed] == [deal.id]
    assert "pay.refund" in result.failed[0][1]
    assert [(r.saga_id, r.status) for r in result.resumed] == [(crm_only.id, "fully_reversed")]
    assert world.crm["r2"]["stage"] == "lead"
    result = await engine.recover()  # the right catalog finishes the one left
    assert result.failed == ()
    assert [r.saga_id for r in result.resumed] == [deal.id]
    assert [c["refunded"] for c in world.charges.values()] == [5000]
    await log.close()
