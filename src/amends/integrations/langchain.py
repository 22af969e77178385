"""LangChain / LangGraph: every tool call of an agent becomes a step of an amends saga.

```python
from amends.integrations.langchain import AmendsMiddleware

amends_mw = AmendsMiddleware(engine)                    # contracts from engine.catalog by name
agent = create_agent(model, tools, middleware=[amends_mw])
out = await agent.ainvoke({"messages": [("user", "Close the ACME deal")]})
report = await engine.undo(out["amends_saga_id"])      # or amends_mw.last_saga_id
```

Without an enclosing :func:`agent_run`, each agent run is one saga titled with the user's
request (concurrent runs each have their own; the run's state carries its id); inside
``async with agent_run(engine, "title") as run:`` every run joins that saga. However a run ends
(an exception, a recursion limit, a cancellation), its saga is closed and the exception carries
the saga id. For a hand-built LangGraph graph, :func:`amends_tool_node` is a ``ToolNode`` doing
the same (it needs an enclosing :func:`agent_run`). Requires the ``amends[langchain]`` extra;
``import amends`` never imports LangChain.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import sys
import threading
import types
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping, Sequence
from types import CodeType
from typing import Annotated, Any, NotRequired, cast

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.callbacks import manager as _lc_callbacks_manager
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import config as _lc_runnables_config
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.tracers.context import register_configure_hook
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.pregel import Pregel
from pydantic import BaseModel

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
    refusal_text,
    resolve_tool_name,
    shown_args,
    spend,
    title_from,
)
from ._agents import (
    UNDO_TOOL,
    AgentRun,
    Answers,
    SyncAgentRun,
    agent_run,
    agent_run_sync,
    continue_run,
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
    Answer,
    run_tokens_of,
    session_of,
)

__all__ = [
    "AmendsMiddleware",
    "AmendsState",
    "agent_run",
    "agent_run_sync",
    "amends_tool_node",
    "approval_message",
    "catalog_tools",
    "declare",
    "follow_up_tools",
    "spend",
    "undo_tool",
]

Handler = Callable[[ToolCallRequest], Any]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Any]]

SAGA_KEY = "amends_saga_id"
"""The agent state key holding the saga of the run (``out["amends_saga_id"]``)."""


class AmendsState(AgentState):
    """The agent state with the run's saga id (written by :class:`AmendsMiddleware`)."""

    amends_saga_id: NotRequired[Annotated[str, OmitFromInput]]


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
    # ToolNode turns some exceptions into an error ToolMessage (handle_tool_errors, its own
    # argument validation): whether the tool began decides what it means (Answers, `ran`).
    if isinstance(answer, ToolMessage) and answer.status == "error":
        return str(answer.content)
    return None


def _loggable(answer: Any) -> Any:
    if isinstance(answer, ToolMessage):
        return answer.artifact if answer.artifact is not None else answer.content
    return {"repr": repr(answer)}


def _answers(request: ToolCallRequest) -> Answers:
    tc = request.tool_call

    def refusal(text: str) -> ToolMessage:
        return ToolMessage(
            content=text, tool_call_id=tc.get("id") or "", name=tc.get("name"), status="error"
        )

    return Answers(refusal=refusal, reported_error=_reported_error, loggable=_loggable)


class _Began:
    __slots__ = ("began",)

    def __init__(self) -> None:
        self.began = False


_BEGAN: contextvars.ContextVar[_Began | None] = contextvars.ContextVar(
    "amends_lc_began", default=None
)
_WATCHED: dict[int, tuple[weakref.ref[BaseTool], BaseTool]] = {}


def _watched(tool: BaseTool) -> BaseTool:
    """A copy of ``tool`` that notes, in the call's :data:`_BEGAN`, when the tool's own code
    begins: after ToolNode validated the arguments (issue 25 item 8: arguments it rejects never
    ran, whatever ``handle_tool_errors`` makes of the error). One copy per tool, kept while the
    tool lives."""
    key = id(tool)
    held = _WATCHED.get(key)
    if held is not None and held[0]() is tool:
        return held[1]
    copy = tool.model_copy()
    for name in ("_run", "_arun"):
        original = getattr(tool, name)

        @functools.wraps(original)  # BaseTool passes config/run_manager by its signature
        def began(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            seen = _BEGAN.get()
            if seen is not None:
                seen.began = True
            return __original(*args, **kwargs)

        object.__setattr__(copy, name, began)
    _WATCHED[key] = (weakref.ref(tool, functools.partial(_forget, key)), copy)
    return copy


def _forget(key: int, _: object) -> None:
    with contextlib.suppress(Exception):  # at interpreter exit the dict may be gone already
        _WATCHED.pop(key, None)


def _title(state: Any) -> str:
    for msg in reversed(_messages(state)):
        if isinstance(msg, HumanMessage):
            return title_from(msg.content if isinstance(msg.content, str) else msg.text)
    return "LangChain agent run"


# --- where a run ends: LangChain's callbacks see the end of every root run -----------------


@dataclasses.dataclass(eq=False)
class _Own:
    """A saga a middleware opened for one agent run."""

    middleware: AmendsMiddleware
    run: AgentRun
    sync: SyncAgentRun | None
    """The holder of a sync run's saga (its own event loop), or ``None`` for an async run."""


@dataclasses.dataclass(eq=False)
class _Root:
    """One root LangChain run (an agent graph run, or a graph that runs the agent)."""

    run_id: uuid.UUID
    owned: list[_Own] = dataclasses.field(default_factory=list)
    ended: bool = False
    nested: bool = False
    """Begun inside another run (a sub-agent's graph run inside a supervisor's node)."""
    graph: types.FrameType | None = None
    """The frame of LangGraph's ``Pregel.stream``/``astream`` running this run (a graph run):
    where its end reads whether the graph finished or paused on an interrupt."""


_OPEN: dict[str, _Own] = {}
"""The sagas the middlewares opened and have not closed, by saga id (a resumed run's end finds
the saga its state names here)."""


_PAUSED: dict[str, AmendsMiddleware] = {}
"""The sagas this process paused (a graph paused on an interrupt), by saga id: a resumed run
that makes no tool call still closes its saga at its end."""


def _left_paused(outputs: Any) -> tuple[AmendsMiddleware, str] | None:
    """The middleware and saga of a run that ended (not paused) with its saga still paused by
    this process: resumed, it made no tool call that would have continued the saga."""
    named = _saga_of(outputs) if isinstance(outputs, Mapping) else None
    if named is None or named in _OPEN or named not in _PAUSED:
        return None
    return _PAUSED.pop(named), named


def _graph_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """The graph run's own frame above a callback (past LangChain's callback manager), if the
    run being started is a LangGraph graph run."""
    while frame is not None and frame.f_globals.get("__name__") in _CONFIGURING:
        frame = frame.f_back
    return frame if frame is not None and frame.f_code in _GRAPH_RUNS else None


def _paused(root: _Root) -> bool:
    """Whether a graph run that ended without an exception paused (an interrupt: a node's
    ``interrupt()``, ``interrupt_before``/``interrupt_after``) rather than finished. A root
    graph pausing ends its ``ainvoke``/``invoke`` normally; its saga stays open for the resume
    (``Command(resume=...)``). LangGraph's run loop says which (``status == "done"``: no task
    left); read from the graph run's frame, as no callback carries it."""
    frame = root.graph
    if frame is None:
        return False
    loop = frame.f_locals.get("loop")
    return getattr(loop, "status", "done") != "done"


def _ending(root: _Root, outputs: Any) -> tuple[list[_Own], bool]:
    """The sagas the normal end of ``root`` closes, or pauses if the graph paused (an
    interrupt: the run is resumed later, maybe in another process): those opened or used in
    it, and the one its final state names (a run resumed after an interrupt that made no tool
    call since)."""
    owned = root.owned
    named = _OPEN.get(_saga_of(outputs) or "") if isinstance(outputs, Mapping) else None
    if named is not None and named not in owned:
        owned = [*owned, named]
    return owned, bool(owned) and _paused(root)


_ROOT: contextvars.ContextVar[_Root | None] = contextvars.ContextVar("amends_lc_root", default=None)


class _RunEnds(BaseCallbackHandler):
    """Sees every root LangChain run, and every agent run with an :class:`AmendsMiddleware`,
    begin and end (a configure hook adds it to each run).

    Issue 25 items 4 and 7: a run can end where no middleware hook runs (LangGraph's recursion
    limit, a cancellation, an error in another middleware). The run's ``on_chain_error`` is
    awaited before the exception leaves it: the sagas opened in that run are closed there and
    the exception gets the saga id. An agent run nested in another run (a supervisor graph's
    node runs a sub-agent) is watched as its own run: when it fails and the outer run catches
    the error and goes on, its saga is closed then, not left running (issue 25 item 6's nested
    shapes, ``tests/integrations/test_langchain_nested.py``). Inline and cheap: two events per
    watched run."""

    run_inline = True
    # Chain events only: LangChain skips this handler for every other kind of event (without
    # these, each model call fell back to stringifying the whole conversation for on_llm_start).
    ignore_llm = True
    ignore_chat_model = True
    ignore_retry = True
    ignore_agent = True
    ignore_retriever = True
    ignore_custom_event = True

    def __init__(self) -> None:
        super().__init__()
        self.roots: dict[uuid.UUID, _Root] = {}
        """The runs begun and not yet ended, by run id."""

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        # Called inline, in the context the run's code runs in: its nodes see the run. LangChain
        # gives this handler the chain runs it configures (a graph run, root or nested), not
        # the runs of the nodes inside a graph: the innermost run around an agent's
        # before_agent node is the agent's own graph run.
        root = self.roots[run_id] = _Root(
            run_id, nested=parent_run_id is not None, graph=_graph_frame(sys._getframe(1))
        )
        _ROOT.set(root)

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        """A sync run (``invoke``) ended: close the sagas it owns unless it paused (issue 25
        item 6: the run's end, not an after-agent node LangGraph walks on every superstep)."""
        owned, paused = self._ended(run_id, outputs)
        for own in owned:
            if paused:
                own.middleware._pause_sync(own)
            else:
                own.middleware._close_sync(own)
        left = None if paused else _left_paused(outputs)
        if left is not None:
            left[0]._close_paused_sync(left[1])

    def _ended(self, run_id: uuid.UUID, outputs: Any) -> tuple[list[_Own], bool]:
        """Mark the watched run ``run_id`` ended; the sagas its normal end closes (or pauses:
        ``True`` with them when the graph paused)."""
        root = self.roots.pop(run_id, None)
        if root is None:
            return [], False
        root.ended = True
        return _ending(root, outputs)

    async def on_chain_error(
        self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any
    ) -> None:
        root = self.roots.pop(run_id, None)
        if root is None:
            return
        root.ended = True
        if root.nested and isinstance(error, GraphInterrupt):
            return  # paused, not ended: the outer run's resume goes on with the same saga
        for own in root.owned:
            if not isinstance(error, GraphBubbleUp):
                note_failure(error, own.run.saga_id)
            await own.middleware._close(own, error)


class _AsyncRunEnds(_RunEnds):
    """:class:`_RunEnds` for a graph run of ``astream``/``ainvoke``: its end is awaited (inline,
    before ``ainvoke`` returns), so the saga is closed when the caller reads the result."""

    def __init__(self, roots: dict[uuid.UUID, _Root]) -> None:
        super().__init__()
        self.roots = roots

    async def on_chain_end(  # type: ignore[override]
        self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any
    ) -> None:
        owned, paused = self._ended(run_id, outputs)
        for own in owned:
            await (own.middleware._pause(own) if paused else own.middleware._close(own))
        left = None if paused else _left_paused(outputs)
        if left is not None:
            await left[0]._close_paused(left[1])


_RUN_ENDS = _RunEnds()
_ASYNC_RUN_ENDS = _AsyncRunEnds(_RUN_ENDS.roots)
_HOOK: contextvars.ContextVar[_RunEnds | None] = contextvars.ContextVar(
    "amends_lc_run_ends", default=_RUN_ENDS
)
"""The run-end handler, or ``None`` where no run is to be watched (a context's own switch)."""

_ASTREAM: CodeType = Pregel.astream.__code__
_GRAPH_RUNS: frozenset[CodeType] = frozenset({Pregel.stream.__code__, _ASTREAM})
"""Where LangGraph configures a graph run's callbacks (through
``get_(async_)callback_manager_for_config``)."""

_CONFIGURING: frozenset[str] = frozenset(
    {_lc_callbacks_manager.__name__, _lc_runnables_config.__name__}
)
"""LangChain's modules that configure a run's callbacks and call the configure hook's ``get``:
the frames :class:`_RunsToWatch` looks past to find the run being configured."""


class _RunsToWatch:
    """What LangChain's configure hook reads (``.get()``, for every run it configures): the
    run-end handler for a root run and for every LangGraph graph run (an agent's own, root or
    nested in another run's node); ``None`` for the runs inside a watched run (its chat model
    calls, tools, retrievers, plain runnables). Issue 25 item 6: on every run the handler cost
    ~95 Python calls per tool call, half of them the chat model's ``isinstance`` of each
    handler against a runtime ``Protocol``; only graph runs' ends close sagas."""

    def get(self) -> _RunEnds | None:
        handler = _HOOK.get()
        if handler is None:
            return None
        # The run being configured is the first frame outside LangChain's configuring code
        # (_configure, configure, get_(async_)callback_manager_for_config): found by module name,
        # not by a fixed depth, so a LangChain release that adds or drops a frame there still
        # tells a graph run from the calls inside it.
        graph = _graph_frame(sys._getframe(1))
        if graph is not None and graph.f_code is _ASTREAM and handler is _RUN_ENDS:
            handler = _ASYNC_RUN_ENDS  # its end awaits the saga's close
        root = _ROOT.get()
        if root is None or root.ended:  # no watched run around this one: a root run
            return handler
        return handler if graph is not None else None


_RUNS_TO_WATCH = _RunsToWatch()
_HOOKED = threading.Lock()
_hooked = False


def _hook_run_ends() -> None:
    """Register :class:`_RunEnds` with LangChain once (when the first middleware is made)."""
    global _hooked
    with _HOOKED:
        if not _hooked:
            hook = cast("contextvars.ContextVar[_RunEnds | None]", _RUNS_TO_WATCH)
            register_configure_hook(hook, inheritable=False)  # LangChain calls only its get()
            _hooked = True


class AmendsMiddleware(AgentMiddleware):
    """``create_agent(..., middleware=[AmendsMiddleware(engine)])``: one saga per agent run,
    one step per tool call, sync (``invoke``) and async (``ainvoke``, ``astream``).

    The run's saga id is in its state (``out["amends_saga_id"]``; concurrent runs each have
    their own) and in :attr:`last_saga_id`. A run that raises (a tool's error, the model's, the
    recursion limit, a cancellation) closes its saga, and the exception carries its id
    (``exc.amends_saga_id`` and a note).

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

    state_schema = AmendsState

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
        self.names = check_names(names)
        self.approval = check_approval(approval)
        self.last_saga_id: str | None = None
        """The saga of the latest run (the one it opened or the enclosing one it joined)."""
        self._open: dict[str, _Own] = {}
        """The sagas this middleware opened and has not closed, by saga id."""
        _hook_run_ends()

    # --- one saga per agent run, unless an agent_run() encloses it ------------------------
    def _began(self, own: _Own) -> dict[str, Any]:
        self._open[own.run.saga_id] = own
        _OPEN[own.run.saga_id] = own
        self.last_saga_id = own.run.saga_id
        root = _ROOT.get()
        if root is not None and not root.ended:
            root.owned.append(own)
        return {SAGA_KEY: own.run.saga_id}

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        enclosing = current_run()
        if enclosing is not None:
            self.last_saga_id = enclosing.saga_id
            return {SAGA_KEY: enclosing.saga_id}
        holder = SyncAgentRun(self.engine, self.title or _title(state))
        return self._began(_Own(self, holder.run, holder))

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        enclosing = current_run()
        if enclosing is not None:
            self.last_saga_id = enclosing.saga_id
            return {SAGA_KEY: enclosing.saga_id}
        run = await start_run(self.engine, self.title or _title(state))
        return self._began(_Own(self, run, None))

    # No after-agent node (issue 25 item 6: each node adds channels LangGraph walks on every
    # superstep): the run's own end closes its saga (_RunEnds.on_chain_end), unless it paused.

    def _close_sync(self, own: _Own, exc: BaseException | None = None) -> None:
        """Close the saga of a sync run's ``own`` (once); an async run's saga is left to
        :meth:`_close`."""
        if own.sync is not None and self._open.pop(own.run.saga_id, None) is not None:
            _OPEN.pop(own.run.saga_id, None)
            own.sync.close(exc)

    async def _close(self, own: _Own, exc: BaseException | None = None) -> None:
        """Close the saga of ``own`` (once), with the exception that ended its run."""
        if own.sync is not None:
            self._close_sync(own, exc)
        elif self._open.pop(own.run.saga_id, None) is not None:
            _OPEN.pop(own.run.saga_id, None)
            await end_run(own.run, exc)

    # --- a paused run is handed off: whichever process resumes it continues its saga -----
    def _forget(self, own: _Own) -> bool:
        """Stop holding ``own``'s saga here; whether this middleware held it."""
        if self._open.pop(own.run.saga_id, None) is None:
            return False
        _OPEN.pop(own.run.saga_id, None)
        return True

    def _pause_sync(self, own: _Own) -> None:
        """The graph paused (an interrupt): hand the saga of a sync run to whichever process
        resumes the run (an async run's is left to :meth:`_pause`)."""
        if own.sync is not None and self._forget(own):
            _PAUSED[own.run.saga_id] = self
            own.sync.pause()

    async def _pause(self, own: _Own) -> None:
        """The graph paused: hand ``own``'s saga to whichever process resumes the run; its
        resumed calls become the saga's next steps there (or here)."""
        if own.sync is not None:
            self._pause_sync(own)
        elif self._forget(own):
            _PAUSED[own.run.saga_id] = self
            await own.run.pause()

    async def _close_paused(self, saga_id: str) -> None:
        """Close a saga this process paused, whose run was resumed and ended without a tool
        call (a refused call, another middleware's interrupt)."""
        with contextlib.suppress(amends.SagaClosedError, amends.SagaStateError):
            await end_run(await continue_run(self.engine, saga_id))  # else: undone, or taken

    def _close_paused_sync(self, saga_id: str) -> None:
        with contextlib.suppress(amends.SagaClosedError, amends.SagaStateError):
            SyncAgentRun(self.engine, saga_id, saga=self.engine.continue_saga(saga_id)).close()

    def _paused_saga(self, request: ToolCallRequest) -> str | None:
        """The saga a resumed run's state names when no process holds it here (paused)."""
        if current_run() is not None:
            return None
        named = _saga_of(request.state)
        if named is None or named in self._open or named in _OPEN:
            return None
        return named

    async def _take(self, request: ToolCallRequest) -> ToolMessage | None:
        """Continue the saga of a run resumed after a pause (in any process) before its call;
        or the model's answer when the saga is being undone (the call is not made)."""
        named = self._paused_saga(request)
        if named is None:
            return None
        _PAUSED.pop(named, None)
        try:
            run = await continue_run(self.engine, named)
        except amends.SagaClosedError as exc:  # undone meanwhile: the model is told (issue 25)
            return _answers(request).refusal(f"amends: {exc}")  # type: ignore[no-any-return]
        self._began(_Own(self, run, None))
        return None

    def _take_sync(self, request: ToolCallRequest) -> ToolMessage | None:
        """:meth:`_take` for a sync run (the saga lives on a holder's thread)."""
        named = self._paused_saga(request)
        if named is None:
            return None
        _PAUSED.pop(named, None)
        try:
            holder = SyncAgentRun(self.engine, named, saga=self.engine.continue_saga(named))
        except amends.SagaClosedError as exc:
            return _answers(request).refusal(f"amends: {exc}")  # type: ignore[no-any-return]
        self._began(_Own(self, holder.run, holder))
        return None

    def _run(self, request: ToolCallRequest) -> AgentRun:
        run = current_run()
        if run is not None:
            return run
        named = _saga_of(request.state) or ""
        own = self._open.get(named)
        if own is None:
            # a run paused by an interrupt and resumed through another AmendsMiddleware (the
            # agent rebuilt for the next request, as a web server does): the saga it opened is
            # still open in this process, and the resumed run goes on adding to it
            own = _OPEN.get(named)
            if own is None or own.middleware.engine is not self.engine:
                raise amends.ConfigError(self._not_open(named), saga_id=named or None)
        root = _ROOT.get()  # a run resumed after an interrupt is a new root run
        if root is not None and not root.ended and own not in root.owned:
            root.owned.append(own)
        return own.run

    @staticmethod
    def _not_open(named: str) -> str:
        """Why a tool call has no saga to be a step of."""
        if not named:
            return (
                "an amends-wrapped tool was called outside an agent run; use the middleware "
                "with create_agent, or wrap the graph run in 'async with agent_run(engine, "
                "title)' (agent_run_sync for invoke)"
            )
        return (
            f"this run's saga {named!r} is open in this process for another engine, so the "
            f"resumed call is not made; resume the run with the middleware of the engine that "
            f"ran it"
        )

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
                "args": shown_args(self.engine.catalog, tool, args),  # rule 11
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

    def _not_a_step(
        self, request: ToolCallRequest, turn: Hashable | None, place: int | None
    ) -> None:
        """The calls listed after this one in its turn need not wait for it (see
        :meth:`AgentRun.begun`)."""
        try:
            run = self._run(request)
        except amends.ConfigError:  # no run: no call waits either
            return
        run.begun(place, turn)

    def _admit(
        self, request: ToolCallRequest, turn: Hashable | None, place: int | None
    ) -> str | ToolMessage | None:
        """The catalog name the call is recorded under; or the approval gate's refusal; or
        ``None``: the agent does not have the tool, ToolNode answers and nothing runs."""
        if request.tool is None:
            self._not_a_step(request, turn, place)
            return None
        tool = resolve_tool_name(self.engine.catalog, request.tool_call["name"], self.names)
        try:
            refused = self._gate(request, tool)
        except GraphBubbleUp:  # an interrupt pauses the run; its saga stays open for the resume
            self._not_a_step(request, turn, place)
            raise
        if refused is not None:
            self._not_a_step(request, turn, place)
            return refused
        return tool

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> Any:
        if _OPEN.get(_saga_of(request.state) or "") is None and (
            refused := self._take_sync(request)
        ):
            return refused
        turn, place = _turn_of(request)
        if request.tool_call["name"] in NOT_STEPS:  # undo, follow-ups: not steps of this saga
            self._not_a_step(request, turn, place)
            with self._run(request).activate():
                return handler(request)
        tool = self._admit(request, turn, place)
        if not isinstance(tool, str):
            return handler(request) if tool is None else tool
        watched, seen, token = _watch(request)
        try:
            return self._run(request).call_tool_sync(
                tool,
                request.tool_call.get("args") or {},
                lambda: handler(watched),
                answers=_answers(request),
                turn=turn,
                place=place,
                ran=lambda: seen.began,
            )
        finally:
            _BEGAN.reset(token)

    def awrap_tool_call(
        self, request: ToolCallRequest, handler: AsyncHandler
    ) -> Coroutine[Any, Any, Any]:
        """The async hook, given to LangChain as a plain function that returns the call's
        coroutine (issue 25 item 6): ``create_agent`` wraps every middleware's
        ``awrap_tool_call`` in a LangSmith ``traceable`` span, which for a coroutine function
        hops to a thread pool twice per tool call (set-up and end of the span, traced or not)
        and runs the hook in a task of its own, but records a plain function's span inline
        (~150 fewer Python calls and no thread hop per tool call). The coroutine runs in the
        tool node's own task; with LangSmith tracing on, the hook's span closes when the
        coroutine is handed back, before the tool runs; the tool's own run is traced as
        before."""
        return self._awrap_tool_call(request, handler)

    async def _awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> Any:
        if _OPEN.get(_saga_of(request.state) or "") is None and (
            refused := await self._take(request)
        ):
            return refused
        turn, place = _turn_of(request)
        if request.tool_call["name"] in NOT_STEPS:  # undo, follow-ups: not steps of this saga
            self._not_a_step(request, turn, place)
            with self._run(request).activate():
                return await handler(request)
        tool = self._admit(request, turn, place)
        if not isinstance(tool, str):
            return await handler(request) if tool is None else tool
        watched, seen, token = _watch(request)

        async def call() -> Any:
            return await handler(watched)

        try:
            return await self._run(request).call_tool(
                tool,
                request.tool_call.get("args") or {},
                call,
                answers=_answers(request),
                turn=turn,
                place=place,
                ran=lambda: seen.began,
            )
        finally:
            _BEGAN.reset(token)


def _watch(
    request: ToolCallRequest,
) -> tuple[ToolCallRequest, _Began, contextvars.Token[_Began | None]]:
    """The request with its tool watched (:func:`_watched`), what the watch sees, and the token
    the caller resets :data:`_BEGAN` with in a ``finally`` (a plain call, not a context
    manager: issue 25 item 6 counts the calls per tool call)."""
    assert request.tool is not None
    seen = _Began()
    token = _BEGAN.set(seen)
    return _with_tool(request, _watched(request.tool)), seen, token


_REQUEST_FIELDS = frozenset(f.name for f in dataclasses.fields(ToolCallRequest))


def _with_tool(request: ToolCallRequest, tool: BaseTool) -> ToolCallRequest:
    """``request.override(tool=tool)`` without ``dataclasses.replace`` (issue 25 item 6: ~40
    Python calls per tool call, its field loop and ToolCallRequest's ``__setattr__`` guard). A
    request of any other shape (a subclass, slots, fields this does not know) is overridden
    the framework's way. (amends' own classes use ``amends._fields.replaced``; an integration
    imports no private name.)"""
    fields = getattr(request, "__dict__", None)
    if type(request) is not ToolCallRequest or fields is None or fields.keys() != _REQUEST_FIELDS:
        return request.override(tool=tool)
    copy: ToolCallRequest = object.__new__(ToolCallRequest)
    copy.__dict__.update(fields)
    copy.__dict__["tool"] = tool
    return copy


def _saga_of(state: Any) -> str | None:
    value = state.get(SAGA_KEY) if isinstance(state, Mapping) else getattr(state, SAGA_KEY, None)
    return value if isinstance(value, str) else None


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
    ``handle_tool_errors=`` and the other ``ToolNode`` options pass through; arguments the node
    rejects before the tool runs are a ``failed`` step (nothing ran), whatever the handler
    makes of the error.

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
    it answers with the honest report, and the run's later tool calls are refused with a
    message the model reads. Give it to an agent that has :class:`AmendsMiddleware` (or a graph
    with :func:`amends_tool_node`); it is never recorded as a step itself."""
    sync_fn, async_fn = undo_tool_functions(budget)
    return StructuredTool.from_function(
        func=sync_fn, coroutine=async_fn, name=UNDO_TOOL, description=async_fn.__doc__ or ""
    )


def _run_tokens(state: Any) -> int | None:
    """The tokens the run's model calls reported so far (``usage_metadata``), if any did."""
    counts = [run_tokens_of(m) for m in _messages(state) if isinstance(m, AIMessage)]
    known = [n for n in counts if n is not None]
    return sum(known) if known else None


class _FollowUpArgs(BaseModel):
    """``amends_follow_up``'s arguments (a model of its own: LangChain's schema from a function
    renames a parameter called ``args``)."""

    step_id: str
    tool: str
    args: dict[str, Any]
    state: Annotated[Any, InjectedState] = None


def follow_up_tools(agent: amends.FollowUpAgent) -> list[StructuredTool]:
    """LangChain tools with which an agent handles the open manual actions of a reversal
    (issue 27, docs/follow-ups.md): ``amends_open_actions`` lists them (drafts, recipients),
    ``amends_follow_up`` proposes one follow-up, ``amends_follow_up_status`` says what is left.

    ``agent`` is ``engine.follow_up_agent(saga_id, by=..., allow=[...], approve=...)``: every
    proposal passes its approval gate and the reversal's budget (the tokens the run's model
    reported since the previous proposal count as that proposal's); read ``agent.outcomes``
    and ``agent.left`` after the run. A follow-up not sent (refused, the budget spent, the
    vendor refused) is an error ``ToolMessage`` the model reads; the run goes on. The tools are
    never steps of a saga, with or without :class:`AmendsMiddleware`.

    Raises:
        ConfigError: ``agent`` is not an ``amends.FollowUpAgent``.
    """
    session = session_of(agent)

    def answer(a: Answer) -> str:
        if not a.ok:
            raise ToolException(a.text)  # handle_tool_error: an error ToolMessage
        return a.text

    async def open_actions() -> str:
        return answer(await session.open_actions())

    async def send(
        step_id: str,
        tool: str,
        args: dict[str, Any],
        state: Annotated[Any, InjectedState] = None,
    ) -> str:
        return answer(await session.send(step_id, tool, args, _run_tokens(state)))

    async def left() -> str:
        return answer(await session.left())

    out = []
    made = (
        (OPEN_TOOL, OPEN_DOC, open_actions, _schema(open_actions)),
        (SEND_TOOL, SEND_DOC, send, _FollowUpArgs),
        (LEFT_TOOL, LEFT_DOC, left, _schema(left)),
    )
    for name, doc, fn, schema in made:

        def sync_fn(__fn: Callable[..., Awaitable[str]] = fn, **kwargs: Any) -> str:
            return amends.run(__fn(**kwargs))  # invoke(): runs in ToolNode's worker thread

        out.append(
            StructuredTool.from_function(
                func=sync_fn,
                coroutine=fn,
                name=name,
                description=doc,
                args_schema=schema,
                handle_tool_error=True,
            )
        )
    return out
