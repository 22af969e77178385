"""Issue 27 part 2: a person sends a manual action's draft through a catalog tool, as a follow-up
of the saga's reversal — logged write-ahead, in the reversal's budget, irreversible with its own
residue; sent, it resolves the manual action; failed, it leaves it open; in doubt, it is never
sent twice."""

from __future__ import annotations

from typing import Any

import pytest

import amends
from amends import StepState
from amends.sandbox import World, sandbox_catalog
from amends.sandbox.world import SimulatedCrash

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)
EDITED = "Hello Bob, please ignore my earlier email: the price was wrong. Ann"


def mails(sw: World, to: str = "bob@example.com") -> list[dict[str, Any]]:
    return [m for _, m in sw.items("mail.messages") if m["to"] == to]


def engine_for(sw: World, log: Any = None, pages: list[str] | None = None) -> amends.Engine:
    cat = sandbox_catalog(sw, timeout=2.0)

    @cat.tool("pager.send")  # a vendor that honours no idempotency key (rule 5)
    async def pager_send(call: amends.Call, to: str, text: str) -> dict[str, str]:
        assert pages is not None
        pages.append(text)  # the vendor acts ...
        raise ConnectionResetError("connection reset by peer")  # ... and the answer is lost

    return amends.Engine(cat, log=log or amends.SqliteLog(":memory:"), retry=FAST)


async def mailed_and_undone(
    eng: amends.Engine, budget: amends.Budget | None = None
) -> tuple[str, amends.UndoReport]:
    """A saga that emailed Bob (irreversible) and updated the CRM, undone."""
    async with eng.saga("Quote ACME") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
        saga.call("crm.update_field", record_id="acme", field="stage", value="quoted")
    report = await eng.undo(saga.id, budget=budget)
    assert report.step("s1").state is StepState.ACKNOWLEDGED
    assert report.step("s2").state is StepState.REVERTED
    return saga.id, report


async def test_a_sent_draft_is_a_follow_up_of_the_reversal_and_resolves_the_manual_action(
    sw: World,
) -> None:
    eng = engine_for(sw)
    saga_id, report = await mailed_and_undone(eng)
    action = report.step("s1").manual_action
    assert action is not None and action.parties == ("bob@example.com",) and action.draft
    before = await eng.log.get_reversal(saga_id=saga_id)
    assert before is not None

    sent = await eng.send_follow_up(
        saga_id, "s1", tool="mail.send", by="ann@example.com",
        args={"to": "bob@example.com", "subject": "Correction", "body": EDITED},
    )  # fmt: skip

    assert (sent.state, sent.follow_up_id, sent.reversal_id) == (
        "sent",
        "s1+f1",
        report.reversal_id,
    )
    assert sent.parties == ("bob@example.com",) and sent.by == "ann@example.com"
    assert [m["body"] for m in mails(sw)] == ["Price: 100", EDITED]  # the edited text, once
    assert sent.reference == f"id {mails(sw)[1]['id']}"
    assert sent.residue[0].what == (
        "follow-up sent (it stays sent): mail.send(body='Hello Bob, please ignore my earlier "
        "email: the price was wrong. Ann', subject='Correction', to='bob@example.com')"
    )
    after = await eng.report(saga_id)
    assert after is not None and after.status == "cannot_undo"  # the engine's outcome is kept
    handled = after.handled("s1")
    assert handled is not None and handled["by"] == "ann@example.com"
    assert handled["note"] == (
        f"follow-up s1+f1 of reversal {report.reversal_id}: sent with mail.send "
        f"(id {mails(sw)[1]['id']})"
    )
    assert after.open_manual_actions == []
    rev = await eng.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == before.calls_spent + 1  # in the budget
    kinds = [e.kind for e in await eng.log.events(saga_id)]
    assert kinds[-3:] == ["follow_up.dispatched", "follow_up.sent", "step.resolved"]  # write-ahead
    assert [f.to_dict() for f in await eng.follow_ups(saga_id)] == [
        {**sent.to_dict(), "at": (await eng.follow_ups(saga_id))[0].at}
    ]
    assert await eng.log.verify(saga_id) == []  # the history still verifies

    with pytest.raises(amends.SagaStateError, match="handled by ann@example.com"):
        await eng.send_follow_up(
            saga_id, "s1", tool="mail.send", by="ann@example.com",
            args={"to": "bob@example.com", "subject": "Correction", "body": EDITED},
        )  # fmt: skip
    assert len(mails(sw)) == 2
    await eng.close()


async def test_a_send_that_fails_leaves_the_manual_action_open_and_can_be_sent_again(
    sw: World,
) -> None:
    eng = engine_for(sw)
    saga_id, _ = await mailed_and_undone(eng)
    sw.faults.add("mail.send", "permanent")
    args = {"to": "bob@example.com", "subject": "Correction", "body": EDITED}
    failed = await eng.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert failed.state == "failed"
    assert failed.detail.startswith("not sent: mail.send failed permanently")
    assert failed.detail.endswith("; the manual action stays open")
    assert len(mails(sw)) == 1
    report = await eng.report(saga_id)
    assert report is not None and [m.step_id for m in report.open_manual_actions] == ["s1"]

    again = await eng.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert (again.state, again.follow_up_id) == ("sent", "s1+f2")
    assert [m["body"] for m in mails(sw)] == ["Price: 100", EDITED]
    assert [(f.follow_up_id, f.state) for f in await eng.follow_ups(saga_id)] == [
        ("s1+f1", "failed"),
        ("s1+f2", "sent"),
    ]
    await eng.close()


async def test_a_send_whose_answer_was_lost_is_in_doubt_and_never_sent_twice(sw: World) -> None:
    pages: list[str] = []
    eng = engine_for(sw, pages=pages)
    saga_id, _ = await mailed_and_undone(eng)
    args = {"to": "bob", "text": "please ignore my email"}
    doubt = await eng.send_follow_up(saga_id, "s1", tool="pager.send", args=args, by="ann")
    assert doubt.state == "in_doubt"
    assert doubt.detail == (
        "pager.send raised ConnectionResetError: connection reset by peer; whether it took "
        "effect is unknown; it may have gone out: check with the recipients before doing "
        "anything, never send it again"
    )
    assert pages == ["please ignore my email"]
    report = await eng.report(saga_id)
    assert report is not None and report.handled("s1") is None  # never claimed as handled
    mail = {"to": "bob@example.com", "subject": "x", "body": "y"}
    for tool, more in (("pager.send", args), ("mail.send", mail)):
        with pytest.raises(
            amends.SagaStateError, match=r"s1\+f1 of step 's1' \(pager.send\) is in doubt"
        ):
            await eng.send_follow_up(saga_id, "s1", tool=tool, args=more, by="ann")
    assert pages == ["please ignore my email"] and len(mails(sw)) == 1
    await eng.close()


async def test_a_send_in_flight_at_a_crash_is_in_doubt_for_every_later_engine(
    sw: World, tmp_path: Any
) -> None:
    db = str(tmp_path / "log.db")
    eng = engine_for(sw, log=db)
    saga_id, _ = await mailed_and_undone(eng)
    sw.faults.arm_crash(1, after_effect=True, op="mail.send")
    args = {"to": "bob@example.com", "subject": "Correction", "body": EDITED}
    with pytest.raises(SimulatedCrash):
        await eng.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert len(mails(sw)) == 2  # it went out; the engine never saw the answer
    later = engine_for(sw, log=db)
    [f] = await later.follow_ups(saga_id)
    assert (f.follow_up_id, f.state) == ("s1+f1", "in_doubt")
    assert f.detail.startswith(
        "mail.send was being sent by ann and no outcome is recorded yet: it is being sent now, "
        "or its process stopped while sending it; it may have gone out"
    )
    with pytest.raises(amends.SagaStateError, match="is in doubt"):
        await later.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert len(mails(sw)) == 2
    await eng.close()
    await later.close()


async def test_a_send_the_reversal_budget_cannot_pay_for_is_refused_and_writes_nothing(
    sw: World,
) -> None:
    eng = engine_for(sw)
    saga_id, report = await mailed_and_undone(eng, amends.Budget(tool_calls=2))
    assert report.tool_calls == 2
    events = await eng.log.events(saga_id)
    with pytest.raises(amends.SagaStateError) as err:
        await eng.send_follow_up(
            saga_id, "s1", tool="mail.send", by="ann",
            args={"to": "bob@example.com", "subject": "Correction", "body": EDITED},
        )  # fmt: skip
    assert str(err.value) == (
        "the reversal's budget is spent (tool-call budget of 2 spent before mail.send could "
        "run): the follow-up was not sent; continue the reversal with a new budget (amends "
        f"undo {saga_id} --continue --budget-calls N), or send it by hand and resolve the "
        f"manual action (amends resolve {saga_id} s1 --note ...)"
    )
    assert len(mails(sw)) == 1 and await eng.log.events(saga_id) == events
    await eng.close()


@pytest.mark.parametrize(
    ("step", "tool", "args", "error", "match"),
    [
        ("s9", "mail.send", {}, amends.ContractError, "has no step 's9'"),
        ("s1", "fax.send", {}, amends.ContractError, "no tool 'fax.send' in the catalog"),
        ("s1", "mail.send", ["to"], amends.ConfigError, "must be a mapping"),
        ("s2", "mail.send", {}, amends.SagaStateError, "is reverted: its effect no longer stands"),
    ],
)
async def test_bad_requests_get_a_clear_error_and_send_nothing(
    sw: World, step: str, tool: str, args: Any, error: type[Exception], match: str
) -> None:
    eng = engine_for(sw)
    saga_id, _ = await mailed_and_undone(eng)
    events = await eng.log.events(saga_id)
    with pytest.raises(error, match=match):
        await eng.send_follow_up(saga_id, step, tool=tool, args=args, by="ann")
    assert len(mails(sw)) == 1 and await eng.log.events(saga_id) == events
    await eng.close()


async def test_a_saga_not_undone_has_no_manual_action_to_send(sw: World) -> None:
    eng = engine_for(sw)
    async with eng.saga("Quote ACME") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
    with pytest.raises(amends.SagaStateError, match="has no finished reversal.*undo it first"):
        await eng.send_follow_up(saga.id, "s1", tool="mail.send", args={}, by="ann")
    with pytest.raises(amends.ConfigError, match="must name who"):
        await eng.send_follow_up(saga.id, "s1", tool="mail.send", args={}, by=" ")
    await eng.close()


async def test_a_send_whose_process_stopped_before_its_resolution_is_resolved_never_resent(
    sw: World, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mail went out and was logged sent; the process stopped before the resolution was
    written. The next request writes it (by the sender) and is refused: nothing sent again."""
    db = str(tmp_path / "log.db")
    eng = engine_for(sw, log=db)
    saga_id, _ = await mailed_and_undone(eng)

    async def stopped(*args: Any, **kwargs: Any) -> None:
        raise SimulatedCrash("process stopped")

    monkeypatch.setattr(eng.log, "resolve_step", stopped)
    args = {"to": "bob@example.com", "subject": "Correction", "body": EDITED}
    with pytest.raises(SimulatedCrash):
        await eng.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    later = engine_for(sw, log=db)
    with pytest.raises(amends.SagaStateError, match=r"s1\+f1 of step 's1' was sent already by ann"):
        await later.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="bea")
    assert [m["body"] for m in mails(sw)] == ["Price: 100", EDITED]
    report = await later.report(saga_id)
    handled = report.handled("s1") if report is not None else None
    assert handled is not None and handled["by"] == "ann"
    assert handled["note"].startswith("follow-up s1+f1 of reversal ")
    await eng.close()
    await later.close()
