"""The engine: sagas run forward with write-ahead logging, the undo entry point, and recovery.

Forward: a step's intent is durable before its tool runs; its result, inverse and expectation are
durable before anything that depends on it starts (rule 1). Undo: one reversal per saga, enforced by
the log across threads and processes (rule 6), then handed to :mod:`amends.reversal`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from .budget import Budget, BudgetMeter
from .contracts import NOTHING, Call, Catalog, Inverse, Reversibility
from .errors import (
    ConfigError,
    ContractError,
    LeaseLostError,
    PermanentError,
    SagaClosedError,
    SagaNotFoundError,
    StepFailedError,
    TransientError,
)
from .log import SagaLog, open_log
from .log.base import Claim, ReversalRecord, SagaRecord, StepFinish
from .planner import Plan, plan
from .report import StepOutcome, UndoReport
from .reversal import RetryPolicy, invoke, run_plan

_RNG = random.Random()

__all__ = ["Engine", "RecoveryReport", "Ref", "Saga", "Step", "run"]

T = TypeVar("T")


def _new_id(prefix: str) -> str:
    # time-ordered, so ids sort by creation in listings
    return f"{prefix}_{time.time_ns():x}{uuid.uuid4().hex[:10]}"


def _owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def run(awaitable: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running event loop.

    ``amends.run(engine.undo(saga_id))`` or ``amends.run(main)``.
    """

    async def main() -> T:
        return await (awaitable() if callable(awaitable) else awaitable)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop is running in this thread
        return pool.submit(asyncio.run, main()).result()


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
    ) -> None:
        self.saga = saga
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
        engine: Engine,
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
        self.id = saga_id or _new_id("saga")
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
        e._live[self.id] = self
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
            self.engine._live.pop(self.id, None)
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
        if not self._entered or self._closed:
            raise SagaClosedError(
                f"saga {self.id!r} is not open; call saga.call(...) inside "
                f"'async with engine.saga(...) as saga'",
                saga_id=self.id,
            )
        spec = self.engine.catalog.get(tool)
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
        step = Step(self, sid, seq, tool, args, unique, resources)
        for r in resources:
            self._last_by_resource[r] = step
        self.steps.append(step)
        self._by_id[sid] = step
        step.task = asyncio.create_task(self.engine._run_step(self, step))
        return step

    async def gather(self, *steps: Step) -> list[Any]:
        """Await several steps; returns their results in order.

        Raises:
            StepFailedError: The first of them that failed.
        """
        return list(await asyncio.gather(*(s._wait() for s in steps)))


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`Engine.recover` did."""

    in_doubt: tuple[tuple[str, str], ...]
    """(saga_id, step_id) of forward steps found with intent but no result, now ``in_doubt``."""
    resumed: tuple[UndoReport, ...]
    """Reversals whose worker had died, resumed and finished here."""


class Engine:
    """Runs sagas forward with write-ahead logging and undoes them honestly.

    Args:
        catalog: The tools and their reversibility contracts.
        log: A :class:`SagaLog`, a URL (``sqlite:///path``, ``postgresql://...``) or a path.
            Default ``./amends.db``.
        retry: How transient errors are retried, forward and during undo.
        lease_seconds: How long a worker's claim on a running saga or reversal lasts without a
            heartbeat; after that, another worker may recover it. Default 15s.
        poll_interval: Seconds between looks at the log while waiting for another process.
    """

    def __init__(
        self,
        catalog: Catalog,
        log: SagaLog | str | os.PathLike[str] | None = None,
        *,
        retry: RetryPolicy | None = None,
        lease_seconds: float = 15.0,
        poll_interval: float = 0.02,
    ) -> None:
        if not isinstance(catalog, Catalog):
            raise ConfigError(f"Engine needs an amends.Catalog, got {catalog!r}")
        if lease_seconds <= 0:
            raise ConfigError(f"lease_seconds must be positive, got {lease_seconds!r}")
        self.catalog = catalog
        self.log = open_log(log)
        self.retry = retry or RetryPolicy()
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = poll_interval
        self.owner = _owner_id()
        self._live: dict[str, Saga] = {}
        self._reversals: dict[str, concurrent.futures.Future[UndoReport]] = {}
        self._lock = threading.Lock()
        self.progress_hooks: list[Callable[[str, StepOutcome], None]] = []
        """Called with (reversal_id, outcome) as each step of a reversal settles (for SSE)."""

    def saga(
        self,
        title: str,
        *,
        tenant: str | None = None,
        actor: str | None = None,
        saga_id: str | None = None,
    ) -> Saga:
        """A new saga; use it as ``async with engine.saga("Close the ACME deal") as saga``."""
        return Saga(self, title, tenant=tenant, actor=actor, saga_id=saga_id)

    # --- forward --------------------------------------------------------------------------
    async def _run_step(self, saga: Saga, step: Step) -> None:
        for dep in step.deps:
            assert dep.task is not None
            await asyncio.shield(dep.task)
        now = time.time
        spec = self.catalog.get(step.tool)
        bad = [d for d in step.deps if d.state != "done"]
        dep_ids = [d.id for d in step.deps]
        if bad:
            started = await self.log.begin_step(
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
                await self.log.finish_step(
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
        started = await self.log.begin_step(
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
                    idempotency_key=f"amends:{saga.id}:{step.id}",
                    attempt=attempt,
                )
                try:
                    result = await invoke(spec.fn, call, args, spec.timeout)
                    break
                except TransientError as exc:
                    if attempt >= self.retry.max_attempts:
                        raise StepFailedError(
                            f"{step.tool} kept failing transiently after {attempt} attempts: {exc}"
                        ) from exc
                    await asyncio.sleep(
                        exc.retry_after
                        if exc.retry_after is not None
                        else self.retry.backoff(attempt, _RNG)
                    )
            finish = self._finish_done(spec.reversibility, step, call, result)
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
            await asyncio.shield(self.log.finish_step(saga.id, step.id, finish, now=now()))
            raise
        except (PermanentError, StepFailedError) as exc:
            finish = StepFinish("failed", error=str(exc))
        except ContractError as exc:  # the tool misused Call; its effect may have happened
            finish = StepFinish("in_doubt", error=f"contract error inside the tool: {exc}")
        except Exception as exc:  # any other exception counts as permanent (DESIGN.md)
            finish = StepFinish("failed", error=f"{type(exc).__name__}: {exc}")
        await self.log.finish_step(saga.id, step.id, finish, now=now())
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
        self, declared: Reversibility, step: Step, call: Call, result: Any
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
            elif inv.tool not in self.catalog:
                violation = (
                    f"tool {step.tool!r} recorded inverse {inv.tool!r} which is not in the "
                    f"catalog; register it or record an inverse the catalog has"
                )
            elif call.recorded_expectation is not None and (
                call.recorded_expectation.probe not in self.catalog
                or self.catalog.get(call.recorded_expectation.probe).reversibility
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

    # --- undo -----------------------------------------------------------------------------
    async def preview(self, saga_id: str) -> Plan:
        """The plan undo would follow now, without executing anything.

        Raises:
            SagaNotFoundError: No such saga.
        """
        return plan(await self._saga_or_raise(saga_id), self.catalog)

    async def _saga_or_raise(self, saga_id: str) -> SagaRecord:
        if not isinstance(saga_id, str) or not saga_id:
            raise ConfigError(f"saga id must be a non-empty string, got {saga_id!r}")
        saga = await self.log.get_saga(saga_id)
        if saga is None:
            raise SagaNotFoundError(
                f"no saga {saga_id!r} in {self.log.url}; list sagas with "
                f"`amends show --db {self.log.url}`",
                saga_id=saga_id,
            )
        return saga

    async def report(self, saga_id: str) -> UndoReport | None:
        """The report of the saga's reversal if it has finished, else ``None``."""
        rev = await self.log.get_reversal(saga_id=saga_id)
        return UndoReport.from_dict(rev.report) if rev and rev.report else None

    async def undo(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        """Undo a saga: the one reversal of it, started here or joined if already asked for.

        Concurrent and repeated calls — in this process or others sharing the log — all get the
        same report (rule 6). A second caller's ``budget`` is ignored: the reversal keeps its own.

        Raises:
            SagaNotFoundError: No such saga in the log.
            LogError: The log cannot be read or written.
        """
        budget = budget or Budget()
        if not isinstance(budget, Budget):
            raise ConfigError(f"budget must be an amends.Budget, got {budget!r}")
        with self._lock:
            fut = self._reversals.get(saga_id)
            mine = fut is None
            if fut is None:
                fut = concurrent.futures.Future()
                self._reversals[saga_id] = fut
        if not mine:
            return await asyncio.wrap_future(fut)
        try:
            report = await self._undo(saga_id, budget)
        except BaseException as exc:
            fut.set_exception(exc)
            with self._lock:
                self._reversals.pop(saga_id, None)
            raise
        fut.set_result(report)
        with self._lock:
            self._reversals.pop(saga_id, None)
        return report

    def undo_sync(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        """:meth:`undo` for synchronous callers."""
        return run(self.undo(saga_id, budget=budget))

    async def _undo(self, saga_id: str, budget: Budget) -> UndoReport:
        await self._saga_or_raise(saga_id)
        while True:
            claim = await self.log.claim_reversal(
                saga_id,
                reversal_id=_new_id("rev"),
                budget=budget.to_dict(),
                owner=self.owner,
                lease_until=time.time() + self.lease_seconds,
                now=time.time(),
            )
            if claim.outcome == "done":
                assert claim.reversal.report is not None
                return UndoReport.from_dict(claim.reversal.report)
            if claim.outcome == "running_elsewhere":
                report = await self._wait_elsewhere(claim.reversal)
                if report is not None:
                    return report
                continue  # its lease expired: take it over
            try:
                return await self._execute(saga_id, claim)
            except LeaseLostError:
                continue  # another worker took over; join it

    async def _wait_elsewhere(self, rev: ReversalRecord) -> UndoReport | None:
        while True:
            await asyncio.sleep(self.poll_interval)
            cur = await self.log.get_reversal(reversal_id=rev.reversal_id)
            assert cur is not None
            if cur.state == "done" and cur.report is not None:
                return UndoReport.from_dict(cur.report)
            if cur.lease_until is None or cur.lease_until <= time.time():
                return None

    async def _execute(self, saga_id: str, claim: Claim) -> UndoReport:
        rev = claim.reversal
        budget = Budget.from_dict(rev.budget)
        meter = BudgetMeter(budget, calls_spent=rev.calls_spent, tokens_spent=rev.tokens_spent)
        stop = asyncio.Event()
        lost: list[LeaseLostError] = []

        async def beat() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), self.lease_seconds / 3)
                except TimeoutError:
                    pass
                if stop.is_set():
                    return
                try:
                    await self.log.renew_reversal_lease(
                        rev.reversal_id, rev.generation, time.time() + self.lease_seconds
                    )
                except LeaseLostError as exc:
                    lost.append(exc)
                    return
                except Exception:
                    continue

        heartbeat = asyncio.create_task(beat())
        try:
            saga = await self._settled_saga(saga_id, meter)
            the_plan = plan(saga, self.catalog)

            def progress(outcome: StepOutcome) -> None:
                for hook in self.progress_hooks:
                    hook(rev.reversal_id, outcome)

            outcomes = await run_plan(
                catalog=self.catalog,
                log=self.log,
                saga=saga,
                reversal=rev,
                plan=the_plan,
                retry=self.retry,
                meter=meter,
                on_progress=progress,
            )
            if lost:
                raise lost[0]
            report = UndoReport(
                saga_id=saga_id,
                reversal_id=rev.reversal_id,
                title=saga.title,
                steps=tuple(outcomes),
                tool_calls=meter.calls,
                tokens=meter.tokens,
                seconds=time.monotonic() - meter.started,
                budget=budget.to_dict(),
                requested_at=rev.requested_at,
                finished_at=time.time(),
            )
            await self.log.finish_reversal(
                rev.reversal_id, rev.generation, report.to_dict(), now=time.time()
            )
            return report
        finally:
            stop.set()
            await heartbeat

    async def _settled_saga(self, saga_id: str, meter: BudgetMeter) -> SagaRecord:
        """The saga once no step of it is mid-call: in-flight steps finish, later ones cancel."""
        live = self._live.get(saga_id)
        if live is not None:
            await live.settle()
        while True:
            saga = await self._saga_or_raise(saga_id)
            running = [s for s in saga.steps if s.state == "intent"]
            expired = saga.lease_until is None or saga.lease_until <= time.time()
            if not running or expired or meter.remaining_seconds() <= 0:
                return saga
            await asyncio.sleep(self.poll_interval)

    # --- recovery -------------------------------------------------------------------------
    async def recover(self) -> RecoveryReport:
        """After a crash: mark forward steps left with intent but no result ``in_doubt``, and
        resume every reversal whose worker's lease has expired, without re-sending any
        compensation already logged done.
        """
        now = time.time()
        in_doubt = await self.log.mark_in_doubt(now)
        resumed = []
        for rev in await self.log.expired_reversals(now):
            resumed.append(await self.undo(rev.saga_id, budget=Budget.from_dict(rev.budget)))
        return RecoveryReport(tuple(in_doubt), tuple(resumed))

    def recover_sync(self) -> RecoveryReport:
        return run(self.recover())

    async def close(self) -> None:
        await self.log.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
