"""The client side: hand a saga's reversal to Temporal, and build workers that run it."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from amends import (
    AmendsError,
    Budget,
    Catalog,
    ConfigError,
    ReversalRecord,
    SagaLog,
    SagaNotFoundError,
    UndoReport,
    open_log,
    plan,
)
from amends._budget import BudgetMeter
from amends._selection import select
from amends._telemetry import tracer

from ._activities import ReversalActivities
from ._workflow import (
    WORKFLOW_NAME,
    ReversalInput,
    ReversalWorkflow,
    reversal_owner,
    workflow_id,
)

if TYPE_CHECKING:
    from amends import Engine

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "TemporalRunner",
    "TemporalUnavailableError",
    "connect",
    "make_worker",
    "workflow_id",
]

DEFAULT_TASK_QUEUE = "amends-reversals"


class TemporalUnavailableError(AmendsError):
    """Temporal's server did not answer (down, restarting, or the address is wrong): nothing
    was undone or recorded by this request; undo again once it answers."""


async def connect(target: str, *, namespace: str = "default") -> Client:
    """Connect to Temporal at ``HOST:PORT`` and check that ``namespace`` exists there.

    Raises:
        ConfigError: ``target`` is not ``HOST:PORT``, nothing answers there, or the server has
            no such namespace.
    """
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"Temporal address {target!r} is not HOST:PORT; e.g. --temporal 127.0.0.1:7233"
        )
    try:
        client = await Client.connect(
            target, namespace=namespace, interceptors=tracing_interceptors()
        )
    except RuntimeError as exc:  # the SDK's connection errors are RuntimeErrors
        raise ConfigError(
            f"cannot reach Temporal at {target!r} (namespace {namespace!r}): {exc}; start it "
            f"(`temporal server start-dev`) or fix the address"
        ) from exc
    await check_namespace(client)
    return client


def target_of(client: Client) -> str:
    """The ``HOST:PORT`` a client talks to (for messages)."""
    return str(getattr(client.service_client.config, "target_host", "") or "Temporal")


async def check_namespace(client: Client, saga_id: str | None = None) -> None:
    """Issue 25 item 12: a namespace the server does not have is a clear error up front (a
    worker polling it printed "serving task queue ..." and then two tracebacks).

    Raises:
        ConfigError: The server has no such namespace.
        TemporalUnavailableError: The server did not answer.
    """
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        raise translated(exc, client, saga_id) from exc


def translated(exc: RPCError, client: Client, saga_id: str | None = None) -> AmendsError:
    """Temporal's RPC error as amends' own (one table at the adapter's edge): the value, what
    is wrong and what to do."""
    target = target_of(client)
    if exc.status is RPCStatusCode.NOT_FOUND and "amespace" in exc.message:
        ns = client.namespace
        return ConfigError(
            f"Temporal at {target!r} has no namespace {ns!r}; create it (`temporal operator "
            f"namespace create --namespace {ns}`) or fix --namespace",
            saga_id=saga_id,
        )
    if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
        what = f" to undo saga {saga_id!r}" if saga_id else ""
        return TemporalUnavailableError(
            f"cannot reach Temporal at {target!r}{what}: {exc.message}; nothing was undone: "
            f"start the server (`temporal server start-dev --db-filename temporal.db`) or fix "
            f"the address, then undo again",
            saga_id=saga_id,
        )
    return AmendsError(
        f"Temporal at {target!r} refused the request ({exc.status.name}): {exc.message}",
        saga_id=saga_id,
    )


def tracing_interceptors(client: Client | None = None) -> list[Any]:
    """Issue 28: temporalio's ``TracingInterceptor`` when an OpenTelemetry tracer provider is
    set (and ``client`` has none yet): a reversal's spans then continue from the caller into
    the workflow and the activities, on whichever workers run them."""
    if tracer() is None:
        return []
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as exc:  # it needs opentelemetry-sdk, as a tracer provider does
        logging.getLogger("amends.temporal").warning(
            "amends: reversal spans will not cross Temporal: %s", exc
        )
        return []
    if client is not None and any(
        isinstance(i, TracingInterceptor) for i in client.config().get("interceptors", ())
    ):
        return []
    return [TracingInterceptor()]


def finite_positive(value: object) -> bool:
    """Whether ``value`` is a finite number above 0 (a duration in seconds)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and value > 0
        and math.isfinite(value)
    )


def check_seconds(name: str, value: object) -> None:
    """A duration in seconds given to the Temporal integration: a finite number above 0.

    Raises:
        ConfigError: Anything else (0, negative, NaN, infinite, not a number): an infinite
            heartbeat timeout raised ``OverflowError`` at undo time, and an infinite heartbeat
            interval never heartbeats, so every tool call would be taken for lost.
    """
    if not finite_positive(value):
        raise ConfigError(
            f"{name} must be positive, got {value!r}; give a finite number of seconds above 0"
        )


def check_task_queue(name: str, value: object) -> None:
    """A Temporal task queue name: a non-blank string (Temporal refuses an empty one only when
    a reversal is started, and a worker polling it serves nothing).

    Raises:
        ConfigError: Anything else.
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{name} must name a Temporal task queue, got {value!r}; e.g. {DEFAULT_TASK_QUEUE!r}"
        )


def check_timing(heartbeat_timeout: float, local_batch_seconds: float) -> None:
    """The reversal workflow's timing settings, checked where they are given.

    Raises:
        ConfigError: A heartbeat timeout that is not a finite positive number, or a negative
            batch bound.
    """
    check_seconds("heartbeat_timeout", heartbeat_timeout)
    if not local_batch_seconds >= 0:
        raise ConfigError(
            f"local_batch_seconds must be 0 (never) or a positive number of seconds, got "
            f"{local_batch_seconds!r}"
        )


def reversal_settings(
    engine: Engine,
    *,
    heartbeat_timeout: float,
    local_batch_seconds: float,
    lease_seconds: float = 3600.0,
) -> dict[str, Any]:
    """The :class:`ReversalInput` fields every reversal workflow gets from its engine and timing,
    whoever starts it (:class:`TemporalRunner` or :class:`AmendsInterceptor`)."""
    return {
        "retry": dataclasses.asdict(engine.retry_policy),
        "heartbeat_timeout": float(heartbeat_timeout),
        "lease_seconds": float(lease_seconds),
        "poll_interval": max(engine.poll_interval, 0.05),
        "local_batch_seconds": float(local_batch_seconds),
    }


def default_task_timeout(heartbeat_timeout: float) -> float:
    """A dead worker's workflow task moves to a live one after about a heartbeat timeout."""
    return max(heartbeat_timeout, 1.0)


class TemporalRunner:
    """Runs reversals as Temporal workflows: ``Engine(catalog, log=pg_url, runner=...)``.

    Every undo of a saga, from any client, process or machine, attaches to the one workflow
    whose id derives from the saga id (rule 6); workers started with :func:`make_worker` (or
    ``amends worker``) execute it, recording every compensation in the shared saga log.

    Args:
        client: A connected :class:`temporalio.client.Client`, or ``"HOST:PORT"``.
        task_queue: The queue the workers poll. Default ``amends-reversals``.
        namespace: Temporal namespace when ``client`` is an address. Default ``default``.
        heartbeat_timeout: Seconds without a heartbeat after which a tool call's worker counts
            as dead and the call moves through amends' crash rules. Default 5.
        lease_seconds: How long the reversal's claim in the log lasts for local engines (they
            take a reversal over only when it expires). Default 3600.
        task_timeout: Seconds a worker may take over one workflow task; a worker that died
            while holding one delays the reversal this long. Default: the heartbeat timeout.
        local_batch_seconds: The calls of one workflow activation whose tools' timeouts and
            budget bound them to at most this many seconds (probes and first attempts of
            compensations) run as a local activity, in the worker running the reversal: no
            round trip through Temporal's server. A dead worker's batch moves with its workflow
            task, after ``task_timeout``. Longer batches, retries and follow-ups are regular
            activities that heartbeat. ``0`` makes every batch a regular activity. Default 300.
    """

    def __init__(
        self,
        client: Client | str,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        namespace: str = "default",
        heartbeat_timeout: float = 5.0,
        lease_seconds: float = 3600.0,
        task_timeout: float | None = None,
        local_batch_seconds: float = 300.0,
    ) -> None:
        check_timing(heartbeat_timeout, local_batch_seconds)
        check_seconds("lease_seconds", lease_seconds)
        if task_timeout is not None:
            check_seconds("task_timeout", task_timeout)
        check_task_queue("task_queue", task_queue)
        self._client = client if isinstance(client, Client) else None
        self._target = client if isinstance(client, str) else None
        self.task_queue = task_queue
        self.namespace = namespace
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.lease_seconds = float(lease_seconds)
        self.task_timeout = float(task_timeout or default_task_timeout(heartbeat_timeout))
        self.local_batch_seconds = float(local_batch_seconds)
        self._checked = False

    async def client(self) -> Client:
        """The Temporal client (connected on first use; its namespace checked once).

        Raises:
            ConfigError: Nothing answers at the address, or the server has no such namespace.
            TemporalUnavailableError: The server of a given client did not answer.
        """
        return await self._connected()

    async def _connected(self, saga_id: str | None = None) -> Client:
        if self._client is None:
            assert self._target is not None
            self._client = await connect(self._target, namespace=self.namespace)
        elif not self._checked:
            await check_namespace(self._client, saga_id)
        self._checked = True
        return self._client

    async def undo(
        self, engine: Engine, saga_id: str, budget: Budget, *, steps: Sequence[str] | None = None
    ) -> UndoReport:
        """Start the saga's reversal workflow, or attach to it, and return its report.

        ``steps`` (issue 27; ``Engine.undo(steps=/since=)`` checked them against the saga):
        undo only those steps and what depends on them. The selection is part of the workflow
        id (:func:`workflow_id`): the same selection asked again attaches to the same run;
        another selection, or the whole saga, is a run of its own that extends the saga's one
        reversal in the log once the running one is over, never compensating a step twice.

        Raises:
            ConfigError: The engine has its own planner (``Engine(planner=...)``), or
                ``steps`` is empty or not a list of step ids.
            ContractError: ``steps`` names a step the saga does not have.
            SagaNotFoundError: No such saga in the engine's log.
            AmendsError: The workflow failed (its cause is named).
        """
        asked = None if steps is None else list(steps)
        return await self._run(engine, saga_id, budget, resume=False, steps=asked)

    async def resume(self, engine: Engine, saga_id: str, budget: Budget) -> UndoReport:
        """Continue the saga's reversal with a new budget, on Temporal (``Engine.resume``).

        The continuation is a run of the same workflow id: a caller attaches to a reversal or
        continuation still running (rule 6, as ``Engine.resume`` joins it locally); after it
        finished, a new run reopens it in the log and attempts only what was not attempted or
        is now unblocked. If someone continued it since this caller looked, that continuation's
        report is returned: never two continuations for one request.

        Raises:
            ConfigError: The engine has its own planner (``Engine(planner=...)``).
            SagaNotFoundError: No such saga in the engine's log.
            AmendsError: The workflow failed (its cause is named).
        """
        return await self._run(engine, saga_id, budget, resume=True)

    async def _run(
        self,
        engine: Engine,
        saga_id: str,
        budget: Budget,
        *,
        resume: bool,
        steps: list[str] | None = None,
    ) -> UndoReport:
        if engine.planner is not plan:
            # the workflow plans on the workers; a planner function cannot travel there
            raise ConfigError(
                "Engine(planner=...) cannot be used with a TemporalRunner: the reversal "
                "workflow plans on the workers with amends' planner, so a custom planner "
                "would be silently ignored; drop planner= or run this engine without runner=",
            )
        saga = await engine.log.get_saga(saga_id)
        if saga is None:
            raise SagaNotFoundError(
                f"no saga {saga_id!r} in {engine.log.url}; list sagas with "
                f"`amends show --db {engine.log.url}`",
                saga_id=saga_id,
            )
        if steps is not None:  # checked, and in the saga's order, as Engine.undo has them
            steps = list(select(saga, steps, running_here=True) or ())  # Engine.undo judged
        seen = None
        if resume:
            rev = await engine.log.get_reversal(saga_id=saga_id)
            seen = None if rev is None else rev.continuations
        client = await self._connected(saga_id)
        wid = workflow_id(saga_id, steps)
        try:
            handle = await self._start(client, engine, saga_id, budget, resume, seen, steps)
        except RPCError as exc:  # one table at the edge: amends' errors, never the SDK's
            raise translated(exc, client, saga_id) from exc
        # issue 23: Budget(seconds=) bounds the whole call, waiting for a worker included (the
        # workflow counts its seconds from this request too)
        asked = time.monotonic()
        deadline = asked + budget.seconds + self._grace
        try:
            result = await self._result(handle, client, saga_id, deadline)
            if result is None:
                taken = await self._taken_up(engine, saga_id, resume, seen)
                if taken is None:
                    unserved = _Unserved(asked, resume, steps)
                    return await self._unserved(engine, client, saga_id, budget, unserved)
                # a worker is on it: the reversal's own budget bounds it (rule 6: a caller who
                # joined with a smaller budget waits for the one reversal all the same)
                left = float(taken.budget.get("seconds", budget.seconds)) + 2 * self._grace
                result = await self._result(handle, client, saga_id, time.monotonic() + left)
            if result is None:
                raise AmendsError(
                    f"the reversal workflow {wid!r} took the reversal up but "
                    f"has not finished within its budget and a grace of {3 * self._grace:g} s; "
                    f"see why with `temporal workflow show --workflow-id "
                    f"{wid}`; once it finishes, engine.report({saga_id!r}) has "
                    f"its report",
                    saga_id=saga_id,
                )
            return UndoReport.from_dict(result)
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == "SagaNotFoundError":
                raise SagaNotFoundError(
                    f"{cause.message}; the workers and this client must share one log",
                    saga_id=saga_id,
                ) from exc
            raise AmendsError(
                f"the reversal workflow {wid!r} failed: {cause or exc}; see "
                f"it with `temporal workflow show --workflow-id {wid}`",
                saga_id=saga_id,
            ) from exc

    async def _result(
        self,
        handle: WorkflowHandle[Any, dict[str, Any]],
        client: Client,
        saga_id: str,
        deadline: float | None,
    ) -> dict[str, Any] | None:
        """The reversal's report, or ``None`` at ``deadline`` (``time.monotonic()``).

        A server that stops answering while the reversal runs is waited for (the workers go on
        when it is back), within the deadline; past it, the caller is told the reversal was
        started, not that nothing was undone (issue 23: causes are exact)."""
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            waiting = asyncio.ensure_future(handle.result())
            try:
                done, _ = await asyncio.wait({waiting}, timeout=left)
                if done:
                    return await waiting
            except RPCError as exc:
                if exc.status is not RPCStatusCode.UNAVAILABLE:
                    raise translated(exc, client, saga_id) from exc
                if deadline is not None and time.monotonic() + 0.5 >= deadline:
                    raise TemporalUnavailableError(
                        f"the reversal of saga {saga_id!r} was started on Temporal, but Temporal "
                        f"at {target_of(client)!r} stopped answering: {exc.message}; it goes on "
                        f"when the server is back (undo again to attach to it, or read its "
                        f"report with engine.report({saga_id!r}))",
                        saga_id=saga_id,
                    ) from exc
                await asyncio.sleep(0.5)  # the server is restarting: ask again
            finally:
                if not waiting.done():
                    waiting.cancel()

    @property
    def _grace(self) -> float:
        """Seconds a reversal may take past its budget to write its last events and report."""
        return max(2.0, self.task_timeout)

    async def _start(
        self,
        client: Client,
        engine: Engine,
        saga_id: str,
        budget: Budget,
        resume: bool,
        seen: int | None,
        steps: list[str] | None = None,
    ) -> WorkflowHandle[Any, dict[str, Any]]:
        """Start the saga's reversal workflow, or attach to the one running (rule 6)."""
        return await client.start_workflow(
            WORKFLOW_NAME,
            ReversalInput(
                saga_id,
                budget.to_dict(),
                resume=resume,
                after_continuation=seen,
                steps=steps,
                **reversal_settings(
                    engine,
                    heartbeat_timeout=self.heartbeat_timeout,
                    local_batch_seconds=self.local_batch_seconds,
                    lease_seconds=self.lease_seconds,
                ),
            ),
            id=workflow_id(saga_id, steps),  # issue 27: one run per selection asked
            task_queue=self.task_queue,
            # rule 6: a caller attaches to the running reversal; after it finished, a new run
            # finds the report in the log and returns it.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            task_timeout=timedelta(seconds=self.task_timeout),
            # when this client also runs a worker of the queue (an agent server that serves
            # reversals too), its first workflow task comes back with the start: one trip less
            request_eager_start=True,
            result_type=dict,
        )

    async def _taken_up(
        self, engine: Engine, saga_id: str, resume: bool, seen: int | None
    ) -> ReversalRecord | None:
        """The reversal (or the continuation) the workflow has claimed in the log, or ``None``:
        if claimed, a worker runs it, and its own budget bounds it from here."""
        rev = await engine.log.get_reversal(saga_id=saga_id)
        # any of the saga's reversal workflows (issue 27: one per selection) holds it for us
        if rev is None or not reversal_owner(rev.owner, saga_id):
            return None
        if rev.state == "running" or (resume and rev.continuations != seen):
            return rev
        return None

    async def _unserved(
        self, engine: Engine, client: Client, saga_id: str, budget: Budget, how: _Unserved
    ) -> UndoReport:
        """The budget ran out before any worker took the reversal up (issue 23: the call waited
        forever, with nothing in the log). The reversal is recorded as it stands: nothing was
        attempted, every step ``over_budget`` (the local engine's own run, its clock counted
        from the request and spent: one reversal, in the log, rule 6); the workflow, still
        queued, finds it done when a worker comes, and ``engine.resume`` continues it. Each
        step's detail names the caller's budget and the queue, in the stored report as in the
        caller's (rule 8: it said "time budget of 0s spent", and only the caller saw the queue)."""
        import amends

        note = await self._queue_note(client, saga_id)
        here = amends.Engine(engine.catalog, log=engine.log, retry=engine.retry_policy)
        here._meter_type = functools.partial(_SpentMeter, began=how.asked, after=f"; {note}")
        if how.resume:
            return await here.resume(saga_id, budget=budget)
        return await here.undo(saga_id, budget=budget, steps=how.steps)

    async def _queue_note(self, client: Client, saga_id: str) -> str:
        """Why no worker took the reversal up: nobody polls its task queue, or nobody did in
        time."""
        where = f"Temporal task queue {self.task_queue!r} (namespace {client.namespace!r} at "
        where += f"{target_of(client)})"
        try:
            answer = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=self.task_queue),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                )
            )
            polled = bool(answer.pollers)
        except RPCError:
            polled = False
        if polled:
            return f"the workers of {where} did not take the reversal up within the budget"
        return (
            f"no worker serves {where}: start one (`amends worker --temporal "
            f"{target_of(client)} --task-queue {self.task_queue} --db ...`), then "
            f"engine.resume({saga_id!r}) continues the reversal"
        )


@dataclasses.dataclass(frozen=True)
class _Unserved:
    asked: float
    """``time.monotonic()`` when the caller asked: the budget's seconds count from there."""
    resume: bool
    steps: list[str] | None


class _SpentMeter(BudgetMeter):
    """The meter of a reversal no worker took up: its seconds counted from the caller's request
    (so all spent, as the caller's budget says), and ``after`` names the queue."""

    def __init__(
        self, budget: Budget, *, began: float, after: str, calls_spent: int = 0,
        tokens_spent: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(budget, calls_spent=calls_spent, tokens_spent=tokens_spent)
        self.started = began
        self._deadline = began + budget.seconds
        self.after = after


class _Worker(Worker):
    def __init__(self, owned: SagaLog | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owned = owned

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            if self._owned is not None:
                owned, self._owned = self._owned, None
                await owned.close()


def make_worker(
    client: Client,
    catalog: Catalog,
    log: SagaLog | str | os.PathLike[str],
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    heartbeat_seconds: float = 1.0,
    **worker_options: Any,
) -> Worker:
    """A Temporal worker that runs amends reversals: ``async with make_worker(...)``.

    Args:
        client: A connected Temporal client.
        catalog: The tools (the catalog the agents ran with).
        log: The shared saga log (a :class:`amends.PostgresLog` or its URL).
        task_queue: The queue :class:`TemporalRunner` starts workflows on.
        heartbeat_seconds: How often a running tool call heartbeats (keep it well under the
            runner's ``heartbeat_timeout``).
        **worker_options: Passed to :class:`temporalio.worker.Worker`.
    """
    if not isinstance(catalog, Catalog):
        raise ConfigError(f"make_worker needs an amends.Catalog, got {catalog!r}")
    check_seconds("heartbeat_seconds", heartbeat_seconds)
    check_task_queue("task_queue", task_queue)
    opened = open_log(log)
    acts = ReversalActivities(
        catalog,
        opened,
        heartbeat_seconds=heartbeat_seconds,
        client=client,
        identity=worker_options.get("identity"),
    )
    # A workflow's next task goes to the worker that ran its last one (its sticky queue). When
    # that worker died, Temporal waits this long before handing the task to another worker; the
    # SDK default (10 s) would dominate the time a dead worker's reversal takes to move.
    worker_options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=1))
    # independent branches are compensated in parallel (rule 3): poll for their calls in
    # parallel too (the SDK defaults of 5 pollers serialise a wide reversal; measured in
    # benchmarks/temporal.py)
    worker_options.setdefault("max_concurrent_activity_task_polls", 20)
    worker_options.setdefault("max_concurrent_workflow_task_polls", 10)
    # The reversal workflow is amends' own code, deterministic by construction (workflow time,
    # a seeded random, no I/O: every effect is an activity), and its modules were passed through
    # the sandbox anyway, so the sandbox checked nothing. It cost the most: while a sandboxed
    # workflow runs, the SDK swaps the process-wide ``isinstance``/``issubclass`` (and every
    # restricted builtin) for thread-local wrappers, which made the workflow's own work several
    # times slower (issue 16: most of a 100-step reversal's workflow CPU time). Pass
    # ``workflow_runner=`` to choose otherwise.
    worker_options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    # issue 28: a client not made by connect() still gets the workflow and activity spans
    worker_options["interceptors"] = [
        *worker_options.get("interceptors", ()),
        *tracing_interceptors(client),
    ]
    return _Worker(
        None if opened is log else opened,  # a log opened here from a URL closes with the worker
        client,
        task_queue=task_queue,
        workflows=[ReversalWorkflow],
        activities=acts.all(),
        **worker_options,
    )
