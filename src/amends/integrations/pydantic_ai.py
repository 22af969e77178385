"""Pydantic AI: a wrapper toolset whose every tool call is a step of an amends saga.

```python
from amends.integrations.pydantic_ai import AmendsToolset

toolset = AmendsToolset(FunctionToolset([...]), engine=engine)  # contracts by tool name
agent = Agent(model, toolsets=[toolset])
result = await agent.run("Close the ACME deal")               # or agent.run_sync(...)
report = await engine.undo(toolset.last_saga_id)
```

Without an enclosing :func:`agent_run`, each agent run is one saga titled with the prompt; inside
``async with agent_run(engine, "title") as run:`` every run joins that saga. A tool raising
``ModelRetry`` refused before acting: its step is ``failed``, not ``in_doubt``. Requires the
``amends[pydantic-ai]`` extra; ``import amends`` never imports Pydantic AI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import to_jsonable_python

import amends
from amends import Catalog, Engine

from ._agent_parts import (
    approval_message,
    catalog_tool_function,
    check_approval,
    check_names,
    declare,
    needs_approval,
    resolve_tool_name,
    spend,
    title_from,
)
from ._agents import (
    AgentRun,
    Answers,
    agent_run,
    agent_run_sync,
    current_run,
    end_run,
    note_failure,
    start_run,
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
    run_tokens_of,
    session_of,
)

__all__ = [
    "AmendsToolset",
    "agent_run",
    "agent_run_sync",
    "approval_message",
    "catalog_toolset",
    "declare",
    "follow_up_tools",
    "spend",
    "undo_tool",
]

# A refusal (the request was undone) is the tool's answer: Pydantic AI has no error answer that
# does not count against the tool's retries (ModelRetry would end the run after a few).
_ANSWERS = Answers(refusal=str, refused=lambda exc: isinstance(exc, ModelRetry))


def _turn_of(ctx: RunContext[Any]) -> tuple[Hashable, int | None, ToolCallPart | None]:
    """The model response that asked for this call (its turn), the call's place among the calls
    it listed, and the call as the model sent it.

    A turn is identified by its response, not by its tool-call ids, which a later response may
    reuse (issue 25 item 9): the run that produced it, its place in the conversation and its
    time. All three travel with the message history, so a deferred call approved in a later run
    keeps its original turn."""
    for index in range(len(ctx.messages) - 1, -1, -1):
        msg = ctx.messages[index]
        if isinstance(msg, ModelResponse):
            calls = [p for p in msg.parts if isinstance(p, ToolCallPart)]
            for place, part in enumerate(calls):
                if part.tool_call_id == ctx.tool_call_id:
                    return ("pydantic_ai", msg.run_id, index, msg.timestamp), place, part
    return ("pydantic_ai", ctx.run_id, ctx.run_step), None, None  # one response per run step


_PLAIN = (str, int, float, bool, type(None))


def _sent(
    tool_args: dict[str, Any], part: ToolCallPart | None, schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The arguments the model sent, by the tool's parameter names, without the defaults it
    never sent (issue 25 item 9: the step reads as in every other framework).

    Plain values are the validated ones; any other (a Pydantic model, a date) is the JSON the
    model sent for it, as the other frameworks log it, not a ``repr``. ``schema`` is the tool's
    JSON schema: a parameter it does not name was sent under another name (an alias, or the
    fields of a tool's one model argument, which Pydantic AI lets the model send unwrapped), so
    it is kept, never mistaken for a default; ``None``: the schema names every parameter."""
    if part is None:
        return dict(tool_args)
    sent = part.args
    if type(sent) is not dict:  # a dict is what args_as_dict() returns as it is
        try:
            sent = part.args_as_dict()
        except Exception:  # arguments Pydantic AI could read are in tool_args anyway
            return dict(tool_args)
    named = tool_args if schema is None else schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name, value in tool_args.items():
        if name in sent:
            out[name] = value if type(value) in _PLAIN else sent[name]
        elif name not in named:  # sent under another name: never a default
            if type(value) in _PLAIN:  # under its alias
                out[name] = value
            elif len(tool_args) == 1:  # the tool's one model argument, its fields unwrapped
                out[name] = dict(sent)
            else:
                out[name] = to_jsonable_python(value)
    return out


@dataclasses.dataclass
class _PerRun:
    title: str
    own: AgentRun | None = None
    handled: BaseException | None = None
    """The exception being handled where the run began (``agent.run`` called inside an
    ``except`` block): not the run's own failure when the toolset is left."""


@dataclasses.dataclass
class AmendsToolset(WrapperToolset[Any]):
    """Wraps a toolset so that each of its tool calls is a step of the run's saga.

    The saga of a run: :meth:`saga_id_of` (``toolset.saga_id_of(result)``; concurrent runs each
    have their own) or :attr:`last_saga_id`. A run that raises closes its saga, and the
    exception carries its id (``exc.amends_saga_id`` and a note), given as
    ``Agent(toolsets=[toolset])`` or as ``Agent(capabilities=[toolset.capability])``.

    Args:
        wrapped: The toolset whose tools the agent calls (e.g. a ``FunctionToolset``).
        engine: The engine whose catalog holds the contracts and whose log records the saga.
        title: Saga title of runs this toolset opens; default the prompt's first line.
        names: Framework tool name -> catalog name where the default (exact name, or dots written
            as underscores) does not fit.
        approval: The approval gate: ``"off"`` (default), ``"irreversible"`` or ``"residue"``.
            Such a call is deferred with Pydantic AI's ``ApprovalRequired`` (metadata
            ``{"amends_approval": question}``), so the run ends with ``DeferredToolRequests``
            (add it to the agent's ``output_type``); run again with
            ``deferred_tool_results=DeferredToolResults(approvals={call_id: True | False})``
            inside the same :func:`agent_run`. Nothing is recorded before approval.
    """

    engine: Engine | None = None
    title: str | None = None
    names: Mapping[str, str] | None = None
    approval: str = "off"
    last_saga_id: str | None = dataclasses.field(default=None, compare=False)
    _per_run: _PerRun | None = dataclasses.field(default=None, compare=False, repr=False)
    _parent: AmendsToolset | None = dataclasses.field(default=None, compare=False, repr=False)
    _by_run: dict[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """The saga of each run this toolset (or its per-run copies) recorded, by run id."""
    _run_id: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.engine, Engine):
            raise amends.ConfigError(
                f"AmendsToolset needs engine=amends.Engine(...), got {self.engine!r}; e.g. "
                f"AmendsToolset(FunctionToolset([...]), engine=engine)"
            )
        check_approval(self.approval)
        self.names = check_names(self.names) or None

    @property
    def _engine(self) -> Engine:
        assert self.engine is not None  # checked in __post_init__
        return self.engine

    @property
    def capability(self) -> AbstractCapability[Any]:
        """This toolset as a Pydantic AI capability: ``Agent(capabilities=[toolset.capability])``
        registers the toolset and gives the exception of a run that fails, however it fails,
        the saga of what the run did (issue 25)."""
        return _Amends(self._parent or self)

    def saga_id_of(self, run: Any) -> str | None:
        """The saga of one agent run: ``run`` is its result (``AgentRunResult``,
        ``StreamedRunResult``, an ``AgentRun``) or its ``run_id``; ``None`` if this toolset
        recorded no such run."""
        run_id = run if isinstance(run, str) else getattr(run, "run_id", None)
        return self._by_run.get(run_id) if isinstance(run_id, str) else None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        # A fresh copy per agent run, so concurrent runs of one agent keep separate sagas.
        wrapped = await self.wrapped.for_run(ctx)
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else None
        title = self.title or title_from(prompt, "Pydantic AI agent run")
        parent = self._parent or self
        return dataclasses.replace(
            self,
            wrapped=wrapped,
            _per_run=_PerRun(title),
            _parent=parent,
            _by_run=parent._by_run,
            _run_id=ctx.run_id,
        )

    async def __aenter__(self) -> AmendsToolset:
        await super().__aenter__()
        per_run = self._per_run
        if per_run is not None and current_run() is None and per_run.own is None:
            per_run.own = await start_run(self._engine, per_run.title)
            per_run.handled = sys.exc_info()[1]
        run = current_run() or (per_run.own if per_run else None)
        if run is not None:
            self._remember(run.saga_id)
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        per_run = self._per_run
        exc = args[1] if len(args) > 1 else None
        failure = exc
        if failure is None and per_run is not None and per_run.own is not None:
            # Pydantic AI leaves a failed run's toolsets from the handler of the run's error,
            # telling them nothing (a model error, a usage limit): that error is the one being
            # handled here, unless it was already being handled where the run began. Without
            # this, toolsets= gave a failed run's exception no saga id (issue 25 item 4; only
            # capabilities= did, through on_run_error).
            handled = sys.exc_info()[1]
            if handled is not None and handled is not per_run.handled:
                failure = handled
        task = asyncio.current_task()
        if exc is None and task is not None and task.cancelling():
            # Pydantic AI leaves a cancelled run's toolsets before it cancels the tools still
            # running: said so, the saga cancels them (their steps end in_doubt, rule 9) rather
            # than wait for them (issue 25 item 5: the cancel waited for the tool).
            exc = asyncio.CancelledError()
        try:
            if per_run is not None and per_run.own is not None:
                own, per_run.own = per_run.own, None
                if failure is not None:  # issue 25 item 4: the run's handle
                    note_failure(failure, own.saga_id)
                # a cancellation cancels the tools still running; a failure raises no step error
                # over the run's own
                await end_run(own, exc or failure)
        finally:
            result = await super().__aexit__(*args)
        return result

    def _remember(self, saga_id: str) -> None:
        self.last_saga_id = saga_id
        if self._run_id is not None:
            self._by_run[self._run_id] = saga_id
        if self._parent is not None:
            self._parent.last_saga_id = saga_id

    def _run(self) -> AgentRun:
        run = current_run() or (self._per_run.own if self._per_run else None)
        if run is None:
            raise amends.ConfigError(
                "an AmendsToolset tool was called outside an agent run; pass the toolset to "
                "Agent(toolsets=[...]) or agent.run(toolsets=[...]), or wrap the run in "
                "'async with agent_run(engine, title)'"
            )
        return run

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        async def call() -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        turn, place, part = _turn_of(ctx)
        run = self._run()
        if name in NOT_STEPS:  # undo (it undoes this saga), follow-ups (of the reversal)
            run.begun(place, turn)
            with run.activate():
                return await call()
        engine = self.engine  # not the _engine property: a call fewer per tool call
        assert engine is not None  # checked in __post_init__
        catalog = engine.catalog
        catalog_name = resolve_tool_name(catalog, name, self.names)
        if (
            self.approval != "off"  # the common case, answered without a call (issue 25 item 6)
            and needs_approval(catalog, catalog_name, self.approval)
            and not ctx.tool_call_approved
        ):
            # the framework's human-in-the-loop: the call is deferred, nothing has run
            run.begun(place, turn)
            raise ApprovalRequired(
                metadata={"amends_approval": approval_message(catalog, catalog_name, tool_args)}
            )
        return await run.call_tool(
            catalog_name,
            _sent(tool_args, part, tool.tool_def.parameters_json_schema),
            call,
            answers=_ANSWERS,
            turn=turn,
            place=place,
        )


@dataclasses.dataclass
class _Amends(AbstractCapability[Any]):
    """:attr:`AmendsToolset.capability`: registers the toolset, and names the saga in the
    exception of a run that fails (``on_run_error`` sees every way a run ends)."""

    toolset: AmendsToolset

    def get_toolset(self) -> AbstractToolset[Any]:
        return self.toolset

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        saga_id = self.toolset.saga_id_of(ctx.run_id)
        if saga_id is not None:
            note_failure(error, saga_id)
        raise error


def catalog_toolset(catalog: Catalog, tools: Sequence[str] | None = None) -> FunctionToolset[Any]:
    """A ``FunctionToolset`` of catalog tools (all, or those named), each named with dots as
    underscores (``crm_update_field``): the alternative of registering a tool once in the
    catalog. Wrap it in :class:`AmendsToolset` so each call records its inverse.

    Raises:
        ContractError: A name not in the catalog.
    """
    names = list(tools) if tools is not None else [spec.name for spec in catalog]
    return FunctionToolset(
        [catalog_tool_function(catalog, n) for n in names],
    )


def undo_tool(budget: amends.Budget | None = None) -> Any:
    """A tool function the agent can call to undo everything its run has done so far
    (``amends_undo``); it answers with the honest report. Put it in the toolset you wrap in
    :class:`AmendsToolset`; it is never recorded as a step itself."""
    return undo_tool_functions(budget)[1]


def follow_up_tools(agent: amends.FollowUpAgent) -> FunctionToolset[Any]:
    """A ``FunctionToolset`` with which an agent handles the open manual actions of a reversal
    (issue 27, docs/follow-ups.md): ``amends_open_actions`` lists them (drafts, recipients),
    ``amends_follow_up`` proposes one follow-up, ``amends_follow_up_status`` says what is left.

    ``agent`` is ``engine.follow_up_agent(saga_id, by=..., allow=[...], approve=...)``: every
    proposal passes its approval gate and the reversal's budget (the tokens of the run's usage
    since the previous proposal count as that proposal's); read ``agent.outcomes`` and
    ``agent.left`` after the run. A follow-up not sent (refused, the budget spent, the vendor
    refused) is an answer starting ``amends:`` that the model reads, not ``ModelRetry`` (which
    would end the run after a few). The tools are never steps of a saga, even wrapped in
    :class:`AmendsToolset`.

    Raises:
        ConfigError: ``agent`` is not an ``amends.FollowUpAgent``.
    """
    session = session_of(agent)

    async def open_actions() -> str:
        return (await session.open_actions()).text

    async def send(ctx: RunContext[Any], step_id: str, tool: str, args: dict[str, Any]) -> str:
        return (await session.send(step_id, tool, args, run_tokens_of(ctx.usage))).text

    async def left() -> str:
        return (await session.left()).text

    toolset: FunctionToolset[Any] = FunctionToolset()
    toolset.add_function(open_actions, name=OPEN_TOOL, description=OPEN_DOC)
    toolset.add_function(send, name=SEND_TOOL, description=SEND_DOC)
    toolset.add_function(left, name=LEFT_TOOL, description=LEFT_DOC)
    return toolset
