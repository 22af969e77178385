"""The demo scene: one agent request fanned out to twelve tool calls, drift, and two Undo clicks;
then a second request undone only in part ("take back the charge, keep the meeting").

``run_demo(db)`` runs it against a fresh saga log ``db`` and sandbox world ``db + ".world"`` and
returns a :class:`DemoResult`: the report amends gave, what a naive undo stack would have claimed
for the same run (executed on a copy of the world taken before undo), the draft a person sent,
the selective undo of the second request (its preview and report), and both worlds afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from dataclasses import dataclass, field
from typing import Any

from amends import Call, Catalog, Engine, Preview, SentFollowUp, UndoReport

from .catalog import sandbox_catalog, world_path_for
from .world import World

__all__ = [
    "DEMO_TITLE",
    "HUMAN_STAGE",
    "SELECTED_STEP",
    "SELECTIVE_TITLE",
    "DemoResult",
    "run_demo",
    "run_demo_async",
]

DEMO_TITLE = "Close the ACME renewal"
HUMAN_STAGE = "contract_sent"
"""What the account owner sets the CRM stage to after the agent wrote ``closed_won``."""
SELECTIVE_TITLE = "Book the ACME admin training"
"""The second request: a meeting booked, a card charged for it, the charge recorded in the CRM."""
SELECTED_STEP = "training_fee"
"""The step of the second request a person takes back (the charge); the meeting stays."""


@dataclass(frozen=True)
class DemoResult:
    """What the demo did and what the world shows afterwards."""

    saga_id: str
    """The saga of the agent request."""
    report: UndoReport
    """The report of the first Undo click."""
    second_report: UndoReport
    """The report of the second, concurrent click (same reversal, same report)."""
    naive_claims: list[dict[str, str]]
    """What a naive undo stack said per step: ``{"step_id", "tool", "claim"}``."""
    naive_damage: list[str]
    """What the world shows after the naive undo, in plain language."""
    world: dict[str, Any]
    """Snapshot of the sandbox world after the amends reversal."""
    naive_world: dict[str, Any] = field(default_factory=dict)
    """Snapshot of the copy of the world after the naive undo stack ran."""
    db: str = ""
    world_path: str | None = None
    sent: SentFollowUp | None = None
    """The buyer's email draft, edited and sent by a person after the undo: a follow-up of the
    reversal that marks that manual action handled (issue 27)."""
    selective_saga_id: str = ""
    """The saga of the second request (:data:`SELECTIVE_TITLE`)."""
    selective_preview: Preview | None = None
    """The preview of undoing only the charge: what its closure adds, and why (issue 27)."""
    selective: UndoReport | None = None
    """The report of that selective undo: the charge refunded, the CRM field that records it
    reverted, the meeting kept as it is (issue 27)."""
    selective_outcome: list[str] = field(default_factory=list)
    """What the world shows after that selective undo, in plain language."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "saga_id": self.saga_id,
            "db": self.db,
            "world_path": self.world_path,
            "report": self.report.to_dict(),
            "same_reversal": self.report.reversal_id == self.second_report.reversal_id,
            "naive": {"claims": self.naive_claims, "damage": self.naive_damage},
            "world": self.world,
            "sent": self.sent.to_dict() if self.sent is not None else None,
            "selective": (
                {
                    "saga_id": self.selective_saga_id,
                    "preview": self.selective_preview.to_dict(),
                    "report": self.selective.to_dict(),
                    "outcome": self.selective_outcome,
                }
                if self.selective is not None and self.selective_preview is not None
                else None
            ),
        }


def _fresh(path: str | None) -> None:
    if path is None:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def _log_path(db: str) -> str | None:
    if db in ("", ":memory:"):
        return None
    return db[len("sqlite:///") :] if db.startswith("sqlite:///") else db


async def _scene(engine: Engine) -> str:
    """The agent's twelve tool calls for one request."""
    async with engine.saga(DEMO_TITLE, tenant="acme", actor="agent:sales") as saga:
        stage = saga.call(
            "crm.update_field", step_id="crm_stage", record_id="acme", field="stage",
            value="closed_won",
        )  # fmt: skip
        charge = saga.call(
            "payments.charge", step_id="charge", after=[stage], customer="cus_acme",
            cents=1_200_000, description="ACME renewal 2027",
        )  # fmt: skip
        saga.call(
            "crm.update_field", step_id="crm_charge", record_id="acme", field="last_charge",
            value=charge["id"],
        )  # fmt: skip
        saga.call(
            "mail.send", step_id="email_buyer", after=[charge], to="buyer@acme.example",
            subject="Your ACME renewal is confirmed",
            body="Thank you! Your renewal is active and your card was charged 12,000.00 USD.",
        )  # fmt: skip
        saga.call(
            "mail.send", step_id="email_finance", after=[charge], to="finance@example.com",
            subject="ACME renewal booked: 12,000.00 USD", body="Please recognise the renewal.",
        )  # fmt: skip
        saga.call(
            "calendar.create_event", step_id="kickoff", after=[stage],
            title="ACME renewal kickoff", start="2026-12-09T15:00:00Z",
            attendees=["buyer@acme.example", "dana@example.com"],
        )  # fmt: skip
        saga.call(
            "chat.post", step_id="chat", after=[charge], channel="#sales",
            text="ACME renewed for 12,000 USD!",
        )  # fmt: skip
        saga.call(
            "crm.add_note", step_id="note", record_id="acme",
            text="Renewal closed by the agent; kickoff booked.",
        )  # fmt: skip
        draft = saga.call(
            "docs.create_draft", step_id="draft", title="ACME renewal summary",
            text="ACME renews for 2027 at 12,000 USD.",
        )  # fmt: skip
        saga.call("docs.share", step_id="share", doc_id=draft["id"], people=["buyer@acme.example"])
        saga.call(
            "mail.send_delayed", step_id="reminder", to="dana@example.com",
            subject="Reminder: prepare the ACME kickoff", delay=30.0,
        )  # fmt: skip
        saga.call(
            "sms.send", step_id="sms", after=[charge], to="+1-555-0100",
            text="ACME renewal closed, card charged.",
        )  # fmt: skip
    return saga.id


async def _naive_undo(catalog: Catalog, engine: Engine, saga_id: str) -> list[dict[str, str]]:
    """A text-editor undo stack: pop each step, call its inverse, no drift check, say "Undone"."""
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    claims: list[dict[str, str]] = []
    for s in sorted(saga.steps, key=lambda s: s.seq, reverse=True):
        if s.inverse is not None:
            spec = catalog.get(s.inverse["tool"])
            call = Call(
                saga_id=saga_id,
                step_id=s.step_id,
                tool=spec.name,
                phase="compensate",
                idempotency_key=f"naive:{saga_id}:{s.step_id}",
            )
            try:
                result = spec.fn(call, **s.inverse["args"])
                if asyncio.iscoroutine(result):
                    await result
            except Exception:  # the naive stack swallows errors, that is the point
                pass
        claims.append({"step_id": s.step_id, "tool": s.tool, "claim": "Undone"})
    return claims


def _damage(naive: World) -> list[str]:
    """What a person would find in the world after the naive undo said "Undone" to everything."""
    out: list[str] = []
    stage = naive.crm.read_field("acme", "stage")
    if stage != HUMAN_STAGE:
        out.append(
            f"CRM acme.stage is {stage!r}: the undo stack overwrote the account owner's edit "
            f"({HUMAN_STAGE!r})"
        )
    snap = naive.snapshot()
    delivered = [
        m for m in snap.get("mail", {}).get("messages", {}).values() if m["status"] == "delivered"
    ]
    for m in delivered:
        out.append(f"Email '{m['subject']}' to {m['to']} is still delivered")
    for m in snap.get("sms", {}).get("messages", {}).values():
        out.append(f"Text message to {m['to']} is still delivered")
    for re in snap.get("payments", {}).get("refunds", {}).values():
        out.append(
            f"Refund {re['id']} of {re['cents'] / 100:,.2f} USD is {re['status']} until "
            f"{re['settles_on']}; the charge stays on the statement"
        )
    for ev in snap.get("calendar", {}).get("events", {}).values():
        notices = [n["to"] for n in ev["notices"] if n["kind"] == "cancellation"]
        if notices:
            out.append(f"Cancellation notices for '{ev['title']}' went to {', '.join(notices)}")
    for msg in snap.get("chat", {}).get("messages", {}).values():
        out.append(f"Chat members {', '.join(msg['notified'])} were notified of '{msg['text']}'")
    return out


async def _send_draft(engine: Engine, saga_id: str) -> SentFollowUp:
    """A person (Dana) edits the draft the report gives for the buyer's email and sends it: a
    follow-up of the reversal, in its budget, that marks that manual action handled."""
    return await engine.send_follow_up(
        saga_id, "email_buyer", tool="mail.send", by="dana@example.com",
        args={
            "to": "buyer@acme.example", "subject": "Correction: your ACME renewal",
            "body": "Hello, please disregard our earlier email: the renewal is not confirmed "
            "yet and the charge is being refunded. Dana",
        },
    )  # fmt: skip


async def _booking(engine: Engine) -> str:
    """The second request: book the training, charge the card for it, record the charge."""
    async with engine.saga(SELECTIVE_TITLE, tenant="acme", actor="agent:sales") as saga:
        meeting = saga.call(
            "calendar.create_event", step_id="training", title="ACME admin training",
            start="2026-12-14T16:00:00Z", attendees=["buyer@acme.example", "dana@example.com"],
        )  # fmt: skip
        fee = saga.call(
            "payments.charge", step_id=SELECTED_STEP, after=[meeting], customer="cus_acme",
            cents=150_000, description="ACME admin training",
        )  # fmt: skip
        saga.call(
            "crm.update_field", step_id="crm_training_fee", record_id="acme",
            field="training_charge", value=fee["id"],
        )  # fmt: skip
    return saga.id


async def _take_back_the_charge(engine: Engine) -> tuple[str, Preview, UndoReport]:
    """Issue 27: a person undoes only the charge of the second request. The preview names what
    the closure adds (the CRM field that used the charge's id) before anything is undone; the
    meeting, which the charge does not depend back on, stays as it is."""
    saga_id = await _booking(engine)
    preview = await engine.preview(saga_id, steps=[SELECTED_STEP])
    report = await engine.undo(saga_id, steps=[SELECTED_STEP])
    return saga_id, preview, report


def _outcome(world: World) -> list[str]:
    """What a person finds in the world after "take back the charge, keep the meeting"."""
    snap = world.snapshot()
    out: list[str] = []
    for ev in snap["calendar"]["events"].values():
        if ev["title"] == "ACME admin training":
            kept = "still on the calendar" if ev["status"] == "confirmed" else ev["status"]
            out.append(
                f"The meeting '{ev['title']}' on {ev['start'][:10]} is {kept}; invited: "
                f"{', '.join(ev['attendees'])}"
            )
    for ch in snap["payments"]["charges"].values():
        if ch["description"] == "ACME admin training":
            for re_id in ch["refunds"]:
                re = snap["payments"]["refunds"][re_id]
                out.append(
                    f"The card charge of {ch['cents'] / 100:,.2f} USD for '{ch['description']}' "
                    f"is refunded: the refund is {re['status']} until {re['settles_on']}"
                )
    value = world.crm.read_field("acme", "training_charge")
    out.append(
        "The CRM field that recorded the charge is empty again"
        if value is None
        else f"The CRM field that recorded the charge still reads {value!r}"
    )
    return out


async def run_demo_async(db: str, *, seed: int = 0) -> DemoResult:
    """The demo, for callers already inside an event loop (the web server). See :func:`run_demo`."""
    log_path = _log_path(db)
    world_path = world_path_for(db)
    _fresh(log_path)
    _fresh(world_path)
    world = World(world_path, seed=seed)
    catalog = sandbox_catalog(world)
    engine = Engine(catalog, log=db if log_path is not None else ":memory:")
    try:
        saga_id = await _scene(engine)
        # Between forward and undo: the account owner corrects the stage the agent wrote
        # (drift), a channel member reads the post, and a few sandbox seconds pass.
        world.crm.human_edit("acme", "stage", HUMAN_STAGE)
        record = await engine.log.get_saga(saga_id)
        assert record is not None
        chat_id = next(s.result["id"] for s in record.steps if s.step_id == "chat")
        world.chat.member_reads(chat_id, "sam")
        world.advance(5.0)

        naive_world = world.copy()
        naive_claims = await _naive_undo(sandbox_catalog(naive_world), engine, saga_id)

        # The user clicks Undo twice: both requests join the one reversal (rule 6).
        first, second = await asyncio.gather(engine.undo(saga_id), engine.undo(saga_id))
        sent = await _send_draft(engine, saga_id)
        selective_saga_id, selective_preview, selective = await _take_back_the_charge(engine)
        return DemoResult(
            saga_id=saga_id,
            report=first,
            second_report=second,
            naive_claims=naive_claims,
            naive_damage=_damage(naive_world),
            world=world.snapshot(),
            naive_world=naive_world.snapshot(),
            db=db,
            world_path=world_path,
            sent=sent,
            selective_saga_id=selective_saga_id,
            selective_preview=selective_preview,
            selective=selective,
            selective_outcome=_outcome(world),
        )
    finally:
        await engine.close()
        world.close()


def run_demo(db: str, *, seed: int = 0) -> DemoResult:
    """Run the demo scene against a fresh saga log ``db`` and world file ``db + ".world"``.

    Args:
        db: Saga log path (recreated); ``":memory:"`` keeps everything in memory.
        seed: Seeds the sandbox world's randomness.

    Returns:
        The reports, the naive stack's claims and damage, the draft a person sent, the
        selective undo of the second request, and both worlds afterwards.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_demo_async(db, seed=seed))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside a loop
        return pool.submit(asyncio.run, run_demo_async(db, seed=seed)).result()
