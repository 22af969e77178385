"""The sandbox catalog's contracts end to end through amends.Engine (forward, then undo)."""

from __future__ import annotations

from typing import Any

import pytest

import amends
from amends.sandbox import World, sandbox_catalog


def states(report: amends.UndoReport) -> dict[str, str]:
    return {s.step_id: s.state.value for s in report.steps}


def effect_ops(world: World) -> list[str]:
    return [f"{e['vendor']}.{e['op']}" for e in world.effects()]


async def test_every_catalog_tool_declares_its_class_and_probes_are_read_only(sw: World) -> None:
    catalog = sandbox_catalog(sw)
    classes = {spec.name: spec.reversibility.value for spec in catalog}
    assert all(spec.explicit for spec in catalog)
    assert classes == {
        "calendar.cancel_event": "irreversible",
        "calendar.create_event": "compensable",
        "calendar.get_event": "read_only",
        "chat.announce": "irreversible",
        "chat.delete": "irreversible",
        "chat.edit": "reversible",
        "chat.get_message": "read_only",
        "chat.post": "compensable",
        "crm.add_note": "reversible",
        "crm.delete_note": "irreversible",
        "crm.log_activity": "irreversible",
        "crm.get_record": "read_only",
        "crm.read_field": "read_only",
        "crm.update_field": "reversible",
        "docs.create_draft": "reversible",
        "docs.create_private_note": "reversible",
        "docs.delete": "irreversible",
        "docs.get": "read_only",
        "docs.share": "compensable",
        "docs.unshare": "irreversible",
        "ledger.get_entry": "read_only",
        "ledger.post": "compensable",
        "ledger.reverse": "irreversible",
        "mail.cancel_scheduled": "irreversible",
        "mail.get_message": "read_only",
        "mail.send": "irreversible",
        "mail.send_delayed": "reversible",
        "payments.charge": "compensable",
        "payments.get_charge": "read_only",
        "payments.get_wire": "read_only",
        "payments.recall_wire": "irreversible",
        "payments.refund": "irreversible",
        "payments.wire": "reversible",
        "sms.send": "irreversible",
    }
    # rule 5: every vendor that replays a known key says so; the legacy ledger ignores keys
    writes = {spec.name for spec in catalog if spec.reversibility.value != "read_only"}
    idempotent = {spec.name for spec in catalog if spec.idempotent}
    assert writes - idempotent == {"ledger.post", "ledger.reverse"}
    assert idempotent <= writes


async def test_crm_update_reverts_and_world_is_as_before(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("stage") as saga:
        saga.call("crm.update_field", record_id="acme", field="stage", value="won")
    assert sw.crm.read_field("acme", "stage") == "won"
    report = await sandbox_engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert states(report) == {"s1": "reverted"}
    assert sw.crm.read_field("acme", "stage") == "negotiation"


async def test_crm_human_edit_is_drift_and_left_untouched(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("stage") as saga:
        saga.call("crm.update_field", record_id="acme", field="stage", value="won")
    sw.crm.human_edit("acme", "stage", "legal")
    report = await sandbox_engine.undo(saga.id)
    assert report.status == "cannot_undo"
    assert states(report) == {"s1": "drifted"}
    assert "expected 'won', found 'legal'" in report.steps[0].detail
    assert sw.crm.read_field("acme", "stage") == "legal"
    assert [e.get("actor") for e in sw.effects()] == ["api", "human"]


async def test_crm_inverse_honours_the_precondition_compare_and_set(sw: World) -> None:
    """An inverse whose precondition no longer holds raises PreconditionFailed, writes nothing."""
    catalog = sandbox_catalog(sw)
    sw.crm.human_edit("acme", "stage", "legal")
    pre = amends.Expectation("crm.read_field", {"record_id": "acme", "field": "stage"}, "won")
    call = amends.Call(
        saga_id="g",
        step_id="s1",
        tool="crm.update_field",
        phase="compensate",
        idempotency_key="amends:g:s1:undo",
        precondition=pre,
    )
    with pytest.raises(amends.PreconditionFailed, match="is 'legal', expected 'won'"):
        await catalog.get("crm.update_field").fn(
            call, record_id="acme", field="stage", value="negotiation"
        )
    assert sw.crm.read_field("acme", "stage") == "legal"


async def test_charge_is_compensated_by_one_refund_with_settle_date(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("charge") as saga:
        ch = saga.call("payments.charge", customer="cus_acme", cents=5000)
    charge_id = (await ch)["id"]
    sw.faults.add("payments.refund", "transient")  # rate limited once: retried
    report = await sandbox_engine.undo(saga.id)
    again = await sandbox_engine.undo(saga.id)
    assert again.reversal_id == report.reversal_id
    assert report.status == "partially_reversed"
    assert states(report) == {"s1": "compensated"}
    assert report.steps[0].attempts == 2
    [res] = report.residue
    assert res.parties == ("cus_acme",) and res.settles_at == "2026-12-10"
    assert res.what == (
        f"Refund of 50.00 USD for charge {charge_id} to cus_acme is pending; "
        f"the original charge stays on their statement"
    )
    assert effect_ops(sw) == ["payments.charge", "payments.refund"]
    assert sw.payments.get_charge(charge_id)["refunded"] == 5000


async def test_charge_forward_replay_uses_the_step_idempotency_key(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("charge") as saga:
        ch = saga.call("payments.charge", customer="cus_acme", cents=5000)
    key = sw.effects()[0]["idempotency_key"]
    assert key == f"amends:{saga.id}:s1"
    assert sw.payments.charge("cus_acme", 5000, idempotency_key=key) == await ch
    assert effect_ops(sw) == ["payments.charge"]


@pytest.mark.parametrize("actor", ["dispute", "close_card"])
async def test_refund_refused_is_failed_with_a_manual_action(
    sw: World, sandbox_engine: amends.Engine, actor: str
) -> None:
    async with sandbox_engine.saga("charge") as saga:
        ch = saga.call("payments.charge", customer="cus_acme", cents=5000)
    charge_id = (await ch)["id"]
    if actor == "dispute":
        sw.payments.dispute(charge_id)
    else:
        sw.payments.close_card("cus_acme")
    report = await sandbox_engine.undo(saga.id)
    assert report.status == "cannot_undo"
    assert states(report) == {"s1": "failed"}
    assert ("disputed" if actor == "dispute" else "closed") in report.steps[0].detail
    assert len(report.manual_actions) == 1
    assert sw.payments.get_charge(charge_id)["refunded"] == 0


async def test_refund_issued_by_hand_is_drift_not_a_double_refund(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("charge") as saga:
        ch = saga.call("payments.charge", customer="cus_acme", cents=5000)
    charge_id = (await ch)["id"]
    sw.payments.refund(charge_id, 5000)
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "drifted"}
    assert effect_ops(sw) == ["payments.charge", "payments.refund"]


async def test_send_delayed_is_cancelled_inside_window_and_drifted_after(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("mail") as saga:
        a = saga.call("mail.send_delayed", to="a@x", subject="One")
    async with sandbox_engine.saga("mail2") as saga2:
        b = saga2.call("mail.send_delayed", to="b@x", subject="Two")
    sw.advance(10)
    r1 = await sandbox_engine.undo(saga.id)
    assert states(r1) == {"s1": "reverted"} and r1.status == "fully_reversed"
    assert sw.mail.get((await a)["id"])["status"] == "cancelled"
    sw.advance(30)
    r2 = await sandbox_engine.undo(saga2.id)
    assert states(r2) == {"s1": "drifted"}
    assert sw.mail.get((await b)["id"])["status"] == "delivered"


async def test_mail_send_is_acknowledged_with_a_draft(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("mail") as saga:
        saga.call("mail.send", to="a@x", subject="Prices", body="...")
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "acknowledged"}
    [m] = report.manual_actions
    assert m.who == "the sender" and m.parties == ("a@x",)
    assert m.draft == (
        "Hello, please disregard my earlier email 'Prices': it was sent in error. "
        "I will follow up with the correct details shortly."
    )
    assert sw.snapshot()["mail"]["messages"]["msg_1"]["status"] == "delivered"


async def test_calendar_chat_docs_compensate_with_residue(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    async with sandbox_engine.saga("mixed") as saga:
        saga.call(
            "calendar.create_event", title="Kickoff", start="2026-12-09", attendees=["a@x", "b@x"]
        )
        saga.call("chat.post", channel="#finance", text="hello")
        d = saga.call("docs.create_draft", title="Plan", text="t")
        saga.call("docs.share", doc_id=d["id"], people=["c@x"])
        saga.call("crm.add_note", record_id="acme", text="n")
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {
        "s1": "compensated",
        "s2": "compensated",
        "s3": "reverted",
        "s4": "compensated",
        "s5": "reverted",
    }
    assert report.status == "partially_reversed"
    assert [r.parties for r in report.residue] == [("a@x", "b@x"), ("kim", "lee"), ("c@x",)]
    snap = sw.snapshot()
    assert snap["calendar"]["events"]["evt_1"]["status"] == "cancelled"
    assert snap["chat"]["messages"]["chat_1"]["status"] == "deleted"
    doc: dict[str, Any] = snap["docs"]["docs"]["doc_1"]
    assert doc["status"] == "deleted" and doc["shared_with"] == [] and doc["notified"] == ["c@x"]
    assert snap["crm"]["records"]["acme"]["notes"] == {}
    ops = effect_ops(sw)
    assert ops.index("docs.unshare") < ops.index("docs.delete")  # rule 3: dependents first
    assert ops.count("calendar.cancellation_notice") == 2


async def test_chat_edit_reverts_unless_someone_edited_again(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    m1 = sw.chat.post("#sales", "one")
    m2 = sw.chat.post("#sales", "two")
    async with sandbox_engine.saga("edit") as saga:
        saga.call("chat.edit", message_id=m1["id"], text="ONE")
        saga.call("chat.edit", message_id=m2["id"], text="TWO")
    sw.chat.edit(m2["id"], "two, by a human")
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "reverted", "s2": "drifted"}
    assert sw.chat.get(m1["id"])["text"] == "one"
    assert sw.chat.get(m2["id"])["text"] == "two, by a human"


async def test_docs_collaborator_edit_is_drift(sw: World, sandbox_engine: amends.Engine) -> None:
    async with sandbox_engine.saga("doc") as saga:
        d = saga.call("docs.create_draft", title="Plan", text="t")
    sw.docs.collaborator_edit((await d)["id"], "theirs")
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "drifted"}
    assert sw.docs.get("doc_1")["status"] == "draft"


async def test_wire_recalled_inside_window_needs_review_after(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    """Inside the recall window the wire is recalled; after it the expectation (in_flight) no
    longer holds, so the step is drifted (needs review) and no recall is attempted (rule 4)."""
    async with sandbox_engine.saga("w1") as s1:
        s1.call("payments.wire", to_account="DE001", cents=100)
    async with sandbox_engine.saga("w2") as s2:
        s2.call("payments.wire", to_account="DE002", cents=100)
    r1 = await sandbox_engine.undo(s1.id)
    assert states(r1) == {"s1": "reverted"}
    sw.advance(601)
    r2 = await sandbox_engine.undo(s2.id)
    assert states(r2) == {"s1": "drifted"} and r2.status == "cannot_undo"
    assert "'completed'" in r2.steps[0].detail
    assert [e["op"] for e in sw.effects() if e["op"] == "recall_wire"] == ["recall_wire"]
    assert sw.payments.get_wire("wire_1")["status"] == "recalled"
    assert sw.payments.get_wire("wire_2")["status"] == "completed"


async def test_sms_is_acknowledged(sw: World, sandbox_engine: amends.Engine) -> None:
    async with sandbox_engine.saga("sms") as saga:
        saga.call("sms.send", to="+1", text="hi")
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "acknowledged"}
    assert report.manual_actions[0].draft == (
        "Please ignore my previous text message; it was sent in error."
    )


async def test_timeout_fault_leaves_the_step_in_doubt(sw: World) -> None:
    engine = amends.Engine(sandbox_catalog(sw, timeout=0.05), log=amends.SqliteLog(":memory:"))
    sw.faults.add("mail.send", "timeout", delay=1.0)
    with pytest.raises(amends.StepFailedError, match="in_doubt"):
        async with engine.saga("t") as saga:
            saga.call("mail.send", to="a@x", subject="hi")
    report = await engine.undo(saga.id)
    assert states(report) == {"s1": "in_doubt"}
    assert sw.effects() == []
    await engine.close()


async def test_permanent_fault_on_forward_has_no_effect(
    sw: World, sandbox_engine: amends.Engine
) -> None:
    sw.faults.add("payments.charge", "permanent")
    with pytest.raises(amends.StepFailedError):
        async with sandbox_engine.saga("c") as saga:
            saga.call("payments.charge", customer="cus_acme", cents=100)
    report = await sandbox_engine.undo(saga.id)
    assert states(report) == {"s1": "not_needed"}
    assert sw.effects() == []


async def test_every_reversible_or_compensable_tool_records_an_expectation_or_a_reason(
    sw: World,
) -> None:
    """Rule 4: no sandbox tool leaves its inverse to run blindly. A new reversible/compensable
    tool must be added here (the sample set must equal the catalog's)."""
    from amends._calls import invoke

    msg = sw.chat.post("#sales", "hello")
    doc = sw.docs.create_draft("Plan", "text")
    samples: dict[str, dict[str, object]] = {
        "mail.send_delayed": {"to": "a@x", "subject": "Hi"},
        "calendar.create_event": {"title": "T", "start": "2026-12-09", "attendees": ["a@x"]},
        "crm.update_field": {"record_id": "acme", "field": "stage", "value": "won"},
        "crm.add_note": {"record_id": "acme", "text": "n"},
        "payments.charge": {"customer": "cus_acme", "cents": 100},
        "payments.wire": {"to_account": "DE1", "cents": 100},
        "chat.post": {"channel": "#sales", "text": "t"},
        "chat.edit": {"message_id": msg["id"], "text": "edited"},
        "docs.create_draft": {"title": "D", "text": "t"},
        "docs.create_private_note": {"text": "t"},
        "docs.share": {"doc_id": doc["id"], "people": ["a@x"]},
        "ledger.post": {"account": "acme", "cents": 100},
    }
    catalog = sandbox_catalog(sw)
    undoable = {s.name for s in catalog if s.reversibility.value in ("reversible", "compensable")}
    assert undoable == set(samples)
    for name, args in samples.items():
        call = amends.Call(saga_id="s", step_id=name, tool=name, phase="forward",
                           idempotency_key=f"k-{name}")  # fmt: skip
        await invoke(catalog.get(name).fn, call, args, None)
        assert isinstance(call.recorded_inverse, amends.Inverse), name
        assert call.recorded_expectation is not None or call.recorded_no_drift_check, name
        probe = call.recorded_expectation.probe if call.recorded_expectation else None
        assert probe is None or catalog.get(probe).reversibility.value == "read_only", name
