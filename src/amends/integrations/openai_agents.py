"""OpenAI Agents SDK: wrapped function tools whose every call is a step of an amends saga.

```python
from amends.integrations.openai_agents import run_agent

outcome = await run_agent(engine, agent, "Close the ACME deal")   # or run_agent_sync(...)
outcome.result.final_output
report = await engine.undo(outcome.saga_id)
```

:func:`run_agent` opens one saga per run (or joins the enclosing :func:`agent_run`), hands the
runner a copy of the agent whose function tools are wrapped (:func:`wrap_agent`, built on
``dataclasses.replace(tool, on_invoke_tool=...)``) and :class:`AmendsRunHooks`, which only observe
(each model call begins a turn). A tool's exception goes through amends (rule 9) and then to the
tool's own failure handler, so the model sees the same error text as without amends. Requires
the ``amends[openai-agents]`` extra; ``import amends`` never imports the SDK.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from agents import Agent, FunctionTool, RunHooks, Runner, function_tool
from agents.exceptions import ModelBehaviorError
from agents.tool import (
    Tool,
    maybe_invoke_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext

import amends
from amends import Catalog, Engine

from ._agent_parts import (
    approval_message,
    catalog_tool_function,
    check_approval,
    check_names,
    declare,
    framework_name,
    needs_approval,
    resolve_tool_name,
    spend,
    title_from,
)
from ._agents import (
    UNDO_TOOL,
    AgentRun,
    Answers,
    agent_run,
    agent_run_sync,
    current_run,
    undo_tool_functions,
)
from ._follow_up_tools import (
    LEFT_DOC,
    LEFT_TOOL,
    NOT_STEPS,
    OPEN_DOC,
    OPEN_TOOL,
    SEND_DOC,
    SEND_TOOL,
    Answer,
    run_tokens_of,
    session_of,
)

__all__ = [
    "AgentRunOutcome",
    "AmendsRunHooks",
    "agent_run",
    "agent_run_sync",
    "approval_message",
    "approval_requests",
    "catalog_function_tools",
    "declare",
    "follow_up_tools",
    "run_agent",
    "run_agent_sync",
    "spend",
    "undo_tool",
    "wrap_agent",
    "wrap_tools",
]

R = TypeVar("R")

_TURNS = itertools.count(1)

# Wrapped tools whose calls go straight to amends (no approval gate stops them first), and, per
# agent run, the place of each such call in the model response that listed it (AmendsRunHooks).
_ORDERED: weakref.WeakSet[Any] = weakref.WeakSet()
_LISTED: weakref.WeakKeyDictionary[AgentRun, dict[str, int]] = weakref.WeakKeyDictionary()
# The catalog name each wrapped tool's calls are recorded under (approval_requests words the
# question with that tool's contract).
_CATALOG_NAME: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

# A refusal (the request was undone) is the tool's output the model reads; the SDK rejects
# arguments that fail validation before calling the function (a refusal before acting).
_ANSWERS = Answers(refusal=str, refused=lambda exc: isinstance(exc, ModelBehaviorError))


_INVOKE_ANNOTATIONS: dict[str, Any] = {"ctx": ToolContext[Any], "args_json": str, "return": Any}
"""The annotations of a wrapped tool's ``on_invoke_tool`` as objects (see :func:`_wrap`)."""


def _the_run() -> AgentRun:
    run = current_run()
    if run is None:
        raise amends.ConfigError(
            "an amends-wrapped OpenAI Agents tool was called outside an agent run; use "
            "run_agent(engine, agent, input) or wrap Runner.run in 'async with "
            "agent_run(engine, title)' with hooks=AmendsRunHooks()"
        )
    return run


def _wrap(
    tool: FunctionTool, catalog: Catalog, names: Mapping[str, str] | None, approval: str
) -> FunctionTool:
    # The copy's own failure handler is switched off so the tool's exception reaches amends
    # (rule 9: in doubt); the original tool's handler then formats it for the model as before.
    raising = dataclasses.replace(tool)
    set_function_tool_failure_error_function(raising, None)
    catalog_name = resolve_tool_name(catalog, tool.name, names)

    async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> Any:
        try:
            args = json.loads(args_json) if args_json.strip() else {}
        except ValueError:
            args = {"arguments": args_json}
        if not isinstance(args, dict):
            args = {"arguments": args}
        run = _the_run()
        place = _LISTED.get(run, {}).get(ctx.tool_call_id) if run.turns_from_hooks else None

        async def call() -> Any:
            return await raising.on_invoke_tool(ctx, args_json)

        try:
            return await run.call_tool(
                catalog_name,
                args,
                call,
                answers=_ANSWERS,
                # With AmendsRunHooks each model call begins a turn; without them every call is
                # its own turn, depending on every step done before it (safe for undo order).
                turn=None if run.turns_from_hooks else ("openai_agents", next(_TURNS)),
                place=place,
            )
        except Exception as exc:
            answer = await maybe_invoke_function_tool_failure_error_function(
                function_tool=tool, context=ctx, error=exc
            )
            if answer is None:
                raise
            return answer

    # The SDK reads this function's signature and type hints on every call (to choose the
    # context it passes). Written as strings (this module's `from __future__ import
    # annotations`) they were compiled and evaluated anew each time, ~0.1-0.3 ms per tool
    # call (issue 25 item 6); as objects, evaluated once here, the SDK reads them as they are.
    on_invoke_tool.__annotations__ = dict(_INVOKE_ANNOTATIONS)
    _CATALOG_NAME[on_invoke_tool] = catalog_name
    if needs_approval(catalog, catalog_name, approval):
        # the SDK's human-in-the-loop: the run stops with an interruption before the call
        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, needs_approval=True)
    _ORDERED.add(on_invoke_tool)
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def wrap_tools(
    tools: Sequence[Tool],
    engine: Engine,
    *,
    names: Mapping[str, str] | None = None,
    approval: str = "off",
) -> list[Tool]:
    """Copies of ``tools`` whose function tools record each call as a step (other kinds of
    tool, e.g. hosted tools, are passed through unchanged and are not recorded).

    Args:
        tools: The agent's tools.
        engine: The engine whose catalog holds the contracts.
        names: Framework tool name -> catalog name where the default does not fit.
        approval: The approval gate: ``"off"`` (default), ``"irreversible"`` or ``"residue"``:
            such tools get ``needs_approval=True``, so the run stops with interruptions
            (:func:`approval_requests` words them); approve or reject on ``result.to_state()``
            and run again inside the same :func:`agent_run`.

    Raises:
        ConfigError: ``engine`` is not an :class:`amends.Engine`, or an unknown approval mode.
    """
    if not isinstance(engine, Engine):
        raise amends.ConfigError(f"wrap_tools needs an amends.Engine, got {engine!r}")
    check_approval(approval)
    names = check_names(names) or None
    return [
        _wrap(t, engine.catalog, names, approval)
        if isinstance(t, FunctionTool) and t.name not in NOT_STEPS  # undo, follow-ups: no steps
        else t
        for t in tools
    ]


def wrap_agent(
    agent: Agent[Any],
    engine: Engine,
    *,
    names: Mapping[str, str] | None = None,
    approval: str = "off",
) -> Agent[Any]:
    """A copy of ``agent`` whose function tools are wrapped (:func:`wrap_tools`).

    Agents reached by handoff keep their own tools; wrap them too if they act.
    """
    return agent.clone(tools=wrap_tools(agent.tools, engine, names=names, approval=approval))


def approval_requests(
    engine: Engine, result: Any, *, names: Mapping[str, str] | None = None
) -> list[tuple[Any, str]]:
    """The interruptions of a run stopped by the approval gate, each with the question to put
    to the person (the call, its class, what undo can and cannot do).

    Each call is worded with the contract of the catalog tool its calls are recorded under:
    ``names`` (as given to :func:`run_agent`), else the name the wrapped tool was given, else
    the default (dots written as underscores).

    Raises:
        ConfigError: ``names`` is not a mapping of framework tool names to catalog names.
    """
    names = check_names(names) or None
    out = []
    for item in result.interruptions:
        raw = item.raw_item
        name = item.tool_name or getattr(raw, "name", None) or "tool"
        try:
            args = json.loads(getattr(raw, "arguments", None) or "{}")
        except ValueError:
            args = {}
        tool = (
            resolve_tool_name(engine.catalog, name, names)
            if names and name in names
            else _wrapped_name(item, name) or resolve_tool_name(engine.catalog, name)
        )
        out.append(
            (item, approval_message(engine.catalog, tool, args if isinstance(args, dict) else {}))
        )
    return out


def _wrapped_name(item: Any, name: str) -> str | None:
    """The catalog name the interrupted call's wrapped tool records under, if it is one."""
    for t in getattr(getattr(item, "agent", None), "tools", ()):
        if isinstance(t, FunctionTool) and t.name == name:
            return _CATALOG_NAME.get(t.on_invoke_tool)
    return None


class AmendsRunHooks(RunHooks[Any]):
    """Run hooks that begin a turn of the enclosing :func:`agent_run` at each model call (they
    observe only). Pass them as ``Runner.run(..., hooks=AmendsRunHooks())``.

    Args:
        inner: Your own hooks, called after these.
    """

    def __init__(self, inner: RunHooks[Any] | None = None) -> None:
        self.inner = inner

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        run = current_run()
        if run is not None:
            run.turns_from_hooks = True
            run.begin_turn(("openai_agents", next(_TURNS)))
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        # The SDK runs the response's function calls concurrently; their steps are numbered in
        # the order the model listed them (AgentRun.call_tool's place).
        run = current_run()
        if run is not None:
            ordered = {
                t.name
                for t in getattr(agent, "tools", ())
                if isinstance(t, FunctionTool) and t.on_invoke_tool in _ORDERED
            }
            calls = [
                item.call_id
                for item in getattr(response, "output", ())
                if getattr(item, "type", None) == "function_call" and item.name in ordered
            ]
            _LISTED[run] = {call_id: place for place, call_id in enumerate(calls)}
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    # The other hooks only pass through to the user's.

    async def on_agent_start(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_start(*args)

    async def on_agent_end(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_end(*args)

    async def on_handoff(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(*args)

    async def on_tool_start(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(*args)

    async def on_tool_end(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(*args)


@dataclasses.dataclass(frozen=True)
class AgentRunOutcome(Generic[R]):
    """What :func:`run_agent` returns."""

    result: R
    """The SDK's ``RunResult`` (``result.final_output``)."""
    saga_id: str
    """The saga of this run: ``await engine.undo(outcome.saga_id)`` undoes it."""


async def run_agent(
    engine: Engine,
    agent: Agent[Any],
    input: Any,
    *,
    title: str | None = None,
    names: Mapping[str, str] | None = None,
    hooks: RunHooks[Any] | None = None,
    approval: str = "off",
    **runner_kwargs: Any,
) -> AgentRunOutcome[Any]:
    """``Runner.run`` with every function-tool call recorded as a step of one saga.

    Joins the enclosing :func:`agent_run` if there is one, else opens a saga titled ``title``
    (default: the input's first line) for this run. ``approval`` as in :func:`wrap_tools`.

    Raises:
        ConfigError: ``engine`` is not an :class:`amends.Engine`.
        Exception: Whatever ``Runner.run`` raises (``MaxTurnsExceeded``, a guardrail, the
            model's error), with the saga of what the run did: ``exc.amends_saga_id`` and a
            note (issue 25); the saga is closed.
    """
    wrapped = wrap_agent(agent, engine, names=names, approval=approval)
    run_hooks = AmendsRunHooks(hooks)
    enclosing = current_run()
    if enclosing is not None:
        result = await Runner.run(wrapped, input, hooks=run_hooks, **runner_kwargs)
        return AgentRunOutcome(result, enclosing.saga_id)
    async with agent_run(engine, title or title_from(input, "OpenAI Agents run")) as run:
        result = await Runner.run(wrapped, input, hooks=run_hooks, **runner_kwargs)
    return AgentRunOutcome(result, run.saga_id)


def run_agent_sync(
    engine: Engine,
    agent: Agent[Any],
    input: Any,
    *,
    title: str | None = None,
    names: Mapping[str, str] | None = None,
    hooks: RunHooks[Any] | None = None,
    approval: str = "off",
    **runner_kwargs: Any,
) -> AgentRunOutcome[Any]:
    """:func:`run_agent` for synchronous code (the SDK's ``Runner.run_sync`` runs an event loop
    too, so this does the same with :func:`amends.run`)."""
    return amends.run(
        run_agent(
            engine,
            agent,
            input,
            title=title,
            names=names,
            hooks=hooks,
            approval=approval,
            **runner_kwargs,
        )
    )


def catalog_function_tools(catalog: Catalog, tools: Sequence[str] | None = None) -> list[Tool]:
    """Function tools that run catalog tools (all, or those named), named with dots as
    underscores (``crm_update_field``): the alternative of registering a tool once in the
    catalog. Use them through :func:`run_agent` / :func:`wrap_agent`.

    Raises:
        ContractError: A name not in the catalog.
    """
    names = list(tools) if tools is not None else [spec.name for spec in catalog]
    return [
        function_tool(catalog_tool_function(catalog, n), name_override=framework_name(n))
        for n in names
    ]


def undo_tool(budget: amends.Budget | None = None) -> FunctionTool:
    """A function tool the agent can call to undo everything its run has done so far
    (``amends_undo``); it answers with the honest report. Use it with :func:`run_agent` (or
    inside :func:`agent_run`); it is never recorded as a step itself."""
    return function_tool(undo_tool_functions(budget)[1], name_override=UNDO_TOOL)


class _NotSent(Exception):
    """A follow-up tool's error answer: the SDK's failure handler hands the model its text."""


def _error_text(ctx: Any, error: Exception) -> str:
    return str(error)


def follow_up_tools(agent: amends.FollowUpAgent) -> list[FunctionTool]:
    """Function tools with which an agent handles the open manual actions of a reversal
    (issue 27, docs/follow-ups.md): ``amends_open_actions`` lists them (drafts, recipients),
    ``amends_follow_up`` proposes one follow-up, ``amends_follow_up_status`` says what is left.

    ``agent`` is ``engine.follow_up_agent(saga_id, by=..., allow=[...], approve=...)``: every
    proposal passes its approval gate and the reversal's budget (the tokens of the run's usage
    since the previous proposal count as that proposal's); read ``agent.outcomes`` and
    ``agent.left`` after the run. A follow-up not sent (refused, the budget spent, the vendor
    refused) is a tool error the model reads (the tool's failure handler); the run goes on.
    Run them with ``Runner.run`` or :func:`run_agent`; they are never steps of a saga.

    Raises:
        ConfigError: ``agent`` is not an ``amends.FollowUpAgent``.
    """
    session = session_of(agent)

    def answer(a: Answer) -> str:
        if not a.ok:
            raise _NotSent(a.text)
        return a.text

    async def open_actions() -> str:
        return answer(await session.open_actions())

    async def send(ctx: ToolContext[Any], step_id: str, tool: str, args: dict[str, Any]) -> str:
        return answer(await session.send(step_id, tool, args, run_tokens_of(ctx.usage)))

    async def left() -> str:
        return answer(await session.left())

    return [
        function_tool(
            fn,
            name_override=name,
            description_override=doc,
            failure_error_function=_error_text,
            strict_mode=False,  # args: any object
        )
        for name, doc, fn in (
            (OPEN_TOOL, OPEN_DOC, open_actions),
            (SEND_TOOL, SEND_DOC, send),
            (LEFT_TOOL, LEFT_DOC, left),
        )
    ]
