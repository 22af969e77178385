"""A draft only this saga can see needs no expectation, but it must say so (rule 4)."""
import asyncio

import amends

DRAFTS: dict[str, str] = {}

catalog = amends.Catalog()


@catalog.tool("docs.create_draft", reversibility="reversible", idempotent=True)
async def create_draft(call: amends.Call, title: str) -> dict:
    draft_id = f"d-{call.idempotency_key[-6:]}"  # the key is stable for this step: no duplicate
    DRAFTS[draft_id] = title
    call.inverse("docs.delete_draft", draft_id=draft_id)
    call.no_drift_check(reason="a private draft only this saga can see")
    return {"id": draft_id}


@catalog.tool("docs.delete_draft", reversibility="irreversible", idempotent=True)
async def delete_draft(call: amends.Call, draft_id: str) -> None:
    DRAFTS.pop(draft_id, None)


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Draft the renewal letter") as saga:
        saga.call("docs.create_draft", title="Renewal")
    preview = await engine.preview(saga.id)
    print(preview.steps[0].verb, "-", preview.steps[0].check)
    report = await engine.undo(saga.id)
    print(report.status, report.steps[0].state)
    assert report.status == "fully_reversed" and DRAFTS == {}
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
