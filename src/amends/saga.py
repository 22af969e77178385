"""The forward side of a saga: fan-out of steps, dependencies, and write-ahead logging.

A step's intent is durable before its tool runs; its result, inverse and expectation are durable
before anything that depends on it starts (rule 1). This module never undoes anything: undo,
recovery and the one-reversal rule live in :mod:`amends.engine`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol

from .calls import RetryPolicy, idempotency_key, invoke
from .contracts import NOTHING, Call, Catalog, Inverse, Reversibility, ToolFn, ToolSpec
from .errors import (
    ConfigError,
    ContractError,
    PermanentError,
    SagaClosedError,
    StepFailedError,
    TransientError,
)
from .log.base import SagaLog, StepFinish

__all__ = ["Ref", "Saga", "SagaHost", "Step", "new_id"]

_RNG = random.Random()


def new_id(prefix: str) -> str:
    """A fresh, time-ordered id (``saga_…``, ``rev_…``), so ids sort by creation in listings."""
    return f"{prefix}_{time.time_ns():x}{uuid.uuid4().hex[:10]}"


class SagaHost(Protocol):
    """What a saga needs from the engine that runs it."""

    catalog: Catalog
    log: SagaLog
    retry: RetryPolicy
    owner: str
    lease_seconds: float
    live_sagas: dict[str, Saga]


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
        value = self.step.result
        for key in self.path:
            value = value[key]
        return value

    def __repr__(self) -> str:
        return f"ref({self.step.id}{''.join(f'[{k!r}]' for k in self.path)})"

    __str__ = __repr__


def _refs(value: Any, found: list[Step]) -> None:
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


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return {"repr": repr(value)}


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
        self.saga = saga
        self.spec = spec
        """The contract the step runs under, and the function its forward call runs."""
        self.id = step_id
        self.seq = seq
        self.tool = tool
        self.args = args
        self.deps = deps
        self.resources = resources
        self.state = "pending"
        """``pending``, ``intent``, ``done``, ``failed``, ``in_doubt``, ``cancelled``,
        ``skipped``."""
        self._result: Any = NOTHING
        self._error: StepFailedError | None = None
        self._observed = False
        self.task: asyncio.Task[None] | None = None

    @property
    def result(self) -> Any:
        if self.state != "done":
            raise StepFailedError(
                f"step {self.id} ({self.tool}) has no result: it is {self.state}",
                saga_id=self.saga.id,
                step_id=self.id,
                tool=self.tool,
                state=self.state,
            )
        return self._result

    def __getitem__(self, key: Any) -> Ref:
        return Ref(self, (key,))

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> Any:
        assert self.task is not None
        await asyncio.shield(self.task)
        self._observed = True
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self) -> str:
        return f"Step({self.id!r}, {self.tool!r}, state={self.state!r})"


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
        self.engine = engine
        self.title = title
        self.tenant = tenant
        self.actor = actor
        self.id = saga_id or new_id("saga")
        self.steps: list[Step] = []
        self._by_id: dict[str, Step] = {}
        self._last_by_resource: dict[str, Step] = {}
        self._entered = False
        self._closed = False
        self._heartbeat: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Saga:
        e = self.engine
        await e.log.create_saga(
            self.id,
            self.title,
            tenant=self.tenant,
            actor=self.actor,
            owner=e.owner,
            lease_until=time.time() + e.lease_seconds,
            now=time.time(),
        )
        self._entered = True
        e.live_sagas[self.id] = self
        self._heartbeat = asyncio.create_task(self._beat())
        return self

    async def _beat(self) -> None:
        e = self.engine
        while True:
            await asyncio.sleep(e.lease_seconds / 3)
            try:
                await e.log.renew_saga_leases([self.id], e.owner, time.time() + e.lease_seconds)
            except Exception:  # a missed heartbeat only shortens the lease; the next one retries
                continue

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.settle()
        finally:
            if self._heartbeat is not None:
                self._heartbeat.cancel()
            self._closed = True
            failed = any(s.state in ("failed", "in_doubt") for s in self.steps)
            await self.engine.log.finish_saga(
                self.id, "failed" if failed else "completed", now=time.time()
            )
            self.engine.live_sagas.pop(self.id, None)
        if exc is None:
            for s in self.steps:
                if s._error is not None and not s._observed and s.state in ("failed", "in_doubt"):
                    raise s._error

    async def settle(self) -> None:
        """Wait until every step called so far has finished (or was cancelled)."""
        tasks = [s.task for s in self.steps if s.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def call(
        self, tool: str, /, *, after: Iterable[Step] = (), step_id: str | None = None, **args: Any
    ) -> Step:
        """Start tool ``tool`` as a step of this saga and return its handle.

        Args:
            tool: Catalog name.
            after: Steps this one depends on (it starts after they are done).
            step_id: A readable id; default ``s1``, ``s2``, ... in call order.
            **args: The tool's arguments. A :class:`Step` or ``step["key"]`` stands for that
                step's result and makes this step depend on it.

        Raises:
            ContractError: Unknown tool, a dependency from another saga, or a duplicate step id.
            SagaClosedError: Called outside ``async with`` or after the saga closed.
        """
        self._check_open()
        return self._start(self.engine.catalog.get(tool), tool, after, step_id, args)

    def call_with(
        self,
        fn: ToolFn,
        tool: str,
        /,
        *,
        after: Iterable[Step] = (),
        step_id: str | None = None,
        **args: Any,
    ) -> Step:
        """Run ``fn(call, **args)`` as the forward call of a new step named ``tool``.

        For tools whose code lives elsewhere (a framework's tool function, an MCP upstream, a
        Temporal activity): the contract is the catalog's entry for ``tool`` (its
        reversibility, resources, timeout), or the irreversible default when the catalog has none,
        so the call still runs and undo acknowledges it. Write-ahead logging and the rules for
        failures are the same as for :meth:`call`; ``fn`` may record its inverse on ``call`` or on
        :func:`amends.current_call`.

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
            spec = dataclasses.replace(catalog.get(tool), fn=fn)
        else:  # no contract: the default, irreversible (DESIGN.md)
            spec = ToolSpec(
                name=str(tool), fn=fn, reversibility=Reversibility.IRREVERSIBLE, explicit=False
            )
        return self._start(spec, tool, after, step_id, args)

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
        after: Iterable[Step],
        step_id: str | None,
        args: dict[str, Any],
    ) -> Step:
        self._check_open()
        self._check_open()
        seq = len(self.steps) + 1
        sid = step_id or f"s{seq}"
        if sid in self._by_id:
            raise ContractError(
                f"step id {sid!r} is already used in saga {self.id!r}", saga_id=self.id, step_id=sid
            )
        deps: list[Step] = []
        for d in after:
            if not isinstance(d, Step) or d.saga is not self:
                raise ContractError(
                    f"after= takes steps of this saga, got {d!r}", saga_id=self.id, step_id=sid
                )
            deps.append(d)
        _refs(args, deps)
        for d in deps:
            if d.saga is not self:
                raise ContractError(
                    f"argument refers to step {d.id!r} of another saga",
                    saga_id=self.id,
                    step_id=sid,
                )
        resources = spec.resources_for(args)
        for r in resources:  # steps sharing a resource are ordered (forward and in reverse)
            prev = self._last_by_resource.get(r)
            if prev is not None:
                deps.append(prev)
        unique: list[Step] = []
        for d in deps:
            if d not in unique:
                unique.append(d)
        step = Step(self, sid, seq, tool, args, unique, resources, spec)
        for r in resources:
            self._last_by_resource[r] = step
        self.steps.append(step)
        self._by_id[sid] = step
        step.task = asyncio.create_task(_run_step(self.engine, self, step))
        return step

    async def gather(self, *steps: Step) -> list[Any]:
        """Await several steps; returns their results in order.

        Raises:
            StepFailedError: The first of them that failed.
        """
        return list(await asyncio.gather(*(s._wait() for s in steps)))


# --- the forward call of one step ---------------------------------------------------------
async def _run_step(host: SagaHost, saga: Saga, step: Step) -> None:
    for dep in step.deps:
        assert dep.task is not None
        await asyncio.shield(dep.task)
    now = time.time
    spec = step.spec
    bad = [d for d in step.deps if d.state != "done"]
    dep_ids = [d.id for d in step.deps]
    if bad:
        started = await host.log.begin_step(
            saga.id,
            step.id,
            seq=step.seq,
            tool=step.tool,
            args=_jsonable(step.args),
            deps=dep_ids,
            resources=step.resources,
            declared=spec.reversibility.value,
            now=now(),
        )
        reason = f"never ran: step {bad[0].id} ({bad[0].tool}) it waits for is {bad[0].state}"
        if started:
            step.state = "skipped"
            await host.log.finish_step(
                saga.id, step.id, StepFinish("skipped", error=reason), now=now()
            )
        else:
            step.state = "cancelled"
        step._error = StepFailedError(
            reason, state=step.state, saga_id=saga.id, step_id=step.id, tool=step.tool
        )
        return
    args = _resolve(step.args)
    logged_args = _jsonable(args)
    # rule 1: the intent is durable before the tool is called.
    started = await host.log.begin_step(
        saga.id,
        step.id,
        seq=step.seq,
        tool=step.tool,
        args=logged_args,
        deps=dep_ids,
        resources=step.resources,
        declared=spec.reversibility.value,
        now=now(),
    )
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
        return
    step.state = "intent"
    call: Call | None = None
    finish: StepFinish
    try:
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
            try:
                result = await invoke(spec.fn, call, args, spec.timeout)
                break
            except TransientError as exc:
                if attempt >= host.retry.max_attempts:
                    raise StepFailedError(
                        f"{step.tool} kept failing transiently after {attempt} attempts: {exc}"
                    ) from exc
                await asyncio.sleep(
                    exc.retry_after
                    if exc.retry_after is not None
                    else host.retry.backoff(attempt, _RNG)
                )
        finish = _finish_done(host.catalog, spec.reversibility, step, call, result)
        step._result = result
    except TimeoutError:
        finish = StepFinish(
            "in_doubt",
            error=f"{step.tool} did not answer within "
            f"{spec.timeout}s; whether it took effect is unknown",
        )
    except asyncio.CancelledError:
        finish = StepFinish(
            "in_doubt",
            error="the step's task was cancelled while its tool "
            "was running; whether it took effect is unknown",
        )
        step.state = "in_doubt"
        await asyncio.shield(host.log.finish_step(saga.id, step.id, finish, now=now()))
        raise
    except (PermanentError, StepFailedError) as exc:
        finish = StepFinish("failed", error=str(exc))
    except ContractError as exc:  # the tool misused Call; its effect may have happened
        finish = StepFinish("in_doubt", error=f"contract error inside the tool: {exc}")
    except Exception as exc:  # any other exception counts as permanent (DESIGN.md)
        finish = StepFinish("failed", error=f"{type(exc).__name__}: {exc}")
    await host.log.finish_step(saga.id, step.id, finish, now=now())
    step.state = finish.state
    if finish.state != "done":
        step._error = StepFailedError(
            f"step {step.id} ({step.tool}) {finish.state}: {finish.error}",
            state=finish.state,
            saga_id=saga.id,
            step_id=step.id,
            tool=step.tool,
        )


def _finish_done(
    catalog: Catalog, declared: Reversibility, step: Step, call: Call, result: Any
) -> StepFinish:
    effective = declared
    violation = None
    inv = call.recorded_inverse
    if declared in (Reversibility.REVERSIBLE, Reversibility.COMPENSABLE):
        # rule 2: no inverse recorded -> logged and reported as irreversible.
        if not isinstance(inv, Inverse):
            violation = (
                f"tool {step.tool!r} is {declared.value!r} but recorded no inverse; "
                f"call call.inverse(...) or register it as 'irreversible'"
            )
        elif inv.tool not in catalog:
            violation = (
                f"tool {step.tool!r} recorded inverse {inv.tool!r} which is not in the "
                f"catalog; register it or record an inverse the catalog has"
            )
        elif call.recorded_expectation is not None and (
            call.recorded_expectation.probe not in catalog
            or catalog.get(call.recorded_expectation.probe).reversibility
            is not Reversibility.READ_ONLY
        ):
            violation = (
                f"tool {step.tool!r} recorded expectation probe "
                f"{call.recorded_expectation.probe!r}, which is not a read_only "
                f"tool of the catalog; drift could not be checked"
            )
        if violation:
            effective = Reversibility.IRREVERSIBLE
    return StepFinish(
        "done",
        effective=effective.value,
        result=_jsonable(result),
        inverse=inv.to_dict() if isinstance(inv, Inverse) else None,
        expectation=None
        if call.recorded_expectation is None
        else call.recorded_expectation.to_dict(),
        residue=[r.to_dict() for r in call.recorded_residue],
        acknowledgement=None
        if call.recorded_acknowledgement is None
        else call.recorded_acknowledgement.to_dict(),
        violation=violation,
    )
