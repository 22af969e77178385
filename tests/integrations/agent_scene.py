"""One scripted scene, played through LangChain, LangGraph, Pydantic AI, OpenAI Agents and plain
amends, so the tests can assert that every adapter produces the same saga and the same report.

The scene ("Close the ACME deal"), over the sandbox world:

* turn 1, two parallel tool calls: ``crm_update_field`` (acme stage -> closed_won) and
  ``payments_charge`` (cus_acme, 50.00 USD);
* turn 2, having seen both results: ``chat_post`` to #sales and ``lookup_weather`` (a framework
  tool with no contract in the catalog: irreversible, the run still works);
* then the account owner sets the stage to ``contract_sent`` by hand (drift).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import amends
from amends.sandbox import World, sandbox_catalog

TITLE = "Close the ACME deal"
TURNS: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        (
            "c1",
            "crm_update_field",
            {"record_id": "acme", "field": "stage", "value": "closed_won"},
        ),
        ("c2", "payments_charge", {"customer": "cus_acme", "cents": 5000}),
    ],
    [
        ("c3", "chat_post", {"channel": "#sales", "text": "ACME is closed: 50.00 USD charged"}),
        ("c4", "lookup_weather", {"city": "Paris"}),
    ],
]
CATALOG_TOOLS = ["crm.update_field", "payments.charge", "chat.post"]
FINAL_TEXT = "Done: ACME is closed."


def lookup_weather(city: str) -> str:
    """Look up the weather in a city (a tool with no contract in the catalog)."""
    return f"sunny in {city}"


OPENED: list[amends.Engine] = []
"""Engines :func:`new_engine` made, closed after each test (``conftest.close_engines``)."""


def new_engine(world: World | None = None) -> tuple[World, amends.Engine]:
    world = world or World()
    engine = amends.Engine(
        sandbox_catalog(world),
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    OPENED.append(engine)
    return world, engine


def human_edit(world: World) -> None:
    """The account owner changes the stage the agent wrote (drift for the CRM step)."""
    world.crm.human_edit("acme", "stage", "contract_sent")


# --- drivers: each plays TURNS through one framework and returns the saga id -------------


async def play_plain(engine: amends.Engine, *, sync: bool = False) -> str:
    """The same scene written by hand with amends' own API (the reference)."""
    async with engine.saga(TITLE) as saga:
        a = saga.call("crm.update_field", **TURNS[0][0][2])
        b = saga.call("payments.charge", **TURNS[0][1][2])
        await saga.gather(a, b)
        c = saga.call("chat.post", after=[a, b], **TURNS[1][0][2])
        d = saga.call_with(
            lambda call, city: lookup_weather(city), "lookup_weather", after=[a, b], city="Paris"
        )
        await saga.gather(c, d)
    return saga.id


def _langchain_model() -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # the fake ignores tools
            return self

    responses = [
        AIMessage(
            content="",
            tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in turn],
        )
        for turn in TURNS
    ]
    return ScriptedChatModel(messages=iter([*responses, AIMessage(content=FINAL_TEXT)]))


def _langchain_tools(engine: amends.Engine) -> list[Any]:
    from langchain_core.tools import tool

    from amends.integrations.langchain import catalog_tools

    return [*catalog_tools(engine.catalog, CATALOG_TOOLS), tool(lookup_weather)]


async def play_langchain(engine: amends.Engine, *, sync: bool = False) -> str:
    from langchain.agents import create_agent

    from amends.integrations.langchain import AmendsMiddleware

    mw = AmendsMiddleware(engine)
    agent = create_agent(_langchain_model(), _langchain_tools(engine), middleware=[mw])
    state = {"messages": [("user", TITLE)]}
    out = await (asyncio.to_thread(agent.invoke, state) if sync else agent.ainvoke(state))
    assert out["messages"][-1].content == FINAL_TEXT
    assert mw.last_saga_id is not None
    return mw.last_saga_id


async def play_langgraph(engine: amends.Engine, *, sync: bool = False) -> str:
    """A hand-built LangGraph graph (model node + amends_tool_node) inside agent_run."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from amends.integrations.langchain import agent_run, agent_run_sync, amends_tool_node

    model = _langchain_model()

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: Any) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", amends_tool_node(_langchain_tools(engine), engine))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    app = graph.compile()
    state = {"messages": [("user", TITLE)]}
    if sync:

        def in_thread() -> str:
            with agent_run_sync(engine, TITLE) as run:
                out = app.invoke(state)
            assert out["messages"][-1].content == FINAL_TEXT
            return run.saga_id

        return await asyncio.to_thread(in_thread)
    async with agent_run(engine, TITLE) as run:
        out = await app.ainvoke(state)
    assert out["messages"][-1].content == FINAL_TEXT
    return run.saga_id


async def play_pydantic_ai(engine: amends.Engine, *, sync: bool = False) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset, catalog_toolset

    script = [[ToolCallPart(n, a, tool_call_id=i) for i, n, a in turn] for turn in TURNS]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL_TEXT)])

    inner = FunctionToolset(
        [*catalog_toolset(engine.catalog, CATALOG_TOOLS).tools.values(), lookup_weather]
    )
    toolset = AmendsToolset(inner, engine=engine)
    agent = Agent(FunctionModel(respond), toolsets=[toolset])
    if sync:
        out = await asyncio.to_thread(agent.run_sync, TITLE)
    else:
        out = await agent.run(TITLE)
    assert out.output == FINAL_TEXT
    assert toolset.last_saga_id is not None
    return toolset.last_saga_id


def openai_agent(engine: amends.Engine, extra_tools: list[Any] | None = None) -> Any:
    from agents import Agent, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import catalog_function_tools

    model = ScriptedModel(
        [
            *(
                ModelStep(output=[function_call(n, a, call_id=i) for i, n, a in turn])
                for turn in TURNS
            ),
            ModelStep(output=[assistant_message(FINAL_TEXT)]),
        ]
    )
    tools = [*catalog_function_tools(engine.catalog, CATALOG_TOOLS), function_tool(lookup_weather)]
    return Agent(name="sales", model=model, tools=[*tools, *(extra_tools or [])])


async def play_openai_agents(engine: amends.Engine, *, sync: bool = False) -> str:
    from amends.integrations.openai_agents import run_agent, run_agent_sync

    agent = openai_agent(engine)
    if sync:
        outcome = await asyncio.to_thread(run_agent_sync, engine, agent, TITLE)
    else:
        outcome = await run_agent(engine, agent, TITLE)
    assert outcome.result.final_output == FINAL_TEXT
    return outcome.saga_id


async def play_langchain_astream(engine: amends.Engine, *, sync: bool = False) -> str:
    """The agent streamed (``agent.astream``): the last state carries the saga id."""
    from langchain.agents import create_agent

    from amends.integrations.langchain import AmendsMiddleware

    agent = create_agent(
        _langchain_model(), _langchain_tools(engine), middleware=[AmendsMiddleware(engine)]
    )
    states = [s async for s in agent.astream({"messages": [("user", TITLE)]}, stream_mode="values")]
    last = states[-1]
    assert last["messages"][-1].content == FINAL_TEXT
    return str(last["amends_saga_id"])


async def play_pydantic_ai_run_stream(engine: amends.Engine, *, sync: bool = False) -> str:
    """``agent.run_stream``: tool calls first, then the streamed final text."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset, catalog_toolset

    script = [[ToolCallPart(n, a, tool_call_id=i) for i, n, a in turn] for turn in TURNS]

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        if script:
            from pydantic_ai.models.function import DeltaToolCall

            yield {
                n: DeltaToolCall(
                    name=p.tool_name, json_args=json.dumps(p.args), tool_call_id=p.tool_call_id
                )
                for n, p in enumerate(script.pop(0))
            }
        else:
            yield FINAL_TEXT

    inner = FunctionToolset(
        [*catalog_toolset(engine.catalog, CATALOG_TOOLS).tools.values(), lookup_weather]
    )
    toolset = AmendsToolset(inner, engine=engine)
    agent = Agent(FunctionModel(stream_function=stream), capabilities=[toolset.capability])
    async with agent.run_stream(TITLE) as result:
        text = "".join([t async for t in result.stream_text(delta=True)])
    assert text == FINAL_TEXT
    saga_id = toolset.saga_id_of(result)
    assert saga_id is not None
    return saga_id


async def play_openai_agents_run_streamed(engine: amends.Engine, *, sync: bool = False) -> str:
    """``Runner.run_streamed`` with ``wrap_agent`` and ``AmendsRunHooks`` inside ``agent_run``."""
    from agents import Runner

    from amends.integrations.openai_agents import AmendsRunHooks, agent_run, wrap_agent

    async with agent_run(engine, TITLE) as run:
        result = Runner.run_streamed(
            wrap_agent(openai_agent(engine), engine), TITLE, hooks=AmendsRunHooks()
        )
        async for _ in result.stream_events():
            pass
    assert result.final_output == FINAL_TEXT
    return run.saga_id


PLAYERS: dict[str, Callable[..., Any]] = {
    "plain": play_plain,
    "langchain": play_langchain,
    "langgraph": play_langgraph,
    "pydantic_ai": play_pydantic_ai,
    "openai_agents": play_openai_agents,
}
STREAMERS: dict[str, Callable[..., Any]] = {
    "langchain_astream": play_langchain_astream,
    "pydantic_ai_run_stream": play_pydantic_ai_run_stream,
    "openai_agents_run_streamed": play_openai_agents_run_streamed,
}
"""The streaming APIs of each framework (issue 25: the docs show them; async only)."""


# --- what the tests compare ----------------------------------------------------------------


@dataclass(frozen=True)
class SagaShape:
    """The saga as a framework-neutral value: each step's tool, state and dependencies (by tool)."""

    title: str
    steps: dict[str, tuple[str, tuple[str, ...]]]


async def saga_shape(engine: amends.Engine, saga_id: str) -> SagaShape:
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    tool_of = {s.step_id: s.tool for s in saga.steps}
    return SagaShape(
        saga.title,
        {s.tool: (s.state, tuple(sorted(tool_of[d] for d in s.deps))) for s in saga.steps},
    )


def neutral_report(report: amends.UndoReport, engine_steps: dict[str, str]) -> dict[str, Any]:
    """``report.to_dict()`` minus ids and timings, step ids replaced by tool names, steps sorted."""
    d = report.to_dict()
    for key in ("saga_id", "reversal_id", "seconds", "requested_at", "finished_at"):
        d.pop(key)
    d["runs"] = [{k: v for k, v in r.items() if k not in ("seconds", "finished_at")}
                 for r in d["runs"]]  # fmt: skip
    text = json.dumps(d, sort_keys=True)
    for sid, tool in engine_steps.items():
        text = re.sub(rf"\b{re.escape(sid)}\b", f"<{tool}>", text)
    out: dict[str, Any] = json.loads(text)
    out["steps"] = sorted(out["steps"], key=lambda s: s["tool"])
    out["manual_actions"] = sorted(out["manual_actions"], key=lambda m: m["step_id"])
    return out


async def step_tools(engine: amends.Engine, saga_id: str) -> dict[str, str]:
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    return {s.step_id: s.tool for s in saga.steps}
