"""Issue 27, re-checked: follow-ups a person or an agent makes are calls of the reversal, and
what the engine says about them is true — the report counts their cost, and a follow-up another
request is sending right now is not described as one whose process stopped."""

from __future__ import annotations

import asyncio

import pytest

import amends
from amends import FollowUpProposal
from amends.sandbox import World, sandbox_catalog

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


def engine(sw: World, log: amends.SagaLog | str | None = None) -> amends.Engine:
    cat = sandbox_catalog(sw, timeout=2.0)

    @cat.tool("slow.send")  # a message vendor that takes its time to answer
    async def slow_send(call: amends.Call, to: str, text: str) -> dict[str, str]:
        await asyncio.sleep(0.3)
        return {"id": f"m-{text}"}

    return amends.Engine(cat, log=log or amends.SqliteLog(":memory:"), retry=FAST)


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
        FollowUpProposal("s3", "mail.send", {"to": "bob@example.com", "subject": "Sorry",
                                             "body": "ignore it"}, tokens=40)  # fmt: skip
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
