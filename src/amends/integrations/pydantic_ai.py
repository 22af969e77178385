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

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

import amends
from amends import Catalog, Engine

from ._agents import (
    UNDO_TOOL,
    AgentRun,
    agent_run,
    agent_run_sync,
    approval_message,
    catalog_tool_function,
    check_approval,
    current_run,
    declare,
    end_run,
    needs_approval,
    resolve_tool_name,
    spend,
    start_run,
    title_from,
    undo_tool_functions,
)

__all__ = [
    "AmendsToolset",
    "agent_run",
    "agent_run_sync",
    "approval_message",
    "catalog_toolset",
    "declare",
    "spend",
    "undo_tool",
]


def _turn_of(ctx: RunContext[Any]) -> tuple[Hashable, int | None]:
    """The model response that asked for this call (the ids of its tool calls: stable when a
    deferred, approved call runs in a later agent run, unlike the run step) and the call's place
    among the calls it listed."""
    for msg in reversed(ctx.messages):
        if isinstance(msg, ModelResponse):
            ids = [p.tool_call_id for p in msg.parts if isinstance(p, ToolCallPart)]
            if ctx.tool_call_id in ids:
                return ("pydantic_ai", frozenset(ids)), ids.index(ctx.tool_call_id)
    return ("pydantic_ai", ctx.run_id, ctx.run_step), None  # one model response per run step


@dataclasses.dataclass
class _PerRun:
    title: str
    own: AgentRun | None = None


@dataclasses.dataclass
class AmendsToolset(WrapperToolset[Any]):
    """Wraps a toolset so that each of its tool calls is a step of the run's saga.

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

    def __post_init__(self) -> None:
        if not isinstance(self.engine, Engine):
            raise amends.ConfigError(
                f"AmendsToolset needs engine=amends.Engine(...), got {self.engine!r}; e.g. "
                f"AmendsToolset(FunctionToolset([...]), engine=engine)"
            )
        check_approval(self.approval)

    @property
    def _engine(self) -> Engine:
        assert self.engine is not None  # checked in __post_init__
        return self.engine

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        # A fresh copy per agent run, so concurrent runs of one agent keep separate sagas.
        wrapped = await self.wrapped.for_run(ctx)
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else None
        title = self.title or title_from(prompt, "Pydantic AI agent run")
        return dataclasses.replace(self, wrapped=wrapped, _per_run=_PerRun(title), _parent=self)

    async def __aenter__(self) -> AmendsToolset:
        await super().__aenter__()
        per_run = self._per_run
        if per_run is not None and current_run() is None and per_run.own is None:
            per_run.own = await start_run(self._engine, per_run.title)
        run = current_run() or (per_run.own if per_run else None)
        if run is not None:
            self._remember(run.saga_id)
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        per_run = self._per_run
        try:
            if per_run is not None and per_run.own is not None:
                own, per_run.own = per_run.own, None
                await end_run(own)
        finally:
            result = await super().__aexit__(*args)
        return result

    def _remember(self, saga_id: str) -> None:
        self.last_saga_id = saga_id
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

        turn, place = _turn_of(ctx)
        if name == UNDO_TOOL:  # not a step: it undoes the saga its steps belong to
            self._run().begun(place, turn)
            with self._run().activate():
                return await call()
        catalog_name = resolve_tool_name(self._engine.catalog, name, self.names)
        catalog = self._engine.catalog
        if needs_approval(catalog, catalog_name, self.approval) and not ctx.tool_call_approved:
            # the framework's human-in-the-loop: the call is deferred, nothing has run
            self._run().begun(place, turn)
            raise ApprovalRequired(
                metadata={"amends_approval": approval_message(catalog, catalog_name, tool_args)}
            )
        return await self._run().call_tool(
            catalog_name,
            dict(tool_args),
            call,
            turn=turn,
            place=place,
            refused=lambda exc: isinstance(exc, ModelRetry),
        )


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
