"""The eval world: in-memory vendors with real semantics, and the honest catalog over them.

It mirrors the tool names and contracts of :mod:`amends.sandbox` (``crm.update_field``,
``payments.charge``, ``calendar.create_event``, ...) but is kept inside ``amends.evals`` so that the
invariants judge the engine against a world the engine does not share code with. Every applied
effect is appended to :attr:`EvalWorld.effects` with the step that caused it (``tag``) and its
vendor idempotency key; a replayed key applies nothing, as a real vendor does. Effects by other
actors carry ``actor`` (``"human"``, ``"webhook"``, ...) and ``conflicts=True`` when they change a
value the agent wrote (the invariants use it for "never overwrite someone else's write").

This module must never consult the saga log: the oracle reads the world, not the engine.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..contracts import Call, Catalog
from ..errors import PermanentError, PreconditionFailed, TransientError

__all__ = ["EvalWorld", "FaultTable", "SimulatedCrash", "eval_catalog"]

FaultKind = Literal["transient", "permanent", "crash_before", "crash_after"]


class SimulatedCrash(BaseException):
    """Raised by a tool to simulate the process dying mid-call (not an ``Exception``)."""


@dataclass
class _Fault:
    op: str
    kind: FaultKind
    times: int


class FaultTable:
    """Faults a tool consults before (or, for ``crash_after``, after) acting."""

    def __init__(self) -> None:
        self._faults: list[_Fault] = []
        self.crash_at: int | None = None
        """Crash (before acting) at this tool call number, counted from :meth:`arm_crash`."""
        self.crash_after_effect = False
        self._calls = 0

    def add(self, op: str, kind: FaultKind, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``op`` fail with ``kind``."""
        self._faults.append(_Fault(op, kind, times))

    def arm_crash(self, nth: int, *, after_effect: bool = False) -> None:
        """Crash at the ``nth`` tool call from now (1-based), before or after its effect."""
        self.crash_at = nth
        self.crash_after_effect = after_effect
        self._calls = 0

    def clear(self) -> None:
        self._faults.clear()
        self.crash_at = None

    def before(self, op: str) -> bool:
        """Raise the fault due for ``op``; True if the call must crash after acting."""
        if self.crash_at is not None:
            self._calls += 1
            if self._calls == self.crash_at:
                self.crash_at = None
                if not self.crash_after_effect:
                    raise SimulatedCrash(f"simulated crash before {op}")
                return True
        for f in self._faults:
            if f.op == op and f.times > 0:
                f.times -= 1
                if f.kind == "transient":
                    raise TransientError(f"{op}: vendor unavailable (injected), try again")
                if f.kind == "permanent":
                    raise PermanentError(f"{op}: vendor refused the call (injected)")
        return False


class EvalWorld:
    """All vendor state for one saga, plus the effect log the invariants read."""

    def __init__(self, *, latency: float = 0.0, clock: Callable[[], float] | None = None) -> None:
        self.crm: dict[str, dict[str, Any]] = {}
        self.notes: dict[str, dict[str, Any]] = {}
        self.charges: dict[str, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.chat: dict[str, dict[str, Any]] = {}
        self.docs: dict[str, dict[str, Any]] = {}
        self.effects_log: list[dict[str, Any]] = []
        self.faults = FaultTable()
        self.latency = latency
        self.now = 0.0
        self._replay: dict[str, Any] = {}
        self._ids = 0

    # --- bookkeeping ----------------------------------------------------------------------
    def copy(self) -> EvalWorld:
        """An identical, independent world (same state, effects and replay table; no faults)."""
        other = EvalWorld(latency=self.latency)
        for name in ("crm", "notes", "charges", "events", "messages", "chat", "docs",
                     "effects_log", "_replay"):  # fmt: skip
            setattr(other, name, copy.deepcopy(getattr(self, name)))
        other.now, other._ids = self.now, self._ids
        return other

    def effects(self) -> list[dict[str, Any]]:
        """Every effect applied, in order (``seq`` is the position)."""
        return list(self.effects_log)

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids}"

    def _effect(self, vendor: str, op: str, key: str, tag: str | None, idem: str | None,
                **more: Any) -> None:  # fmt: skip
        self.effects_log.append(
            {"seq": len(self.effects_log), "vendor": vendor, "op": op, "key": key, "tag": tag,
             "idempotency_key": idem, "actor": "agent", "conflicts": False, **more}
        )  # fmt: skip

    def _external(self, vendor: str, op: str, key: str, actor: str, *, conflicts: bool) -> None:
        self.effects_log.append(
            {"seq": len(self.effects_log), "vendor": vendor, "op": op, "key": key, "tag": None,
             "idempotency_key": None, "actor": actor, "conflicts": conflicts}
        )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The full JSON-able state (the "true world" shown by ``amends eval --replay``)."""
        return {
            "crm": self.crm,
            "notes": self.notes,
            "charges": self.charges,
            "events": self.events,
            "messages": self.messages,
            "chat": self.chat,
            "docs": self.docs,
        }

    # --- other actors (between forward and undo) ------------------------------------------
    def human_edit(self, record_id: str, field: str, value: Any, actor: str = "human") -> None:
        rec = self.crm.setdefault(record_id, {"version": 0})
        rec[field] = value
        rec["version"] += 1
        self._external("crm", "human_edit", f"{record_id}.{field}", actor, conflicts=True)

    def webhook_edit(self, record_id: str, field: str, value: Any) -> None:
        self.human_edit(record_id, field, value, actor="webhook")

    def dispute(self, charge_id: str) -> None:
        self.charges[charge_id]["status"] = "disputed"
        self._external("payments", "dispute", charge_id, "customer", conflicts=True)

    def settle(self, charge_id: str) -> None:
        self.charges[charge_id]["settled"] = True
        self._external("payments", "settle", charge_id, "bank", conflicts=False)

    def attendee_decline(self, event_id: str, who: str) -> None:
        self.events[event_id]["declined"].append(who)
        self._external("calendar", "decline", event_id, who, conflicts=False)

    def recipient_reads(self, message_id: str) -> None:
        self.messages[message_id]["read"] = True
        self._external("mail", "read", message_id, "recipient", conflicts=False)

    def member_reads(self, message_id: str, who: str) -> None:
        self.chat[message_id]["seen_by"].append(who)
        self._external("chat", "read", message_id, who, conflicts=False)

    def collaborator_edit(self, doc_id: str, text: str) -> None:
        self.docs[doc_id]["text"] = text
        self._external("docs", "edit", doc_id, "collaborator", conflicts=True)

    def advance(self, seconds: float) -> None:
        """Move the clock: scheduled mail whose send-delay window passed is sent."""
        self.now += seconds
        for mid, m in self.messages.items():
            if m["status"] == "scheduled" and m["send_at"] <= self.now:
                m["status"] = "sent"
                self._external("mail", "sent_by_clock", mid, "clock", conflicts=True)

    # --- the vendor call wrapper ------------------------------------------------------------
    async def enter(self, op: str, idem: str | None) -> tuple[bool, Any]:
        """Latency, faults, replay: (crash_after, replayed response or None)."""
        if self.latency:
            await asyncio.sleep(self.latency)
        crash_after = self.faults.before(op)
        if idem is not None:
            return crash_after, self._replay.get(f"{op}|{idem}")
        return crash_after, None

    def remember(self, op: str, idem: str | None, response: Any, crash_after: bool) -> Any:
        if idem is not None:
            self._replay[f"{op}|{idem}"] = response
        if crash_after:
            raise SimulatedCrash(f"simulated crash after {op} took effect")
        return response


def _tag(call: Call) -> str:
    return f"{call.step_id}:{'forward' if call.phase == 'forward' else 'undo'}"


def eval_catalog(world: EvalWorld) -> Catalog:
    """The honest catalog over ``world`` (same names and contracts as the sandbox's)."""
    cat = Catalog()
    w = world

    async def enter(call: Call) -> tuple[bool, Any]:
        return await w.enter(call.tool, call.idempotency_key)

    # --- crm ------------------------------------------------------------------------------
    @cat.tool("crm.read_field", reversibility="read_only")
    async def read_field(call: Call, record_id: str, field: str) -> Any:
        await enter(call)
        return w.crm.get(record_id, {}).get(field)

    @cat.tool(
        "crm.update_field",
        reversibility="reversible",
        resources=lambda a: [f"crm:{a['record_id']}"],
    )
    async def update_field(call: Call, record_id: str, field: str, value: Any) -> Any:
        crash, replay = await enter(call)
        if replay is not None:
            return w.remember(call.tool, None, replay, crash)
        rec = w.crm.setdefault(record_id, {"version": 0})
        before = rec.get(field)
        pre = call.precondition
        if pre is not None and rec.get(field) != pre.equals:  # compare-and-set (rule 4)
            raise PreconditionFailed(
                f"crm {record_id}.{field} is {rec.get(field)!r}, not {pre.equals!r}"
            )
        rec[field] = value
        rec["version"] += 1
        w._effect("crm", "update_field", f"{record_id}.{field}", _tag(call), call.idempotency_key)
        call.inverse("crm.update_field", record_id=record_id, field=field, value=before)
        call.expect("crm.read_field", {"record_id": record_id, "field": field}, equals=value)
        return w.remember(call.tool, call.idempotency_key, {"version": rec["version"]}, crash)

    @cat.tool("crm.add_note", reversibility="reversible")
    async def add_note(call: Call, record_id: str, text: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            nid = w._id("note")
            w.notes[nid] = {"record_id": record_id, "text": text}
            w._effect("crm", "add_note", nid, _tag(call), call.idempotency_key)
            replay = {"note_id": nid}
        call.inverse("crm.delete_note", note_id=replay["note_id"])
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("crm.delete_note", reversibility="reversible")
    async def delete_note(call: Call, note_id: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            if note_id not in w.notes:
                raise PermanentError(f"note {note_id!r} does not exist")
            del w.notes[note_id]
            w._effect("crm", "delete_note", note_id, _tag(call), call.idempotency_key)
            replay = {"deleted": note_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    # --- payments -------------------------------------------------------------------------
    @cat.tool("payments.get_charge", reversibility="read_only")
    async def get_charge(call: Call, charge_id: str) -> Any:
        await enter(call)
        return dict(w.charges.get(charge_id, {}))

    @cat.tool("payments.charge", reversibility="compensable")
    async def charge(call: Call, customer: str, cents: int) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            cid = w._id("ch")
            w.charges[cid] = {"customer": customer, "cents": cents, "status": "captured",
                              "refunded": 0, "settled": False}  # fmt: skip
            w._effect("payments", "charge", cid, _tag(call), call.idempotency_key)
            replay = {"charge_id": cid}
        cid = replay["charge_id"]
        call.inverse("payments.refund", charge_id=cid, cents=cents)
        call.expect("payments.get_charge", {"charge_id": cid}, path="status", equals="captured")
        call.residue(f"Refund of {cents / 100:.2f} to {customer}", parties=[customer],
                     settles_in_days=3)  # fmt: skip
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("payments.refund", reversibility="irreversible")
    async def refund(call: Call, charge_id: str, cents: int) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            ch = w.charges.get(charge_id)
            if ch is None:
                raise PermanentError(f"no charge {charge_id!r}")
            ch["refunded"] += cents
            ch["status"] = "refunded"
            w._effect("payments", "refund", charge_id, _tag(call), call.idempotency_key)
            replay = {"refunded": charge_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    # --- calendar -------------------------------------------------------------------------
    @cat.tool("calendar.get_event", reversibility="read_only")
    async def get_event(call: Call, event_id: str) -> Any:
        await enter(call)
        return dict(w.events.get(event_id, {}))

    @cat.tool("calendar.create_event", reversibility="compensable")
    async def create_event(call: Call, title: str, attendees: list[str]) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            eid = w._id("ev")
            w.events[eid] = {"title": title, "attendees": list(attendees), "status": "confirmed",
                             "declined": []}  # fmt: skip
            w._effect("calendar", "create_event", eid, _tag(call), call.idempotency_key)
            replay = {"event_id": eid}
        call.inverse("calendar.cancel_event", event_id=replay["event_id"])
        call.residue("Cancellation notice sent to every attendee", parties=list(attendees))
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("calendar.cancel_event", reversibility="irreversible")
    async def cancel_event(call: Call, event_id: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            ev = w.events.get(event_id)
            if ev is None or ev["status"] == "cancelled":
                raise PermanentError(f"event {event_id!r} is not an active event")
            ev["status"] = "cancelled"
            w._effect("calendar", "cancel_event", event_id, _tag(call), call.idempotency_key)
            replay = {"cancelled": event_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    # --- mail -----------------------------------------------------------------------------
    @cat.tool("mail.get_message", reversibility="read_only")
    async def get_message(call: Call, message_id: str) -> Any:
        await enter(call)
        return dict(w.messages.get(message_id, {}))

    @cat.tool("mail.send")
    async def send(call: Call, to: str, subject: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            mid = w._id("msg")
            w.messages[mid] = {"to": to, "subject": subject, "status": "sent", "read": False,
                               "send_at": w.now}  # fmt: skip
            w._effect("mail", "send", mid, _tag(call), call.idempotency_key)
            replay = {"message_id": mid}
        call.acknowledge(who="the sender", parties=[to],
                         draft=f"Please disregard my earlier message {subject!r}.")  # fmt: skip
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("mail.send_delayed", reversibility="reversible")
    async def send_delayed(call: Call, to: str, subject: str, delay: float = 30.0) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            mid = w._id("msg")
            w.messages[mid] = {"to": to, "subject": subject, "status": "scheduled",
                               "read": False, "send_at": w.now + delay}  # fmt: skip
            w._effect("mail", "send_delayed", mid, _tag(call), call.idempotency_key)
            replay = {"message_id": mid}
        mid = replay["message_id"]
        call.inverse("mail.cancel_scheduled", message_id=mid)
        call.expect("mail.get_message", {"message_id": mid}, path="status", equals="scheduled")
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("mail.cancel_scheduled", reversibility="irreversible")
    async def cancel_scheduled(call: Call, message_id: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            m = w.messages.get(message_id)
            if m is None or m["status"] != "scheduled":
                raise PermanentError(f"message {message_id!r} is no longer scheduled")
            m["status"] = "cancelled"
            w._effect("mail", "cancel_scheduled", message_id, _tag(call), call.idempotency_key)
            replay = {"cancelled": message_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    # --- chat -----------------------------------------------------------------------------
    @cat.tool("chat.get_message", reversibility="read_only")
    async def chat_get(call: Call, message_id: str) -> Any:
        await enter(call)
        return dict(w.chat.get(message_id, {}))

    @cat.tool("chat.post", reversibility="compensable")
    async def chat_post(call: Call, channel: str, text: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            mid = w._id("chat")
            w.chat[mid] = {"channel": channel, "text": text, "deleted": False, "seen_by": []}
            w._effect("chat", "post", mid, _tag(call), call.idempotency_key)
            replay = {"message_id": mid}
        call.inverse("chat.delete", message_id=replay["message_id"])
        call.residue("Notification already seen by channel members", parties=[channel])
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("chat.delete", reversibility="irreversible")
    async def chat_delete(call: Call, message_id: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            m = w.chat.get(message_id)
            if m is None or m["deleted"]:
                raise PermanentError(f"chat message {message_id!r} is already gone")
            m["deleted"] = True
            w._effect("chat", "delete", message_id, _tag(call), call.idempotency_key)
            replay = {"deleted": message_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    # --- docs -----------------------------------------------------------------------------
    @cat.tool("docs.get", reversibility="read_only")
    async def docs_get(call: Call, doc_id: str) -> Any:
        await enter(call)
        return dict(w.docs.get(doc_id, {}))

    @cat.tool("docs.create_draft", reversibility="reversible")
    async def create_draft(call: Call, title: str, text: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            did = w._id("doc")
            w.docs[did] = {"title": title, "text": text, "deleted": False}
            w._effect("docs", "create_draft", did, _tag(call), call.idempotency_key)
            replay = {"doc_id": did}
        did = replay["doc_id"]
        call.inverse("docs.delete", doc_id=did)
        call.expect("docs.get", {"doc_id": did}, path="text", equals=text)
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    @cat.tool("docs.delete", reversibility="irreversible")
    async def docs_delete(call: Call, doc_id: str) -> Any:
        crash, replay = await enter(call)
        if replay is None:
            d = w.docs.get(doc_id)
            if d is None or d["deleted"]:
                raise PermanentError(f"doc {doc_id!r} is already deleted")
            d["deleted"] = True
            w._effect("docs", "delete", doc_id, _tag(call), call.idempotency_key)
            replay = {"deleted": doc_id}
        return w.remember(call.tool, call.idempotency_key, replay, crash)

    return cat
