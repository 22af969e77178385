"""The demo scene: one agent request fanned out to twelve tool calls, drift, and two Undo clicks.

``run_demo(db)`` runs it against a fresh saga log ``db`` and sandbox world ``db + ".world"`` and
returns a :class:`DemoResult`: the report amends gave, what a naive undo stack would have claimed
for the same run (executed on a copy of the world taken before undo), and both worlds afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from dataclasses import dataclass, field
from typing import Any

from amends import Call, Catalog, Engine, SentFollowUp, UndoReport

from .catalog import sandbox_catalog, world_path_for
from .world import World

__all__ = ["DEMO_TITLE", "HUMAN_STAGE", "DemoResult", "run_demo", "run_demo_async"]

DEMO_TITLE = "Close the ACME renewal"
HUMAN_STAGE = "contract_sent"
"""What the account owner sets the CRM stage to after the agent wrote ``closed_won``."""


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
        The reports, the naive stack's claims and damage, and both worlds afterwards.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_demo_async(db, seed=seed))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside a loop
        return pool.submit(asyncio.run, run_demo_async(db, seed=seed)).result()
