"""Drive the three real agent loops (LangChain ``create_agent``, Pydantic AI ``Agent``, OpenAI
Agents ``Runner``) with the same scripted model turns and the same plain Python tools, so one test
can state a behaviour once and hold every framework to it (issue 25).

A script is a list of model turns, each a list of ``(call_id, tool name, arguments)``; after the
last turn the model answers ``FINAL``. ``between(n)`` is awaited before the model's ``n``-th
response (0-based): a person acting between two turns (an undo from outside the run).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import amends

FINAL = "All done."
FRAMEWORKS = ("langchain", "pydantic_ai", "openai_agents")

Turn = list[tuple[str, str, dict[str, Any]]]
Between = Callable[[int], Awaitable[None]]


@dataclasses.dataclass
class Played:
    """What one scripted run gave."""

    saga_id: str | None
    """The saga the adapter says the run recorded."""
    answers: dict[str, str]
    """What the model was told for each tool call, by call id."""
    output: Any
    """The run's final output (text)."""


async def _nothing(n: int) -> None:
    return None


async def play(
    framework: str,
    engine: amends.Engine,
    turns: Sequence[Turn],
    tools: Sequence[Callable[..., Any]],
    *,
    prompt: str = "Do it",
    between: Between = _nothing,
    extra_tools: Sequence[Any] = (),
    **options: Any,
) -> Played:
    """Run ``turns`` through ``framework``'s own loop with amends' adapter (``options`` go to
    the adapter: ``names=``, ``approval=``, ...) and return what happened."""
    runner = {
        "langchain": _langchain,
        "pydantic_ai": _pydantic_ai,
        "openai_agents": _openai_agents,
    }[framework]
    return await runner(engine, list(turns), list(tools), prompt, between, extra_tools, options)


async def _langchain(
    engine: amends.Engine,
    turns: list[Turn],
    tools: list[Callable[..., Any]],
    prompt: str,
    between: Between,
    extra: Sequence[Any],
    options: dict[str, Any],
) -> Played:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    from amends.integrations.langchain import AmendsMiddleware

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    class Between(AgentMiddleware):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        async def abefore_model(self, state: Any, runtime: Any) -> None:
            await between(self.n)
            self.n += 1

    msgs = [
        AIMessage(
            content="",
            tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in turn],
        )
        for turn in turns
    ]
    mw = AmendsMiddleware(engine, **options)
    agent = create_agent(
        Scripted(messages=iter([*msgs, AIMessage(content=FINAL)])),
        [*(tool(t) for t in tools), *extra],
        middleware=[Between(), mw],
    )
    out = await agent.ainvoke({"messages": [("user", prompt)]})
    answers = {
        m.tool_call_id: str(m.content) for m in out["messages"] if isinstance(m, ToolMessage)
    }
    return Played(out.get("amends_saga_id"), answers, out["messages"][-1].content)


async def _pydantic_ai(
    engine: amends.Engine,
    turns: list[Turn],
    tools: list[Callable[..., Any]],
    prompt: str,
    between: Between,
    extra: Sequence[Any],
    options: dict[str, Any],
) -> Played:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset

    script = [[ToolCallPart(n, a, tool_call_id=i) for i, n, a in turn] for turn in turns]
    calls = [0]

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await between(calls[0])
        calls[0] += 1
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL)])

    toolset = AmendsToolset(FunctionToolset([*tools, *extra]), engine=engine, **options)
    agent = Agent(FunctionModel(respond), capabilities=[toolset.capability])
    result = await agent.run(prompt)
    answers: dict[str, str] = {}
    for m in result.all_messages():
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, ToolReturnPart | RetryPromptPart) and p.tool_call_id:
                    answers[p.tool_call_id] = str(p.content)
    return Played(toolset.saga_id_of(result), answers, result.output)


async def _openai_agents(
    engine: amends.Engine,
    turns: list[Turn],
    tools: list[Callable[..., Any]],
    prompt: str,
    between: Between,
    extra: Sequence[Any],
    options: dict[str, Any],
) -> Played:
    from agents import Agent, RunHooks, function_tool
    from agents.items import ToolCallOutputItem
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import run_agent

    class Between(RunHooks[Any]):
        def __init__(self) -> None:
            self.n = 0

        async def on_llm_start(self, *args: Any) -> None:
            await between(self.n)
            self.n += 1

    model = ScriptedModel(
        [
            *(ModelStep(output=[function_call(n, a, call_id=i) for i, n, a in t]) for t in turns),
            ModelStep(output=[assistant_message(FINAL)]),
        ]
    )
    agent = Agent(name="agent", model=model, tools=[*(function_tool(t) for t in tools), *extra])
    outcome = await run_agent(engine, agent, prompt, hooks=Between(), **options)
    answers = {
        i.raw_item["call_id"]: str(i.output)
        for i in outcome.result.new_items
        if isinstance(i, ToolCallOutputItem) and isinstance(i.raw_item, dict)
    }
    return Played(outcome.saga_id, answers, outcome.result.final_output)
