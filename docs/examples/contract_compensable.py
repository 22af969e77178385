"""A compensable tool: its inverse is a forward action that leaves residue; a follow-up during
compensation, and an irreversible tool's manual action with a draft."""
import asyncio

import amends

BOOKINGS: dict[str, str] = {}
SENT: list[str] = []

catalog = amends.Catalog()


@catalog.tool("calendar.get", reversibility="read_only")
async def get_event(call: amends.Call, event_id: str) -> str:
    return BOOKINGS[event_id]


@catalog.tool("calendar.invite", reversibility="compensable")
async def invite(call: amends.Call, title: str, attendees: list[str]) -> dict:
    event_id = f"ev{len(BOOKINGS) + 1}"
    BOOKINGS[event_id] = "booked"
    call.inverse("calendar.cancel", event_id=event_id, attendees=attendees)
    call.expect("calendar.get", {"event_id": event_id}, equals="booked")
    # expected residue, shown by the preview before the click
    call.residue(f"Cancellation notice for '{title}'", parties=attendees)
    return {"id": event_id}


@catalog.tool("calendar.cancel", reversibility="irreversible")
async def cancel(call: amends.Call, event_id: str, attendees: list[str]) -> None:
    BOOKINGS[event_id] = "cancelled"
    # what the compensation really left, recorded while compensating
    call.residue("Cancellation notices sent", parties=attendees)
    call.follow_up("chat.post", channel="#sales", text=f"Meeting {event_id} was cancelled")


@catalog.tool("chat.post")
async def post(call: amends.Call, channel: str, text: str) -> None:
    SENT.append(text)
    if call.phase == "forward":
        call.acknowledge(who="the channel owner", parties=[channel],
                         draft="Please ignore my last message.")


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Book the kickoff") as saga:
        saga.call("calendar.invite", title="Kickoff", attendees=["ann@acme.test"])
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=10))
    print(report.status)
    for r in report.residue:
        print("-", r.what, "->", ", ".join(r.parties))
    assert report.status == "partially_reversed"
    assert BOOKINGS == {"ev1": "cancelled"} and SENT == ["Meeting ev1 was cancelled"]
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
