"""The honest catalog over the sandbox vendors: each tool's reversibility contract, as a user
would write it.

Every contract follows the rules of DESIGN.md: the inverse is computed while the forward call
runs, from what the vendor returned (rule 2: inverse is data); the expectation names a read-only
probe and the value the world must still show (rule 4: drift); residue says in plain language
what stays behind, who sees it and when it settles; an irreversible tool acknowledges with who can
follow up and a draft they can send. Every vendor write gets ``call.idempotency_key``, and every
tool whose vendor replays a known key says so (``idempotent=True``, rule 5), except the legacy
ledger, which ignores keys: it names a probe that shows whether its reversal landed instead.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, cast

from amends import Call, Catalog

from .crm import ANY
from .payments import REFUND_SETTLE_BUSINESS_DAYS
from .world import World, add_business_days, current_world

__all__ = ["demo_catalog", "sandbox_catalog"]

DEFAULT_TIMEOUT = 5.0
"""Seconds a sandbox tool call may take before the engine treats it as timed out."""


def _vendor_time(iso: str) -> str:
    """A sandbox vendor's timestamp, said to be one (issue 26 item 2: one clock). The sandbox
    runs on its own clock (:data:`~amends.sandbox.world.EPOCH`, days away from the engine's),
    so a time it stamps is labelled as the vendor's, never mixed unlabelled with the times the
    engine records: "7 Dec 2026 09:00 UTC by the sandbox vendor's clock"."""
    when = datetime.fromisoformat(iso).astimezone(UTC)
    return f"{when.day} {when:%b %Y %H:%M} UTC by the sandbox vendor's clock"


def _money(cents: int) -> str:
    return f"{cents / 100:,.2f} USD"


ToolFn = Callable[..., Awaitable[Any]]


DESCRIBE: dict[str, str] = {
    "mail.send": "Email '{subject}' to {to}",
    "mail.send_delayed": "Schedule the email '{subject}' to {to}",
    "mail.cancel_scheduled": "Cancel the scheduled email {message_id}",
    "mail.get_message": "Look up email {message_id}",
    "calendar.create_event": "Invite {attendees} to '{title}' at {start:when}",
    "calendar.cancel_event": "Cancel event {event_id} (attendees get a cancellation notice)",
    "calendar.get_event": "Look up event {event_id}",
    "crm.update_field": "Set {field} of CRM record {record_id} to '{value}'",
    "crm.read_field": "Read {field} of CRM record {record_id}",
    "crm.get_record": "Look up CRM record {record_id}",
    "crm.add_note": "Add a note to CRM record {record_id}: '{text}'",
    "crm.log_activity": "Log activity on CRM record {record_id}: '{text}'",
    "crm.delete_note": "Delete note {note_id} from CRM record {record_id}",
    "payments.charge": "Charge {cents:cents} USD to {customer}",
    "payments.refund": "Refund {cents:cents} USD of charge {charge_id}",
    "payments.get_charge": "Look up charge {charge_id}",
    "payments.wire": "Wire {cents:cents} USD to account {to_account}",
    "payments.recall_wire": "Recall wire {wire_id}",
    "payments.get_wire": "Look up wire {wire_id}",
    "chat.post": "Post in {channel}: '{text}'",
    "chat.edit": "Edit chat message {message_id} to '{text}'",
    "chat.announce": "Announce in {channel}: '{text}'",
    "chat.delete": "Delete chat message {message_id}",
    "chat.get_message": "Look up chat message {message_id}",
    "docs.create_draft": "Create the draft '{title}'",
    "docs.create_private_note": "Write a private note: '{text}'",
    "docs.share": "Share document {doc_id} with {people}",
    "docs.unshare": "Stop sharing document {doc_id} with {people}",
    "docs.delete": "Delete document {doc_id}",
    "docs.get": "Look up document {doc_id}",
    "ledger.post": "Post {cents:cents} USD to ledger account {account}",
    "ledger.reverse": "Reverse ledger entry {entry_id}",
    "ledger.get_entry": "Look up ledger entry {entry_id}",
    "sms.send": "Text {to}: '{text}'",
}
"""Each sandbox tool's step in a sentence (``describe=``, issue 17)."""


def sandbox_catalog(world: World | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> Catalog:
    """The catalog of honest tool contracts over ``world``'s vendors.

    Args:
        world: The sandbox world the tools act on; ``None``: the world bound with
            :func:`amends.sandbox.use_world` in the task that calls the tool, so that one catalog
            (built once) serves many worlds at a time, as the eval suite does.
        timeout: Seconds each tool call may take (an injected ``timeout`` fault exceeds it).

    Returns:
        A :class:`amends.Catalog` with the mail, calendar, CRM, payments, chat, docs and SMS tools.
    """
    catalog = Catalog()
    # Each tool reads its world once per call: the fixed one, or the one bound in the calling
    # task (issue 29: a stand-in forwarding every attribute read cost ~250 calls per saga).
    world_of: Callable[[], World] = current_world
    if world is not None:
        fixed = world

        def fixed_world() -> World:
            return fixed

        world_of = fixed_world
    key_of = _IDEMPOTENCY_KEY  # a C getter: no Python call per vendor write (issue 29)

    def tool(name: str, **kw: Any) -> Callable[[ToolFn], ToolFn]:
        kw.setdefault("describe", DESCRIBE.get(name))  # issue 17: steps as sentences

        def register(fn: ToolFn) -> ToolFn:
            @functools.wraps(fn)
            async def acted(call: Call, /, **args: Any) -> Any:
                world = world_of()
                # its arguments bound first (a TypeError meets no fault); every tool here is a
                # coroutine function
                run = cast(Coroutine[Any, Any, Any], fn(call, **args))
                faults = world.faults
                if world.latency > 0 or faults._crash_at is not None or faults._faults:
                    try:  # latency and injected faults before the vendor acts (World.gate);
                        await world.gate(name)  # issue 29: no coroutine for it otherwise
                    except BaseException:
                        run.close()
                        raise
                out = await run
                if world._after:  # injected faults due once the tool has acted (after_call)
                    world.after_call(call)
                return out

            catalog.register(name, acted, **kw)
            return fn

        return register

    # --- mail -----------------------------------------------------------------------------
    @tool("mail.send", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def mail_send(call: Call, to: str, subject: str, body: str = "") -> dict[str, Any]:
        """Send an email now; delivered mail cannot be unsent."""
        world = world_of()
        msg = world.mail.send(to, subject, body, idempotency_key=key_of(call))
        call.acknowledge(
            who="the sender",
            parties=[to],
            what=f"Email '{subject}' to {to} was delivered "
            f"({_vendor_time(msg['delivered_at'])}) and cannot be unsent",
            draft=f"Hello, please disregard my earlier email '{subject}': it was sent in error. "
            f"I will follow up with the correct details shortly.",
        )
        return msg

    @tool("mail.send_delayed", reversibility="reversible", timeout=timeout, idempotent=True)
    async def mail_send_delayed(
        call: Call, to: str, subject: str, body: str = "", delay: float = 30.0
    ) -> dict[str, Any]:
        """Schedule an email; cancellable until its send-delay window elapses."""
        world = world_of()
        msg = world.mail.send_delayed(to, subject, body, delay=delay, idempotency_key=key_of(call))
        _names_what_it_made(world, "mail", call, msg)
        call.inverse("mail.cancel_scheduled", message_id=msg["id"])
        call.expect(
            "mail.get_message", {"message_id": msg["id"]}, equals="scheduled", path="status"
        )
        return msg

    @tool("mail.cancel_scheduled", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def mail_cancel_scheduled(call: Call, message_id: str) -> dict[str, Any]:
        """Stop a scheduled email before it is delivered (the inverse of mail.send_delayed)."""
        world = world_of()
        return world.mail.cancel_scheduled(message_id, idempotency_key=key_of(call))

    @tool("mail.get_message", reversibility="read_only", timeout=timeout)
    async def mail_get_message(call: Call, message_id: str) -> dict[str, Any]:
        """Read a message's status: scheduled, delivered or cancelled."""
        world = world_of()
        return world.mail.get(message_id)

    # --- calendar -------------------------------------------------------------------------
    @tool("calendar.create_event", reversibility="compensable", timeout=timeout, idempotent=True)
    async def calendar_create_event(
        call: Call,
        title: str,
        start: str,
        attendees: list[str],
        announce: str | None = None,
        log_to: str | None = None,
    ) -> dict[str, Any]:
        """Create an event and invite its attendees; cancelling notifies each of them (and, with
        ``announce``, posts to that channel, which logs it on CRM record ``log_to``)."""
        world = world_of()
        event = world.calendar.create_event(title, start, attendees, idempotency_key=key_of(call))
        _names_what_it_made(world, "calendar", call, event)
        extra = {k: v for k, v in (("announce", announce), ("log_to", log_to)) if v}
        call.inverse("calendar.cancel_event", event_id=event["id"], **extra)
        call.expect(
            "calendar.get_event", {"event_id": event["id"]}, equals="confirmed", path="status"
        )
        call.residue(
            f"A cancellation notice for '{title}' goes to every attendee; they already "
            f"had the invitation",
            parties=attendees,
        )
        return event

    @tool("calendar.cancel_event", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def calendar_cancel_event(
        call: Call, event_id: str, announce: str | None = None, log_to: str | None = None
    ) -> dict[str, Any]:
        """Cancel an event; a cancellation notice goes to every attendee. With ``announce``, a
        follow-up posts the cancellation to that channel (rule 7: it spends budget)."""
        world = world_of()
        event = world.calendar.cancel_event(event_id, idempotency_key=key_of(call))
        if announce and call.phase == "compensate":
            text = f"'{event['title']}' ({event['start']}) is cancelled"
            more = {"log_to": log_to} if log_to else {}
            call.follow_up("chat.announce", channel=announce, text=text, **more)
        return event

    @tool("calendar.get_event", reversibility="read_only", timeout=timeout)
    async def calendar_get_event(call: Call, event_id: str) -> dict[str, Any]:
        """Read an event and its attendees' responses."""
        world = world_of()
        return world.calendar.get(event_id)

    # --- CRM ------------------------------------------------------------------------------
    @tool(
        "crm.update_field",
        reversibility="reversible",
        resources=lambda a: [f"crm:{a['record_id']}"],
        timeout=timeout,
        idempotent=True,
    )
    async def crm_update_field(
        call: Call, record_id: str, field: str, value: Any
    ) -> dict[str, Any]:
        """Set one field of a record, compare-and-set; its inverse writes the old value back."""
        world = world_of()
        before = world.crm.get(record_id)
        pre = call.precondition
        # rule 4: as an inverse, the vendor's compare-and-set enforces the expectation, so a
        # value someone else wrote between the drift check and this write is never overwritten.
        out = world.crm.update_field(
            record_id,
            field,
            value,
            if_version=None if pre is not None else before["version"],
            if_value=pre.equals if pre is not None else ANY,
            idempotency_key=key_of(call),
        )
        call.inverse("crm.update_field", record_id=record_id, field=field, value=out["old"])
        call.expect("crm.read_field", {"record_id": record_id, "field": field}, equals=value)
        # rule 5 with rule 4: after a crash with the write-back in flight, the engine re-sends
        # it only if the field still shows the agent's value (or the old one: it landed); the
        # CRM's own compare-and-set uses Python's ==, which takes a person's True for a 1
        call.landed("crm.read_field", {"record_id": record_id, "field": field}, equals=out["old"])
        return out

    @tool("crm.read_field", reversibility="read_only", timeout=timeout)
    async def crm_read_field(call: Call, record_id: str, field: str) -> Any:
        """Read one field of a record."""
        world = world_of()
        return world.crm.read_field(record_id, field)

    @tool("crm.get_record", reversibility="read_only", timeout=timeout)
    async def crm_get_record(call: Call, record_id: str) -> dict[str, Any]:
        """Read a whole record: fields, version, etag and notes."""
        world = world_of()
        return world.crm.get(record_id)

    @tool(
        "crm.add_note",
        reversibility="reversible",
        resources=lambda a: [f"crm:{a['record_id']}"],
        timeout=timeout,
        idempotent=True,
    )
    async def crm_add_note(call: Call, record_id: str, text: str) -> dict[str, Any]:
        """Attach a note to a record; its inverse deletes that note."""
        world = world_of()
        note = world.crm.add_note(record_id, text, idempotency_key=key_of(call))
        call.inverse("crm.delete_note", record_id=record_id, note_id=note["id"])
        call.expect(
            "crm.get_record", {"record_id": record_id}, equals=text, path=("notes", note["id"])
        )
        return note

    @tool("crm.log_activity", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def crm_log_activity(call: Call, record_id: str, text: str) -> dict[str, Any]:
        """Append a line to a record's activity log; people read it, it is never rewritten."""
        world = world_of()
        out = world.crm.log_activity(record_id, text, idempotency_key=key_of(call))
        if call.phase == "forward":
            call.acknowledge(
                who="the record's owner",
                parties=[record_id],
                what=f"Activity '{text}' was logged on CRM record {record_id}",
                draft=f"Please ignore the activity '{text}' on {record_id}; logged in error.",
            )
        return out

    @tool("crm.delete_note", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def crm_delete_note(call: Call, record_id: str, note_id: str) -> dict[str, Any]:
        """Delete a note (the inverse of crm.add_note)."""
        world = world_of()
        return world.crm.delete_note(record_id, note_id, idempotency_key=key_of(call))

    # --- payments -------------------------------------------------------------------------
    @tool("payments.charge", reversibility="compensable", timeout=timeout, idempotent=True)
    async def payments_charge(
        call: Call, customer: str, cents: int, description: str = "", deal: str | None = None
    ) -> dict[str, Any]:
        """Charge a card (vendor idempotency key = the step's); compensated by a refund. With
        ``deal``, the charge is under the finance lock: refundable only while the deal is open
        (declare ``saga.call(..., undo_after=[the step that closed it])``)."""
        world = world_of()
        ch = world.payments.charge(
            customer,
            cents,
            description=description,
            deal=deal,
            idempotency_key=call.idempotency_key,
        )
        _names_what_it_made(world, "payments", call, ch)
        call.inverse("payments.refund", charge_id=ch["id"], cents=cents)
        # drift: a refund someone issued by hand since would make ours a double refund.
        call.expect("payments.get_charge", {"charge_id": ch["id"]}, equals=0, path="refunded")
        # expected residue, for the preview; the refund records the processor's real settle date.
        # Issue 23: the same clock and computation as the processor's (the sandbox date), so
        # the confirm dialog promises the date the report then gives.
        call.residue(
            f"Refund of {_money(cents)} for charge {ch['id']} to {customer} would be pending; "
            f"the original charge stays on their statement",
            parties=[customer],
            settles_at=refund_settle_date(world),
        )
        return ch

    @tool("payments.refund", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def payments_refund(call: Call, charge_id: str, cents: int) -> dict[str, Any]:
        """Refund a charge (at most once, never more than charged); settles in 3 business days."""
        world = world_of()
        re = world.payments.refund(charge_id, cents, idempotency_key=key_of(call))
        # The settle date comes from the processor's answer, not from when the charge ran.
        call.residue(
            f"Refund of {_money(cents)} for charge {charge_id} to {re['customer']} is pending; "
            f"the original charge stays on their statement",
            parties=[re["customer"]],
            settles_at=re["settles_on"],
        )
        return re

    @tool("payments.get_charge", reversibility="read_only", timeout=timeout)
    async def payments_get_charge(call: Call, charge_id: str) -> dict[str, Any]:
        """Read a charge: amount, refunded cents, dispute status."""
        world = world_of()
        return world.payments.get_charge(charge_id)

    @tool("payments.wire", reversibility="reversible", timeout=timeout, idempotent=True)
    async def payments_wire(call: Call, to_account: str, cents: int) -> dict[str, Any]:
        """Send a wire; recallable inside its recall window, irreversible after it."""
        world = world_of()
        wire = world.payments.wire(to_account, cents, idempotency_key=key_of(call))
        _names_what_it_made(world, "payments", call, wire)
        call.inverse("payments.recall_wire", wire_id=wire["id"])
        # rule 4: only a wire still in flight can be recalled; once its recall window has closed
        # (sandbox clock, not the engine's) or someone recalled it, the step needs review.
        call.expect("payments.get_wire", {"wire_id": wire["id"]}, equals="in_flight", path="status")
        return wire

    @tool("payments.recall_wire", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def payments_recall_wire(call: Call, wire_id: str) -> dict[str, Any]:
        """Recall a wire inside its recall window (the inverse of payments.wire)."""
        world = world_of()
        return world.payments.recall_wire(wire_id, idempotency_key=key_of(call))

    @tool("payments.get_wire", reversibility="read_only", timeout=timeout)
    async def payments_get_wire(call: Call, wire_id: str) -> dict[str, Any]:
        """Read a wire: in_flight (recallable), completed or recalled."""
        world = world_of()
        return world.payments.get_wire(wire_id)

    # --- chat -----------------------------------------------------------------------------
    @tool("chat.post", reversibility="compensable", timeout=timeout, idempotent=True)
    async def chat_post(call: Call, channel: str, text: str) -> dict[str, Any]:
        """Post to a channel (members are notified); compensated by deleting the post."""
        world = world_of()
        msg = world.chat.post(channel, text, idempotency_key=key_of(call))
        _names_what_it_made(world, "chat", call, msg)
        call.inverse("chat.delete", message_id=msg["id"])
        call.expect("chat.get_message", {"message_id": msg["id"]}, equals=text, path="text")
        members = msg["notified"]
        call.residue(
            f"Members of {channel} ({', '.join(members)}) were already notified of the post; "
            f"deleting it does not unsend the notification",
            parties=members,
        )
        return msg

    @tool(
        "chat.edit",
        reversibility="reversible",
        # rule 3: two edits of one message are undone newest first, like two CRM writes
        resources=lambda a: [f"chat:{_resource_id(a['message_id'])}"],
        timeout=timeout,
        idempotent=True,
    )
    async def chat_edit(call: Call, message_id: str, text: str) -> dict[str, Any]:
        """Edit a message; its inverse edits the old text back."""
        world = world_of()
        out = world.chat.edit(message_id, text, idempotency_key=key_of(call))
        call.inverse("chat.edit", message_id=message_id, text=out["old"])
        call.expect("chat.get_message", {"message_id": message_id}, equals=text, path="text")
        return out

    @tool("chat.announce", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def chat_announce(
        call: Call, channel: str, text: str, log_to: str | None = None
    ) -> dict[str, Any]:
        """Post an announcement (members are notified); as a follow-up, it asks for one more:
        logging the announcement on CRM record ``log_to`` (a nested follow-up, rule 7)."""
        world = world_of()
        msg = world.chat.post(channel, text, idempotency_key=key_of(call))
        if call.phase == "follow_up" and log_to:
            call.follow_up("crm.log_activity", record_id=log_to, text=f"announced in {channel}")
        elif call.phase == "forward":
            call.acknowledge(
                who="the poster",
                parties=msg["notified"],
                what=f"Announcement in {channel} was posted and its members notified",
                draft=f"Please disregard the announcement '{text}' in {channel}.",
            )
        return msg

    @tool("chat.delete", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def chat_delete(call: Call, message_id: str) -> dict[str, Any]:
        """Delete a message (the inverse of chat.post); its notifications stay seen."""
        world = world_of()
        return world.chat.delete(message_id, idempotency_key=key_of(call))

    @tool("chat.get_message", reversibility="read_only", timeout=timeout)
    async def chat_get_message(call: Call, message_id: str) -> dict[str, Any]:
        """Read a message: text, status and who has seen it."""
        world = world_of()
        return world.chat.get(message_id)

    # --- docs -----------------------------------------------------------------------------
    @tool("docs.create_draft", reversibility="reversible", timeout=timeout, idempotent=True)
    async def docs_create_draft(call: Call, title: str, text: str) -> dict[str, Any]:
        """Create a private draft; its inverse deletes it without trace."""
        world = world_of()
        doc = world.docs.create_draft(title, text, idempotency_key=key_of(call))
        _names_what_it_made(world, "docs", call, doc)
        call.inverse("docs.delete", doc_id=doc["id"])
        call.expect("docs.get", {"doc_id": doc["id"]}, equals=text, path="text")
        # rule 5 with rule 4: a delete in flight at a crash is re-sent only if the world shows
        # it did not land and no one edited the draft meanwhile (docs.delete checks no text)
        call.landed("docs.get", {"doc_id": doc["id"]}, equals="deleted", path="status")
        return doc

    @tool("docs.create_private_note", reversibility="reversible", timeout=timeout, idempotent=True)
    async def docs_create_private_note(call: Call, text: str) -> dict[str, Any]:
        """Create a private note (no one else can see, share or edit it); deleted on undo."""
        world = world_of()
        doc = world.docs.create_draft("Private note", text, private=True,
                                      idempotency_key=key_of(call))  # fmt: skip
        _names_what_it_made(world, "docs", call, doc)
        call.inverse("docs.delete", doc_id=doc["id"])
        # rule 4: nothing to compare: the vendor lets no one but this saga touch a private note
        call.no_drift_check(reason="a private note only this saga can see; no one else can edit it")
        return doc

    @tool(
        "docs.share",
        reversibility="compensable",
        resources=lambda a: [f"docs:{_resource_id(a['doc_id'])}"],
        timeout=timeout,
        idempotent=True,
    )
    async def docs_share(call: Call, doc_id: str, people: list[str]) -> dict[str, Any]:
        """Share a document (each person is notified); compensated by unsharing."""
        world = world_of()
        out = world.docs.share(doc_id, people, idempotency_key=key_of(call))
        added = out["added"]
        call.inverse("docs.unshare", doc_id=doc_id, people=added)
        # rule 4: if someone changed who can see the document since, unsharing needs review.
        call.expect(
            "docs.get", {"doc_id": doc_id}, equals=out["doc"]["shared_with"], path="shared_with"
        )
        if added:
            call.residue(
                f"{', '.join(added)} got a notification that '{out['doc']['title']}' was shared "
                f"with them; unsharing removes access, not the notification",
                parties=added,
            )
        return out

    @tool("docs.unshare", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def docs_unshare(call: Call, doc_id: str, people: list[str]) -> dict[str, Any]:
        """Remove people's access to a document (the inverse of docs.share)."""
        world = world_of()
        return world.docs.unshare(doc_id, people, idempotency_key=key_of(call))

    @tool("docs.delete", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def docs_delete(call: Call, doc_id: str) -> dict[str, Any]:
        """Delete a document (the inverse of docs.create_draft)."""
        world = world_of()
        return world.docs.delete(doc_id, idempotency_key=key_of(call))

    @tool("docs.get", reversibility="read_only", timeout=timeout)
    async def docs_get(call: Call, doc_id: str) -> dict[str, Any]:
        """Read a document: text, status, who it is shared with."""
        world = world_of()
        return world.docs.get(doc_id)

    # --- ledger: a legacy vendor that ignores idempotency keys ------------------------------
    @tool("ledger.post", reversibility="compensable", timeout=timeout)  # idempotent=False
    async def ledger_post(call: Call, account: str, cents: int, memo: str = "") -> dict[str, Any]:
        """Book an entry on an account; compensated by a reversing entry."""
        world = world_of()
        entry = world.ledger.post(account, cents, memo)
        call.inverse("ledger.reverse", entry_id=entry["id"])
        call.expect("ledger.get_entry", {"entry_id": entry["id"]}, equals="posted", path="status")
        # rule 5: the ledger ignores idempotency keys, so a reversal in flight at a crash is
        # never re-sent blindly; this probe shows whether it landed.
        call.landed("ledger.get_entry", {"entry_id": entry["id"]}, equals="reversed", path="status")
        call.residue(
            f"A reversing entry of {_money(cents)} stands next to the original one on the "
            f"statement of {account}",
            parties=[account],
        )
        return entry

    @tool("ledger.reverse", reversibility="irreversible", timeout=timeout)  # idempotent=False
    async def ledger_reverse(call: Call, entry_id: str) -> dict[str, Any]:
        """Book a reversing entry (the inverse of ledger.post); every request books one."""
        world = world_of()
        return world.ledger.reverse(entry_id)

    @tool("ledger.get_entry", reversibility="read_only", timeout=timeout)
    async def ledger_get_entry(call: Call, entry_id: str) -> dict[str, Any]:
        """Read a ledger entry: posted or reversed."""
        world = world_of()
        return world.ledger.get_entry(entry_id)

    # --- SMS ------------------------------------------------------------------------------
    @tool("sms.send", reversibility="irreversible", timeout=timeout, idempotent=True)
    async def sms_send(call: Call, to: str, text: str) -> dict[str, Any]:
        """Send a text message; it cannot be taken back."""
        world = world_of()
        msg = world.sms.send(to, text, idempotency_key=key_of(call))
        call.acknowledge(
            who="the sender",
            parties=[to],
            what=f"Text message to {to} was delivered ({_vendor_time(msg['sent_at'])}) and "
            "cannot be unsent",
            draft="Please ignore my previous text message; it was sent in error.",
        )
        return msg

    return catalog


def _resource_id(value: Any) -> str:
    """An id for ``resources``: the id itself, or, for another step's result not known yet
    (``post["id"]``), that reference's own stable name, so two edits of one post share it."""
    return value if isinstance(value, str) else repr(value)


_IDEMPOTENCY_KEY: Callable[[Call], str] = operator.attrgetter("idempotency_key")
"""The vendor idempotency key for a call (stable across retries, crashes and processes)."""


class UntrustedAnswer(RuntimeError):
    """A vendor acted, but its answer does not name what it made: no inverse can be taken from
    it. Neither a refusal (``PermanentError``) nor a retry (``TransientError``): the step is
    ``in_doubt`` (rule 9), for a person to look up."""


def _names_what_it_made(world: World, vendor: str, call: Call, answer: dict[str, Any]) -> None:
    """Rule 8 before an inverse is taken from a vendor's answer: its ``id`` must name what this
    call made, as the vendor's look-up by the call's idempotency key shows it (a re-send with
    the key answers the same). A confused or compromised vendor answering another resource's
    id (another customer's charge) or a null would make undo refund, delete or cancel
    something else, or nothing; the tool records no inverse and raises :class:`UntrustedAnswer`.
    One look-up per call that creates something (``amends eval``'s ``hostile_words`` family
    makes vendors answer so).

    Raises:
        UntrustedAnswer: The answer's id is not the id of what the call made.
    """
    made = world.replay(vendor, call.idempotency_key)
    rid = answer.get("id")
    if made is not None and rid != made.get("id"):
        raise UntrustedAnswer(
            f"{call.tool}: the vendor acted, but its answer names {rid!r}, not what this call "
            f"made ({made.get('id')!r}); no inverse was recorded from it: look the call up at "
            f"the vendor by its idempotency key before undoing it by hand"
        )


def refund_settle_date(world: World) -> str:
    """When a refund issued now would settle (3 business days from the sandbox date)."""
    return add_business_days(world.today(), REFUND_SETTLE_BUSINESS_DAYS).isoformat()


def world_path_for(db: str) -> str | None:
    """The sandbox world file that goes with saga log ``db`` (``None`` for ``:memory:``)."""
    if db in ("", ":memory:"):
        return None
    if db.startswith("sqlite:///"):
        db = db[len("sqlite:///") :]
    elif "://" in db:  # a server log (PostgreSQL): keep the world next to the working directory
        name = "".join(c if c.isalnum() else "_" for c in db.split("://", 1)[1])
        db = f".amends-{name[:60]}"
    return db + ".world"


def demo_catalog(db: str) -> Catalog:
    """``sandbox_catalog(World(db + ".world"))``: the CLI's default catalog, so
    ``amends undo --db X.db`` can undo sandbox sagas in a new process."""
    return sandbox_catalog(World(world_path_for(db)))
