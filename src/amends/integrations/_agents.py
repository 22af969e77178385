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
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

import amends
from amends import Catalog, Engine, Saga, Step

__all__ = [
    "APPROVAL_MODES",
    "UNDO_TOOL",
    "AgentRun",
    "ToolReportedError",
    "agent_run",
    "agent_run_sync",
    "approval_message",
    "catalog_tool_function",
    "current_run",
    "declare",
    "needs_approval",
    "resolve_tool_name",
    "spend",
    "tokens_of",
    "undo_tool_functions",
]

T = TypeVar("T")

_ACTIVE: contextvars.ContextVar[AgentRun | None] = contextvars.ContextVar(
    "amends_agent_run", default=None
)

# Keyword names saga.call_with() takes itself; a framework tool argument of the same name would
# be swallowed by it, so it is refused with a clear message instead.
_RESERVED_ARGS = frozenset({"after", "step_id"})

PLACE_GRACE = 1.0
"""Seconds a tool call waits for the calls its model turn listed before it to begin their steps
(they normally arrive within milliseconds of each other); past it, it begins anyway, so a call
another layer never lets through (a framework's call limit) delays the rest, never blocks them."""


class ToolReportedError(Exception):
    """The framework turned the tool's exception into an error answer for the model.

    Raised inside the step so the engine applies rule 9 (the tool began, its effect is unknown:
    ``in_doubt``); the framework still gets its own error answer back.
    """


def current_run() -> AgentRun | None:
    """The :class:`AgentRun` opened by :func:`agent_run` / :func:`agent_run_sync` around this
    code, or ``None``."""
    return _ACTIVE.get()


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
        self._seen: tuple[Step, ...] = ()
        self._turn_lock = threading.Lock()
        self._begun: set[int] = set()  # places of the current turn whose calls have begun
        self._arrived: set[int] = set()  # ... whose calls reached amends (begun or waiting)
        self._place_waiters: list[asyncio.Future[None]] = []

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
            self._seen = tuple(s for s in self.saga.steps if s.state == "done")
            self._begun = set()
            self._arrived = set()
        self._wake_place_waiters()

    def _wake_place_waiters(self) -> None:
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
        """The steps a tool call of the current turn depends on: those the model had seen done.

        A step that failed or is in doubt is not a dependency: the model saw its error, and the
        saga would otherwise refuse to run the new call (it waits only for steps that are done).
        """
        return [s for s in self._seen if s.state == "done"]

    async def call_tool(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], Awaitable[T]] | Callable[[], T],
        *,
        turn: Hashable | None = None,
        reported_error: Callable[[T], str | None] | None = None,
        loggable: Callable[[T], Any] | None = None,
        refused: Callable[[Exception], bool] | None = None,
        refused_answer: Callable[[T], str | None] | None = None,
        place: int | None = None,
    ) -> T:
        """Run one framework tool call as a step of the saga and return what the framework's
        own call returned.

        Args:
            tool: The catalog name of the tool (see :func:`resolve_tool_name`).
            args: The arguments the model gave; logged with the step (sensitive ones redacted).
            run: Runs the framework's tool call (sync or async, no arguments).
            turn: The model turn that asked for the call (see :meth:`begin_turn`); ``None``
                keeps the current turn.
            reported_error: For frameworks that turn a tool's exception into an error answer:
                returns the error text for such an answer, else ``None``.
            loggable: Maps the framework's answer to the JSON logged as the step's result.
            refused: Says whether an exception from the tool is a refusal made before it acted
                (Pydantic AI's ``ModelRetry``): the step is ``failed``, not ``in_doubt``.
            refused_answer: For an answer the framework gave without running the tool (invalid
                arguments): returns its text, else ``None``; the step is ``failed``.
            place: The call's index among the tool calls its model turn listed; the step
                begins after those listed before it (see :meth:`begun`). ``None``: at once.

        Raises:
            ConfigError: An argument name the saga reserves (``after``, ``step_id``).
            Exception: Whatever the tool raised, unchanged, so the framework handles it as before.
        """
        if asyncio.get_running_loop() is not self.loop:
            return await self._call_from_other_loop(
                tool,
                args,
                run,
                turn=turn,
                reported_error=reported_error,
                loggable=loggable,
                refused=refused,
                refused_answer=refused_answer,
                place=place,
            )
        if turn is not None:
            self.begin_turn(turn)
        box: dict[str, Any] = {}
        try:
            if place:
                await self._wait_for_place(place)
            step = self._start_step(
                tool, args, run, box, reported_error, loggable, refused, refused_answer
            )
        finally:
            self.begun(place, turn)
        try:
            await step
        except amends.StepFailedError:
            if "exc" in box:  # the framework sees the tool's own exception, as without amends
                raise box["exc"] from None
            if "value" in box:  # the framework's own error answer goes back to the model
                return box["value"]  # type: ignore[no-any-return]
            raise
        return box["value"]  # type: ignore[no-any-return]

    def _start_step(
        self,
        tool: str,
        args: Mapping[str, Any],
        run: Callable[[], Awaitable[T]] | Callable[[], T],
        box: dict[str, Any],
        reported_error: Callable[[T], str | None] | None,
        loggable: Callable[[T], Any] | None,
        refused: Callable[[Exception], bool] | None,
        refused_answer: Callable[[T], str | None] | None,
    ) -> Step:
        """Begin the step of one tool call; its outcome goes into ``box`` (``value``/``exc``)."""
        clash = _RESERVED_ARGS.intersection(args)
        if clash:
            raise amends.ConfigError(
                f"tool {tool!r} has an argument named {sorted(clash)[0]!r}, which amends' "
                f"saga.call_with() reserves; rename the tool's parameter",
                tool=tool,
            )

        def finish(value: Any) -> Any:
            box["value"] = value
            refusal = refused_answer(value) if refused_answer is not None else None
            if refusal is not None:  # the framework refused before the tool ran: no effect
                raise amends.PermanentError(f"{tool} did not run: {refusal}")
            error = reported_error(value) if reported_error is not None else None
            if error is not None:  # rule 9: the tool began and failed; effect unknown
                raise ToolReportedError(f"{tool} answered with an error: {error}")
            return loggable(value) if loggable is not None else value

        def refuse(exc: Exception) -> None:
            if refused is not None and refused(exc):
                # the tool refused before acting (the framework's "retry with other arguments"):
                # no effect, like amends.PermanentError; not in doubt (rule 9).
                raise amends.PermanentError(f"{tool} refused: {exc}") from exc

        if inspect.iscoroutinefunction(run):
            coro_fn = run

            async def forward_async(call: amends.Call, **_: Any) -> Any:
                try:
                    value = await coro_fn()
                except Exception as exc:  # not a cancellation: a timeout is the engine's to report
                    box["exc"] = exc
                    refuse(exc)
                    raise
                return finish(value)

            step = self.saga.call_with(forward_async, tool, after=self.dependencies(), **args)
        else:
            sync_fn = run

            def forward_sync(call: amends.Call, **_: Any) -> Any:
                try:
                    value = sync_fn()
                except Exception as exc:  # not a cancellation: a timeout is the engine's to report
                    box["exc"] = exc
                    refuse(exc)
                    raise
                return finish(value)

            step = self.saga.call_with(forward_sync, tool, after=self.dependencies(), **args)
        return step

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
        turn: Hashable | None = None,
        reported_error: Callable[[T], str | None] | None = None,
        loggable: Callable[[T], Any] | None = None,
        refused: Callable[[Exception], bool] | None = None,
        refused_answer: Callable[[T], str | None] | None = None,
        place: int | None = None,
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
                tool,
                args,
                in_caller_context,
                turn=turn,
                reported_error=reported_error,
                loggable=loggable,
                refused=refused,
                refused_answer=refused_answer,
                place=place,
            ),
            self.loop,
        )
        return future.result()

    async def undo(self, budget: amends.Budget | None = None) -> amends.UndoReport:
        """Undo everything this run recorded so far (the saga's one reversal, rule 6)."""
        undo = self.engine.undo(self.saga_id, budget=budget)
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:
            return await undo
        # the saga's live steps belong to its own loop: undo there
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(undo, self.loop))

    def undo_sync(self, budget: amends.Budget | None = None) -> amends.UndoReport:
        """:meth:`undo` from a thread that is not the saga's event loop."""
        return asyncio.run_coroutine_threadsafe(self.undo(budget), self.loop).result()

    @contextlib.contextmanager
    def activate(self) -> Iterator[AgentRun]:
        """Make this run the :func:`current_run` inside the ``with`` block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


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
) -> AsyncIterator[AgentRun]:
    """Make every framework tool call inside the block a step of one saga.

    ``async with agent_run(engine, "Close the ACME deal") as run:`` then run the agent (once or
    several times); afterwards ``await engine.undo(run.saga_id)``. Pass ``saga=`` (already open)
    to add the runs to a saga you manage yourself.

    Raises:
        ConfigError: No engine, or neither a title nor an open saga.
    """
    engine = _check_engine(engine)
    loop = asyncio.get_running_loop()
    if saga is not None:
        run = AgentRun(engine, saga, loop)
        with run.activate():
            yield run
        return
    if not isinstance(title, str) or not title.strip():
        raise amends.ConfigError(
            f"agent_run() needs a title saying what the agent was asked (or saga=...), "
            f"got {title!r}"
        )
    async with engine.saga(title, saga_id=saga_id, tenant=tenant, actor=actor) as opened:
        run = AgentRun(engine, opened, loop)
        with run.activate():
            yield run


class SyncAgentRun:
    """An :class:`AgentRun` for synchronous code: its saga lives on a private event-loop thread.

    Use as ``with agent_run_sync(engine, "title") as run:``; :meth:`close` ends the saga.
    """

    def __init__(
        self,
        engine: Engine,
        title: str,
        *,
        saga_id: str | None = None,
        tenant: str | None = None,
        actor: str | None = None,
    ) -> None:
        engine = _check_engine(engine)
        if not isinstance(title, str) or not title.strip():
            raise amends.ConfigError(
                f"agent_run_sync() needs a title saying what the agent was asked, got {title!r}"
            )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="amends-agent-run", daemon=True
        )
        self._thread.start()
        self._saga = engine.saga(title, saga_id=saga_id, tenant=tenant, actor=actor)
        try:
            asyncio.run_coroutine_threadsafe(self._saga.__aenter__(), self._loop).result()
        except BaseException:
            self._stop()
            raise
        self.run = AgentRun(engine, self._saga, self._loop)
        """The run; hand ``run.saga_id`` to ``engine.undo_sync`` afterwards."""
        self._closed = False

    def close(self) -> None:
        """Wait for the run's steps, close the saga and stop its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(
                self._saga.__aexit__(None, None, None), self._loop
            ).result()
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


@contextlib.contextmanager
def agent_run_sync(
    engine: Engine,
    title: str,
    *,
    saga_id: str | None = None,
    tenant: str | None = None,
    actor: str | None = None,
) -> Iterator[AgentRun]:
    """:func:`agent_run` for synchronous code (``agent.invoke``, ``agent.run_sync``,
    ``Runner.run_sync``): ``with agent_run_sync(engine, "title") as run: ...``.

    Raises:
        ConfigError: No engine or no title.
    """
    holder = SyncAgentRun(engine, title, saga_id=saga_id, tenant=tenant, actor=actor)
    try:
        with holder.run.activate():
            yield holder.run
    finally:
        holder.close()


def resolve_tool_name(catalog: Catalog, name: str, names: Mapping[str, str] | None = None) -> str:
    """The catalog name for a framework tool called ``name``.

    Frameworks allow only ``[A-Za-z0-9_-]`` in tool names, so ``crm_update_field`` finds the
    catalog's ``crm.update_field``. In order: ``names[name]`` if given; ``name`` itself if the
    catalog has it; the one catalog tool whose name with dots replaced by underscores is
    ``name``; else ``name`` (no contract: irreversible, and the run still works).
    """
    if names and name in names:
        return names[name]
    if name in catalog:
        return name
    matches = [spec.name for spec in catalog if spec.name.replace(".", "_") == name]
    return matches[0] if len(matches) == 1 else name


def declare(
    catalog: Catalog,
    name: str,
    *,
    reversibility: str,
    resources: Callable[[Mapping[str, Any]], list[str]] | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
) -> Any:
    """Declare the contract of a framework tool that keeps its own code: ``name`` is the tool's
    name as the framework calls it, and the tool records its inverse and expectation on
    :func:`amends.current_call`. Returns the catalog's ``ToolSpec``.

    Raises:
        ContractError: As :meth:`amends.Catalog.register` (name taken or malformed, unknown
            class).
    """

    async def runs_in_the_framework(call: amends.Call, **args: Any) -> Any:
        # The adapter runs the framework's own tool in its place; amends never calls this.
        raise amends.ConfigError(
            f"tool {name!r} is declared for an agent framework and runs only through its "
            f"adapter; register a function with @catalog.tool to call it from amends",
            tool=name,
        )

    return catalog.register(
        name,
        runs_in_the_framework,
        reversibility=reversibility,
        resources=resources,
        idempotent=idempotent,
        timeout=timeout,
    )


UNDO_TOOL = "amends_undo"
"""The name of the undo tool the agent can be given (never recorded as a step itself)."""

_UNDO_DOC = (
    "Undo everything you have done in this request so far. Reversible actions are reverted, "
    "compensable ones compensated (with what remains listed); irreversible ones are reported "
    "for a person to follow up. Returns the honest undo report."
)


def undo_tool_functions(
    budget: amends.Budget | None = None,
) -> tuple[Callable[[], str], Callable[[], Awaitable[str]]]:
    """The sync and async bodies of the agent's undo tool (:data:`UNDO_TOOL`): undo the current
    run's saga and return the report as text. Adapters never record it as a step (a step that
    undoes its own saga would wait for itself)."""

    def no_run() -> str:
        return "amends: there is no agent run to undo here (the undo tool runs inside a run)"

    def undo_sync() -> str:
        run = current_run()
        return no_run() if run is None else run.undo_sync(budget).render("text")

    async def undo_async() -> str:
        run = current_run()
        return no_run() if run is None else (await run.undo(budget)).render("text")

    for fn in (undo_sync, undo_async):
        fn.__name__ = UNDO_TOOL
        fn.__doc__ = _UNDO_DOC
    return undo_sync, undo_async


def framework_name(tool: str) -> str:
    """The name a framework shows the model for catalog tool ``tool`` (dots become ``_``)."""
    return tool.replace(".", "_")


def catalog_tool_function(catalog: Catalog, tool: str) -> Callable[..., Awaitable[Any]]:
    """An async function with the signature of catalog tool ``tool`` minus ``call``, which runs
    the catalog's code with :func:`amends.current_call` as its ``call``.

    The adapters turn it into their own tool type (``catalog_tools(...)``), so a tool registered
    once in the catalog can be handed to the framework. Called outside an amends step it raises
    a :class:`amends.ConfigError` rather than acting unrecorded.

    Raises:
        ContractError: ``tool`` is not in the catalog.
    """
    spec = catalog.get(tool)
    fn = spec.fn
    sig = inspect.signature(fn, eval_str=True)
    params = list(sig.parameters.values())[1:]  # drop `call`

    plain = sig.replace(parameters=params)

    async def tool_function(*args: Any, **kwargs: Any) -> Any:
        bound = plain.bind(*args, **kwargs)  # some frameworks pass arguments positionally
        call = amends.current_call()
        if call is None:
            raise amends.ConfigError(
                f"catalog tool {tool!r} was called outside an amends step, so its inverse "
                f"would be lost; add the amends middleware/toolset/wrapper to the agent",
                tool=tool,
            )
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if plain.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        result = fn(call, **named)
        if inspect.isawaitable(result):
            result = await result
        return result

    tool_function.__name__ = framework_name(tool)
    tool_function.__qualname__ = tool_function.__name__
    tool_function.__doc__ = inspect.getdoc(fn) or f"The {tool} tool."
    tool_function.__signature__ = plain  # type: ignore[attr-defined]
    tool_function.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    } | (
        {"return": sig.return_annotation}
        if sig.return_annotation is not inspect.Signature.empty
        else {}
    )
    return tool_function


def title_from(prompt: object, default: str = "Agent run") -> str:
    """A saga title from the user's prompt: its first line, at most 80 characters."""
    text = prompt if isinstance(prompt, str) else ""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not line:
        return default
    return line if len(line) <= 80 else line[:77] + "..."


async def start_run(engine: Engine, title: str) -> AgentRun:
    """Open a saga for one framework run (an adapter's default when no :func:`agent_run` is
    active); end it with :func:`end_run`."""
    saga = _check_engine(engine).saga(title)
    await saga.__aenter__()
    return AgentRun(engine, saga, asyncio.get_running_loop())


async def end_run(run: AgentRun) -> None:
    """Wait for the run's steps and close its saga."""
    await run.saga.__aexit__(None, None, None)


# --- the approval gate (the MCP gateway's counterpart for frameworks with human-in-the-loop) --

APPROVAL_MODES = ("off", "irreversible", "residue")
"""``off``: never ask; ``irreversible``: ask before a call undo cannot take back (a tool with no
contract included); ``residue``: also before a compensable call (undo leaves residue)."""

_UNDO_SAYS = {
    "irreversible": "Undo CANNOT take this back: a person would have to follow up.",
    "compensable": "Undo can compensate this, but not without trace: residue remains.",
}


def check_approval(mode: str) -> str:
    """``mode`` if it is one of :data:`APPROVAL_MODES`.

    Raises:
        ConfigError: Any other value.
    """
    if mode not in APPROVAL_MODES:
        raise amends.ConfigError(
            f"approval is {mode!r}; use one of {', '.join(repr(m) for m in APPROVAL_MODES)}"
        )
    return mode


def _class_of(catalog: Catalog, tool: str) -> tuple[str, bool]:
    if tool not in catalog:
        return "irreversible", False  # no contract: the default (DESIGN.md)
    spec = catalog.get(tool)
    return spec.reversibility.value, spec.explicit


def needs_approval(catalog: Catalog, tool: str, mode: str) -> bool:
    """Whether the gate asks a person before catalog tool ``tool`` runs, under ``mode``."""
    if check_approval(mode) == "off":
        return False
    cls, _ = _class_of(catalog, tool)
    return cls == "irreversible" or (mode == "residue" and cls == "compensable")


def approval_message(catalog: Catalog, tool: str, args: Mapping[str, Any]) -> str:
    """The question put to the person: the call, its class, what undo can and cannot do."""
    cls, explicit = _class_of(catalog, tool)
    label = cls if explicit else "irreversible (no contract)"
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return "\n".join(
        [
            f"The agent wants to call {tool}({shown[:300]}).",
            f"Class: {label}. {_UNDO_SAYS.get(cls, '')}".rstrip(),
            "Allow this call?",
        ]
    )


def refusal_text(tool: str, catalog: Catalog) -> str:
    """What the model is told when the person does not approve (the call was not made)."""
    cls, _ = _class_of(catalog, tool)
    return f"amends: the user did not approve {tool} ({cls}); the call was not made"


# --- tokens a framework call spent -------------------------------------------------------


def tokens_of(usage: Any) -> int:
    """Total tokens of a framework's usage record or run result (LangChain ``AIMessage`` /
    ``usage_metadata``, Pydantic AI ``RunUsage`` / ``result.usage()``, OpenAI Agents ``Usage`` /
    ``result.context_wrapper.usage``), for ``call.spend(tokens=...)`` in a compensation that
    runs an agent: the reversal's budget counts them.

    Raises:
        ConfigError: No token count can be found in ``usage``.
    """
    inner = getattr(usage, "usage", None)  # pydantic_ai run result (a property since 2.x)
    if inner is not None and not isinstance(usage, Mapping):
        usage = inner if hasattr(inner, "total_tokens") or not callable(inner) else inner()
    wrapper = getattr(usage, "context_wrapper", None)  # openai-agents RunResult
    if wrapper is not None:
        usage = wrapper.usage
    meta = getattr(usage, "usage_metadata", None)  # langchain AIMessage
    if meta is not None:
        usage = meta
    if isinstance(usage, Mapping):
        total = usage.get("total_tokens")
        if total is None and ("input_tokens" in usage or "output_tokens" in usage):
            total = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    else:
        total = getattr(usage, "total_tokens", None)
    if not isinstance(total, int) or total < 0:
        raise amends.ConfigError(
            f"no token count in {usage!r}; pass a usage record or run result of LangChain, "
            f"Pydantic AI or OpenAI Agents, or call call.spend(tokens=n) yourself"
        )
    return total


def spend(call: amends.Call, usage: Any) -> int:
    """``call.spend(tokens=tokens_of(usage))``; returns the tokens spent."""
    n = tokens_of(usage)
    call.spend(tokens=n)
    return n
