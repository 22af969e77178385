"""Issue 25, held in more shapes: the three adapters driven by real agent loops with scripted
models (stacks.py), for tools, runs and failures the first tests did not try."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from agent_scene import new_engine
from pydantic import BaseModel, Field
from stacks import FINAL, FRAMEWORKS, play
from test_real_stacks import declare_set_stage, world_tools

import amends
from amends.integrations.langchain import declare
from amends.sandbox import World


class Order(BaseModel):
    sku: str
    qty: int = 1
    when: str | None = None


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_pydantic_model_argument_is_logged_as_the_json_the_model_sent(
    framework: str,
) -> None:
    """Item 9's class: a tool taking a Pydantic model logs the model's JSON under the tool's
    parameter name in every framework. Pydantic AI logged ``{}`` for a tool whose one argument
    is a model (its schema lets the model send the fields unwrapped, and those names were taken
    for defaults never sent) and ``{"repr": "..."}`` beside another argument."""
    _, engine = new_engine()
    # keyed by tool: LangChain runs one turn's sync tools in threads, in no fixed order
    got: dict[str, Any] = {}

    def place_order(order: Order) -> str:
        """Place an order."""
        got["place_order"] = order
        return f"placed {order.sku} x{order.qty}"

    def gift_order(order: Order, note: str, wrap: bool = False) -> str:
        """Place an order as a gift."""
        got["gift_order"] = (order, note, wrap)
        return f"gift {order.sku}"

    sent = {"sku": "A1", "when": "2026-12-10"}
    # Pydantic AI's schema for a tool whose one argument is a model is the model's own fields
    first = sent if framework == "pydantic_ai" else {"order": sent}
    turns = [
        [("c1", "place_order", first), ("c2", "gift_order", {"order": sent, "note": "hi"})],
    ]
    played = await play(framework, engine, turns, [place_order, gift_order])
    assert played.output == FINAL
    assert played.answers == {"c1": "placed A1 x1", "c2": "gift A1"}
    assert got == {
        "place_order": Order(sku="A1", when="2026-12-10"),
        "gift_order": (Order(sku="A1", when="2026-12-10"), "hi", False),
    }
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.args, s.state) for s in saga.steps] == [
        ("s1", "place_order", {"order": sent}, "done"),
        ("s2", "gift_order", {"order": sent, "note": "hi"}, "done"),
    ]


async def test_pydantic_ai_an_argument_sent_under_its_alias_is_logged() -> None:
    """Item 9's class: an argument the model sends under its alias (``dealId``) is logged under
    the parameter's name, and a default the model never sent still is not (it logged ``{}``)."""
    _, engine = new_engine()
    got: list[tuple[str, str]] = []

    def tag_deal(deal_id: Annotated[str, Field(alias="dealId")], label: str = "hot") -> str:
        """Tag a deal."""
        got.append((deal_id, label))
        return "tagged"

    played = await play(
        "pydantic_ai", engine, [[("c1", "tag_deal", {"dealId": "acme"})]], [tag_deal]
    )
    assert got == [("acme", "hot")]
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.tool, s.args, s.state) for s in saga.steps] == [
        ("tag_deal", {"deal_id": "acme"}, "done")
    ]


CARD = "4111 1111 1111 1111"


def charge_card(customer: str, cents: int, card_number: str, memo: str) -> str:
    """Charge the customer's card."""
    raise AssertionError("the approval gate stops the call before it runs")


async def approval_questions(framework: str, engine: amends.Engine, args: dict[str, Any]) -> Any:
    """The approval gate's question(s) for one charge_card call, as the person sees them."""
    if framework == "langchain":
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool
        from langgraph.checkpoint.memory import InMemorySaver

        from amends.integrations.langchain import AmendsMiddleware

        class Scripted(GenericFakeChatModel):
            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self

        call = {"name": "charge_card", "args": args, "id": "c1", "type": "tool_call"}
        agent = create_agent(
            Scripted(messages=iter([AIMessage(content="", tool_calls=[call])])),
            [tool(charge_card)],
            middleware=[AmendsMiddleware(engine, approval="residue")],
            checkpointer=InMemorySaver(),
        )
        out = await agent.ainvoke(
            {"messages": [("user", "Charge")]}, {"configurable": {"thread_id": "t"}}
        )
        [pause] = out["__interrupt__"]
        return pause.value
    if framework == "pydantic_ai":
        from pydantic_ai import Agent, DeferredToolRequests
        from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
        from pydantic_ai.toolsets import FunctionToolset

        from amends.integrations.pydantic_ai import AmendsToolset

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[ToolCallPart("charge_card", args, tool_call_id="c1")])

        toolset = AmendsToolset(FunctionToolset([charge_card]), engine=engine, approval="residue")
        agent = Agent(
            FunctionModel(respond), toolsets=[toolset], output_type=[str, DeferredToolRequests]
        )
        out = await agent.run("Charge")
        assert isinstance(out.output, DeferredToolRequests)
        return out.output.metadata["c1"]["amends_approval"]
    from agents import Agent as OAgent
    from agents import function_tool
    from agents.testing import ModelStep, ScriptedModel, function_call

    from amends.integrations.openai_agents import approval_requests, run_agent

    model = ScriptedModel([ModelStep(output=[function_call("charge_card", args, call_id="c1")])])
    oagent = OAgent(name="a", model=model, tools=[function_tool(charge_card)])
    outcome = await run_agent(engine, oagent, "Charge", approval="residue")
    [(_, question)] = approval_requests(engine, outcome.result)
    return question


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_the_approval_question_never_shows_a_sensitive_argument(framework: str) -> None:
    """Rule 11 on the approval gate: a card number the tool declared sensitive is shown as
    ``[redacted:card_number]`` in the question put to the person (and in LangChain's interrupt
    payload), also where another argument repeats it, as the MCP gateway's gate shows it;
    every adapter showed it in full."""
    _, engine = new_engine()
    declare(engine.catalog, "charge_card", reversibility="compensable", sensitive=["card_number"])
    args = {
        "customer": "cus_acme",
        "cents": 900,
        "card_number": CARD,
        "memo": f"ACME, card {CARD}",
    }
    asked = await approval_questions(framework, engine, args)
    question = asked["amends_approval"] if framework == "langchain" else asked
    assert question.splitlines()[0] == (
        "The agent wants to call charge_card(customer='cus_acme', cents=900, "
        "card_number='[redacted:card_number]', memo='ACME, card [redacted:card_number]')."
    )
    assert CARD not in json.dumps(asked)
    if framework == "langchain":
        assert asked["args"] == {
            "customer": "cus_acme",
            "cents": 900,
            "card_number": "[redacted:card_number]",
            "memo": "ACME, card [redacted:card_number]",
        }


def paused_agent(engine: amends.Engine, world: World, saver: Any, skip: int = 0) -> Any:
    """A LangChain agent with the approval gate: it wins the deal, then asks before posting."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from amends.integrations.langchain import AmendsMiddleware

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    turns = [
        [("c1", "set_stage", {"deal": "acme", "stage": "closed_won"})],
        [("c2", "post_message", {"channel": "#sales", "text": "ACME is won!"})],
    ]
    msgs = [
        AIMessage(
            content="",
            tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in t],
        )
        for t in turns
    ][skip:]
    return create_agent(
        Scripted(messages=iter([*msgs, AIMessage(content=FINAL)])),
        [tool(t) for t in world_tools(world)],
        middleware=[AmendsMiddleware(engine, approval="irreversible")],
        checkpointer=saver,
    )


@pytest.mark.parametrize("sync", [False, True], ids=["ainvoke", "invoke"])
async def test_a_paused_run_resumed_through_a_rebuilt_agent_goes_on_in_its_saga(
    sync: bool,
) -> None:
    """The approval gate pauses a LangChain run; the application builds its agent again for the
    next request (a new AmendsMiddleware, the same checkpointer) and resumes it: the approved
    call is a step of the paused run's saga, which the resumed run's end closes. Before, the
    resume crashed with ConfigError ("called outside an agent run") and the saga stayed
    running."""
    from langchain_core.messages import ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    declare_set_stage(engine)
    saver, cfg = InMemorySaver(), {"configurable": {"thread_id": "t1"}}

    async def invoke(agent: Any, arg: Any) -> Any:
        if sync:
            return await asyncio.to_thread(agent.invoke, arg, cfg)
        return await agent.ainvoke(arg, cfg)

    first = await invoke(paused_agent(engine, world, saver), {"messages": [("user", "Win")]})
    assert first["__interrupt__"]
    out = await invoke(paused_agent(engine, world, saver, skip=2), Command(resume=True))
    assert out["messages"][-1].content == FINAL
    assert out["amends_saga_id"] == first["amends_saga_id"]
    answers = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers == {"c1": "acme is closed_won", "c2": "chat_1"}
    saga = await engine.log.get_saga(first["amends_saga_id"])
    assert saga is not None and saga.state == "completed"
    assert [(s.step_id, s.tool, s.state, s.deps) for s in saga.steps] == [
        ("s1", "set_stage", "done", ()),
        ("s2", "post_message", "done", ("s1",)),
    ]
    report = await engine.undo(saga.saga_id)
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_a_paused_run_resumed_where_its_saga_is_not_open_is_refused_in_words() -> None:
    """Resumed with an engine whose log does not hold its saga (another log), the call is not
    made, and the error names the saga and what to do instead of "called outside an agent
    run". (Resumed by another process on the same log, the run continues its saga:
    tests/integrations/test_handoff.py; this test pinned the refusal of that before.)"""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    declare_set_stage(engine)
    _, elsewhere = new_engine(world)
    declare_set_stage(elsewhere)
    saver, cfg = InMemorySaver(), {"configurable": {"thread_id": "t1"}}
    first = await paused_agent(engine, world, saver).ainvoke({"messages": [("user", "Win")]}, cfg)
    sid = first["amends_saga_id"]
    with pytest.raises(amends.SagaNotFoundError) as refused:
        await paused_agent(elsewhere, world, saver, skip=2).ainvoke(Command(resume=True), cfg)
    assert str(refused.value).startswith(
        f"no saga {sid!r} in {elsewhere.log.url}, so it cannot be continued here and nothing "
        f"was called: continue it with an engine on the log that recorded it"
    )
    assert [e for e in world.effects() if e["vendor"] == "chat"] == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("names", ["crm.update_field", ["set_stage"], {"set_stage": 1}])
def test_names_that_map_no_tool_are_refused_when_the_adapter_is_made(
    framework: str, names: Any
) -> None:
    """``names=`` must map framework tool names to catalog names: a string was accepted by
    Pydantic AI and OpenAI Agents (and failed at the first tool call), and LangChain raised a
    raw ValueError; every adapter now says what it wants."""
    _, engine = new_engine()
    with pytest.raises(amends.ConfigError) as refused:
        if framework == "langchain":
            from amends.integrations.langchain import AmendsMiddleware

            AmendsMiddleware(engine, names=names)
        elif framework == "pydantic_ai":
            from pydantic_ai.toolsets import FunctionToolset

            from amends.integrations.pydantic_ai import AmendsToolset

            AmendsToolset(FunctionToolset([]), engine=engine, names=names)
        else:
            from amends.integrations.openai_agents import wrap_tools

            wrap_tools([], engine, names=names)
    assert str(refused.value) == (
        f"names must map framework tool names to catalog names, got {names!r}; e.g. "
        f"names={{'set_stage': 'crm.update_field'}}"
    )
