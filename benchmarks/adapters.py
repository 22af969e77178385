"""10. Adapter cost: the CPU each agent-framework adapter adds per tool call over the plain API.

For each framework, the same scripted agent makes N sequential tool calls (one per model turn)
of a tool that records its inverse through ``amends.current_call()``, once without amends and
once with the adapter, on an in-memory log. The adapter's own cost per call is

    (CPU with the adapter - CPU without amends) / N  -  CPU of one ``await saga.call(...)``

i.e. what the adapter adds beyond recording the step itself (issue 25 item 6: goal <= 0.5 ms).
The three measurements of a framework run one after another in each round, rounds interleaved,
so they see the same machine load.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import amends

from .common import Section, Spread, Target, noop_catalog

N = 100
GOAL = 0.5e-3
"""Seconds of CPU an adapter may add per tool call over ``saga.call`` (issue 25 item 6)."""


def bench_noop(i: int) -> int:
    """A no-op tool that records its inverse when amends records it."""
    call = amends.current_call()
    if call is not None:
        call.inverse("bench_noop", i=i)
        call.no_drift_check(reason="a benchmark no-op: there is no state anyone could change")
    return i


def new_engine() -> amends.Engine:
    """``bench.noop`` for the plain API, and ``bench_noop``'s contract for the frameworks."""
    from amends.integrations.langchain import declare

    catalog = noop_catalog()
    declare(catalog, "bench_noop", reversibility="reversible")
    return amends.Engine(catalog, log=amends.SqliteLog(":memory:"))


async def plain(engine: amends.Engine, n: int) -> None:
    """``n`` sequential ``saga.call`` steps: the reference."""
    async with engine.saga("bench: plain") as saga:
        for i in range(n):
            await saga.call("bench.noop", i=i)


async def langchain(engine: amends.Engine | None, n: int) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from amends.integrations.langchain import AmendsMiddleware

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    turns = [
        AIMessage(content="", tool_calls=[{"name": "bench_noop", "args": {"i": i}, "id": f"c{i}"}])
        for i in range(n)
    ]
    model = Scripted(messages=iter([*turns, AIMessage(content="done")]))
    middleware = [AmendsMiddleware(engine)] if engine is not None else []
    agent = create_agent(model, [tool(bench_noop)], middleware=middleware)
    await agent.ainvoke({"messages": [("user", "bench")]}, {"recursion_limit": 4 * n + 10})


async def pydantic_ai(engine: amends.Engine | None, n: int, *, capability: bool = False) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset

    left = [n]

    def respond(messages: Any, info: Any) -> ModelResponse:
        if left[0] == 0:
            return ModelResponse(parts=[TextPart("done")])
        left[0] -= 1
        return ModelResponse(parts=[ToolCallPart("bench_noop", {"i": left[0]})])

    tools = FunctionToolset([bench_noop])
    if engine is None:
        agent = Agent(FunctionModel(respond), toolsets=[tools])
    elif capability:  # the recommended form: every failed run gets its saga id
        toolset = AmendsToolset(tools, engine=engine)
        agent = Agent(FunctionModel(respond), capabilities=[toolset.capability])
    else:
        agent = Agent(FunctionModel(respond), toolsets=[AmendsToolset(tools, engine=engine)])
    from pydantic_ai.usage import UsageLimits

    await agent.run("bench", usage_limits=UsageLimits(request_limit=n + 5))


async def openai_agents(engine: amends.Engine | None, n: int) -> None:
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import run_agent

    model = ScriptedModel(
        [
            *(
                ModelStep(output=[function_call("bench_noop", {"i": i}, call_id=f"c{i}")])
                for i in range(n)
            ),
            ModelStep(output=[assistant_message("done")]),
        ]
    )
    agent = Agent(name="bench", model=model, tools=[function_tool(bench_noop)])
    if engine is None:
        await Runner.run(agent, "bench", max_turns=n + 5)
    else:
        await run_agent(engine, agent, "bench", max_turns=n + 5)


FRAMEWORKS: dict[str, Callable[[amends.Engine | None, int], Awaitable[None]]] = {
    "LangChain (create_agent, ainvoke)": langchain,
    "Pydantic AI (Agent.run, toolsets=)": pydantic_ai,
    "Pydantic AI (Agent.run, capabilities=)": functools.partial(pydantic_ai, capability=True),
    "OpenAI Agents (Runner.run)": openai_agents,
}


def cpu(loop: asyncio.AbstractEventLoop, coro: Awaitable[None]) -> float:
    """CPU seconds of this process (every thread) while ``coro`` runs."""
    t = time.process_time()
    loop.run_until_complete(coro)
    return time.process_time() - t


def measure(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[None]], rounds: int, n: int
) -> tuple[Spread, Spread, Spread]:
    """CPU per call without amends, with the adapter, and of ``saga.call``, over ``rounds``."""
    bare: list[float] = []
    adapted: list[float] = []
    ref: list[float] = []
    for r in range(rounds + 1):  # round 0 warms imports and caches up
        engine = new_engine()
        # a saga's first opening with a new catalog looks up the catalog's module (once per
        # catalog): paid here, outside both measurements
        loop.run_until_complete(plain(engine, 1))
        a = cpu(loop, fn(None, n))
        b = cpu(loop, fn(engine, n))
        p = cpu(loop, plain(engine, n))
        loop.run_until_complete(engine.close())
        if r:
            bare.append(a / n)
            adapted.append(b / n)
            ref.append(p / n)
    return Spread.of(bare), Spread.of(adapted), Spread.of(ref)


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    rounds = 2 if quick else 9
    n = 20 if quick else N
    sec = Section(
        f"10. Adapter cost: CPU per tool call, {n} sequential calls, in-memory log",
        ["framework", "without amends ms", "with the adapter ms", "saga.call ms",
         "adapter over saga.call ms"],
    )  # fmt: skip
    for name, fn in FRAMEWORKS.items():
        try:
            bare, adapted, ref = measure(loop, fn, rounds, n)
        except ImportError as exc:
            sec.rows.append([name, f"not measured: {exc}", "", "", ""])
            continue
        over = adapted.median - bare.median - ref.median
        sec.rows.append(
            [name, bare.fmt(1e3, 2), adapted.fmt(1e3, 2), ref.fmt(1e3, 2), f"{over * 1e3:+.2f}"]
        )
        sec.targets.append(
            Target(
                f"adapter cost, {name}",
                f"{over * 1e3:+.2f} ms",
                "<= 0.5 ms",
                over <= GOAL,
            )
        )
    sec.notes.append(
        f"{rounds} rounds after one warm-up; in each, the framework's run without amends, the same "
        f"run with the adapter and {n} plain saga.call steps, one after another (so they share the "
        f"machine's load). CPU is this process's (every thread: the log's writer thread too), "
        f"from time.process_time. 'Adapter over saga.call' = with - without - saga.call, medians: "
        f"what the adapter adds beyond recording the step. Scripted models (no network)."
    )
    return [sec]
