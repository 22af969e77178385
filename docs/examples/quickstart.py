import asyncio

import amends

# Stand-ins for three vendors, so the example runs as it is: a CRM, a card processor, a mailer.
CRM = {"r1": {"stage": "open"}}
CHARGES: dict[str, str] = {}
OUTBOX: list[str] = []

catalog = amends.Catalog()


@catalog.tool("crm.read_field", reversibility="read_only")  # a probe: observes, changes nothing
async def read_field(call: amends.Call, record_id: str, field: str) -> str:
    return CRM[record_id][field]


@catalog.tool("crm.update_field", reversibility="reversible",
              describe="Set {field} of {record_id} to '{value}'",
              resources=lambda args: [f"crm:{args['record_id']}"])
async def update_field(call: amends.Call, record_id: str, field: str, value: str) -> dict:
    before = CRM[record_id][field]
    CRM[record_id][field] = value
    call.inverse("crm.update_field", record_id=record_id, field=field, value=before)
    call.expect("crm.read_field", {"record_id": record_id, "field": field}, equals=value)
    return {"record_id": record_id, field: value}


@catalog.tool("payments.charge_status", reversibility="read_only")
async def charge_status(call: amends.Call, charge_id: str) -> str:
    return CHARGES[charge_id]


@catalog.tool("payments.charge", reversibility="compensable", idempotent=True,
              describe="Charge {cents:cents} USD to {customer}")
async def charge(call: amends.Call, customer: str, cents: int) -> dict:
    charge_id = f"ch_{len(CHARGES) + 1}"
    CHARGES[charge_id] = "captured"
    call.inverse("payments.refund", charge_id=charge_id, cents=cents)
    call.expect("payments.charge_status", {"charge_id": charge_id}, equals="captured")
    call.residue(f"Refund of {cents / 100:.2f} to {customer}", parties=[customer],
                 settles_in_business_days=3)
    return {"id": charge_id}


@catalog.tool("payments.refund", reversibility="irreversible", idempotent=True,
              describe="Refund {cents:cents} USD of {charge_id}")
async def refund(call: amends.Call, charge_id: str, cents: int) -> dict:
    CHARGES[charge_id] = "refunded"
    return {"charge_id": charge_id, "refunded": cents}


@catalog.tool("email.send", reversibility="irreversible",  # declared: nothing unsends a mail
              describe="Email '{subject}' to {to}")
async def send(call: amends.Call, to: str, subject: str, body: str) -> dict:
    OUTBOX.append(f"{to}: {subject}")
    call.acknowledge(who="the sender", parties=[to],
                     draft=f"Please disregard my earlier message '{subject}'.")
    return {"sent": True}


async def main() -> amends.UndoReport:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("payments.charge", customer="c1", cents=5000, after=[a])
        saga.call("email.send", to="bob@acme.test", subject="Won", body="...", after=[b])

    CRM["r1"]["stage"] = "lost"  # meanwhile, someone moves the deal by hand

    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=50, seconds=30))
    print(report.render("text"))
    await engine.close()
    return report


if __name__ == "__main__":
    asyncio.run(main())
