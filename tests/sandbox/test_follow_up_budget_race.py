"""Issue 27, rule 7: follow-ups sent at once never pass the reversal's budget.

The follow-ups of a finished reversal hold no lease: two agents (or two people, two processes)
may send at once. Each used to meter from the spend it read before sending and write that total
back, so both took the budget's last call, and the later write erased the other's spend (the
reversal said 1 call spent after 3 reached the vendor). The log now adds each follow-up's own
cost to the latest total in the write's transaction and refuses a claim that would pass a cap.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import amends
from amends import FollowUpProposal
from amends._reversal.follow_ups import FollowUpSender
from amends.sandbox import World, sandbox_catalog


def _engine(sw: World, log: str, sent: list[str]) -> amends.Engine:
    cat = sandbox_catalog(sw, timeout=2.0)

    @cat.tool("slow.send")  # a message vendor that takes its time: the sends overlap
    async def slow_send(call: amends.Call, to: str, text: str) -> dict[str, str]:
        await asyncio.sleep(0.2)
        sent.append(to)
        return {"id": f"m-{to}"}

    return amends.Engine(cat, log=log)


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.slow, pytest.mark.postgres])]
)
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    url: str = request.getfixturevalue("pg_url")
    return url


async def test_three_agents_at_once_never_pass_the_call_cap(sw: World, log_url: str) -> None:
    """Three agents, two engines on one log, propose a follow-up each at once with one budget
    of 2 tool calls left: exactly 2 reach the vendor, the third is not done and its agent
    stopped, and the reversal's spend is the sum of both (2 calls, 20 tokens)."""
    sent: list[str] = []
    one, two = _engine(sw, log_url, sent), _engine(sw, log_url, sent)
    async with one.saga("Invite") as saga:
        for to in ("ann", "bob", "cy"):
            saga.call("mail.send", to=f"{to}@example.com", subject="Party", body="at 8")
    first = await one.undo(saga.id, budget=amends.Budget(tool_calls=2, tokens=100))
    assert first.tool_calls == 0  # three acknowledgements: nothing called
    agents = [
        eng.follow_up_agent(saga.id, by=f"agent:{n}", allow=["slow.send"])
        for n, eng in (("a", one), ("b", two), ("c", two))
    ]
    outcomes = await asyncio.gather(
        *(
            agent.propose(FollowUpProposal(step, "slow.send", {"to": to, "text": "sorry"}, 10))
            for agent, step, to in zip(
                agents, ("s1", "s2", "s3"), ("ann", "bob", "cy"), strict=True
            )
        )
    )
    states = sorted(o.state for o in outcomes)
    assert states == ["not_done", "sent", "sent"]
    assert len(sent) == 2  # the vendor saw exactly the cap
    stopped = next(o for o in outcomes if o.state == "not_done")
    # refused by the log's check or, had it read after both claims, by the sender's own
    assert stopped.detail.startswith("not attempted: the reversal's budget is spent (")
    assert stopped.detail.endswith("; the engine stopped the agent")
    rev = await one.log.get_reversal(saga_id=saga.id)
    assert rev is not None and (rev.calls_spent, rev.tokens_spent) == (2, 20)
    report = await two.report(saga.id)
    assert report is not None and (report.tool_calls, report.tokens) == (2, 20)
    handled = sorted(m.step_id for m in report.manual_actions if report.handled(m.step_id))
    assert handled == sorted(o.proposal.step_id for o in outcomes if o.state == "sent")
    await one.close()
    await two.close()


async def test_a_send_finishing_late_does_not_erase_a_later_ones_spend(
    sw: World, log_url: str
) -> None:
    """A slow follow-up claims a call, a second is claimed and sent while the first is in
    flight, then the first's outcome is written: the reversal still counts both (its outcome
    used to write back the total it had read, 1), so a third and a fourth cannot both pass a
    cap of 3."""
    sent: list[str] = []
    eng = _engine(sw, log_url, sent)
    async with eng.saga("Invite") as saga:
        for to in ("ann", "bob", "cy", "dee"):
            saga.call("mail.send", to=f"{to}@example.com", subject="Party", body="at 8")
    await eng.undo(saga.id, budget=amends.Budget(tool_calls=3))

    async def send(step: str, to: str) -> str:
        try:
            f = await eng.send_follow_up(
                saga.id, step, tool="slow.send", args={"to": to, "text": "sorry"}, by="ann"
            )
        except amends.SagaStateError as exc:
            return f"refused: {exc}"
        return f.state

    slow = asyncio.ensure_future(send("s1", "ann"))
    await asyncio.sleep(0.05)
    assert await send("s2", "bob") == "sent"
    assert await slow == "sent"
    rev = await eng.log.get_reversal(saga_id=saga.id)
    assert rev is not None and rev.calls_spent == 2
    last = await asyncio.gather(send("s3", "cy"), send("s4", "dee"))
    assert sorted(s.split(" (")[0] for s in last) == [
        "refused: the reversal's budget is spent",
        "sent",
    ]
    assert sorted(sent) == sorted(["ann", "bob", *(["cy"] if last[0] == "sent" else ["dee"])])
    lost = "s4" if last[0] == "sent" else "s3"
    (refused,) = [s for s in last if s != "sent"]
    assert refused.startswith("refused: the reversal's budget is spent (")
    assert refused.endswith(
        f": the follow-up was not sent; continue the reversal with a new budget (amends undo "
        f"{saga.id} --continue --budget-calls N), or send it by hand and resolve the manual "
        f"action (amends resolve {saga.id} {lost} --note ...)"
    )
    rev = await eng.log.get_reversal(saga_id=saga.id)
    assert rev is not None and rev.calls_spent == 3
    await eng.close()


@pytest.mark.parametrize("lie", [-1000, float("nan"), float("inf"), 50.5, "50", True, None])
async def test_an_agent_lying_about_its_tokens_is_refused_and_the_budget_stands(
    sw: World, lie: object
) -> None:
    """A proposal whose token count is not a whole number 0 or more is refused when it is
    made (ConfigError naming the value): nothing sent, the reversal's spend unchanged, its
    record readable. It used to be taken: -1000 gave the agent 1,000 tokens of budget back,
    NaN made the saga unreadable for good ("history altered"), 50.5 counted 50."""
    eng = amends.Engine(sandbox_catalog(sw, timeout=2.0), log=amends.SqliteLog(":memory:"))
    async with eng.saga("Invite") as saga:
        saga.call("mail.send", to="ann@example.com", subject="Party", body="at 8")
        saga.call("mail.send", to="bob@example.com", subject="Party", body="at 8")
    await eng.undo(saga.id, budget=amends.Budget(tool_calls=10, tokens=100))
    agent = eng.follow_up_agent(saga.id, by="agent:liar", allow=["mail.send"])
    args = {"to": "ann@example.com", "subject": "Sorry"}
    with pytest.raises(amends.ConfigError) as err:
        await agent.propose(FollowUpProposal("s1", "mail.send", args, lie))  # type: ignore[arg-type]
    assert str(err.value) == (
        f"FollowUpProposal(tokens=...) takes a whole number of tokens, 0 or more, got {lie!r} "
        f"for the follow-up of step 's1'; pass what producing it cost, e.g. tokens=120"
    )
    assert [m["to"] for _, m in sw.items("mail.messages")] == ["ann@example.com", "bob@example.com"]
    honest = await agent.propose(
        FollowUpProposal("s2", "mail.send", args | {"to": "bob@example.com"}, 90)
    )
    assert honest.state == "sent"
    over = await agent.propose(FollowUpProposal("s1", "mail.send", args, 11))
    assert over.state == "not_done" and agent.stopped is not None  # 90 + 11 > 100
    report = await eng.report(saga.id)
    assert report is not None and (report.tool_calls, report.tokens) == (1, 90)
    await eng.close()


async def test_a_person_answering_after_the_session_time_does_not_stretch_it(sw: World) -> None:
    """Session cap 0.3 s; the person approves after 0.5 s: nothing is sent, the agent is
    stopped, and the next proposal is not done either. The time was checked only before the
    person was asked, so the send went out 0.2 s past the cap (rule 7)."""
    eng = amends.Engine(sandbox_catalog(sw, timeout=2.0), log=amends.SqliteLog(":memory:"))
    async with eng.saga("Invite") as saga:
        saga.call("mail.send", to="ann@example.com", subject="Party", body="at 8")
        saga.call("mail.send", to="bob@example.com", subject="Party", body="at 8")
    await eng.undo(saga.id)

    async def person(p: FollowUpProposal) -> bool:
        await asyncio.sleep(0.5)
        return True

    agent = eng.follow_up_agent(saga.id, by="agent:x", approve=person, seconds=0.3)
    ann = {"to": "ann@example.com", "subject": "Sorry"}
    first = await agent.propose(FollowUpProposal("s1", "mail.send", ann))
    assert (first.state, first.detail) == (
        "not_done",
        "not attempted: the time budget of 0.3 s is spent (while a person was asked); the "
        "engine stopped the agent",
    )
    second = await agent.propose(
        FollowUpProposal("s2", "mail.send", ann | {"to": "bob@example.com"})
    )
    assert second.state == "not_done" and [o.state for o in agent.left] == ["not_done"] * 2
    assert [m["subject"] for _, m in sw.items("mail.messages")] == ["Party", "Party"]
    report = await eng.report(saga.id)
    assert report is not None and report.tool_calls == 0
    assert [m.step_id for m in report.open_manual_actions] == ["s1", "s2"]
    await eng.close()


async def test_the_log_refuses_a_claim_made_from_a_spend_read_before_another_send(
    sw: World, log_url: str
) -> None:
    """Deterministic: two senders read the reversal before either sends (one call left); the
    first sends, the second's claim is refused by the log itself, with the words and the fix,
    and nothing more reaches the vendor."""
    sent: list[str] = []
    eng = _engine(sw, log_url, sent)
    async with eng.saga("Invite") as saga:
        for to in ("ann", "bob"):
            saga.call("mail.send", to=f"{to}@example.com", subject="Party", body="at 8")
    await eng.undo(saga.id, budget=amends.Budget(tool_calls=1))
    read_before = await eng.log.get_saga(saga.id)  # what both senders saw
    assert read_before is not None
    sender = FollowUpSender(eng.log, eng.catalog, eng.retry_policy)
    ann = await sender.send(read_before, "s1", "slow.send", {"to": "ann", "text": "x"}, "ann")
    assert ann.state == "sent"
    with pytest.raises(amends.SagaStateError) as err:
        await sender.send(read_before, "s2", "slow.send", {"to": "bob", "text": "x"}, "bea")
    assert str(err.value) == (
        f"the reversal's budget is spent (tool calls: 1 of 1 spent, this follow-up needs 1 "
        f"more; another follow-up was sent meanwhile): the follow-up was not sent; continue "
        f"the reversal with a new budget (amends undo {saga.id} --continue --budget-calls N), "
        f"or send it by hand and resolve the manual action (amends resolve {saga.id} s2 "
        f"--note ...)"
    )
    assert sent == ["ann"]
    assert [f.follow_up_id for f in await eng.follow_ups(saga.id)] == ["s1+f1"]
    rev = await eng.log.get_reversal(saga_id=saga.id)
    assert rev is not None and rev.calls_spent == 1
    await eng.close()
