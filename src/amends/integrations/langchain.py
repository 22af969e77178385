"""LangChain / LangGraph: every tool call of an agent becomes a step of an amends saga.

```python
from amends.integrations.langchain import AmendsMiddleware

amends_mw = AmendsMiddleware(engine)                    # contracts from engine.catalog by name
agent = create_agent(model, tools, middleware=[amends_mw])
await agent.ainvoke({"messages": [("user", "Close the ACME deal")]})
report = await engine.undo(amends_mw.last_saga_id)
```

Without an enclosing :func:`agent_run`, each agent run is one saga titled with the user's
request; inside ``async with agent_run(engine, "title") as run:`` every run joins that saga. For a
hand-built LangGraph graph, :func:`amends_tool_node` is a ``ToolNode`` doing the same (it needs
an enclosing :func:`agent_run`). Requires the ``amends[langchain]`` extra; ``import amends``
never imports LangChain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

import amends
from amends import Catalog, Engine

from ._agents import (
    UNDO_TOOL,
    AgentRun,
    SyncAgentRun,
    agent_run,
    agent_run_sync,
    approval_message,
    catalog_tool_function,
    check_approval,
    current_run,
    declare,
    end_run,
    framework_name,
    needs_approval,
    refusal_text,
    resolve_tool_name,
    spend,
    start_run,
    title_from,
    undo_tool_functions,
)

__all__ = [
    "AmendsMiddleware",
    "agent_run",
    "agent_run_sync",
    "amends_tool_node",
    "approval_message",
    "catalog_tools",
    "declare",
    "spend",
    "undo_tool",
]

Handler = Callable[[ToolCallRequest], Any]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Any]]


def _messages(state: Any) -> Sequence[BaseMessage]:
    if isinstance(state, Mapping):
        msgs = state.get("messages", ())
    else:
        msgs = getattr(state, "messages", state if isinstance(state, list) else ())
    return msgs if isinstance(msgs, Sequence) else ()


def _turn_of(request: ToolCallRequest) -> tuple[Hashable | None, int | None]:
    """The model response that asked for this tool call (one model turn) and the call's place
    among the calls it listed, or ``(None, None)``."""
    call_id = request.tool_call.get("id")
    for msg in reversed(_messages(request.state)):
        if isinstance(msg, AIMessage):
            for place, tc in enumerate(msg.tool_calls):
                if tc.get("id") == call_id:
                    return ("lc", msg.id or id(msg)), place
    return None, None


def _reported_error(answer: Any) -> str | None:
    # ToolNode turns some exceptions into an error ToolMessage (handle_tool_errors): the tool
    # began and failed, so its effect is unknown (rule 9).
    if isinstance(answer, ToolMessage) and answer.status == "error":
        return str(answer.content)
    return None


def _refused_answer(answer: Any) -> str | None:
    # ToolNode's own answer to arguments that fail validation (ToolInvocationError): the tool
    # never ran. Any other error answer stays in doubt.
    if (
        isinstance(answer, ToolMessage)
        and answer.status == "error"
        and str(answer.content).startswith("Error invoking tool '")
    ):
        return str(answer.content)
    return None


def _loggable(answer: Any) -> Any:
    if isinstance(answer, ToolMessage):
        return answer.artifact if answer.artifact is not None else answer.content
    return {"repr": repr(answer)}


def _title(state: Any) -> str:
    for msg in reversed(_messages(state)):
        if isinstance(msg, HumanMessage):
            return title_from(msg.content if isinstance(msg.content, str) else msg.text)
    return "LangChain agent run"


class AmendsMiddleware(AgentMiddleware):
    """``create_agent(..., middleware=[AmendsMiddleware(engine)])``: one saga per agent run,
    one step per tool call, sync (``invoke``) and async (``ainvoke``).

    Args:
        engine: The engine whose catalog holds the tools' contracts and whose log records the
            saga.
        title: The saga title of runs this middleware opens; default the user's message.
        names: Framework tool name -> catalog name, where :func:`resolve_tool_name`'s default
            (exact name, or dots written as underscores) does not fit.
        approval: The approval gate: ``"off"`` (default), ``"irreversible"`` or ``"residue"``.
            Before such a call the graph is paused with a LangGraph ``interrupt`` carrying
            ``{"amends_approval": message, "tool", "args", "tool_call_id"}``; resume with
            ``Command(resume=True)`` to run it or ``Command(resume=False)`` to refuse it (the
            model is told; nothing is recorded). Needs a checkpointer, like every interrupt.

    Raises:
        ConfigError: ``engine`` is not an :class:`amends.Engine`, or an unknown approval mode.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        title: str | None = None,
        names: Mapping[str, str] | None = None,
        approval: str = "off",
    ) -> None:
        super().__init__()
        if not isinstance(engine, Engine):
            raise amends.ConfigError(
                f"AmendsMiddleware needs an amends.Engine, got {engine!r}; e.g. "
                f"AmendsMiddleware(amends.Engine(catalog))"
            )
        self.engine = engine
        self.title = title
        self.names = dict(names or {})
        self.approval = check_approval(approval)
        self.last_saga_id: str | None = None
        """The saga of the latest run (the one it opened or the enclosing one it joined)."""
        self._own: AgentRun | None = None
        self._own_sync: SyncAgentRun | None = None

    # --- one saga per agent run, unless an agent_run() encloses it ------------------------
    def _check_free(self) -> None:
        if self._own is not None or self._own_sync is not None:
            raise amends.ConfigError(
                "this AmendsMiddleware is already recording another agent run (running now, "
                "or paused by an approval interrupt and not resumed); for concurrent runs wrap "
                "each in 'async with agent_run(engine, title)' (or agent_run_sync)"
            )

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        enclosing = current_run()
        if enclosing is not None:
            self.last_saga_id = enclosing.saga_id
            return None
        self._check_free()
        self._own_sync = SyncAgentRun(self.engine, self.title or _title(state))
        self.last_saga_id = self._own_sync.run.saga_id
        return None

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._close_own_sync()
        return None

    def _close_own_sync(self) -> None:
        own, self._own_sync = self._own_sync, None
        if own is not None:
            own.close()

    async def _close_own(self) -> None:
        own, self._own = self._own, None
        if own is not None:
            await end_run(own)
        self._close_own_sync()

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        enclosing = current_run()
        if enclosing is not None:
            self.last_saga_id = enclosing.saga_id
            return None
        self._check_free()
        self._own = await start_run(self.engine, self.title or _title(state))
        self.last_saga_id = self._own.saga_id
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await self._close_own()
        return None

    def _run(self) -> AgentRun:
        run = current_run()
        if run is None and self._own is not None:
            run = self._own
        if run is None and self._own_sync is not None:
            run = self._own_sync.run
        if run is None:
            raise amends.ConfigError(
                "an amends-wrapped tool was called outside an agent run; use the middleware "
                "with create_agent, or wrap the graph run in 'async with agent_run(engine, "
                "title)' (agent_run_sync for invoke)"
            )
        return run

    # --- each tool call is a step ---------------------------------------------------------
    def _gate(self, request: ToolCallRequest, tool: str) -> ToolMessage | None:
        """The approval gate: ``None`` to go ahead, else the refusal answer for the model."""
        if not needs_approval(self.engine.catalog, tool, self.approval):
            return None
        from langgraph.types import interrupt

        tc = request.tool_call
        args = dict(tc.get("args") or {})
        answer = interrupt(  # pauses the graph; returns the value it is resumed with
            {
                "amends_approval": approval_message(self.engine.catalog, tool, args),
                "tool": tool,
                "args": args,
                "tool_call_id": tc.get("id"),
            }
        )
        if answer is True or (isinstance(answer, Mapping) and answer.get("approve") is True):
            return None
        return ToolMessage(
            content=refusal_text(tool, self.engine.catalog),
            tool_call_id=tc.get("id") or "",
            name=tc.get("name"),
            status="error",
        )

    def _not_a_step(self, turn: Hashable | None, place: int | None) -> None:
        """The calls listed after this one in its turn need not wait for it (see
        :meth:`AgentRun.begun`)."""
        with contextlib.suppress(amends.ConfigError):  # no run: no call waits either
            self._run().begun(place, turn)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> Any:
        tc = request.tool_call
        turn, place = _turn_of(request)
        if tc["name"] == UNDO_TOOL:  # not a step: it undoes the saga its steps belong to
            self._not_a_step(turn, place)
            with self._run().activate():
                return handler(request)
        if request.tool is None:  # a tool the agent does not have: ToolNode answers, none runs
            self._not_a_step(turn, place)
            return handler(request)
        tool = resolve_tool_name(self.engine.catalog, tc["name"], self.names)
        try:
            refused = self._gate(request, tool)
            if refused is not None:
                self._not_a_step(turn, place)
                return refused
            return self._run().call_tool_sync(
                tool,
                dict(tc.get("args") or {}),
                lambda: handler(request),
                turn=turn,
                place=place,
                reported_error=_reported_error,
                refused_answer=_refused_answer,
                loggable=_loggable,
            )
        except GraphBubbleUp:  # an interrupt pauses the run; its saga stays open for the resume
            self._not_a_step(turn, place)
            raise
        except Exception:
            self._close_own_sync()  # the exception ends the agent run: after_agent never runs
            raise

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> Any:
        tc = request.tool_call
        turn, place = _turn_of(request)
        if tc["name"] == UNDO_TOOL:  # not a step: it undoes the saga its steps belong to
            self._not_a_step(turn, place)
            with self._run().activate():
                return await handler(request)
        if request.tool is None:  # a tool the agent does not have: ToolNode answers, none runs
            self._not_a_step(turn, place)
            return await handler(request)
        tool = resolve_tool_name(self.engine.catalog, tc["name"], self.names)

        async def call() -> Any:
            return await handler(request)

        try:
            refused = self._gate(request, tool)
            if refused is not None:
                self._not_a_step(turn, place)
                return refused
            return await self._run().call_tool(
                tool,
                dict(tc.get("args") or {}),
                call,
                turn=turn,
                place=place,
                reported_error=_reported_error,
                refused_answer=_refused_answer,
                loggable=_loggable,
            )
        except GraphBubbleUp:  # an interrupt pauses the run; its saga stays open for the resume
            self._not_a_step(turn, place)
            raise
        except Exception:
            await self._close_own()  # the exception ends the agent run: after_agent never runs
            raise

    # A failing model call ends the run too; close the saga this middleware opened for it.
    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            self._close_own_sync()
            raise

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            return await handler(request)
        except GraphBubbleUp:
            raise
        except Exception:
            await self._close_own()
            raise


def amends_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    engine: Engine,
    *,
    names: Mapping[str, str] | None = None,
    approval: str = "off",
    **tool_node_kwargs: Any,
) -> ToolNode:
    """A LangGraph ``ToolNode`` whose every tool call is a step of the enclosing
    :func:`agent_run` (sync and async graphs); ``approval`` as in :class:`AmendsMiddleware`.

    Raises:
        ConfigError: ``engine`` is not an :class:`amends.Engine`, or an unknown approval mode.
    """
    mw = AmendsMiddleware(engine, names=names, approval=approval)
    return ToolNode(
        tools,
        wrap_tool_call=mw.wrap_tool_call,
        awrap_tool_call=mw.awrap_tool_call,
        **tool_node_kwargs,
    )


def _schema(fn: Callable[..., Any]) -> Any:
    from langchain_core.tools import create_schema_from_function

    return create_schema_from_function(fn.__name__, fn)


def catalog_tools(catalog: Catalog, tools: Sequence[str] | None = None) -> list[StructuredTool]:
    """LangChain tools that run catalog tools (all, or those named): the alternative of
    registering a tool once in the catalog and handing the agent the wrapped version.

    Each is named like the catalog tool with dots as underscores (``crm_update_field``), takes
    the catalog function's parameters minus ``call``, and must run under the middleware.

    Raises:
        ContractError: A name not in the catalog.
    """
    names = list(tools) if tools is not None else [spec.name for spec in catalog]
    out = []
    for name in names:
        fn = catalog_tool_function(catalog, name)

        def sync_fn(__fn: Callable[..., Awaitable[Any]] = fn, **kwargs: Any) -> Any:
            return amends.run(__fn(**kwargs))  # invoke(): runs in ToolNode's worker thread

        out.append(
            StructuredTool.from_function(
                func=sync_fn,
                coroutine=fn,
                name=framework_name(name),
                description=fn.__doc__ or name,
                args_schema=_schema(fn),
            )
        )
    return out


def undo_tool(budget: amends.Budget | None = None) -> StructuredTool:
    """A tool the agent can call to undo everything its run has done so far (``amends_undo``);
    it answers with the honest report. Give it to an agent that has :class:`AmendsMiddleware`
    (or a graph with :func:`amends_tool_node`); it is never recorded as a step itself."""
    sync_fn, async_fn = undo_tool_functions(budget)
    return StructuredTool.from_function(
        func=sync_fn, coroutine=async_fn, name=UNDO_TOOL, description=async_fn.__doc__ or ""
    )
