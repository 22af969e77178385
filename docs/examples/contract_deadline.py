"""An undo window: a wire can be recalled for one hour. After the deadline the step is
Acknowledge, in the preview and at undo (rule 10)."""
import asyncio
from datetime import UTC, datetime, timedelta

import amends

catalog = amends.Catalog()
RECALL_WINDOW = timedelta(hours=1)


@catalog.tool("bank.wire", reversibility="compensable")
async def wire(call: amends.Call, to: str, cents: int, sent_at: str) -> dict:
    closes = datetime.fromisoformat(sent_at) + RECALL_WINDOW
    call.inverse("bank.recall", to=to, cents=cents, deadline=closes)
    call.no_drift_check(reason="a wire in its recall window cannot be changed by anyone else")
    return {"sent": cents}


@catalog.tool("bank.recall", reversibility="irreversible")
async def recall(call: amends.Call, to: str, cents: int) -> None: ...


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    async with engine.saga("Pay the supplier") as saga:
        saga.call("bank.wire", to="supplier", cents=120_000, sent_at=two_hours_ago)
    preview = await engine.preview(saga.id)
    print(preview.steps[0].verb, "-", preview.steps[0].reason)
    report = await engine.undo(saga.id)
    print(report.steps[0].state, "-", report.steps[0].detail)
    assert report.status == "cannot_undo" and report.steps[0].verb == "Acknowledge"
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
