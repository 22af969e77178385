"""A reversible tool with an expectation: undo checks drift first and never overwrites a value
someone else wrote (rule 4). The vendor's compare-and-set enforces it too."""
import asyncio

import amends

CRM = {"acme": {"stage": "open", "version": 1}}

catalog = amends.Catalog()


@catalog.tool("crm.get", reversibility="read_only")
async def crm_get(call: amends.Call, record_id: str) -> dict:
    return dict(CRM[record_id])


@catalog.tool("crm.set_stage", reversibility="reversible",
              resources=lambda args: [f"crm:{args['record_id']}"])
async def set_stage(call: amends.Call, record_id: str, stage: str) -> dict:
    record = CRM[record_id]
    if call.precondition and record["version"] != call.precondition.equals:
        # the vendor's compare-and-set: someone wrote since; refuse rather than overwrite
        raise amends.PreconditionFailed(f"version is {record['version']} now")
    before = record["stage"]
    record.update(stage=stage, version=record["version"] + 1)
    call.inverse("crm.set_stage", record_id=record_id, stage=before)
    call.expect("crm.get", {"record_id": record_id}, equals=record["version"], path="version")
    return dict(record)


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Mark ACME won") as saga:
        saga.call("crm.set_stage", record_id="acme", stage="won")

    preview = await engine.preview(saga.id)
    print([(p.step_id, p.verb, p.check) for p in preview.steps])

    CRM["acme"].update(stage="lost", version=3)  # a person edits the record by hand

    preview = await engine.preview(saga.id)
    print(preview.needs_review)  # ['s1']: shown as needing review before the click (rule 10)
    report = await engine.undo(saga.id)
    print(report.status, report.steps[0].state)
    assert CRM["acme"]["stage"] == "lost"  # the person's value is kept
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
