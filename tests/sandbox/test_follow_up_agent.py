"""Issue 27 part 3, the engine's side: an agent handling a reversal's open manual actions is
capped. A scripted "cascading apology" agent answers each follow-up with more; every call is a
follow-up of the reversal behind the approval gate, the engine stops it at the budget, and every
proposal ends sent, refused by a person, or listed as not done."""

from __future__ import annotations

from typing import Any

import pytest

import amends
from amends import FollowUpProposal
from amends.sandbox import World, sandbox_catalog

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)
PEOPLE = [f"p{i}@example.com" for i in range(6)]


async def undone(sw: World, budget: amends.Budget) -> tuple[amends.Engine, str]:
    eng = amends.Engine(
        sandbox_catalog(sw, timeout=2.0), log=amends.SqliteLog(":memory:"), retry=FAST
    )
    async with eng.saga("Invite everyone") as saga:
        for who in PEOPLE:
            saga.call("mail.send", to=who, subject="Party", body="Come at 8")
    report = await eng.undo(saga.id, budget=budget)
    assert len(report.manual_actions) == len(PEOPLE)
    return eng, saga.id


async def cascading_apology(agent: amends.FollowUpAgent, tokens: int = 0) -> None:
    """Answers each open manual action with an apology, and each apology sent with two more
    proposals (a second apology and an SMS), until there is nothing left or it is stopped."""
    queue = [
        FollowUpProposal(m.step_id, "mail.send", {"to": m.parties[0], "subject": "Sorry",
                                                   "body": m.draft or ""}, tokens)
        for m in await agent.open_actions()
    ]  # fmt: skip
    while queue:
        p = queue.pop(0)
        outcome = await agent.propose(p)
        if outcome.state == "sent":
            queue += [
                FollowUpProposal(
                    p.step_id, "mail.send", {**p.args, "subject": "Sorry again"}, tokens
                ),
                FollowUpProposal(
                    p.step_id, "sms.send", {"to": "+1-555-0100", "text": "sorry"}, tokens
                ),
            ]


def sent_mails(sw: World, subject: str) -> int:
    return sum(1 for _, m in sw.items("mail.messages") if m["subject"] == subject)


async def test_the_engine_stops_a_cascading_agent_at_the_call_cap_and_lists_what_is_left(
    sw: World,
) -> None:
    eng, saga_id = await undone(sw, amends.Budget(tool_calls=3))
    before = await eng.log.get_reversal(saga_id=saga_id)
    assert before is not None and before.calls_spent == 0  # acknowledging calls nothing
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    await cascading_apology(agent)
    states = [o.state for o in agent.outcomes]
    assert states[:3] == ["sent", "sent", "sent"] and set(states[3:]) == {"not_done"}
    assert len(states) == len(PEOPLE) + 6  # 3 more proposals per sent apology, then stopped
    assert sent_mails(sw, "Sorry") == 3 and sent_mails(sw, "Sorry again") == 0  # calls <= cap
    assert agent.stopped is not None and "tool-call budget of 3 spent" in agent.stopped
    assert all(o.detail.startswith("not attempted: ") for o in agent.left)
    rev = await eng.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == 3
    assert [m.step_id for m in await agent.open_actions()] == ["s4", "s5", "s6"]
    await eng.close()


async def test_tokens_an_agent_spends_are_capped_too(sw: World) -> None:
    eng, saga_id = await undone(sw, amends.Budget(tool_calls=100, tokens=1000))
    agent = eng.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send", "sms.send"])
    await cascading_apology(agent, tokens=300)
    sent = [o for o in agent.outcomes if o.state == "sent"]
    assert len(sent) == 3  # 3 x 300 = 900; a fourth would pass 1000
    rev = await eng.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.tokens_spent == 900 <= 1000
    assert agent.stopped is not None and "token budget of 1000" in agent.stopped
    await eng.close()


async def test_a_tool_outside_the_policy_is_shown_to_a_person_who_may_refuse(sw: World) -> None:
    eng, saga_id = await undone(sw, amends.Budget(tool_calls=100))
    shown: list[Any] = []

    async def person(p: amends.FollowUpProposal) -> bool:
        shown.append((p.step_id, p.tool))
        return p.tool == "mail.send" and p.args["subject"] == "Sorry"

    agent = eng.follow_up_agent(saga_id, by="agent:apology", approve=person)
    await cascading_apology(agent)
    by_state: dict[str, int] = {}
    for o in agent.outcomes:
        by_state[o.state] = by_state.get(o.state, 0) + 1
    # every proposal shown to the person; each apology sent, each extra one refused
    assert by_state == {"sent": len(PEOPLE), "refused": 2 * len(PEOPLE)}
    assert len(shown) == 3 * len(PEOPLE)
    assert sent_mails(sw, "Sorry") == len(PEOPLE) and sent_mails(sw, "Sorry again") == 0
    assert await agent.open_actions() == []
    no_gate = eng.follow_up_agent(saga_id, by="agent:apology")
    out = await no_gate.propose(FollowUpProposal("s1", "sms.send", {"to": "x", "text": "y"}))
    assert (out.state, out.detail) == (
        "refused",
        "refused: sms.send is not allowed by the operator's policy and no person was asked",
    )
    await eng.close()


async def test_an_agent_needs_an_identity(sw: World) -> None:
    eng, saga_id = await undone(sw, amends.Budget())
    with pytest.raises(amends.ConfigError, match="must name who"):
        eng.follow_up_agent(saga_id, by="")
    await eng.close()
