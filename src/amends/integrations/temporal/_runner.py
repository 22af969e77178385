"""The client side: hand a saga's reversal to Temporal, and build workers that run it."""

from __future__ import annotations

import dataclasses
import logging
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from amends._budget import Budget
from amends._contracts import Catalog
from amends._errors import AmendsError, ConfigError, SagaNotFoundError
from amends._log import SagaLog, open_log
from amends._planner import plan
from amends._report import UndoReport
from amends._telemetry import tracer

from ._activities import ReversalActivities
from ._workflow import WORKFLOW_NAME, ReversalInput, ReversalWorkflow, workflow_id

if TYPE_CHECKING:
    from amends._engine import Engine

__all__ = ["DEFAULT_TASK_QUEUE", "TemporalRunner", "connect", "make_worker", "workflow_id"]

DEFAULT_TASK_QUEUE = "amends-reversals"


async def connect(target: str, *, namespace: str = "default") -> Client:
    """Connect to Temporal at ``HOST:PORT``.

    Raises:
        ConfigError: ``target`` is not ``HOST:PORT`` or nothing answers there.
    """
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"Temporal address {target!r} is not HOST:PORT; e.g. --temporal 127.0.0.1:7233"
        )
    try:
        return await Client.connect(
            target, namespace=namespace, interceptors=tracing_interceptors()
        )
    except RuntimeError as exc:  # the SDK's connection errors are RuntimeErrors
        raise ConfigError(
            f"cannot reach Temporal at {target!r} (namespace {namespace!r}): {exc}; start it "
            f"(`temporal server start-dev`) or fix the address"
        ) from exc


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


def check_timing(heartbeat_timeout: float, local_batch_seconds: float) -> None:
    """The reversal workflow's timing settings, checked where they are given.

    Raises:
        ConfigError: A heartbeat timeout that is not positive, or a negative batch bound.
    """
    if not heartbeat_timeout > 0:
        raise ConfigError(f"heartbeat_timeout must be positive, got {heartbeat_timeout!r}")
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
        "retry": dataclasses.asdict(engine.retry),
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
        self._client = client if isinstance(client, Client) else None
        self._target = client if isinstance(client, str) else None
        self.task_queue = task_queue
        self.namespace = namespace
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.lease_seconds = float(lease_seconds)
        self.task_timeout = float(task_timeout or default_task_timeout(heartbeat_timeout))
        self.local_batch_seconds = float(local_batch_seconds)

    async def client(self) -> Client:
        """The Temporal client (connected on first use)."""
        if self._client is None:
            assert self._target is not None
            self._client = await connect(self._target, namespace=self.namespace)
        return self._client

    async def undo(self, engine: Engine, saga_id: str, budget: Budget) -> UndoReport:
        """Start the saga's reversal workflow, or attach to it, and return its report.

        Raises:
            ConfigError: The engine has its own planner (``Engine(planner=...)``).
            SagaNotFoundError: No such saga in the engine's log.
            AmendsError: The workflow failed (its cause is named).
        """
        return await self._run(engine, saga_id, budget, resume=False)

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
        self, engine: Engine, saga_id: str, budget: Budget, *, resume: bool
    ) -> UndoReport:
        if engine.planner is not plan:
            # the workflow plans on the workers; a planner function cannot travel there
            raise ConfigError(
                "Engine(planner=...) cannot be used with a TemporalRunner: the reversal "
                "workflow plans on the workers with amends' planner, so a custom planner "
                "would be silently ignored; drop planner= or run this engine without runner=",
            )
        if await engine.log.get_saga(saga_id) is None:
            raise SagaNotFoundError(
                f"no saga {saga_id!r} in {engine.log.url}; list sagas with "
                f"`amends show --db {engine.log.url}`",
                saga_id=saga_id,
            )
        seen = None
        if resume:
            rev = await engine.log.get_reversal(saga_id=saga_id)
            seen = None if rev is None else rev.continuations
        client = await self.client()
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            ReversalInput(
                saga_id,
                budget.to_dict(),
                resume=resume,
                after_continuation=seen,
                **reversal_settings(
                    engine,
                    heartbeat_timeout=self.heartbeat_timeout,
                    local_batch_seconds=self.local_batch_seconds,
                    lease_seconds=self.lease_seconds,
                ),
            ),
            id=workflow_id(saga_id),
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
        try:
            result: dict[str, Any] = await handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == "SagaNotFoundError":
                raise SagaNotFoundError(
                    f"{cause.message}; the workers and this client must share one log",
                    saga_id=saga_id,
                ) from exc
            raise AmendsError(
                f"the reversal workflow {workflow_id(saga_id)!r} failed: {cause or exc}; see "
                f"it with `temporal workflow show --workflow-id {workflow_id(saga_id)}`",
                saga_id=saga_id,
            ) from exc
        return UndoReport.from_dict(result)


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
    opened = open_log(log)
    acts = ReversalActivities(catalog, opened, heartbeat_seconds=heartbeat_seconds)
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
