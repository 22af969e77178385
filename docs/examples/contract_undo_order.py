"""Undo order differs from forward order: the processor refunds only once the deal is reopened,
so the refund's inverse waits for the CRM's (``undo_after``, rule 3)."""
import asyncio

import amends

DEAL = {"stage": "open"}
ORDER: list[str] = []

catalog = amends.Catalog()


@catalog.tool("crm.stage", reversibility="read_only")
async def stage(call: amends.Call) -> str:
    return DEAL["stage"]


@catalog.tool("crm.set_stage", reversibility="reversible")
async def set_stage(call: amends.Call, value: str) -> None:
    before, DEAL["stage"] = DEAL["stage"], value
    ORDER.append(f"{call.phase}: stage={value}")
    call.inverse("crm.set_stage", value=before)
    call.expect("crm.stage", equals=value)


@catalog.tool("payments.charge", reversibility="compensable")
async def charge(call: amends.Call, cents: int) -> None:
    call.inverse("payments.refund", cents=cents)
    call.no_drift_check(reason="only this saga can refund its own charge")


@catalog.tool("payments.refund", reversibility="irreversible")
async def refund(call: amends.Call, cents: int) -> None:
    if DEAL["stage"] != "open":
        raise amends.PermanentError("the processor refunds only open deals")
    ORDER.append(f"refund {cents}")


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Win and bill") as saga:
        deal = saga.call("crm.set_stage", value="won")
        saga.call("payments.charge", cents=900, after=[deal], undo_after=[deal])
    report = await engine.undo(saga.id)
    print(report.status, ORDER)
    assert ORDER == ["forward: stage=won", "compensate: stage=open", "refund 900"]
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
