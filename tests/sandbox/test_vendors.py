"""Each sandbox vendor's semantics, called directly (no engine)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import amends
from amends.sandbox import World
from amends.sandbox.world import add_business_days


def ops(world: World, vendor: str) -> list[tuple[str, str]]:
    return [(e["op"], e["key"]) for e in world.effects() if e["vendor"] == vendor]


# --- mail ---------------------------------------------------------------------------------
def test_mail_send_replays_first_response_for_same_key(sw: World) -> None:
    """A replayed idempotency key returns the first message and delivers nothing new."""
    a = sw.mail.send("a@x", "Hi", "body", idempotency_key="k1")
    b = sw.mail.send("a@x", "Hi again", "other", idempotency_key="k1")
    assert a == b and a["status"] == "delivered"
    assert ops(sw, "mail") == [("deliver", a["id"])]
    c = sw.mail.send("a@x", "Hi", "body", idempotency_key="k2")
    assert c["id"] != a["id"]
    assert len(ops(sw, "mail")) == 2


def test_mail_send_delayed_is_cancellable_only_inside_its_window(sw: World) -> None:
    """Inside the 30 s window the message can be cancelled; after it, it is delivered for good."""
    m1 = sw.mail.send_delayed("a@x", "One", "")
    m2 = sw.mail.send_delayed("b@x", "Two", "")
    sw.advance(29)
    assert sw.mail.cancel_scheduled(m1["id"])["status"] == "cancelled"
    sw.advance(1)
    assert sw.mail.get(m2["id"])["status"] == "delivered"
    with pytest.raises(amends.PermanentError, match="cannot be unsent"):
        sw.mail.cancel_scheduled(m2["id"])
    with pytest.raises(amends.PermanentError, match="cancelled, not scheduled"):
        sw.mail.cancel_scheduled(m1["id"])
    assert sw.mail.get(m1["id"])["status"] == "cancelled"
    assert ops(sw, "mail") == [
        ("schedule", m1["id"]),
        ("schedule", m2["id"]),
        ("cancel", m1["id"]),
        ("deliver", m2["id"]),
    ]


def test_mail_recipients_read_after_a_random_delay(sw: World) -> None:
    """A delivered message is unread at first and read within the hour, at a seeded time."""
    m = sw.mail.send("a@x", "Hi", "")
    assert sw.mail.get(m["id"])["read_at"] is None
    sw.advance(3600)
    assert sw.mail.get(m["id"])["read_at"] is not None
    assert ("read", m["id"]) in ops(sw, "mail")
    other = World(seed=7)
    m2 = other.mail.send("a@x", "Hi", "")
    assert other.get("mail.messages", m2["id"])["read_due"] == m["read_due"]  # same seed


def test_mail_recipient_reads_now(sw: World) -> None:
    m = sw.mail.send("a@x", "Hi", "")
    sw.mail.recipient_reads(m["id"])
    assert sw.mail.get(m["id"])["read_at"] == sw.iso()
    with pytest.raises(amends.PermanentError, match="msg_99"):
        sw.mail.get("msg_99")


# --- calendar -----------------------------------------------------------------------------
def test_calendar_invites_then_cancellation_notices_every_attendee(sw: World) -> None:
    ev = sw.calendar.create_event("Kickoff", "2026-12-09T15:00Z", ["a@x", "b@x"])
    assert ops(sw, "calendar") == [("invite", ev["id"]), ("invite", ev["id"])]
    sw.calendar.attendee_decline(ev["id"], "b@x")
    out = sw.calendar.cancel_event(ev["id"])
    assert out["status"] == "cancelled"
    assert [(n["to"], n["kind"]) for n in out["notices"]] == [
        ("a@x", "invitation"),
        ("b@x", "invitation"),
        ("a@x", "cancellation"),
        ("b@x", "cancellation"),
    ]
    assert out["attendees"] == {"a@x": "invited", "b@x": "declined"}
    with pytest.raises(amends.PermanentError, match="already cancelled"):
        sw.calendar.cancel_event(ev["id"])
    with pytest.raises(amends.PermanentError, match="not an attendee"):
        sw.calendar.attendee_decline(ev["id"], "c@x")


# --- CRM ----------------------------------------------------------------------------------
def test_crm_update_is_compare_and_set_on_version(sw: World) -> None:
    """A stale version raises PreconditionFailed and writes nothing."""
    rec = sw.crm.get("acme")
    assert rec["version"] == 1 and rec["etag"] == 'W/"acme-1"'
    out = sw.crm.update_field("acme", "stage", "won", if_version=1)
    assert out["old"] == "negotiation" and out["record"]["version"] == 2
    with pytest.raises(amends.PreconditionFailed, match="version 2, not 1"):
        sw.crm.update_field("acme", "stage", "lost", if_version=1)
    assert sw.crm.read_field("acme", "stage") == "won"
    assert sw.crm.get("acme")["version"] == 2


def test_crm_update_is_compare_and_set_on_value(sw: World) -> None:
    sw.crm.human_edit("acme", "stage", "legal")
    with pytest.raises(amends.PreconditionFailed, match="is 'legal', expected 'won'"):
        sw.crm.update_field("acme", "stage", "negotiation", if_value="won")
    assert sw.crm.read_field("acme", "stage") == "legal"
    sw.crm.update_field("acme", "stage", "won", if_value="legal")
    assert sw.crm.read_field("acme", "stage") == "won"


def test_crm_other_writers_bump_the_version_and_are_marked(sw: World) -> None:
    sw.crm.human_edit("acme", "stage", "legal")
    sw.crm.webhook_edit("acme", "amount", "9000")
    assert sw.crm.get("acme")["version"] == 3
    actors = [e["actor"] for e in sw.effects() if e["op"] == "update_field"]
    assert actors == ["human", "webhook"]


def test_crm_update_replays_for_same_key(sw: World) -> None:
    a = sw.crm.update_field("acme", "stage", "won", idempotency_key="k")
    b = sw.crm.update_field("acme", "stage", "won", idempotency_key="k")
    assert a == b
    assert sw.crm.get("acme")["version"] == 2
    assert len(ops(sw, "crm")) == 1


def test_crm_notes_add_and_delete(sw: World) -> None:
    note = sw.crm.add_note("acme", "hello")
    assert sw.crm.get("acme")["notes"] == {note["id"]: "hello"}
    sw.crm.delete_note("acme", note["id"])
    assert sw.crm.get("acme")["notes"] == {}
    with pytest.raises(amends.PermanentError, match=note["id"]):
        sw.crm.delete_note("acme", note["id"])


# --- payments -----------------------------------------------------------------------------
def test_charge_replays_for_same_vendor_idempotency_key(sw: World) -> None:
    a = sw.payments.charge("cus_acme", 5000, idempotency_key="k")
    b = sw.payments.charge("cus_acme", 5000, idempotency_key="k")
    assert a == b
    assert ops(sw, "payments") == [("charge", a["id"])]


def test_refund_never_exceeds_the_charge_and_only_once(sw: World) -> None:
    ch = sw.payments.charge("cus_acme", 5000)
    with pytest.raises(amends.PermanentError, match="exceeds"):
        sw.payments.refund(ch["id"], 5001)
    re = sw.payments.refund(ch["id"], 5000)
    assert re["status"] == "pending" and re["cents"] == 5000
    with pytest.raises(amends.PermanentError, match="already refunded"):
        sw.payments.refund(ch["id"], 1)
    assert sw.payments.get_charge(ch["id"])["refunded"] == 5000
    assert [op for op, _ in ops(sw, "payments")] == ["charge", "refund"]


def test_refund_replays_for_same_key_instead_of_refusing(sw: World) -> None:
    ch = sw.payments.charge("cus_acme", 5000)
    a = sw.payments.refund(ch["id"], 5000, idempotency_key="u")
    assert sw.payments.refund(ch["id"], 5000, idempotency_key="u") == a
    assert [op for op, _ in ops(sw, "payments")] == ["charge", "refund"]


def test_refund_fails_permanently_on_dispute_and_closed_card(sw: World) -> None:
    ch1 = sw.payments.charge("cus_acme", 100)
    ch2 = sw.payments.charge("cus_globex", 100)
    sw.payments.dispute(ch1["id"])
    with pytest.raises(amends.PermanentError, match="disputed"):
        sw.payments.refund(ch1["id"], 100)
    sw.payments.close_card("cus_globex")
    with pytest.raises(amends.PermanentError, match="closed"):
        sw.payments.refund(ch2["id"], 100)
    with pytest.raises(amends.PermanentError, match="closed"):
        sw.payments.charge("cus_globex", 100)
    assert sw.payments.get_charge(ch2["id"])["refunded"] == 0


def test_refund_settles_in_three_business_days(sw: World) -> None:
    """Issued Monday 7 December: pending until Thursday 10 December."""
    ch = sw.payments.charge("cus_acme", 100)
    re = sw.payments.refund(ch["id"], 100)
    assert re["settles_on"] == "2026-12-10"
    sw.advance(2 * 86400)
    assert sw.payments.get_refund(re["id"])["status"] == "pending"
    sw.advance(86400)
    assert sw.payments.get_refund(re["id"])["status"] == "settled"


def test_business_days_skip_the_weekend() -> None:
    from datetime import date

    assert add_business_days(date(2026, 12, 11), 3).isoformat() == "2026-12-16"  # Fri -> Wed
    assert add_business_days(date(2026, 12, 12), 1).isoformat() == "2026-12-14"  # Sat -> Mon


def test_settle_by_another_actor(sw: World) -> None:
    ch = sw.payments.charge("cus_acme", 100)
    re = sw.payments.refund(ch["id"], 100)
    sw.payments.settle(re["id"])
    assert sw.payments.get_refund(re["id"])["status"] == "settled"
    with pytest.raises(amends.PermanentError, match="nope"):
        sw.payments.settle("nope")


def test_wire_recall_only_inside_its_window(sw: World) -> None:
    w1 = sw.payments.wire("DE001", 100)
    w2 = sw.payments.wire("DE002", 100)
    assert sw.payments.recall_wire(w1["id"])["status"] == "recalled"
    sw.advance(600)
    assert sw.payments.get_wire(w2["id"])["status"] == "completed"
    with pytest.raises(amends.PermanentError, match="recall window has closed"):
        sw.payments.recall_wire(w2["id"])


# --- chat, docs, sms ----------------------------------------------------------------------
def test_chat_post_notifies_members_and_delete_cannot_unsee(sw: World) -> None:
    msg = sw.chat.post("#sales", "hi")
    assert msg["notified"] == ["dana", "sam", "lee"]
    sw.chat.member_reads(msg["id"], "sam")
    sw.chat.delete(msg["id"])
    after = sw.chat.get(msg["id"])
    assert after["status"] == "deleted" and after["seen_by"] == ["sam"]
    assert [op for op, _ in ops(sw, "chat")] == [
        "post", "notify", "notify", "notify", "seen", "delete",
    ]  # fmt: skip
    with pytest.raises(amends.PermanentError, match="already deleted"):
        sw.chat.delete(msg["id"])
    with pytest.raises(amends.PermanentError, match="#nope"):
        sw.chat.post("#nope", "x")


def test_chat_edit_returns_the_old_text(sw: World) -> None:
    msg = sw.chat.post("#sales", "hi")
    out = sw.chat.edit(msg["id"], "hello")
    assert out["old"] == "hi" and sw.chat.get(msg["id"])["text"] == "hello"
    sw.chat.edit(msg["id"], "hi")
    assert sw.chat.get(msg["id"])["text"] == "hi"


def test_docs_share_notifies_and_unshare_keeps_the_notification(sw: World) -> None:
    doc = sw.docs.create_draft("Plan", "text")
    out = sw.docs.share(doc["id"], ["a@x", "b@x"])
    assert out["added"] == ["a@x", "b@x"]
    assert sw.docs.share(doc["id"], ["a@x"])["added"] == []  # already shared: no new notice
    sw.docs.unshare(doc["id"], ["a@x", "b@x"])
    after = sw.docs.get(doc["id"])
    assert after["shared_with"] == [] and after["notified"] == ["a@x", "b@x"]
    sw.docs.collaborator_edit(doc["id"], "changed")
    assert sw.docs.get(doc["id"])["text"] == "changed"
    sw.docs.delete(doc["id"])
    with pytest.raises(amends.PermanentError, match="deleted"):
        sw.docs.share(doc["id"], ["c@x"])


def test_sms_send_is_delivered_and_replays(sw: World) -> None:
    a = sw.sms.send("+1", "hi", idempotency_key="k")
    assert sw.sms.send("+1", "hi", idempotency_key="k") == a
    assert ops(sw, "sms") == [("deliver", a["id"])]


# --- world --------------------------------------------------------------------------------
async def test_faults_transient_permanent_slow_then_clear(sw: World) -> None:
    sw.faults.add("payments.refund", "transient", times=2)
    sw.faults.add("sms.send", "permanent")
    sw.faults.add("mail.send", "slow", delay=0.05)
    for _ in range(2):
        with pytest.raises(amends.TransientError, match="rate limiting"):
            await sw.gate("payments.refund")
    await sw.gate("payments.refund")  # used up
    with pytest.raises(amends.PermanentError, match="refused"):
        await sw.gate("sms.send")
    t0 = time.monotonic()
    await sw.gate("mail.send")
    assert time.monotonic() - t0 >= 0.04
    sw.faults.add("chat.post", "transient")
    assert sw.faults.pending() == [
        {"op": "chat.post", "kind": "transient", "times": 1, "delay": 0.0}
    ]
    sw.faults.clear()
    await sw.gate("chat.post")
    with pytest.raises(amends.ConfigError, match="'boom'"):
        sw.faults.add("chat.post", "boom")  # type: ignore[arg-type]


async def test_timeout_fault_sleeps_past_a_deadline(sw: World) -> None:
    sw.faults.add("mail.send", "timeout", delay=5.0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(sw.gate("mail.send"), 0.05)


async def test_latency_is_added_to_every_call(sw: World) -> None:
    sw.latency = 0.03
    t0 = time.monotonic()
    await sw.gate("crm.read_field")
    assert time.monotonic() - t0 >= 0.025


def test_snapshot_is_json_and_copy_is_independent(sw: World) -> None:
    sw.payments.charge("cus_acme", 100)
    snap = sw.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert set(snap) >= {"now", "crm", "payments", "chat"}
    assert snap["payments"]["charges"]["ch_1"]["cents"] == 100
    twin = sw.copy()
    twin.crm.human_edit("acme", "stage", "other")
    assert sw.crm.read_field("acme", "stage") == "negotiation"
    assert twin.effects()[:-1] == sw.effects()
    assert twin.payments.charge("cus_acme", 1)["id"] == "ch_2"  # counters copied


def test_clock_can_be_injected_and_advanced() -> None:
    t = [1_000_000.0]
    w = World(clock=lambda: t[0])
    assert w.now() == 1_000_000.0
    w.advance(10)
    t[0] += 5
    assert w.now() == 1_000_015.0
    with pytest.raises(amends.ConfigError, match="-1"):
        w.advance(-1)
