"""Issue 27 part 3 through the framework adapters: an agent handles the open manual actions of a
reversal with the follow-up tool set (``follow_up_tools``) of LangChain, Pydantic AI and OpenAI
Agents, in each framework's real agent loop with a scripted model.

Every call the agent makes is a follow-up of the reversal (write-ahead, in its budget, behind the
approval gate); when the budget is spent the engine stops it (exactly the cap reaches a vendor,
the rest are not done); a refused follow-up leaves the manual action open; a not-sent follow-up
is an error answer the model reads, and the run goes on. The agent runs under each adapter's
middleware (AmendsMiddleware, AmendsToolset, run_agent): the follow-up tools are never steps of
the run's own saga.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_scene import new_engine

import amends
from amends.sandbox import World, sandbox_catalog

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)

FINAL = "The follow-ups are done."
PEOPLE = ["ann@example.com", "bob@example.com", "cy@example.com"]
Script = list[list[tuple[str, dict[str, Any]]]]
Answers = list[tuple[str, bool]]  # each tool answer the model read: its text, whether an error


async def via_langchain(
    engine: amends.Engine, agent: amends.FollowUpAgent, script: Script, tokens: int = 0
) -> tuple[Answers, str | None]:
    """Run ``script`` (one list of tool calls a model turn; each turn reports ``tokens``)."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    from amends.integrations.langchain import AmendsMiddleware, follow_up_tools

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    ids = iter(range(1, 1000))
    turns = [
        AIMessage(
            content="",
            tool_calls=[{"name": n, "args": a, "id": f"c{next(ids)}"} for n, a in t],
            usage_metadata={"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens},
        )
        for t in script
    ]
    model = Scripted(messages=iter([*turns, AIMessage(content=FINAL)]))
    mw = AmendsMiddleware(engine)
    graph = create_agent(model, follow_up_tools(agent), middleware=[mw])
    out = await graph.ainvoke({"messages": [("user", "Handle the follow-ups of the undo")]})
    assert out["messages"][-1].content == FINAL  # the run went on to its end
    answers = [
        (str(m.content), m.status == "error") for m in out["messages"] if isinstance(m, ToolMessage)
    ]
    return answers, mw.last_saga_id


async def via_pydantic_ai(
    engine: amends.Engine, agent: amends.FollowUpAgent, script: Script, tokens: int = 0
) -> tuple[Answers, str | None]:
    """Run ``script`` (one list of tool calls a model turn; each turn reports ``tokens``)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from amends.integrations.pydantic_ai import AmendsToolset, follow_up_tools

    ids = iter(range(1, 1000))
    parts = [[ToolCallPart(n, a, f"c{next(ids)}") for n, a in t] for t in script]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not parts:
            return ModelResponse(parts=[TextPart(FINAL)])
        used = RequestUsage(input_tokens=tokens) if tokens else RequestUsage()
        return ModelResponse(parts=parts.pop(0), usage=used)  # type: ignore[arg-type]

    toolset = AmendsToolset(follow_up_tools(agent), engine=engine)
    out = await Agent(FunctionModel(respond), toolsets=[toolset]).run("Handle the follow-ups")
    assert out.output == FINAL
    answers = [
        (str(p.content), str(p.content).startswith("amends:"))
        for m in out.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    return answers, toolset.last_saga_id


async def via_openai_agents(
    engine: amends.Engine, agent: amends.FollowUpAgent, script: Script, tokens: int = 0
) -> tuple[Answers, str | None]:
    """Run ``script`` (one list of tool calls a model turn; each turn reports ``tokens``)."""
    from agents import Agent
    from agents.items import ToolCallOutputItem
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from agents.usage import Usage

    from amends.integrations.openai_agents import follow_up_tools, run_agent

    ids = iter(range(1, 1000))
    model = ScriptedModel(
        [
            *(
                ModelStep(
                    output=[function_call(n, a, call_id=f"c{next(ids)}") for n, a in t],
                    usage=Usage(requests=1, input_tokens=tokens, total_tokens=tokens),
                )
                for t in script
            ),
            ModelStep(output=[assistant_message(FINAL)]),
        ]
    )
    ai = Agent(name="follow-ups", model=model, tools=follow_up_tools(agent))
    outcome = await run_agent(engine, ai, "Handle the follow-ups")
    assert outcome.result.final_output == FINAL
    answers = [
        (str(i.output), str(i.output).startswith("amends:"))
        for i in outcome.result.new_items
        if isinstance(i, ToolCallOutputItem)
    ]
    return answers, outcome.saga_id


Driver = Callable[..., Awaitable[tuple[Answers, str | None]]]
DRIVERS: dict[str, Driver] = {
    "langchain": via_langchain,
    "pydantic_ai": via_pydantic_ai,
    "openai_agents": via_openai_agents,
}


async def undone(budget: amends.Budget, log: str | None = None) -> tuple[World, amends.Engine, str]:
    """Three emails sent, then undone: three manual actions (s1, s2, s3), nothing called yet.
    ``log``: a log URL (PostgreSQL); default an in-memory SQLite log."""
    world, engine = new_engine()
    if log is not None:
        await engine.close()
        engine = amends.Engine(sandbox_catalog(world), log=log, retry=FAST)
    async with engine.saga("Invite everyone") as saga:
        for who in PEOPLE:
            saga.call("mail.send", to=who, subject="Party", body="Come at 8")
    report = await engine.undo(saga.id, budget=budget)
    assert [m.step_id for m in report.manual_actions] == ["s1", "s2", "s3"]
    return world, engine, saga.id


def mails(world: World, subject: str) -> list[str]:
    return [m["to"] for _, m in world.items("mail.messages") if m["subject"] == subject]


def apology(step: int, subject: str = "Sorry") -> tuple[str, dict[str, Any]]:
    args = {"to": PEOPLE[step - 1], "subject": subject, "body": "Please disregard my invite."}
    return "amends_follow_up", {"step_id": f"s{step}", "tool": "mail.send", "args": args}


async def no_steps_recorded(engine: amends.Engine, run_saga: str | None) -> None:
    """The follow-up tools are part of the reversal, never steps of the agent run's saga."""
    if run_saga is not None:
        rec = await engine.log.get_saga(run_saga)
        assert rec is not None and list(rec.steps) == []


@pytest.mark.parametrize("framework", DRIVERS)
async def test_an_agent_handles_two_manual_actions_within_the_budget(framework: str) -> None:
    """It lists the open manual actions (drafts, recipients), sends an apology by mail (the
    operator's policy allows mail.send) and a chat post (shown to a person, approved): both
    reach the sandbox, both manual actions are handled with a reference to what was sent, and
    the third one is still open."""
    world, engine, saga_id = await undone(amends.Budget(tool_calls=5))
    shown: list[tuple[str, str]] = []

    def person(p: amends.FollowUpProposal) -> bool:
        shown.append((p.step_id, p.tool))
        return True

    agent = engine.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"], approve=person)
    post = {"channel": "#sales", "text": "Bob: please disregard the party invite."}
    script: Script = [
        [("amends_open_actions", {})],
        [apology(1)],
        [("amends_follow_up", {"step_id": "s2", "tool": "chat.post", "args": post})],
        [("amends_follow_up_status", {})],
    ]
    answers, run_saga = await DRIVERS[framework](engine, agent, script)
    listed, first, second, status = answers
    assert not listed[1] and "Open manual actions in the undo of saga" in listed[0]
    assert "- step_id s2: Email 'Party' to bob@example.com was delivered" in listed[0]
    assert "who can act: the sender; recipients: bob@example.com" in listed[0]
    assert "draft: Hello, please disregard my earlier email 'Party'" in listed[0]
    assert "allows without asking a person: mail.send" in listed[0]
    # the final world: one apology mail to ann, one post in #general, nothing else sent
    assert mails(world, "Sorry") == ["ann@example.com"]
    posts = [m for _, m in world.items("chat.messages") if m["channel"] == "#sales"]
    assert [m["text"] for m in posts] == [post["text"]]
    assert shown == [("s2", "chat.post")]  # only the tool outside the policy was shown
    assert not first[1] and first[0].startswith("Follow-up s1+f1 sent with mail.send (id msg_")
    assert not second[1] and second[0].startswith("Follow-up s2+f1 sent with chat.post (id ")
    assert "2 sent" in status[0] and "Manual actions still open: s3 (the sender)" in status[0]
    report = await engine.report(saga_id)
    # the post reached the channel's members, not Bob, whom s2's manual action names: its
    # resolution says so (rule 8)
    reached = f"to {', '.join(posts[0]['notified'])} "
    for step, sent in (("s1", "mail.send "), ("s2", f"chat.post {reached}")):
        handled = report.handled(step)
        assert handled is not None and handled["by"] == "agent:apology"
        assert f"sent with {sent}(id " in handled["note"], handled
    assert [m.step_id for m in report.open_manual_actions] == ["s3"]
    rev = await engine.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == 2
    assert [o.state for o in agent.outcomes] == ["sent", "sent"]
    await no_steps_recorded(engine, run_saga)
    await engine.close()


@pytest.mark.parametrize("framework", DRIVERS)
async def test_a_cascading_agent_is_stopped_at_the_call_cap(framework: str) -> None:
    """The agent answers each apology with more (a second apology, an SMS); the budget allows two
    calls: exactly two reach the vendor, every later proposal is an error answer saying it was
    stopped and not done, and the status lists them and the manual action still open."""
    await cascade(framework, None)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("framework", DRIVERS)
async def test_a_cascading_agent_is_stopped_at_the_call_cap_on_postgresql(
    framework: str, pg_url: str
) -> None:
    """The same cascade with the reversal logged in PostgreSQL (the log's claims and budget)."""
    await cascade(framework, pg_url)


async def cascade(framework: str, log: str | None) -> None:
    world, engine, saga_id = await undone(amends.Budget(tool_calls=2), log)
    agent = engine.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send", "sms.send"])
    sms = {"step_id": "s1", "tool": "sms.send", "args": {"to": "+1-555-0100", "text": "sorry"}}
    script: Script = [
        [apology(1)],
        [apology(2)],
        [apology(3)],
        [apology(1, "Sorry again")],
        [("amends_follow_up", sms)],
        [("amends_follow_up_status", {})],
    ]
    answers, run_saga = await DRIVERS[framework](engine, agent, script)
    assert mails(world, "Sorry") == PEOPLE[:2] and mails(world, "Sorry again") == []
    assert [e for e in world.effects() if e["vendor"] == "sms"] == []
    assert [error for _, error in answers[:5]] == [False, False, True, True, True]
    assert answers[2][0] == (
        "amends: follow-up not_done for step s3: not attempted: the reversal's budget is spent "
        "(tool-call budget of 2 spent before mail.send could run); the engine stopped the agent\n"
        "Stopped: make no more follow-up calls. Manual actions still open: s3"
    )
    for text, _ in answers[3:5]:
        assert "not attempted: the reversal's budget is spent (tool-call budget of 2" in text
        assert text.endswith("Stopped: make no more follow-up calls. Manual actions still open: s3")
    status = answers[5][0]
    assert "2 sent, 3 not_done" in status and "Stopped: " in status
    assert status.count("- not done: ") == 3 and "Manual actions still open: s3" in status
    assert [o.state for o in agent.outcomes] == ["sent", "sent", *["not_done"] * 3]
    rev = await engine.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == 2
    assert [m.step_id for m in (await engine.report(saga_id)).open_manual_actions] == ["s3"]
    await no_steps_recorded(engine, run_saga)
    await engine.close()


@pytest.mark.parametrize("framework", DRIVERS)
async def test_the_tokens_of_the_agents_model_are_capped_too(framework: str) -> None:
    """Each model turn reports 100 tokens (the framework's own usage record); the reversal's
    token budget is 250: two apologies cost 200, the third would pass the cap and is not made."""
    world, engine, saga_id = await undone(amends.Budget(tool_calls=10, tokens=250))
    agent = engine.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
    answers, _ = await DRIVERS[framework](
        engine, agent, [[apology(1)], [apology(2)], [apology(3)]], 100
    )
    assert mails(world, "Sorry") == PEOPLE[:2]
    assert [o.proposal.tokens for o in agent.outcomes] == [100, 100, 100]
    assert [o.state for o in agent.outcomes] == ["sent", "sent", "not_done"]
    assert "token budget of 250" in answers[2][0] and answers[2][1]
    rev = await engine.log.get_reversal(saga_id=saga_id)
    assert rev is not None and (rev.tokens_spent, rev.calls_spent) == (200, 2)
    await engine.close()


@pytest.mark.parametrize("framework", DRIVERS)
async def test_a_refused_follow_up_leaves_the_manual_action_open(framework: str) -> None:
    """A person refuses the agent's chat post: nothing is posted, the model reads that it was
    refused (and the run goes on), and the manual action stays open."""
    world, engine, saga_id = await undone(amends.Budget(tool_calls=5))
    agent = engine.follow_up_agent(saga_id, by="agent:apology", approve=lambda p: False)
    post = {"channel": "#sales", "text": "Sorry everyone"}
    script: Script = [[("amends_follow_up", {"step_id": "s1", "tool": "chat.post", "args": post})]]
    answers, _ = await DRIVERS[framework](engine, agent, script)
    assert answers == [("amends: follow-up refused for step s1: refused by a person", True)]
    assert list(world.items("chat.messages")) == []
    report = await engine.report(saga_id)
    assert report.handled("s1") is None
    assert [m.step_id for m in report.open_manual_actions] == ["s1", "s2", "s3"]
    rev = await engine.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == 0
    await engine.close()


@pytest.mark.parametrize("framework", DRIVERS)
async def test_bad_follow_ups_are_error_answers_and_nothing_is_sent(framework: str) -> None:
    """A step that does not exist, a tool not in the catalog: each is an error answer naming what
    is wrong; nothing reaches a vendor, the budget is untouched, and the run goes on."""
    world, engine, saga_id = await undone(amends.Budget(tool_calls=5))
    agent = engine.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send", "fax.send"])
    _, good = apology(1)
    script: Script = [
        [("amends_follow_up", {**good, "step_id": "s9"})],
        [("amends_follow_up", {**good, "tool": "fax.send"})],
    ]
    answers, _ = await DRIVERS[framework](engine, agent, script)
    assert [error for _, error in answers] == [True, True]
    assert answers[0][0].startswith("amends: follow-up not_done for step s9: not attempted: ")
    assert f"saga {saga_id!r} has no step 's9'; its steps are s1, s2, s3" in answers[0][0]
    assert answers[1][0].startswith("amends: follow-up not_done for step s1: not attempted: ")
    assert "no tool 'fax.send' in the catalog to send the follow-up with" in answers[1][0]
    assert mails(world, "Sorry") == []
    rev = await engine.log.get_reversal(saga_id=saga_id)
    assert rev is not None and rev.calls_spent == 0
    assert len((await engine.report(saga_id)).open_manual_actions) == 3  # type: ignore[union-attr]
    await engine.close()


def test_follow_up_tools_takes_a_follow_up_agent() -> None:
    from amends.integrations import langchain, openai_agents, pydantic_ai

    for module in (langchain, openai_agents, pydantic_ai):
        with pytest.raises(amends.ConfigError, match=r"takes the amends.FollowUpAgent of engine"):
            module.follow_up_tools("saga_1")  # type: ignore[arg-type]


def test_sync_langchain_agent_handles_a_manual_action() -> None:
    """LangChain's invoke() runs the tools' sync bodies in a worker thread."""

    async def scene() -> None:
        world, engine, saga_id = await undone(amends.Budget(tool_calls=5))
        agent = engine.follow_up_agent(saga_id, by="agent:apology", allow=["mail.send"])
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage

        from amends.integrations.langchain import follow_up_tools

        class Scripted(GenericFakeChatModel):
            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

        name, args = apology(1)
        model = Scripted(
            messages=iter(
                [
                    AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "c1"}]),
                    AIMessage(content=FINAL),
                ]
            )
        )
        graph = create_agent(model, follow_up_tools(agent))
        out = await asyncio.to_thread(graph.invoke, {"messages": [("user", "Follow up")]})
        assert out["messages"][-1].content == FINAL
        assert mails(world, "Sorry") == ["ann@example.com"]
        assert [o.state for o in agent.outcomes] == ["sent"]
        await engine.close()

    asyncio.run(scene())
