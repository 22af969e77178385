import asyncio

import amends

# Stand-ins for three vendors, so the example runs as it is: a calendar, a card processor, a CRM.
EVENTS: dict[str, str] = {}
CHARGES: dict[str, str] = {}
CRM = {"acme": {"stage": "open", "charge": ""}}

catalog = amends.Catalog()


@catalog.tool("calendar.event_status", reversibility="read_only")
async def event_status(call: amends.Call, event_id: str) -> str:
    return EVENTS[event_id]


@catalog.tool("calendar.create_event", reversibility="compensable",
              describe="Invite {attendee} to '{title}'")
async def create_event(call: amends.Call, title: str, attendee: str) -> dict:
    event_id = f"ev_{len(EVENTS) + 1}"
    EVENTS[event_id] = "confirmed"
    call.inverse("calendar.cancel_event", event_id=event_id)
    call.expect("calendar.event_status", {"event_id": event_id}, equals="confirmed")
    call.residue(f"{attendee} gets a cancellation notice", parties=[attendee])
    return {"id": event_id}


@catalog.tool("calendar.cancel_event", reversibility="irreversible")
async def cancel_event(call: amends.Call, event_id: str) -> None:
    EVENTS[event_id] = "cancelled"


@catalog.tool("payments.charge_status", reversibility="read_only")
async def charge_status(call: amends.Call, charge_id: str) -> str:
    return CHARGES[charge_id]


@catalog.tool("payments.charge", reversibility="compensable", idempotent=True,
              describe="Charge {cents} cents to {customer}")
async def charge(call: amends.Call, customer: str, cents: int) -> dict:
    charge_id = f"ch_{len(CHARGES) + 1}"
    CHARGES[charge_id] = "captured"
    call.inverse("payments.refund", charge_id=charge_id)
    call.expect("payments.charge_status", {"charge_id": charge_id}, equals="captured")
    call.residue(f"Refund of {cents / 100:.2f} to {customer}", parties=[customer],
                 settles_in_days=3)
    return {"id": charge_id}


@catalog.tool("payments.refund", reversibility="irreversible", idempotent=True)
async def refund(call: amends.Call, charge_id: str) -> None:
    CHARGES[charge_id] = "refunded"


@catalog.tool("crm.read_field", reversibility="read_only")
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


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Close the ACME deal") as saga:
        saga.call("calendar.create_event", title="Kick-off", attendee="ann@acme.test")
        paid = saga.call("payments.charge", customer="acme", cents=5000)
        saga.call("crm.update_field", record_id="acme", field="charge", value=paid["id"])

    # Take back the charge, keep the meeting: what would that undo, and why?
    preview = await engine.preview(saga.id, steps=[paid.id])
    for added in preview.selection["added"]:
        print(added["reason"])

    report = await engine.undo(saga.id, steps=[paid.id])
    print(report.headline)
    assert CHARGES["ch_1"] == "refunded" and CRM["acme"]["charge"] == ""
    assert EVENTS["ev_1"] == "confirmed"  # the meeting stays

    # Later, undo the rest: the charge is not refunded a second time.
    whole = await engine.undo(saga.id)
    assert whole.reversal_id == report.reversal_id and EVENTS["ev_1"] == "cancelled"
    print(whole.headline)
    await engine.close()


asyncio.run(main())
