"""10. Adapter cost: the CPU each agent-framework adapter adds per tool call over the plain API.

For each framework, the same scripted agent makes N sequential tool calls (one per model turn)
of a tool that records its inverse through ``amends.current_call()``: without amends, with a
pass-through hook of the framework's own kind in the adapter's place (no amends), and with the
adapter, on an in-memory log. Per tool call:

    adapter over saga.call = (with the adapter - without amends) / N - one ``await saga.call``
    the framework's hook   = (with the pass-through hook - without amends) / N
    amends' own            = (with the adapter - with the pass-through hook) / N - saga.call

The first is issue 25 item 6's measure (goal <= 0.5 ms); the other two split it into what the
framework charges for any hook of that kind (LangChain wraps every ``awrap_tool_call``
middleware in a LangSmith span that hops to a thread pool twice per call, traced or not) and
what amends' adapter code adds.

The difference sought is a few per cent of a run's CPU (a framework spends 2-9 ms per tool call
of its own at 100 calls: its message history grows with every turn), so the runs are set up to
differ only in the hook (issue 25 item 6, the measurement's precision):

- garbage collection settled before each timed run (``cpu``): a full collection landing in one
  run and not its pair moved a figure by 0.3-0.8 ms per call;
- each adapter and ``saga.call`` run on a fresh engine and in-memory log (``fresh_engine``);
- each round runs the four kinds twice, ABBA (``round_order``), so a steady change of load
  within the round cancels, and each figure is the median of the per-round differences, so a
  round's load cancels out.

CPU is the process's (every thread): LangChain runs a sync tool, and LangSmith's span around an
``async def`` middleware hook, on its thread pool, and that CPU is the call's too. The same split
is also given in Python function calls per tool call (``cProfile`` totals of the event-loop
thread: deterministic, load-free). ``benchmarks/adapter_instructions.py`` counts the same runs in
callgrind instructions, every thread included, for a verdict when the load makes the CPU
spread wider than the goal.
"""

from __future__ import annotations

import asyncio
import cProfile
import dataclasses
import functools
import gc
import math
import os
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import amends

from .common import Section, Spread, Target, noop_catalog

N = 100
GOAL = 0.5e-3
"""Seconds of CPU an adapter may add per tool call over ``saga.call`` (issue 25 item 6)."""
ROUNDS = 31
"""Timed rounds per framework (after one warm-up): a 90% interval of the median from the 11th
lowest to the 11th highest round (``median_interval``). 15 rounds (4th to 4th) left rows whose
medians sat 0.1-0.3 ms under the goal straddling it on a quiet machine (three runs on
2026-12-05, docs/benchmarks.md); twice the rounds narrow the interval about 1.4x."""
CONFIDENCE = 0.90


def median_interval(xs: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``xs``: order statistics.

    The ``k``-th lowest and ``k``-th highest of ``n`` values hold the true median between them
    unless ``k`` or more values fall on one side of it, which has probability
    ``2 * P(Binomial(n, 1/2) <= k - 1)``; ``k`` is the largest for which that is at most
    ``1 - confidence``. No assumption on how the values spread (a load spike is just a high
    value). With too few values for any ``k``, the whole range.
    """
    s = sorted(xs)
    n = len(s)
    k, below = 0, 0.0
    while k < n // 2:
        below_next = below + math.comb(n, k) / 2**n  # P(Binomial(n, 1/2) <= k)
        if 2 * below_next > 1 - confidence:
            break
        below, k = below_next, k + 1
    if k == 0:
        return s[0], s[-1]
    return s[k - 1], s[n - k]


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


PASS = "pass"
"""The ``engine`` value that runs a framework with a pass-through hook instead of amends."""

Engineish = amends.Engine | str | None


async def langchain(engine: Engineish, n: int) -> None:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
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

    class PassThrough(AgentMiddleware):  # type: ignore[type-arg]
        # the adapter's kind: a plain method returning the coroutine (LangSmith's span around
        # an `async def` hook would add two thread-pool hops that amends' hook does not make)
        def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return handler(request)

    middleware: list[Any] = []
    if isinstance(engine, amends.Engine):
        middleware = [AmendsMiddleware(engine)]
    else:
        # The first AmendsMiddleware registers amends' run-end callback with LangChain for the
        # whole process (it sees every chain event, ~100 Python calls per tool call here): a run
        # without amends must not pay for it. Set in this task's own context only.
        from amends.integrations.langchain import _HOOK

        _HOOK.set(None)
    if engine == PASS:
        middleware = [PassThrough()]
    agent = create_agent(model, [tool(bench_noop)], middleware=middleware)
    await agent.ainvoke({"messages": [("user", "bench")]}, {"recursion_limit": 4 * n + 10})


async def pydantic_ai(engine: Engineish, n: int, *, capability: bool = False) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset

    from amends.integrations.pydantic_ai import AmendsToolset

    left = [n]

    def respond(messages: Any, info: Any) -> ModelResponse:
        if left[0] == 0:
            return ModelResponse(parts=[TextPart("done")])
        left[0] -= 1
        return ModelResponse(parts=[ToolCallPart("bench_noop", {"i": left[0]})])

    class PassThrough(AbstractCapability[Any]):  # the hooks amends' capability overrides
        def get_toolset(self) -> AbstractToolset[Any]:
            return WrapperToolset(tools)

        async def on_run_error(self, ctx: Any, *, error: BaseException) -> Any:
            raise error

    tools = FunctionToolset([bench_noop])
    if engine is None:
        agent = Agent(FunctionModel(respond), toolsets=[tools])
    elif engine == PASS and capability:
        agent = Agent(FunctionModel(respond), capabilities=[PassThrough()])
    elif engine == PASS:  # WrapperToolset.call_tool passes each call through
        agent = Agent(FunctionModel(respond), toolsets=[WrapperToolset(tools)])
    elif not isinstance(engine, amends.Engine):
        raise TypeError(engine)
    elif capability:  # the capability form (a failed run's handle either way since 2026-12-05)
        toolset = AmendsToolset(tools, engine=engine)
        agent = Agent(FunctionModel(respond), capabilities=[toolset.capability])
    else:
        agent = Agent(FunctionModel(respond), toolsets=[AmendsToolset(tools, engine=engine)])
    from pydantic_ai.usage import UsageLimits

    await agent.run("bench", usage_limits=UsageLimits(request_limit=n + 5))


async def openai_agents(engine: Engineish, n: int) -> None:
    import dataclasses

    from agents import Agent, RunHooks, Runner, function_tool
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

    class PassThrough(RunHooks[Any]):  # the hooks AmendsRunHooks overrides, doing nothing
        async def on_llm_start(self, *args: Any) -> None:
            return None

        async def on_llm_end(self, *args: Any) -> None:
            return None

    def passing(tool: Any) -> Any:  # wrap_agent's form: a copy with its own on_invoke_tool
        async def on_invoke_tool(ctx: Any, args_json: str) -> Any:
            return await tool.on_invoke_tool(ctx, args_json)

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    if engine is None:
        await Runner.run(agent, "bench", max_turns=n + 5)
    elif engine == PASS:
        wrapped = agent.clone(tools=[passing(t) for t in agent.tools])
        await Runner.run(wrapped, "bench", max_turns=n + 5, hooks=PassThrough())
    else:
        assert isinstance(engine, amends.Engine)
        await run_agent(engine, agent, "bench", max_turns=n + 5)


FRAMEWORKS: dict[str, Callable[[Engineish, int], Awaitable[None]]] = {
    "LangChain (create_agent, ainvoke)": langchain,
    "Pydantic AI (Agent.run, toolsets=)": pydantic_ai,
    "Pydantic AI (Agent.run, capabilities=)": functools.partial(pydantic_ai, capability=True),
    "OpenAI Agents (Runner.run)": openai_agents,
}


def cpu(loop: asyncio.AbstractEventLoop, coro: Awaitable[None]) -> float:
    """CPU seconds of this process (every thread) while ``coro`` runs, garbage collection
    settled first.

    A full (generation-2) collection walks the whole heap, 120,000-290,000 objects once a
    framework is imported, and costs tens of ms: landing in one run and not in its pair, it
    moved that run's per-call figure by 0.3-0.8 ms, more than the goal. Collecting before the
    run and freezing what survives (``gc.freeze``) leaves only the run's own objects to collect.
    """
    gc.collect()
    gc.freeze()
    try:
        t = time.process_time()
        loop.run_until_complete(coro)
        return time.process_time() - t
    finally:
        gc.unfreeze()


def calls(loop: asyncio.AbstractEventLoop, coro: Awaitable[None]) -> int:
    """Python function calls (cProfile's total, C functions included) while ``coro`` runs."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        loop.run_until_complete(coro)
    finally:
        profile.disable()
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class Split:
    """One framework's figures, per tool call: CPU (seconds) and Python calls."""

    bare: Spread
    hooked: Spread
    adapted: Spread
    ref: Spread
    over: Spread
    """with the adapter - without amends - saga.call (issue 25 item 6), per-round differences"""
    over_interval: tuple[float, float]
    """``median_interval`` of ``over``'s per-round differences: what the verdict reads"""
    hook: Spread
    """with the pass-through hook - without amends"""
    own: Spread
    """with the adapter - with the pass-through hook - saga.call"""
    calls: tuple[float, float, float]
    """Python calls: over saga.call, the framework's hook, amends' own"""


KINDS = ("bare", "hooked", "adapted", "ref")
"""The four runs of a round, in the order of its first half."""


def fresh_engine(loop: asyncio.AbstractEventLoop) -> amends.Engine:
    """A new engine and in-memory log for one run: no run pays for sagas an earlier one left.

    A saga's first opening with a new catalog looks up the catalog's module (once per catalog):
    paid here, outside every measurement.
    """
    engine = new_engine()
    loop.run_until_complete(plain(engine, 1))
    return engine


def one_run(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[None]], kind: str, n: int
) -> float:
    """CPU seconds per tool call of one run of ``kind`` (one of ``KINDS``)."""
    if kind == "bare":
        return cpu(loop, fn(None, n)) / n
    if kind == "hooked":
        return cpu(loop, fn(PASS, n)) / n
    engine = fresh_engine(loop)
    try:
        return cpu(loop, fn(engine, n) if kind == "adapted" else plain(engine, n)) / n
    finally:
        loop.run_until_complete(engine.close())


def round_order(r: int) -> list[str]:
    """Round ``r``'s runs: the four kinds rotated by ``r``, then the same in reverse (ABBA).

    Each kind runs twice per round, mirrored about the round's middle, so a load that rises or
    falls steadily through the round adds the same to every kind's mean; the rotation moves
    which kind runs first (after a warm interpreter's idle) from round to round.
    """
    k = r % len(KINDS)
    first = [*KINDS[k:], *KINDS[:k]]
    return [*first, *reversed(first)]


def measure(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[None]], rounds: int, n: int
) -> Split:
    """The four runs of one framework, twice each per round (``round_order``), ``rounds``
    times after a warm-up round, then once each under cProfile."""
    runs: list[dict[str, float]] = []
    for r in range(rounds + 1):  # round 0 warms imports and caches up
        got: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for kind in round_order(r):
            got[kind].append(one_run(loop, fn, kind, n))
        if r:
            runs.append({kind: statistics.fmean(xs) for kind, xs in got.items()})
    engines = fresh_engine(loop), fresh_engine(loop)
    a, h, b, p = (
        calls(loop, fn(None, n)) / n,
        calls(loop, fn(PASS, n)) / n,
        calls(loop, fn(engines[0], n)) / n,
        calls(loop, plain(engines[1], n)) / n,
    )
    for engine in engines:
        loop.run_until_complete(engine.close())

    def of(f: Callable[[dict[str, float]], float]) -> Spread:
        return Spread.of([f(x) for x in runs])

    def over(x: dict[str, float]) -> float:
        return x["adapted"] - x["bare"] - x["ref"]

    return Split(
        bare=of(lambda x: x["bare"]),
        hooked=of(lambda x: x["hooked"]),
        adapted=of(lambda x: x["adapted"]),
        ref=of(lambda x: x["ref"]),
        over=of(over),
        over_interval=median_interval([over(x) for x in runs]),
        hook=of(lambda x: x["hooked"] - x["bare"]),
        own=of(lambda x: x["adapted"] - x["hooked"] - x["ref"]),
        calls=(b - a - p, h - a, b - h - p),
    )


def _signed(s: Spread) -> str:
    return f"{s.median * 1e3:+.2f} [{s.p10 * 1e3:+.2f} to {s.p90 * 1e3:+.2f}]"


def _rank(rounds: int) -> str:
    """Which order statistic bounds ``median_interval`` for ``rounds`` values, e.g. '4th'."""
    xs = [float(i) for i in range(rounds)]
    k = int(median_interval(xs)[0]) + 1
    return f"{k}{'st' if k == 1 else 'nd' if k == 2 else 'rd' if k == 3 else 'th'}"


def _interval(m: Split) -> str:
    lo, hi = m.over_interval
    return f"{m.over.median * 1e3:+.2f} ({lo * 1e3:+.2f} to {hi * 1e3:+.2f})"


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    rounds = 2 if quick else ROUNDS
    n = 20 if quick else N
    sec = Section(
        f"10. Adapter cost: CPU per tool call, {n} sequential calls, in-memory log",
        ["framework", "without amends ms", "with a pass-through hook ms", "with the adapter ms",
         "saga.call ms",
         "adapter over saga.call ms: median (90% interval of the median) [p10 to p90]",
         "the framework's hook ms", "amends' own ms",
         "Python calls: over saga.call / hook / amends' own"],
    )  # fmt: skip
    for name, fn in FRAMEWORKS.items():
        try:
            m = measure(loop, fn, rounds, n)
        except ImportError as exc:
            sec.rows.append([name, f"not measured: {exc}", *[""] * 7])
            continue
        sec.rows.append(
            [
                name,
                m.bare.fmt(1e3, 2),
                m.hooked.fmt(1e3, 2),
                m.adapted.fmt(1e3, 2),
                m.ref.fmt(1e3, 2),
                f"{_interval(m)} [{m.over.p10 * 1e3:+.2f} to {m.over.p90 * 1e3:+.2f}]",
                _signed(m.hook),
                _signed(m.own),
                " / ".join(f"{c:.0f}" for c in m.calls),
            ]
        )
        sec.targets.append(
            Target(
                f"adapter cost, {name}",
                f"{_interval(m)} ms, 90% interval of the median (amends' own "
                f"{m.own.median * 1e3:+.2f} ms, {m.calls[2]:.0f} Python calls)",
                "<= 0.5 ms",
                # decided only when the whole interval of the median lies on one side of the
                # goal: a median alone, with the rounds spread several times the goal, says
                # nothing
                True
                if m.over_interval[1] <= GOAL
                else False
                if m.over_interval[0] > GOAL
                else None,
            )
        )
    sec.notes.append(
        f"{rounds} rounds after one warm-up; in each, the framework's run without amends, with a "
        f"pass-through hook of the adapter's kind (LangChain: an awrap_tool_call middleware, "
        f"a plain method returning the handler's coroutine as amends' is; "
        f"Pydantic AI: a WrapperToolset, given as a capability with on_run_error for the "
        f"capability row; OpenAI Agents: tools copied with their own on_invoke_tool and run "
        f"hooks), with the adapter, and {n} plain saga.call steps, twice each in ABBA order "
        f"(rotated from round to round; a round's figure per kind is the mean of its two runs), "
        f"each adapter and saga.call run on a fresh engine and in-memory log, garbage collected "
        f"and frozen (gc.freeze) before every timed run. CPU is this process's (every thread), "
        f"from time.process_time. The last three CPU columns are medians [p10 to p90] of the "
        f"per-round differences: 'adapter over saga.call' = with - without - saga.call (issue 25 "
        f"item 6); 'the framework's hook' = pass-through - without; 'amends' own' = with - "
        f"pass-through - saga.call. The verdict reads a 90% confidence interval of the median of "
        f"'adapter over saga.call' (distribution-free, from order statistics: with {rounds} "
        f"rounds, from the {_rank(rounds)} lowest to the {_rank(rounds)} highest round): met only "
        f"when the whole interval is at or under 0.5 ms, not met when it is wholly over, "
        f"undecided otherwise; the same rule for every row, no round discarded. Python calls: "
        f"cProfile totals per tool call, one more run each (deterministic, so not subject to "
        f"the load). Scripted models (no network)."
    )
    return [sec]
