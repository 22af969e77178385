"""What the LangChain/LangGraph, Pydantic AI and OpenAI Agents adapters share, written once.

One agent run (or one user request spanning several runs) is one saga; each tool call the
framework makes is a step whose contract comes from the catalog by tool name (a tool with no
contract is irreversible, and the run still works). Dependencies follow what the model saw:

* tool calls of one model turn are independent of each other (unless their catalog ``resources``
  overlap, which the saga orders by itself);
* a tool call of a later turn depends on every step whose result the model had already seen,
  i.e. every step that was done when the turn began;
* the steps of one turn are numbered in the order the model listed its tool calls, not in the
  order the framework's concurrent tasks happened to reach amends (an adapter that knows a call's
  ``place`` in its turn passes it; a call waits at most :data:`PLACE_GRACE` seconds for the calls
  listed before it to begin), so the same run gives the same step ids and the same report.

The adapters only translate: they tell :class:`AgentRun` where a turn begins (a key that changes
with each model response) and hand it a zero-argument function that runs the framework's own tool
call. The tool keeps running as before; the saga records its intent before and its result and
inverse after (rule 1), and an exception in the tool follows rule 9. This module never imports a
framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import inspect
import threading
import time
import types
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeGuard, TypeVar

import amends
from amends import Engine, Saga, Step

__all__ = [
    "UNDO_TOOL",
    "AgentRun",
    "Answers",
    "ToolReportedError",
    "agent_run",
    "agent_run_sync",
    "continue_run",
    "current_run",
    "end_run",
    "note_failure",
    "start_run",
    "undo_tool_functions",
]

T = TypeVar("T")

_ACTIVE: contextvars.ContextVar[AgentRun | None] = contextvars.ContextVar(
    "amends_agent_run", default=None
)

PLACE_GRACE = 1.0
"""Seconds a tool call waits for the calls its model turn listed before it to begin their steps
(they normally arrive within milliseconds of each other); past it, it begins anyway, so a call
another layer never lets through (a framework's call limit) delays the rest, never blocks them."""


class ToolReportedError(Exception):
    """The framework turned the tool's exception into an error answer for the model.

    Raised inside the step so the engine applies rule 9 (the tool began, its effect is unknown:
    ``in_doubt``); the framework still gets its own error answer back.
    """


@dataclasses.dataclass(frozen=True)
class Answers:
    """How one framework's tool answers map to amends' outcomes (one per adapter)."""

    refusal: Callable[[str], Any]
    """The framework's error answer carrying a text, for a call amends refuses without making
    it (its request was undone): the model reads it and the run goes on (issue 25)."""
    reported_error: Callable[[Any], str | None] | None = None
    """For a framework that turns a tool's exception into an error answer: that answer's text,
    else ``None`` (the step is ``in_doubt``, rule 9, unless the tool never began)."""
    loggable: Callable[[Any], Any] | None = None
    """The framework's answer as the JSON logged as the step's result (default: as is)."""
    refused: Callable[[Exception], bool] | None = None
    """Whether an exception from the tool is a refusal made before it acted (Pydantic AI's
    ``ModelRetry``): the step is ``failed``, not ``in_doubt``."""


_PLAIN = Answers(refusal=str)


class _Box:
    """One tool call's outcome as the framework saw it, and whether its tool is running.

    The defaults are the class's (no ``__init__``: one Python call fewer per tool call, issue 25
    item 6); each call's box sets its own."""

    value: Any = None
    answered = False
    exc: Exception | None = None
    running = False
    cancelled = False

    def check_not_cancelled(self, tool: str) -> None:
        if self.cancelled:  # the agent's run was cancelled before the tool began: it never will
            raise amends.PermanentError(
                f"{tool} was not called: the agent's run was cancelled before it began"
            )


def _cancel(step: Step, box: _Box) -> None:
    """The agent's call was cancelled (issue 25 item 5): so is its tool, at once.

    While the framework's tool runs, the step's task is cancelled, so the cancellation reaches
    the tool (as it would without amends) and the step is ``in_doubt`` right away (rule 9);
    before it began (waiting for its place, its dependencies or its intent's write), it never
    begins. Not while the step writes its outcome: that write is never cut (rule 1)."""
    if box.running and step.task is not None and not step.task.done():
        step.task.cancel()
    else:
        box.cancelled = True


def note_failure(exc: BaseException, saga_id: str) -> None:
    """Give the exception that ended an agent run the handle of what the run did (issue 25):
    ``exc.amends_saga_id`` and a note naming the saga and how to undo it. The innermost run's
    saga is kept when runs are nested."""
    if getattr(exc, "amends_saga_id", None) is not None:
        return
    with contextlib.suppress(AttributeError, TypeError):  # an exception with __slots__
        exc.amends_saga_id = saga_id  # type: ignore[attr-defined]
        exc.add_note(
            f"amends: the tool calls this run made are saga {saga_id}; see it with "
            f"`amends show {saga_id}`, undo it with engine.undo({saga_id!r})"
        )


current_run: Callable[[], AgentRun | None] = _ACTIVE.get
"""The :class:`AgentRun` opened by :func:`agent_run` / :func:`agent_run_sync` around this
code, or ``None``: the context variable's own ``get``, without a Python call of its own on the
adapters' per-tool-call and per-model-call paths (issue 25 item 6)."""


class AgentRun:
    """One saga fed by the tool calls of one or more agent-framework runs.

    Made by :func:`agent_run` (async) or :func:`agent_run_sync`, or by an adapter's default
    (one saga per framework run). Adapters call :meth:`call_tool` (or :meth:`call_tool_sync` from
    a framework's synchronous path) for every tool call.
    """

    def __init__(self, engine: Engine, saga: Saga, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        """The engine whose log records the saga and which can undo it."""
        self.saga = saga
        """The open saga every tool call of this run becomes a step of."""
        self.loop = loop
        """The event loop the saga lives on (tool calls from other threads are sent there)."""
        self.turns_from_hooks = False
        """Set by adapters whose framework announces each model call (OpenAI Agents' hooks);
        otherwise they key turns by the model response that asked for the call."""
        self._turn: Hashable = object()
        self._seen: list[Step] = []
        """The steps a call of the current turn depends on (see :meth:`dependencies`)."""
        self._frontier: dict[Step, None] = {}
        """The steps done so far that no other done step depends on (in call order)."""
        self._undecided: list[Step] = []
        """Steps not yet done when the frontier was last brought up to date."""
        self._counted = 0
        """How many of the saga's steps the frontier has taken in."""
        self._turn_lock = threading.Lock()
        self._begun: set[int] = set()  # places of the current turn whose calls have begun
        self._arrived: set[int] = set()  # ... whose calls reached amends (begun or waiting)
        self._place_waiters: list[asyncio.Future[None]] = []
        self._undone: tuple[str, float] | None = None
        """Who undid this run's request and when; every later call is refused (issue 25)."""
        self._handed: tuple[str, list[Step]] | None = None
        """Continued from a pause (:meth:`pause`): the paused turn (:func:`_turn_token`) and the
        steps its model had seen; when that turn goes on, its calls depend on those, as they
        would have in the process that paused it."""
        turn, seen = saga.context.get("turn"), saga.context.get("seen")
        if isinstance(turn, str) and isinstance(seen, list):
            by_id = {s.id: s for s in saga.steps}
            self._handed = (turn, [by_id[i] for i in seen if i in by_id])
            self._seen = self._handed[1]  # a resumed call no new turn announced (OpenAI Agents)
            self.turns_from_hooks = saga.context.get("hooks") is True

    async def pause(self) -> None:
        """Hand this run's saga to whichever process resumes the run (a person answers an
        approval later, in another request): its steps so far stay in it, and the resumed
        calls become its next steps (:func:`continue_run`)."""
        turn = _turn_token(self._turn)
        seen = [s.id for s in self._seen]
        await self.saga.pause({"turn": turn, "seen": seen, "hooks": self.turns_from_hooks})

    @property
    def saga_id(self) -> str:
        """The saga's id: ``await engine.undo(run.saga_id)`` undoes everything this run did."""
        return self.saga.id

    @property
    def steps(self) -> list[Step]:
        """The steps recorded so far, in call order."""
        return list(self.saga.steps)

    def begin_turn(self, key: Hashable | None = None) -> None:
        """Say that a model turn begins (``key`` names it; a new key means a new turn).

        Every step done at this moment is one whose result the model has seen: tool calls of the
        new turn depend on them. Calling it again with the same key changes nothing, so adapters
        can call it before every tool call with the id of the model response that asked for it.
        """
        with self._turn_lock:
            if key is not None and key == self._turn:
                return
            self._turn = object() if key is None else key
            self._seen = self._done_frontier()
            if self._handed is not None:  # the first turn after a handoff
                handed, self._handed = self._handed, None
                if _turn_token(key) == handed[0]:  # the paused turn goes on
                    self._seen = handed[1]
            self._begun = set()
            self._arrived = set()
        if self._place_waiters:  # _wake_place_waiters' own first check, without its call
            self._wake_place_waiters()

    def _done_frontier(self) -> list[Step]:
        """The done steps no other done step depends on, brought up to date incrementally.

        A call of a new turn depends on every step the model has seen done; depending on this
        frontier says the same (each of the others is an ancestor of one of these, and undo
        order follows dependencies transitively, rule 3) with one edge per step instead of one
        per step seen (issue 25 item 6: a run of 100 sequential calls recorded 4,950 edges, and
        every step waited on each of its own)."""
        steps = self.saga.steps
        self._undecided.extend(steps[self._counted :])
        self._counted = len(steps)
        frontier, still = self._frontier, []
        for s in self._undecided:
            if s.state == "done":
                for d in s.deps:
                    frontier.pop(d, None)
                frontier[s] = None
            elif s.state in ("pending", "intent"):
                still.append(s)  # not finished yet: the model has not seen it
        self._undecided = still
        if len(frontier) < 2:  # the common case, a sequential run: nothing to order
            return list(frontier)
        return sorted(frontier, key=lambda s: s.seq)

    def _wake_place_waiters(self) -> None:
        if not self._place_waiters:  # read after the caller's locked update: a waiter queued
            return  # before it is seen here, one queued after it saw that update (no wait)
        with self._turn_lock:
            waiters, self._place_waiters = self._place_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.get_loop().call_soon_threadsafe(_settle, waiter)

    def begun(self, place: int | None, turn: Hashable | None = None) -> None:
        """Say that the call at ``place`` in its turn has begun, or will never be a step (the
        undo tool, a refused or deferred call, a tool the agent does not have), so the calls
        listed after it need not wait for it. Calling it again changes nothing."""
        if place is None:
            return
        with self._turn_lock:
            if turn is not None and turn != self._turn:
                return  # a call of a turn that is over: nobody waits for it any more
            self._begun.add(place)
        if self._place_waiters:  # _wake_place_waiters' own first check, without its call
            self._wake_place_waiters()

    async def _wait_for_place(self, place: int) -> None:
        """Wait until every call listed before ``place`` in this turn has begun.

        A call waits at most :data:`PLACE_GRACE` seconds for calls that have not reached amends;
        then it gives up on those (the calls after it stop waiting for them too), but it still
        lets the earlier calls that are here begin first, so the order holds among them.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PLACE_GRACE
        turn = self._turn
        gave_up = False
        with self._turn_lock:
            self._arrived.add(place)
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            with self._turn_lock:  # checked and queued at once: a wake-up cannot slip between
                if self._turn is not turn or self._begun.issuperset(range(place)):
                    return
                left = deadline - loop.time()
                if left > 0:
                    self._place_waiters.append(waiter)
                elif gave_up:  # the earlier calls that are here did not begin either
                    return
                else:  # give up on the calls listed before it that never came
                    gave_up = True
                    self._begun |= set(range(place)) - self._arrived
                    deadline = loop.time() + PLACE_GRACE
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, left)
            else:  # the calls after the missing ones re-check, and so does this one
                self._wake_place_waiters()

    def dependencies(self) -> list[Step]:
        """The steps a tool call of the current turn depends on: those the model had seen done,
        each directly or through a later one of them (the frontier, see :meth:`_done_frontier`).

        A step that failed or is in doubt is not a dependency: the model saw its error, and the
        saga would otherwise refuse to run the new call (it waits only for steps that are done).
        """
        return self._seen

    async def call_tool(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], Awaitable[T]] | Callable[[], T],
        *,
        answers: Answers | None = None,
        turn: Hashable | None = None,
        place: int | None = None,
        ran: Callable[[], bool] | None = None,
    ) -> T:
        """Run one framework tool call as a step of the saga and return what the framework's
        own call returned.

        Args:
            tool: The catalog name of the tool (see :func:`resolve_tool_name`).
            args: The arguments the model gave; logged with the step (sensitive ones redacted).
                Any names, ``after`` and ``step_id`` included: they are the tool's.
            run: Runs the framework's tool call (sync or async, no arguments).
            answers: How the framework's answers map to amends' outcomes (:class:`Answers`);
                default: answers as they are, a refusal as its text.
            turn: The model turn that asked for the call (see :meth:`begin_turn`); ``None``
                keeps the current turn.
            place: The call's index among the tool calls its model turn listed; the step
                begins after those listed before it (see :meth:`begun`). ``None``: at once.
            ran: Whether the framework's tool function itself began (``None``: assume it did
                when ``run`` began). An error answer given before it began means nothing ran:
                the step is ``failed``, not ``in_doubt`` (issue 25: arguments the framework
                rejected).

        Returns:
            The framework's answer; after the run's request was undone, ``answers.refusal``'s
            answer instead, and nothing is called (issue 25: the model is told, the run goes on).

        Raises:
            Exception: Whatever the tool raised, unchanged, so the framework handles it as before.
            asyncio.CancelledError: The caller was cancelled; so is the tool (its step is
                ``in_doubt`` at once, rule 9), or, when it had not begun, it never begins.
        """
        if asyncio.get_running_loop() is not self.loop:
            return await self._call_from_other_loop(
                tool, args, run, answers=answers, turn=turn, place=place, ran=ran
            )
        answers = answers or _PLAIN
        if turn is not None:
            self.begin_turn(turn)
        if self._undone is not None:  # issue 25: nothing reaches a vendor after an undo
            self.begun(place, turn)
            return answers.refusal(self._refusal(tool))  # type: ignore[no-any-return]
        box = _Box()
        try:
            if place:
                await self._wait_for_place(place)
            step = self._start_step(tool, args, run, box, answers, ran)
        finally:
            self.begun(place, turn)
        try:
            await step
        except asyncio.CancelledError:
            _cancel(step, box)
            raise
        except amends.StepFailedError as exc:
            if box.exc is not None:  # the framework sees the tool's own exception, as before
                raise box.exc from None
            if box.answered:  # the framework's own error answer goes back to the model
                return box.value  # type: ignore[no-any-return]
            if await self._undone_meanwhile(exc):  # undone from outside while the run went on
                return answers.refusal(self._refusal(tool))  # type: ignore[no-any-return]
            raise
        return box.value  # type: ignore[no-any-return]

    def _start_step(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], Awaitable[T]] | Callable[[], T],
        box: _Box,
        answers: Answers,
        ran: Callable[[], bool] | None,
    ) -> Step:
        """Begin the step of one tool call; its outcome goes into ``box``."""

        # answers that neither report errors nor change what is logged (every adapter's): the
        # value goes back as it is, without a call to finish (issue 25 item 6)
        as_is = answers.reported_error is None and answers.loggable is None

        def finish(value: Any) -> Any:
            box.value, box.answered = value, True
            error = answers.reported_error(value) if answers.reported_error is not None else None
            if error is not None:
                if ran is not None and not ran():  # answered before the tool began: no effect
                    raise amends.PermanentError(f"{tool} did not run: {error}")
                raise ToolReportedError(f"{tool} answered with an error: {error}")  # rule 9
            return answers.loggable(value) if answers.loggable is not None else value

        def failed(exc: Exception) -> None:
            box.exc = exc
            if answers.refused is not None and answers.refused(exc):
                # the tool refused before acting (the framework's "retry with other arguments"):
                # no effect, like amends.PermanentError; not in doubt (rule 9).
                raise amends.PermanentError(f"{tool} refused: {exc}") from exc

        if _is_async(run):
            coro_fn = run

            async def forward(call: amends.Call, /, **_: Any) -> Any:
                if box.cancelled:
                    box.check_not_cancelled(tool)
                box.running = True
                try:
                    value = await coro_fn()
                except Exception as exc:  # not a cancellation: a timeout is the engine's to report
                    failed(exc)
                    raise
                finally:
                    box.running = False
                if as_is:
                    box.value, box.answered = value, True
                    return value
                return finish(value)

        else:
            sync_fn = run

            def forward(call: amends.Call, /, **_: Any) -> Any:  # type: ignore[misc]
                if box.cancelled:
                    box.check_not_cancelled(tool)
                box.running = True
                try:
                    value = sync_fn()
                except Exception as exc:
                    failed(exc)
                    raise
                finally:
                    box.running = False
                if as_is:
                    box.value, box.answered = value, True
                    return value
                return finish(value)

        # the tool's arguments as one mapping: none of them is taken for amends' own options,
        # and forward's ``call`` is positional-only, so a tool argument named ``call`` is the
        # tool's too (issue 25 item 1); after: what dependencies() returns (self._seen), read
        # without its call
        return self.saga.call_with(forward, tool, args, after=self._seen)

    async def _undone_meanwhile(self, exc: amends.StepFailedError) -> bool:
        """Whether ``exc`` is a step the saga refused because its reversal had begun (an undo
        from outside this run); then every later call is refused the same way."""
        if exc.state != "cancelled":
            return False
        rev = await self.engine.log.get_reversal(saga_id=self.saga_id)
        if rev is None:
            return False
        if self._undone is None:
            self._undone = ("a request from outside this agent run", rev.requested_at)
        return True

    def _refusal(self, tool: str) -> str:
        """What the model is told for a call after its request was undone."""
        assert self._undone is not None
        who, when = self._undone
        at = datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"amends: this request was undone by {who} at {at}, so {tool} was not called and "
            f"nothing was done. Ask the user before acting again."
        )

    async def _call_from_other_loop(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], Awaitable[T]] | Callable[[], T],
        **options: Any,
    ) -> T:
        """A framework running its own event loop (``run_sync``) inside a run whose saga lives
        on another: the step is made on the saga's loop, the framework's coroutine still runs
        on the framework's loop, with the framework's context variables and the step's
        :func:`amends.current_call`."""
        caller_loop = asyncio.get_running_loop()
        caller = contextvars.copy_context()

        def restore_caller_context() -> None:
            for var, value in caller.items():
                if var is not _ACTIVE and not isinstance(value, amends.Call):
                    var.set(value)

        inner: Callable[[], Any]
        if inspect.iscoroutinefunction(run):
            coro_fn = run

            async def on_caller_loop() -> Any:
                restore_caller_context()
                return await coro_fn()

            async def relay() -> Any:  # runs inside the step, on the saga's loop
                return await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(on_caller_loop(), caller_loop)
                )

            inner = relay
        else:
            sync_fn = run

            def in_caller_context() -> Any:
                restore_caller_context()
                return sync_fn()

            inner = in_caller_context
        future = asyncio.run_coroutine_threadsafe(
            self.call_tool(tool, args, inner, **options), self.loop
        )
        return await asyncio.wrap_future(future)

    def call_tool_sync(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], T],
        *,
        answers: Answers | None = None,
        turn: Hashable | None = None,
        place: int | None = None,
        ran: Callable[[], bool] | None = None,
    ) -> T:
        """:meth:`call_tool` for a framework's synchronous path (called from another thread).

        The step is run on the saga's event loop; ``run`` runs in a worker thread with the
        caller's context variables (the framework's callbacks and config keep working) and
        :func:`amends.current_call` set.

        Raises:
            ConfigError: Called on the saga's own event loop thread (it would deadlock); use the
                framework's async API there.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise amends.ConfigError(
                f"saga {self.saga_id!r} runs on this event loop, so a synchronous tool call here "
                f"would block it; use the framework's async API (ainvoke / run / Runner.run), "
                f"or open the run with agent_run_sync() in synchronous code",
                saga_id=self.saga_id,
            )
        caller = contextvars.copy_context()

        def in_caller_context() -> T:
            for var, value in caller.items():  # the framework's own context (config, callbacks)
                if var is not _ACTIVE and not isinstance(value, amends.Call):
                    var.set(value)
            return run()

        future = asyncio.run_coroutine_threadsafe(
            self.call_tool(
                tool, args, in_caller_context, answers=answers, turn=turn, place=place, ran=ran
            ),
            self.loop,
        )
        return future.result()

    async def undo(
        self, budget: amends.Budget | None = None, steps: Sequence[str] | None = None
    ) -> amends.UndoReport:
        """Undo everything this run recorded so far (the saga's one reversal, rule 6); the
        run's later tool calls are refused with a message the model reads (issue 25).
        ``steps``: undo only those steps and what depends on them (issue 27); the rest stays
        and the run goes on, but its later tool calls are refused as after a whole undo (the
        saga's one reversal has begun: no step joins it), with words naming the selection.

        Raises:
            AmendsError: ``steps`` names no step of this run (the message lists them).
        """
        if self._undone is None and steps is None:
            self._undone = ("this agent (its amends_undo call)", time.time())
        undo = self.engine.undo(self.saga_id, budget=budget, steps=steps)
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:
            report = await undo
        else:  # the saga's live steps belong to its own loop: undo there
            report = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(undo, self.loop))
        if self._undone is None and report.selection is not None:  # issue 27: in part, by it
            asked = ", ".join(report.selection.get("asked", ()))
            self._undone = (f"this agent in part (its amends_undo call of {asked})", time.time())
        return report

    def undo_sync(
        self, budget: amends.Budget | None = None, steps: Sequence[str] | None = None
    ) -> amends.UndoReport:
        """:meth:`undo` from a thread that is not the saga's event loop."""
        return asyncio.run_coroutine_threadsafe(self.undo(budget, steps), self.loop).result()

    def pause_sync(self) -> None:
        """:meth:`pause` from a thread that is not the saga's event loop."""
        asyncio.run_coroutine_threadsafe(self.pause(), self.loop).result()

    @contextlib.contextmanager
    def activate(self) -> Iterator[AgentRun]:
        """Make this run the :func:`current_run` inside the ``with`` block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


def _turn_token(key: Hashable) -> str:
    """A model turn's key as text that another process computes alike from the same message
    history (a timestamp as ISO text: its time zone object differs once read back)."""
    parts = key if isinstance(key, tuple) else (key,)
    return repr(tuple(p.isoformat() if isinstance(p, datetime.datetime) else p for p in parts))


def _is_async(run: Callable[..., Any]) -> TypeGuard[Callable[..., Awaitable[Any]]]:
    """``inspect.iscoroutinefunction(run)``, answered from the code flags for the plain
    ``async def`` closure every adapter passes (issue 25 item 6: the full check is five Python
    calls per tool call); anything else takes the full check."""
    if type(run) is types.FunctionType and run.__code__.co_flags & inspect.CO_COROUTINE:
        return True
    return inspect.iscoroutinefunction(run)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _check_engine(engine: object) -> Engine:
    if not isinstance(engine, Engine):
        raise amends.ConfigError(
            f"an agent run needs an amends.Engine, got {engine!r}; e.g. "
            f"amends.Engine(catalog, log=amends.SqliteLog('amends.db'))"
        )
    return engine


@contextlib.asynccontextmanager
async def agent_run(
    engine: Engine,
    title: str | None = None,
    *,
    saga: Saga | None = None,
    saga_id: str | None = None,
    tenant: str | None = None,
    actor: str | None = None,
    continue_saga: str | None = None,
) -> AsyncIterator[AgentRun]:
    """Make every framework tool call inside the block a step of one saga.

    ``async with agent_run(engine, "Close the ACME deal") as run:`` then run the agent (once or
    several times); afterwards ``await engine.undo(run.saga_id)``. Pass ``saga=`` (already open)
    to add the runs to a saga you manage yourself. An exception that leaves the block carries
    the saga id (``exc.amends_saga_id`` and a note, see :func:`note_failure`).

    A run that waits for a person (an approval answered later, maybe in another process):
    ``await run.pause()`` inside the block hands the saga off (leaving the block then does not
    close it); ``agent_run(engine, continue_saga=saga_id)`` in any process continues it, the
    approved calls becoming its next steps.

    Raises:
        ConfigError: No engine, or neither a title nor an open saga.
        SagaClosedError: ``continue_saga``: the saga is being undone (it takes no new step).
        SagaStateError: ``continue_saga``: it is not paused (another process continued it
            first) or it is closed.
    """
    engine = _check_engine(engine)
    loop = asyncio.get_running_loop()
    if continue_saga is not None:
        async with engine.continue_saga(continue_saga) as continued:
            run = AgentRun(engine, continued, loop)
            with run.activate(), _noting(run):
                yield run
        return
    if saga is not None:
        run = AgentRun(engine, saga, loop)
        with run.activate(), _noting(run):
            yield run
        return
    if not isinstance(title, str) or not title.strip():
        raise amends.ConfigError(
            f"agent_run() needs a title saying what the agent was asked (or saga=...), "
            f"got {title!r}"
        )
    async with engine.saga(title, saga_id=saga_id, tenant=tenant, actor=actor) as opened:
        run = AgentRun(engine, opened, loop)
        with run.activate(), _noting(run):
            yield run


@contextlib.contextmanager
def _noting(run: AgentRun) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        note_failure(exc, run.saga_id)
        raise


class SyncAgentRun:
    """An :class:`AgentRun` for synchronous code: its saga lives on a private event-loop thread.

    Use as ``with agent_run_sync(engine, "title") as run:``; :meth:`close` ends the saga.
    """

    def __init__(
        self,
        engine: Engine,
        title: str | None,
        *,
        saga_id: str | None = None,
        tenant: str | None = None,
        actor: str | None = None,
        saga: Saga | None = None,
    ) -> None:
        engine = _check_engine(engine)
        if saga is None and (not isinstance(title, str) or not title.strip()):
            raise amends.ConfigError(
                f"agent_run_sync() needs a title saying what the agent was asked, got {title!r}"
            )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="amends-agent-run", daemon=True
        )
        self._thread.start()
        self._saga = saga or engine.saga(title or "", saga_id=saga_id, tenant=tenant, actor=actor)
        try:
            asyncio.run_coroutine_threadsafe(self._saga.__aenter__(), self._loop).result()
        except BaseException:
            self._stop()
            raise
        self.run = AgentRun(engine, self._saga, self._loop)
        """The run; hand ``run.saga_id`` to ``engine.undo_sync`` afterwards."""
        self._closed = False

    def close(self, exc: BaseException | None = None) -> None:
        """Wait for the run's steps, close the saga and stop its thread. Idempotent.

        ``exc``: the exception that ended the run, if any (a cancellation cancels the tools
        still running, whose steps end ``in_doubt``; rule 9)."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(
                self._saga.__aexit__(type(exc) if exc else None, exc, None), self._loop
            ).result()
        finally:
            self._stop()

    def pause(self) -> None:
        """Hand the saga to whichever process resumes the run (:meth:`AgentRun.pause`) and stop
        the thread; the saga stays open."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.run.pause(), self._loop).result()
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


@contextlib.contextmanager
def agent_run_sync(
    engine: Engine,
    title: str | None = None,
    *,
    saga_id: str | None = None,
    tenant: str | None = None,
    actor: str | None = None,
    continue_saga: str | None = None,
) -> Iterator[AgentRun]:
    """:func:`agent_run` for synchronous code (``agent.invoke``, ``agent.run_sync``,
    ``Runner.run_sync``): ``with agent_run_sync(engine, "title") as run: ...``;
    ``run.pause_sync()`` and ``continue_saga=`` as in :func:`agent_run`.

    Raises:
        ConfigError: No engine or no title.
        SagaClosedError, SagaStateError: ``continue_saga`` as in :func:`agent_run`.
    """
    if continue_saga is not None:
        saga = _check_engine(engine).continue_saga(continue_saga)
        holder = SyncAgentRun(engine, continue_saga, saga=saga)
    else:
        holder = SyncAgentRun(engine, title, saga_id=saga_id, tenant=tenant, actor=actor)
    try:
        with holder.run.activate(), _noting(holder.run):
            yield holder.run
    except BaseException as exc:
        holder.close(exc)
        raise
    holder.close()


UNDO_TOOL = "amends_undo"
"""The name of the undo tool the agent can be given (never recorded as a step itself)."""

_UNDO_DOC = (
    "Undo everything you have done in this request so far. Reversible actions are reverted, "
    "compensable ones compensated (with what remains listed); irreversible ones are reported "
    "for a person to follow up. Returns the honest undo report.\n\n"
    "Args:\n"
    "    steps: Undo only these of your tool calls (s1 is your first tool call in this "
    "request, s2 the second, ...) and every call that depended on them, keeping the rest; "
    "leave it out to undo everything."
)


def undo_tool_functions(
    budget: amends.Budget | None = None,
) -> tuple[Callable[..., str], Callable[..., Awaitable[str]]]:
    """The sync and async bodies of the agent's undo tool (:data:`UNDO_TOOL`): undo the current
    run's saga and return the report as text. Adapters never record it as a step (a step that
    undoes its own saga would wait for itself)."""

    def no_run() -> str:
        return "amends: there is no agent run to undo here (the undo tool runs inside a run)"

    def undo_sync(steps: list[str] | None = None) -> str:
        run = current_run()
        if run is None:
            return no_run()
        try:
            return run.undo_sync(budget, steps).render("text")
        except (amends.ConfigError, amends.ContractError) as exc:
            if steps is None:
                raise
            return f"amends: {exc}"  # a bad selection: the model reads why (issue 27)

    async def undo_async(steps: list[str] | None = None) -> str:
        run = current_run()
        if run is None:
            return no_run()
        try:
            return (await run.undo(budget, steps)).render("text")
        except (amends.ConfigError, amends.ContractError) as exc:
            if steps is None:
                raise
            return f"amends: {exc}"

    for fn in (undo_sync, undo_async):
        fn.__name__ = UNDO_TOOL
        fn.__doc__ = _UNDO_DOC
    return undo_sync, undo_async


async def start_run(engine: Engine, title: str) -> AgentRun:
    """Open a saga for one framework run (an adapter's default when no :func:`agent_run` is
    active); end it with :func:`end_run`."""
    saga = _check_engine(engine).saga(title)
    await saga.__aenter__()
    return AgentRun(engine, saga, asyncio.get_running_loop())


async def continue_run(engine: Engine, saga_id: str) -> AgentRun:
    """The run of a saga another process (or this one) paused (:meth:`AgentRun.pause`), held
    here from now on; end it with :func:`end_run` or pause it again.

    Raises:
        amends.SagaClosedError: The saga is being undone: it takes no new step.
        amends.SagaStateError: Another process continued it first, or it is closed.
    """
    saga = _check_engine(engine).continue_saga(saga_id)
    await saga.__aenter__()
    return AgentRun(engine, saga, asyncio.get_running_loop())


async def end_run(run: AgentRun, exc: BaseException | None = None) -> None:
    """Wait for the run's steps and close its saga; ``exc`` as in :meth:`SyncAgentRun.close`."""
    await run.saga.__aexit__(type(exc) if exc else None, exc, None)
