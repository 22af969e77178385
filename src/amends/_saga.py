"""The forward side of a saga: fan-out of steps, dependencies, and write-ahead logging.

A step's intent is durable before its tool runs; its result, inverse and expectation are durable
before anything that depends on it starts (rule 1). This module never undoes anything: undo,
recovery and the one-reversal rule live in :mod:`amends._engine`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
import weakref
from asyncio import ensure_future
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, cast

from ._arguments import check_id, new_id
from ._calls import RetryPolicy, call_arguments, idempotency_key, invoke
from ._catalog_ref import catalog_meta
from ._contracts import (
    NOTHING,
    Call,
    Catalog,
    Inverse,
    Reversibility,
    ToolFn,
    ToolSpec,
)
from ._errors import (
    ConfigError,
    ContractError,
    LogError,
    PermanentError,
    SagaClosedError,
    StepFailedError,
    TransientError,
)
from ._fields import replaced
from ._jsondata import unstorable_words
from ._log.base import SagaLog, StepFinish, StepIntent
from ._log.handoff import handoff_log, pause_saga
from ._log.records import cap_result
from ._native import python_class
from ._outcome import (
    Refused,
    as_steps,
    blocker,
    ended_failed,
    failure,
    finish_done,
    finish_failed,
    first_failure,
    has_failed,
    jsonable,
    observe,
    retrieve,
    step_ended,
    unrecorded,
    until_done,
    with_resources,
    write_error,
)
from ._planner import undo_cycle
from ._secrets import Redaction, redact_args, scrub_record, vault_for
from ._telemetry import NO_SAGA_TRACE, saga_trace

__all__ = ["Ref", "Saga", "SagaHost", "Step", "new_id"]

_RNG = random.Random()


class SagaHost(Protocol):
    """What a saga needs from the engine that runs it."""

    catalog: Catalog
    log: SagaLog
    retry_policy: RetryPolicy
    owner: str
    lease_seconds: float
    live_sagas: dict[str, Saga]
    max_result_bytes: int | None


class Ref:
    """A reference to (part of) another step's result, usable as an argument: ``step["id"]``.

    A step whose arguments hold a Ref depends on the referenced step (forward and in reverse).
    """

    def __init__(self, step: Step, path: tuple[Any, ...] = ()) -> None:
        self.step = step
        self.path = path

    def __getitem__(self, key: Any) -> Ref:
        return Ref(self.step, (*self.path, key))

    def resolve(self) -> Any:
        """The referenced value, once the step is done.

        Raises:
            ContractError: The result has no such key or index (names the step and the key).
        """
        value = self.step.result
        for i, key in enumerate(self.path):
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                so_far = f"{self.step.id}{''.join(f'[{k!r}]' for k in self.path[:i])}"
                has = (
                    f"its keys: {', '.join(map(repr, value))}"
                    if isinstance(value, Mapping)
                    else f"it is {type(value).__name__} {value!r:.80}"
                )
                raise ContractError(
                    f"reference {self!r}: the result of step {self.step.id} ({self.step.tool}) "
                    f"has no {key!r} at {so_far} ({has}); refer to a key the tool returns",
                    saga_id=self.step.saga_id,
                    step_id=self.step.id,
                    tool=self.step.tool,
                ) from None
        return value

    def __repr__(self) -> str:
        return f"ref({self.step.id}{''.join(f'[{k!r}]' for k in self.path)})"

    def __str__(self) -> str:
        # issue 11: f"see {a['id']}" would send the text "ref(s1['id'])" to the vendor and lose
        # the dependency; refuse it where it is written, with the fix.
        raise ContractError(
            f"{self!r} is the result of step {self.step.id}, known only once it has run, so "
            f"it cannot be formatted into a string; pass it as its own argument "
            f"(id={self.step.id}[...]), or await the step first and pass after=[step]: "
            f"text=f\"see {{(await step)['id']}}\", after=[step]",
            saga_id=self.step.saga_id,
            step_id=self.step.id,
            tool=self.step.tool,
        )

    def __format__(self, spec: str) -> str:
        return self.__str__()


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _refs(value: Any, found: list[Step]) -> None:
    if type(value) in _SCALARS:  # issue 12: most arguments; skips the ABC checks below
        return
    if isinstance(value, Step):
        found.append(value)
    elif isinstance(value, Ref):
        found.append(value.step)
    elif isinstance(value, Mapping):
        for v in value.values():
            _refs(v, found)
    elif isinstance(value, list | tuple):
        for v in value:
            _refs(v, found)


def _too_deep(saga_id: str, step_id: str, tool: str) -> ContractError:
    return ContractError(
        f"an argument of {tool!r} is nested too deeply to walk (or contains itself); nothing "
        f"was called. Pass it flatter, or as JSON text",
        saga_id=saga_id,
        step_id=step_id,
        tool=tool,
    )


def _foreign(saga_id: str, step_id: str, other: str) -> ContractError:
    why = f"argument refers to step {other!r} of another saga"
    return ContractError(why, saga_id=saga_id, step_id=step_id)


def _resolve(value: Any) -> Any:
    if isinstance(value, Step):
        return value.result
    if isinstance(value, Ref):
        return value.resolve()
    if isinstance(value, Mapping):
        return {k: _resolve(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_resolve(v) for v in value)
    return value


class Step:
    """Handle on one tool call inside a saga. Await it for the tool's result.

    Raises (when awaited):
        StepFailedError: The step failed, was cancelled by undo, or never ran because a step it
            waits for failed.
    """

    def __init__(
        self,
        saga: Saga,
        step_id: str,
        seq: int,
        tool: str,
        args: dict[str, Any],
        deps: list[Step],
        resources: list[str],
        spec: ToolSpec,
    ) -> None:
        self._saga = saga._ref  # issue 29: no cycle, so a saga's steps go when the saga goes
        self.saga_id = saga.id
        self.spec = spec
        """The contract the step runs under, and the function its forward call runs."""
        self.id, self.seq = step_id, seq
        self.tool, self.args = tool, args
        self.deps = deps
        self.direct = len(deps)
        """How many leading ``deps`` are direct (``after=``, arguments), not via a resource."""
        self.resources = resources
        self.undo_after: list[Step] = []
        """Steps whose inverses this step's inverse waits for (rule 3)."""
        self._state = "pending"
        self._outcome = "pending"
        """The state the step takes once its outcome record is durable."""
        self._written: asyncio.Future[None] | None = None
        """Issue 29: the outcome record on its way to the log (the step's task does not wait
        for it; :func:`_outcomes_durable` does, where the outcome is used: rule 1)."""
        self._result: Any = NOTHING
        self._error: StepFailedError | None = None
        self._observed = False
        self.task: asyncio.Task[None] | None = None
        self._waiter: Any = None
        """Issue 29: what the first ``await step`` waits on while the step runs (a future), or
        the first ``saga.gather`` waiting for it: the step's own task wakes it as its last act
        (:func:`step_ended`), a loop pass sooner than a done callback of the task (what
        ``asyncio.shield`` waited for), and without the shield's two futures."""
        self._writing = False
        """Rule 1: the step's intent is being written; a cancel waits for it (its outcome is
        handed to the log without an await, issue 29)."""
        self._cancel_asked = False
        self.has_refs = True
        """Whether the arguments hold a Step or Ref to resolve before the call (set by the saga
        when it starts the step; issue 12: arguments without one are passed as given)."""

    def _cancel(self) -> None:
        """Cancel the step's task, except while it writes its intent (rule 1): then
        the write finishes first and the task ends cancelled right after it. A flag instead of
        a shielded task per write (issue 12: no extra task on the hot path)."""
        if self._writing:
            self._cancel_asked = True
        elif self.task is not None and not self.task.done():
            self.task.cancel()  # a task that never started wakes its waiter too (see _wait)

    @property
    def saga(self) -> Saga | None:
        """The step's saga, while anything holds it (a weak reference: issue 29)."""
        return self._saga()

    @property
    def state(self) -> str:
        """``pending``, ``intent``, ``done``, ``failed``, ``in_doubt``, ``cancelled``,
        ``skipped``; a finished step stays ``intent`` until its outcome record is durable."""
        w = self._written
        if w is not None and w.done() and write_error(w) is None:
            self._written = None
            self._state = self._outcome
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value

    def _raise_write_error(self) -> None:
        """The outcome write's failure, where the step's task raised it before issue 29."""
        w = self._written
        if w is not None and w.done():
            exc = write_error(w)
            if exc is not None:
                raise exc

    @property
    def result(self) -> Any:
        if self.state != "done":
            raise StepFailedError(
                f"step {self.id} ({self.tool}) has no result: it is {self.state}",
                saga_id=self.saga_id,
                step_id=self.id,
                tool=self.tool,
                state=self.state,
            )
        return self._result

    def __getitem__(self, key: Any) -> Ref:
        return Ref(self, (key,))

    def __format__(self, spec: str) -> str:
        return Ref(self).__str__()  # issue 11: a step's result cannot be formatted before it runs

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> Any:
        self._observed = True  # the agent gets its outcome or error here (not again at the end)
        task = self.task
        assert task is not None
        if task.done():
            if task.cancelled() or task.exception() is not None:
                await task  # raises, as awaiting the shield of a finished task did
        elif self._waiter is None and self._saga().trace.span is None:  # type: ignore[union-attr]
            # cancelling this wait cancels the waiter, never the step (as the shield did)
            waiter = self._waiter = task.get_loop().create_future()
            # The step's task wakes the waiter as its last act (_run_step's finally, which then
            # takes this callback off again); a task cancelled before it started
            # (``step.task.cancel()``, a shutdown) never runs that code, so its end cancels the
            # waiter. An ``await step`` ends whenever the step's task ends, however it ends.
            task.add_done_callback(waiter.cancel)
            try:
                await waiter
            except BaseException:  # the task's error, or this wait cancelled: as the shield,
                retrieve(task)  # take the task's error, so it is not reported unretrieved
                raise
            finally:
                self._waiter = None
        else:  # another await or a gather already waits, or a span wraps the step's task
            await asyncio.shield(task)
        await _outcomes_durable((self,))  # rule 1: durable before the agent sees it
        self._raise_write_error()
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self) -> str:
        return f"Step({self.id!r}, {self.tool!r}, state={self.state!r})"


@python_class
class Saga:
    """One agent request: ``async with engine.saga(...) as saga``, then ``saga.call(...)``."""

    def __init__(
        self,
        engine: SagaHost,
        title: str,
        *,
        tenant: str | None,
        actor: str | None,
        saga_id: str | None,
    ) -> None:
        if not isinstance(title, str) or not title.strip():
            raise ConfigError(
                f"a saga needs a title saying what the agent was asked, got {title!r}"
            )
        refused = unstorable_words(title=title, tenant=tenant, actor=actor)
        if refused is not None:  # bad input is refused alike on every log
            raise ConfigError(refused)
        self.engine = engine
        self.title = title
        self.tenant = tenant
        self.actor = actor
        if saga_id is not None:
            check_id(saga_id, "saga id")
        self._chosen_id = saga_id is not None
        self.id = saga_id or new_id("saga")
        self.steps: list[Step] = []
        self._by_id: dict[str, Step] = {}
        self._last_by_resource: dict[str, Step] = {}
        self._entered = False
        self._closed = False
        self._heartbeat: asyncio.Task[None] | None = None
        self.paused = False
        """Handed to whichever process continues it (:meth:`pause`); closed here."""
        self.context: dict[str, Any] = {}
        """What the process that paused it handed on (:meth:`pause`'s ``context``)."""
        self.vault = vault_for(self)
        """Rule 11: the secrets of this saga's sensitive arguments, scrubbed from all it logs
        (the saga's vault, kept here so the hot path does not look it up per write)."""
        self.trace = NO_SAGA_TRACE
        self._ref = weakref.ref(self)

    async def __aenter__(self) -> Saga:
        e = self.engine
        # issue 11: a reused id is named, not a raw UNIQUE constraint (generated ids are unique)
        if self._chosen_id and await e.log.get_saga(self.id) is not None:
            raise self._reused(e.log.url)
        self.trace = saga_trace(self.id, self.tenant)  # issue 28: the agent run's child span
        try:
            await e.log.create_saga(
                self.id,
                self.title,
                tenant=self.tenant,
                actor=self.actor,
                owner=e.owner,
                lease_until=time.time() + e.lease_seconds,
                now=time.time(),
                # issue 11: which catalog ran the saga, so undo uses the same tools.
                meta={"catalog": catalog_meta(e.catalog), **self.trace.meta()},
            )
        except BaseException as exc:
            # issue 28: whatever stopped the saga here (a log error, the agent's task cancelled
            # while the entry was written) ends its span; no __aexit__ will
            self.trace.end("not_started")
            # another process took the same chosen id between the check and the insert
            if (
                isinstance(exc, LogError)
                and self._chosen_id
                and await e.log.get_saga(self.id) is not None
            ):
                raise self._reused(e.log.url) from None
            raise
        return self._held()

    def _held(self) -> Saga:
        """This process holds the saga now (created, or continued from a pause): steps may
        start, and its lease is renewed until it closes or pauses."""
        self._entered = True
        self.engine.live_sagas[self.id] = self
        self._heartbeat = asyncio.create_task(self._beat())
        return self

    def _reused(self, url: str) -> ConfigError:
        return ConfigError(
            f"saga id {self.id!r} is already used in {url}; give each saga a new id "
            f"(or omit saga_id= for a generated one)",
            saga_id=self.id,
        )

    async def _beat(self) -> None:
        e = self.engine
        while True:
            await asyncio.sleep(e.lease_seconds / 3)
            try:
                await e.log.renew_saga_leases([self.id], e.owner, time.time() + e.lease_seconds)
            except Exception:  # a missed heartbeat only shortens the lease; the next one retries
                continue

    async def pause(self, context: Mapping[str, Any] | None = None) -> None:
        """Hand this saga to whichever process continues it (``engine.continue_saga``), e.g.
        once a person answers an approval: waits for its steps (rule 1), then releases it in
        the log, still open. ``context``: JSON the continuing process reads back
        (``saga.context``). No step starts here after; leaving ``async with`` does not close it.

        Raises:
            SagaClosedError: The saga is not open in this process.
            SagaStateError: Its lease ran out meanwhile and recovery closed it.
        """
        self._check_open()
        log = handoff_log(self.engine.log)
        await self.settle()
        self._closed = self.paused = True
        beat, self._heartbeat = self._heartbeat, None
        if beat is not None:
            beat.cancel()
        self.engine.live_sagas.pop(self.id, None)
        self.trace.end("paused")
        await pause_saga(log, self.id, self.engine.owner, dict(context or {}))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.paused:  # handed off: the process that continues it closes it
            return
        try:
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                # issue 10 item 9: the agent's task was cancelled; cancel the tools still in
                # flight (their steps end in_doubt, rule 9) instead of waiting for them.
                for s in self.steps:
                    s._cancel()
            await self.settle()
        finally:
            beat, self._heartbeat = self._heartbeat, None  # its cancelled frame holds the saga
            if beat is not None:
                beat.cancel()
            self._closed = True
            refused, unwritten = unrecorded(self.id, self.steps)  # rule 1: a refused write
            failed = refused or ended_failed(self.steps)  # fails the saga
            self.trace.end("failed" if failed else "completed")
            await self.engine.log.finish_saga(
                self.id, "failed" if failed else "completed", now=time.time()
            )
            self.engine.live_sagas.pop(self.id, None)
        if exc is None and unwritten is not None:
            raise unwritten
        if exc is None:
            for s in self.steps:
                if s._error is not None and not s._observed and s.state in ("failed", "in_doubt"):
                    raise s._error

    async def settle(self) -> None:
        """Wait until every step called so far has finished (or was cancelled)."""
        # issue 12: finished steps need no wait (gather would add a callback to each)
        tasks = [s.task for s in self.steps if s.task is not None and not s.task.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await _outcomes_durable(self.steps)

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        /,
        *,
        after: Iterable[Step] | Step | None = (),
        step_id: str | None = None,
        undo_after: Iterable[Step] | Step | None = (),
        **args: Any,
    ) -> Step:
        """Start tool ``tool`` as a step of this saga and return its handle.

        Args:
            tool: Catalog name.
            arguments: The tool's arguments as one mapping (issue 25: a tool may have a
                parameter named ``after``, ``step_id`` or ``undo_after``; passed here it is
                the tool's, never amends' option). Merged with ``**args``.
            after: Steps this one depends on (one step, a list, or None; it starts after them).
            step_id: A readable id; default ``s1``, ``s2``, ... in call order.
            undo_after: Steps whose inverses must succeed before this step's inverse runs (a
                refund the processor accepts only once the deal is reopened). Replaces the
                reversed forward edge between the two (rule 3).
            **args: The tool's arguments. A :class:`Step` or ``step["key"]`` stands for that
                step's result and makes this step depend on it.

        Raises:
            ContractError: Unknown tool, a dependency from another saga, a duplicate step id,
                an argument given both in ``arguments`` and by keyword, or an ``undo_after``
                that makes the undo order a cycle (the message names the steps).
            SagaClosedError: Called outside ``async with`` or after the saga closed.
        """
        self._check_open()
        spec = self.engine.catalog.get(tool)
        return self._start(
            spec, tool, after, step_id, call_arguments(tool, arguments, args), undo_after
        )

    def call_with(
        self,
        fn: ToolFn,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        /,
        *,
        after: Iterable[Step] | Step | None = (),
        step_id: str | None = None,
        undo_after: Iterable[Step] | Step | None = (),
        **args: Any,
    ) -> Step:
        """Run ``fn(call, **args)`` as the forward call of a new step named ``tool``.

        For tools whose code lives elsewhere (a framework's tool function, an MCP upstream, a
        Temporal activity): the contract is the catalog's entry for ``tool`` (its
        reversibility, resources, timeout), or the irreversible default when the catalog has none,
        so the call still runs and undo acknowledges it. Write-ahead logging and the rules for
        failures are the same as for :meth:`call`; ``fn`` may record its inverse on ``call`` or on
        :func:`amends.current_call`. ``arguments`` as in :meth:`call`: the tool's own arguments,
        whatever their names.

        Raises:
            ContractError: ``fn`` is not callable, or the same mistakes as :meth:`call`.
            SagaClosedError: Called outside ``async with`` or after the saga closed.
        """
        if not callable(fn):
            raise ContractError(
                f"call_with() needs the function to run first, got {fn!r}; e.g. "
                f"saga.call_with(my_tool_fn, 'crm.update_field', record_id='r1')",
                tool=tool if isinstance(tool, str) else None,
            )
        catalog = self.engine.catalog
        if tool in catalog:
            spec = replaced(catalog.get(tool), fn=fn)  # issue 25 item 6: every adapter call
        else:  # no contract: the default, irreversible (DESIGN.md)
            spec = ToolSpec(
                name=str(tool), fn=fn, reversibility=Reversibility.IRREVERSIBLE, explicit=False
            )
        self._check_open()
        return self._start(
            spec, tool, after, step_id, call_arguments(tool, arguments, args), undo_after
        )

    def _check_open(self) -> None:
        if not self._entered or self._closed:
            raise SagaClosedError(
                f"saga {self.id!r} is not open; call saga.call(...) inside "
                f"'async with engine.saga(...) as saga'",
                saga_id=self.id,
            )

    def _start(
        self,
        spec: ToolSpec,
        tool: str,
        after: Iterable[Step] | Step | None,
        step_id: str | None,
        args: dict[str, Any],
        undo_after: Iterable[Step] | Step | None = (),
    ) -> Step:
        seq = len(self.steps) + 1  # the caller checked that the saga is open (_check_open)
        if step_id is not None:
            check_id(step_id, "step id", saga_id=self.id)
            sid = step_id
        else:  # issue 11: an automatic id never collides with a custom one ("s2")
            n = seq
            while f"s{n}" in self._by_id:
                n += 1
            sid = f"s{n}"
        if sid in self._by_id:
            raise ContractError(
                f"step id {sid!r} is already used in saga {self.id!r}", saga_id=self.id, step_id=sid
            )
        deps: list[Step] = []
        for d in after if isinstance(after, tuple | list) else as_steps(after):  # or one, None
            if not isinstance(d, Step) or d.saga is not self:
                raise ContractError(
                    f"after= takes steps of this saga, got {d!r}", saga_id=self.id, step_id=sid
                )
            deps.append(d)
        explicit = len(deps)
        try:
            for v in args.values():  # _refs(args, deps), without a call for the dict itself
                if type(v) not in _SCALARS:
                    _refs(v, deps)
        except RecursionError:  # rule 12: an argument the caller chose never crashes the saga
            raise _too_deep(self.id, sid, tool) from None
        has_refs = len(deps) > explicit
        for d in deps:
            if d.saga is not self:
                raise _foreign(self.id, sid, d.id)
        resources = spec.resources_for(args)  # steps sharing one are ordered (both ways)
        unique, direct = (  # issue 29: no call for a step with one dependency at most
            with_resources(deps, resources, self._last_by_resource)
            if resources or len(deps) > 1
            else (deps, len(deps))
        )
        step = Step(self, sid, seq, tool, args, unique, resources, spec)
        step.has_refs, step.direct = has_refs, direct
        if undo_after or spec.undo_after:  # issue 29: most steps declare no undo order
            step.undo_after = self._undo_after(step, undo_after, self._declared_order(spec))
        for r in resources:
            self._last_by_resource[r] = step
        self.steps.append(step)
        self._by_id[sid] = step
        run = _run_step(self.engine, self, step)
        if self.trace.span is not None:  # issue 28: a span shows what the log holds
            step.task = _traced_task(self.trace, run, step)
        else:
            step.task = asyncio.get_running_loop().create_task(run, name=sid)  # no 'Task-N'
        return step

    def _declared_order(self, spec: ToolSpec) -> list[Step]:
        """Rule 3 declared in the contract (``undo_after=["crm.update_field"]``): this step's
        inverse waits for the inverse of the latest earlier step of each tool named."""
        wanted = spec.undo_after
        if not wanted:
            return []
        latest: dict[str, Step] = {}
        for s in self.steps:
            if s.tool in wanted:
                latest[s.tool] = s
        return list(latest.values())

    def _undo_after(self, step: Step, given: Any, declared: list[Step]) -> list[Step]:
        """Check an undo-order declaration (rule 3): steps of this saga, no cycle."""
        out: list[Step] = []
        for o in [*as_steps(given), *declared]:  # undo_after= one step, a list, or None
            if not isinstance(o, Step) or o.saga is not self or o is step:
                raise ContractError(
                    f"undo_after= of step {step.id!r} takes earlier steps of this saga, got "
                    f"{o!r}; e.g. saga.call('pay.charge', ..., undo_after=[close_deal])",
                    saga_id=self.id,
                    step_id=step.id,
                )
            if o not in out:
                out.append(o)
        if not out:
            return out
        graph = [(s.id, [d.id for d in s.deps], [o.id for o in s.undo_after]) for s in self.steps]
        graph.append((step.id, [d.id for d in step.deps], [o.id for o in out]))
        cycle = undo_cycle(graph)
        if cycle:
            names = ", ".join(cycle)
            raise ContractError(
                f"undo_after={[o.id for o in out]} on step {step.id!r} ({step.tool}) makes the "
                f"undo order a cycle: the inverses of {names} would each wait for another of "
                f"them; drop the declaration or the forward dependency that contradicts it",
                saga_id=self.id,
                step_id=step.id,
            )
        return out

    async def gather(self, *steps: Step) -> list[Any]:
        """Await several steps; returns their results in order.

        Raises:
            StepFailedError: The first of them that failed.
        """
        # issue 12: one future woken by done callbacks instead of a task and a shield per step
        # (what asyncio.gather over Step._wait cost); cancelling this wait leaves the steps
        # running, as the shield did.
        # every Step has its task from _start on (no _task_of call per step, issue 29)
        tasks = cast("list[asyncio.Task[None]]", [s.task for s in steps])
        first = None
        pending = []
        for s, t in zip(steps, tasks, strict=True):  # issue 29: no call per step still running
            if not t.done():
                pending.append((s, t))
            elif has_failed(s, t):
                first = s
                break
        if first is None and pending:
            first = await first_failure(pending, self.trace.span is None)
        # rule 1: what gather hands the agent is durable (issue 29: the steps did not wait)
        refused = await _outcomes_durable(steps if first is None else (first,))
        first = first or refused
        for s, t in zip(steps, tasks, strict=True):  # each step is seen once it finishes
            if t.done():
                if not t.cancelled():  # observe(s, t), without the call
                    s._observed = True
            else:
                t.add_done_callback(functools.partial(observe, s))
        if first is not None:
            t = _task_of(first)
            if t.cancelled():
                raise asyncio.CancelledError
            exc = t.exception()
            if exc is not None:
                raise exc
            first._raise_write_error()
            assert first._error is not None
            raise first._error
        return [s._result for s in steps]


def _task_of(step: Step) -> asyncio.Task[None]:
    assert step.task is not None
    return step.task


async def _outcomes_durable(steps: Iterable[Step]) -> Step | None:
    """Rule 1 where an outcome is used (issue 29): wait until the outcome records of ``steps``
    are durable or failed. One wake-up per batch the log commits, not one per step."""
    refused = None
    for s in steps:
        w = s._written
        if w is None:
            continue
        if not w.done():
            await until_done(w)
        if not w.cancelled() and w.exception() is None:  # write_error(w) is None, no call
            s._written = None  # what Step.state would do when read
            s._state = s._outcome
        elif refused is None:
            refused = s
    return refused


async def _then_durable(run: Coroutine[Any, Any, None], step: Step) -> None:
    try:
        await run
    finally:
        await _outcomes_durable((step,))


def _traced_task(trace: Any, run: Coroutine[Any, Any, None], step: Step) -> asyncio.Task[None]:
    """The step's task: its run inside the step's span, then durable. A task cancelled before
    it started never ran them: they are closed when it ends, not warned "never awaited"."""
    inner = _then_durable(run, step)
    task = asyncio.get_running_loop().create_task(trace.step(inner, step), name=step.id)
    task.add_done_callback(lambda _: (inner.close(), run.close()))
    return task


# --- the forward call of one step ---------------------------------------------------------
# Split along the rules: wait for dependencies, write the intent (rule 1), dispatch with retries
# (the one retry decision, calls.RetryPolicy.next_wait), decide what a failure means (rule 9),
# record the result with its contract checks (rules 2 and 4).


async def _run_step(host: SagaHost, saga: Saga, step: Step) -> None:
    failed: BaseException | None = None
    try:
        if step.deps and not await _deps_done(host, saga, step):  # issue 29: none in a fan-out
            return
        try:
            args = _resolve(step.args) if step.has_refs else step.args
        except ContractError as exc:  # issue 11: a reference to a key the result lacks
            await _unresolvable(host, saga, step, exc)
            return
        if not await _begin_or_cancelled(host, saga, step, args):
            return
        step._state = "intent"  # the setter's work, without its call (issue 29)
        calls: list[Call] = []
        try:
            result = await _dispatch(host, saga, step, args, calls)
            finish = finish_done(host.catalog, step.spec.reversibility, step, calls[-1], result)
            step._result = result
        except asyncio.CancelledError:
            # rule 9: cancelled after the call began -> the vendor may have acted.
            finish = finish_failed(
                host.catalog,
                step,
                calls,
                "in_doubt",
                "the agent's task was cancelled while the tool was running; whether it took "
                "effect is unknown",
            )
            _log_finish(host, saga, step, finish)
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception):
                raise
            finish = failure(host.catalog, step, calls, exc)
        _log_finish(host, saga, step, finish)
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if step._waiter is not None:  # issue 29: woken by the step itself, not by a loop
            step_ended(step, failed)  # callback of its task's end


async def _deps_done(host: SagaHost, saga: Saga, step: Step) -> bool:
    """Wait for the steps ``step`` depends on, their outcomes durable (rule 1); if one keeps it
    from running (:func:`blocker`), ``step`` never runs (logged so) and this gives ``False``."""
    for dep in step.deps:
        assert dep.task is not None
        await asyncio.shield(dep.task)
    await _outcomes_durable(step.deps)
    for dep in step.deps:
        dep._raise_write_error()
    if (bad := blocker(step)) is not None:  # the caller asks only for a step with deps
        await _never_ran(host, saga, step, cast(Step, bad))
        return False
    return True


async def _never_ran(host: SagaHost, saga: Saga, step: Step, bad: Step) -> None:
    logged, redacted = redact_args(step.spec.sensitive, step.args, saga.vault, jsonable)
    started = await host.log.begin_step(_intent(saga, step, logged, redacted))
    reason = f"never ran: step {bad.id} ({bad.tool}) it waits for is {bad.state}"
    if started:
        step.state = "skipped"
        await host.log.finish_step(
            saga.id, step.id, StepFinish("skipped", error=reason), now=time.time()
        )
    else:
        step.state = "cancelled"
    step._error = StepFailedError(
        reason, state=step.state, saga_id=saga.id, step_id=step.id, tool=step.tool
    )


async def _unresolvable(host: SagaHost, saga: Saga, step: Step, exc: ContractError) -> None:
    """An argument refers to a key its step's result lacks: the tool is never called (no
    effect), and the step is logged ``failed`` with the reason, so the report shows it."""
    reason = f"never ran: {exc}"
    logged, redacted = redact_args(step.spec.sensitive, step.args, saga.vault, jsonable)
    started = await host.log.begin_step(_intent(saga, step, logged, redacted))
    if started:
        step.state = "failed"
        await host.log.finish_step(
            saga.id, step.id, StepFinish("failed", error=reason), now=time.time()
        )
    else:
        step.state = "cancelled"
    step._error = StepFailedError(
        f"step {step.id} ({step.tool}) {reason}",
        state=step.state,
        saga_id=saga.id,
        step_id=step.id,
        tool=step.tool,
    )


async def _begin_or_cancelled(host: SagaHost, saga: Saga, step: Step, args: dict[str, Any]) -> bool:
    """:func:`_begin`, and if the agent's task is cancelled meanwhile, the step is logged
    cancelled (its tool was never called) rather than left with an intent that recovery would
    have to call in doubt (rule 8: the detail names the real cause). The saga's cancel waits
    for the write (:meth:`Step._cancel`), so no shielded task is needed (issue 12)."""
    step._writing = True
    try:
        started = await _begin(host, saga, step, args)
    finally:
        step._writing = False
    if not started:
        step.state = "cancelled"
        step._error = StepFailedError(
            f"step {step.id} ({step.tool}) was cancelled: undo of saga {saga.id} was asked "
            f"before it started",
            state="cancelled",
            saga_id=saga.id,
            step_id=step.id,
            tool=step.tool,
        )
    if step._cancel_asked:
        if started:
            step.state = "cancelled"
            finish = StepFinish(
                "cancelled",
                error="the agent's task was cancelled before the tool was called; it never ran",
            )
            _log_finish(host, saga, step, finish)
        raise asyncio.CancelledError
    return started


def _begin(host: SagaHost, saga: Saga, step: Step, args: dict[str, Any]) -> Awaitable[bool]:
    """Rule 1: the write of the intent, durable before the tool is called; it gives ``False``
    when undo came first. A plain function returning the log's awaitable (issue 12: one
    coroutine fewer per step)."""
    # rule 11: sensitive arguments never reach the log; their values are scrubbed from
    # everything this saga logs from now on (results, inverses, errors).
    vault = saga.vault
    if step.spec.sensitive or vault:
        logged_args, redacted = redact_args(step.spec.sensitive, args, vault, jsonable)
    else:  # nothing to redact or scrub: the same as redact_args gives, one copy fewer
        logged_args, redacted = jsonable(args), []
    return host.log.begin_step(_intent(saga, step, logged_args, redacted))


def _intent(
    saga: Saga, step: Step, logged_args: Any, redacted: Sequence[Redaction] = ()
) -> StepIntent:
    """The step's intent as the log takes it (one record, issue 22)."""
    return StepIntent(
        saga.id,
        step.id,
        seq=step.seq,
        tool=step.tool,
        args=logged_args,
        deps=[d.id for d in step.deps] if step.deps else [],  # issue 29: a fan-out has none
        resources=step.resources,
        declared=step.spec.reversibility._value_,  # no enum property call (issue 29)
        now=time.time(),
        explicit=step.spec.explicit,
        redacted=tuple(redacted),
    )


async def _dispatch(
    host: SagaHost, saga: Saga, step: Step, args: dict[str, Any], calls: list[Call]
) -> Any:
    """Call the tool, retrying transient refusals; every attempt's Call is appended to ``calls``."""
    attempt = 0
    while True:
        attempt += 1
        call = Call(
            saga_id=saga.id,
            step_id=step.id,
            tool=step.tool,
            phase="forward",
            idempotency_key=idempotency_key(saga.id, step.id),
            attempt=attempt,
        )
        calls.append(call)
        try:
            return await invoke(step.spec.fn, call, args, step.spec.timeout)
        except TransientError as exc:
            if not isinstance(call.recorded_inverse, Inverse):  # no effect: may retry
                # read untyped: a vendor may put anything there (a compiled read would check)
                wait = host.retry_policy.next_wait(attempt, cast(Any, exc).retry_after, _RNG)
                if wait is not None:
                    await asyncio.sleep(wait)
                    continue
                raise Refused(host.retry_policy.gave_up(step.tool, attempt, exc)) from exc
            raise
        except PermanentError as exc:
            raise Refused(str(exc)) from exc


def _log_finish(host: SagaHost, saga: Saga, step: Step, finish: StepFinish) -> None:
    """Hand the step's outcome (result, inverse, expectation) to the log; the step does not
    wait for it (issue 29). Rule 1 holds where the outcome is used (:func:`_outcomes_durable`),
    and the write goes on if the agent's task is cancelled meanwhile (no await here to cancel):
    lost, undo could only say in doubt."""
    vault = saga.vault
    if vault:  # rule 11 (an empty vault scrubs nothing: no call)
        finish = scrub_record(vault, finish)
    finish = cap_result(finish, host.max_result_bytes)  # issue 21.13: a 50 MB answer is not logged
    written = host.log.finish_step(saga.id, step.id, finish, now=time.time())
    # a SQL log's write is the writer's future already; an async def log's runs on a task
    step._written = written if isinstance(written, asyncio.Future) else ensure_future(written)
    if finish.state == "done" and finish.error is None:
        step._outcome = "done"
        return
    # a call that raised after recording its inverse is logged done (undo compensates it) but,
    # for the agent, it failed: its dependents do not run. The error is known now (gather
    # stops at it); the agent sees it once the outcome is durable.
    step._outcome = "failed" if finish.state == "done" else finish.state
    step._error = StepFailedError(
        f"step {step.id} ({step.tool}) {finish.state if finish.state != 'done' else 'failed'}: "
        f"{finish.error}",
        state=finish.state,
        saga_id=saga.id,
        step_id=step.id,
        tool=step.tool,
    )
