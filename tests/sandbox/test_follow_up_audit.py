"""Issue 27, re-checked: follow-ups a person or an agent makes are calls of the reversal, and
what the engine says about them is true — the report counts their cost, and a follow-up another
request is sending right now is not described as one whose process stopped."""

from __future__ import annotations

import asyncio

import pytest

import amends
from amends import FollowUpProposal
from amends.cli import main
from amends.sandbox import World, demo_catalog, sandbox_catalog

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


def engine(sw: World, log: amends.SagaLog | str | None = None) -> amends.Engine:
    cat = sandbox_catalog(sw, timeout=2.0)

    @cat.tool("slow.send")  # a message vendor that takes its time to answer
    async def slow_send(call: amends.Call, to: str, text: str) -> dict[str, str]:
        await asyncio.sleep(0.3)
        return {"id": f"m-{text}"}

    @cat.tool("pager.send")  # honours no idempotency key; the first answer is lost (rule 5)
    async def pager_send(call: amends.Call, to: str, text: str) -> dict[str, str]:
        PAGES.append(to)  # the vendor acts ...
        if len(PAGES) == 1:
            raise ConnectionResetError("connection reset by peer")  # ... the answer is lost
        return {"id": f"page-{len(PAGES)}"}

    return amends.Engine(cat, log=log or amends.SqliteLog(":memory:"), retry=FAST)


PAGES: list[str] = []


async def mailed(eng: amends.Engine) -> str:
    async with eng.saga("Invite") as saga:
        saga.call("mail.send", to="ann@example.com", subject="Party", body="Come at 8")
        saga.call("crm.update_field", record_id="acme", field="stage", value="invited")
        saga.call("mail.send", to="bob@example.com", subject="Party", body="Come at 8")
    return saga.id


async def test_the_report_counts_the_follow_ups_calls_and_tokens(sw: World) -> None:
    """Every call the reversal made counts in ``report.tool_calls`` — follow-ups too, sent by
    a person or an agent after the undo finished — and an agent's tokens in ``report.tokens``;
    the figures are the ones the budget was charged (the reversal's record)."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    first = await eng.undo(saga_id, budget=amends.Budget(tool_calls=20, tokens=500))
    assert (first.tool_calls, first.tokens) == (2, 0)  # s2's probe and inverse
    sent = await eng.send_follow_up(
        saga_id, "s1", tool="mail.send", by="ann",
        args={"to": "ann@example.com", "subject": "Sorry", "body": "ignore it"},
    )  # fmt: skip
    assert sent.state == "sent"
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    out = await agent.propose(
        FollowUpProposal(
            "s3",
            "mail.send",
            {"to": "bob@example.com", "subject": "Sorry", "body": "ignore it"},
            tokens=40,
        )
    )
    assert out.state == "sent"
    report = await eng.report(saga_id)
    assert report is not None
    assert (report.tool_calls, report.tokens) == (4, 40)
    assert "4 tool calls, 40 tokens" in report.render("text")
    rev = await eng.log.get_reversal(saga_id=saga_id)
    assert rev is not None and (rev.calls_spent, rev.tokens_spent) == (4, 40)
    await eng.close()


async def test_follow_up_cost_stays_counted_when_a_later_undo_extends_the_reversal(
    sw: World,
) -> None:
    """A selection, a follow-up for its manual action, then the rest undone (a continuation of
    the same reversal): the total is every run's calls plus the follow-up's, never restarted."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    part = await eng.undo(saga_id, steps=["s3"])
    assert [s.step_id for s in part.steps] == ["s3"] and part.tool_calls == 0
    await eng.send_follow_up(
        saga_id, "s3", tool="mail.send", by="ann",
        args={"to": "bob@example.com", "subject": "Sorry", "body": "ignore it"},
    )  # fmt: skip
    whole = await eng.undo(saga_id)
    assert whole.reversal_id == part.reversal_id and whole.tool_calls == 2  # this run's own
    now = await eng.report(saga_id)
    assert now is not None and now.tool_calls == 3
    assert now.handled("s3") is not None and now.handled("s1") is None
    await eng.close()


async def test_a_follow_up_another_request_is_sending_is_not_called_stopped(
    sw: World, tmp_path: object
) -> None:
    """Two people send the same manual action's follow-up at once (two engines on one log):
    one is sent, the other refused with words that do not claim a stopped process — the first
    may still be on its way — and nothing is sent twice."""
    db = str(tmp_path) + "/log.db"  # type: ignore[operator]
    one, two = engine(sw, db), engine(sw, db)
    saga_id = await mailed(one)
    await one.undo(saga_id)
    args = {"to": "ann@example.com", "text": "sorry"}
    first = asyncio.ensure_future(
        one.send_follow_up(saga_id, "s1", tool="slow.send", args=args, by="ann")
    )
    await asyncio.sleep(0.1)  # ann's send is on its way
    with pytest.raises(amends.SagaStateError) as err:
        await two.send_follow_up(saga_id, "s1", tool="slow.send", args=args, by="bea")
    text = str(err.value)
    assert "when its process stopped" not in text
    assert text.startswith(
        "follow-up s1+f1 of step 's1' (slow.send) is in doubt: slow.send was being sent by ann "
        "and no outcome is recorded yet: it is being sent now, or its process stopped while "
        "sending it; it may have gone out"
    ), text
    assert (await first).state == "sent"
    listed = await two.follow_ups(saga_id)
    assert [(f.follow_up_id, f.state, f.by) for f in listed] == [("s1+f1", "sent", "ann")]
    await one.close()
    await two.close()


async def test_follow_ups_the_budget_stopped_continue_with_a_new_budget(sw: World) -> None:
    """Rule 6 with rule 7: follow-ups spent the reversal's budget and the engine stopped the
    agent. The reversal is continued with a new budget (the same reversal; nothing undone
    twice), and a new session sends what was left, each message once."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    first = await eng.undo(saga_id, budget=amends.Budget(tool_calls=3))
    assert first.tool_calls == 2
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    for step, to in (("s1", "ann@example.com"), ("s3", "bob@example.com")):
        await agent.propose(
            FollowUpProposal(step, "mail.send", {"to": to, "subject": "Sorry", "body": "x"})
        )
    assert [o.state for o in agent.outcomes] == ["sent", "not_done"]
    assert agent.stopped is not None and "tool-call budget of 3 spent" in agent.stopped
    assert await eng.continuable(saga_id) == ["s3"]
    with pytest.raises(amends.SagaStateError) as err:
        await eng.send_follow_up(
            saga_id,
            "s3",
            tool="mail.send",
            by="ann",
            args={"to": "bob@example.com", "subject": "Sorry", "body": "x"},
        )
    assert f"continue the reversal with a new budget (amends undo {saga_id} --continue" in str(
        err.value
    )
    more = await eng.resume(saga_id, budget=amends.Budget(tool_calls=2))
    assert more.reversal_id == first.reversal_id and more.continuations == 1
    assert [s.state.value for s in more.steps] == ["acknowledged", "reverted", "acknowledged"]
    again = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    assert [m.step_id for m in await again.open_actions()] == ["s3"]
    out = await again.propose(
        FollowUpProposal(
            "s3", "mail.send", {"to": "bob@example.com", "subject": "Sorry", "body": "x"}
        )
    )
    assert out.state == "sent"
    assert await eng.continuable(saga_id) == []
    sorry = [m["to"] for _, m in sw.items("mail.messages") if m["subject"] == "Sorry"]
    assert sorry == ["ann@example.com", "bob@example.com"]
    crm_undos = [e for e in sw.effects() if str(e.get("tag", "")).endswith(":compensate")]
    assert len(crm_undos) == 1, "the continuation undid nothing twice"
    report = await eng.report(saga_id)
    assert report is not None and report.tool_calls == 4  # 2 (undo) + 0 (continued) + 2 sent
    assert report.open_manual_actions == []
    await eng.close()


def test_amends_undo_continue_renews_the_budget_follow_ups_spent(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the command line: a person's follow-up refused for the budget; `amends undo SAGA
    --continue --budget-calls N` (as the refusal says) continues the reversal, then it is sent."""

    db = str(tmp_path) + "/a.db"  # type: ignore[operator]
    cat = ["--catalog", "amends.sandbox:demo_catalog"]

    async def go() -> str:
        eng = amends.Engine(demo_catalog(db), log=db)
        async with eng.saga("Quote ACME") as saga:
            saga.call("mail.send", to="ann@example.com", subject="Quote", body="Price: 100")
            saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
        await eng.undo(saga.id, budget=amends.Budget(tool_calls=1))
        await eng.send_follow_up(
            saga.id,
            "s1",
            tool="mail.send",
            by="ann",
            args={"to": "ann@example.com", "subject": "Sorry", "body": "ignore it"},
        )
        await eng.close()
        return saga.id

    saga_id = asyncio.run(go())
    send = ["follow-up", "send", saga_id, "s2", "--db", db, *cat, "--tool", "mail.send",
            "--arg", "to=bob@example.com", "--arg", "subject=Sorry", "--arg", "body=b",
            "--yes"]  # fmt: skip
    assert main(send) != 0
    assert "continue the reversal with a new budget" in capsys.readouterr().err
    code = main(["undo", saga_id, "--db", db, *cat, "--continue", "--budget-calls", "3"])
    out = capsys.readouterr().out
    assert code == 1 and "cannot_undo" in out  # the emails still stand; continued
    assert main(send) == 0
    sent = [(m["to"], m["subject"]) for _, m in World(db + ".world").items("mail.messages")]
    assert sent == [
        ("ann@example.com", "Quote"), ("bob@example.com", "Quote"),
        ("ann@example.com", "Sorry"), ("bob@example.com", "Sorry"),
    ]  # fmt: skip


async def test_a_withdrawn_follow_up_resolution_stays_withdrawn_and_a_new_one_can_be_sent(
    sw: World,
) -> None:
    """A follow-up was sent and resolved the manual action; a person withdraws that ("it went
    to the wrong address"). The manual action is open: a new follow-up is sent (``s1+f2``),
    and the withdrawal is never overwritten by the first send's resolution written again."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    await eng.undo(saga_id)
    mail = {"to": "ann@example.com", "subject": "Sorry", "body": "ignore it"}
    first = await eng.send_follow_up(saga_id, "s1", tool="mail.send", args=mail, by="ann")
    assert first.state == "sent"
    await eng.withdraw_resolution(saga_id, "s1", by="bea", note="wrong address, not handled")
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    assert [m.step_id for m in await agent.open_actions()] == ["s1", "s3"]
    fixed = {**mail, "to": "ann@example.org"}
    out = await agent.propose(FollowUpProposal("s1", "mail.send", fixed))
    assert (out.state, out.follow_up and out.follow_up.follow_up_id) == ("sent", "s1+f2")
    report = await eng.report(saga_id)
    assert report is not None
    handled = report.handled("s1")
    assert handled is not None and handled["by"] == "agent:apology"
    assert handled["note"].startswith("follow-up s1+f2 of reversal ")
    assert [(e["by"], bool(e.get("withdrawn"))) for e in handled["earlier"]] == [
        ("ann", False),
        ("bea", True),
    ]
    sorry = [m["to"] for _, m in sw.items("mail.messages") if m["subject"] == "Sorry"]
    assert sorry == ["ann@example.com", "ann@example.org"]
    await eng.close()


async def test_an_agents_failed_or_unknown_follow_up_is_left_never_sent_again(sw: World) -> None:
    """The agent's follow-up tool call fails (the vendor refused) or its outcome is unknown
    (the vendor acted, its answer was lost): neither is ``sent``, both are listed in
    ``agent.left`` (every proposal is sent or listed), the in-doubt one is never sent again,
    and the failed one's manual action stays open and can be sent."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    await eng.undo(saga_id)
    PAGES.clear()
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send", "pager.send"])
    ann = {"to": "ann@example.com", "subject": "Sorry", "body": "x"}
    sw.faults.add("mail.send", "permanent", times=1)
    failed = await agent.propose(FollowUpProposal("s1", "mail.send", ann))
    page = {"to": "bob", "text": "sorry"}
    unknown = await agent.propose(FollowUpProposal("s3", "pager.send", page))
    again = await agent.propose(FollowUpProposal("s3", "pager.send", page))
    retried = await agent.propose(FollowUpProposal("s1", "mail.send", ann))
    assert [o.state for o in agent.outcomes] == ["failed", "in_doubt", "not_done", "sent"]
    assert agent.left == [failed, unknown, again]
    assert "never send it again" in unknown.detail
    assert retried.follow_up is not None and retried.follow_up.follow_up_id == "s1+f2"
    assert PAGES == ["bob"]  # the unknown one went out, once
    sorry = [m["to"] for _, m in sw.items("mail.messages") if m["subject"] == "Sorry"]
    assert sorry == ["ann@example.com"]
    # issue 27 re-check: the in-doubt one is never proposed again (not open), and is listed
    # as in doubt for a person to check
    assert await agent.open_actions() == []
    assert [m.step_id for m in await agent.in_doubt()] == ["s3"]
    await eng.close()


async def test_the_headline_never_calls_an_agents_follow_up_a_persons(sw: World) -> None:
    """Rule 8: a manual action an agent handled (its follow-up sent) is "handled by an agent";
    one a person handled, "handled by a person"."""
    eng = engine(sw)
    saga_id = await mailed(eng)
    await eng.undo(saga_id)
    await eng.send_follow_up(
        saga_id, "s1", tool="mail.send", by="ann",
        args={"to": "ann@example.com", "subject": "Sorry", "body": "x"},
    )  # fmt: skip
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    mail = {"to": "bob@example.com", "subject": "Sorry", "body": "x"}
    assert (await agent.propose(FollowUpProposal("s3", "mail.send", mail))).state == "sent"
    report = await eng.report(saga_id)
    assert report is not None
    assert report.headline == ("1 of 3 taken back · 1 handled by a person · 1 handled by an agent")
    await eng.close()
