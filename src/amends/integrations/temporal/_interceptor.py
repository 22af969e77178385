"""The forward side for agents that already run on Temporal: agent tool activities become steps.

:class:`AmendsInterceptor` is a worker interceptor. Every activity whose type is a tool of the
engine's catalog runs as a step of a saga (by default the saga id is the workflow id), written
ahead (rule 1), with the catalog's contract; the activity records its inverse and expectation
through :func:`amends.current_call`. A later activity depends on every step already done when it
started (what the workflow had seen), so undo runs in the reverse order. When the workflow is
cancelled, the saga's reversal is started as an abandoned child workflow, however the workflow
ends (re-raised, another error, or a normal return): cancellation never skips compensation.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError, CancelledError, WorkflowAlreadyStartedError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

with workflow.unsafe.imports_passed_through():
    from amends import Budget, ConfigError, Engine, Saga, Step, StepFailedError

    from ._runner import check_task_queue, check_timing, default_task_timeout, reversal_settings
    from ._workflow import WORKFLOW_NAME, ReversalInput, workflow_id

__all__ = ["AmendsInterceptor"]


def _check_options(engine: object, tools: object, budget: object) -> None:
    """Refuse what would record nothing, or fail only when the worker starts.

    Raises:
        ConfigError: No :class:`amends.Engine`; ``tools`` a string (it was taken as a set of
            its characters: no activity recorded, silently) or not a collection of activity
            types; ``budget`` not an :class:`amends.Budget`.
    """
    if not isinstance(engine, Engine):
        raise ConfigError(
            f"AmendsInterceptor needs an amends.Engine, got {engine!r}; e.g. "
            f"AmendsInterceptor(amends.Engine(catalog, log='postgresql://...'))"
        )
    if tools is not None and (
        isinstance(tools, str | bytes)
        or not isinstance(tools, Collection)
        or not all(isinstance(t, str) for t in tools)
    ):
        raise ConfigError(
            f"tools must be a list of activity types, got {tools!r}; e.g. "
            f"tools=['crm.update_field', 'payments.charge']"
        )
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigError(
            f"budget must be an amends.Budget, got {budget!r}; e.g. budget=amends.Budget("
            f"tool_calls=50, seconds=60)"
        )


def _default_saga_id(info: activity.Info) -> str:
    return info.workflow_id or info.activity_id


class AmendsInterceptor(Interceptor):
    """Record agent tool activities as saga steps; undo the saga if the workflow is cancelled.

    Args:
        engine: The engine whose catalog gives each tool's contract and whose log (shared by
            every worker) records the steps.
        tools: Activity types that are agent tool calls; default: every tool of the catalog.
        saga_id: The saga an activity belongs to; default its workflow id.
        undo_on_cancel: Start the saga's reversal when its workflow is cancelled. Default True.
        reversal_task_queue: The queue the reversal workflow's workers poll.
        budget: The budget of a reversal started on cancellation.
        heartbeat_timeout: For that reversal, as :class:`TemporalRunner`'s: seconds without a
            heartbeat after which a tool call's worker counts as dead. Default 5.
        local_batch_seconds: For that reversal, as :class:`TemporalRunner`'s: short batches of
            probes and first compensation attempts run as local activities. Default 300.

    The reversal uses the engine's retry policy, as one started by ``engine.undo`` does.

    Steps of one saga are held by the worker process that ran its first tool activity; run a
    workflow's tool activities on one worker process (e.g. a task queue per worker).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        tools: Collection[str] | None = None,
        saga_id: Callable[[activity.Info], str] = _default_saga_id,
        undo_on_cancel: bool = True,
        reversal_task_queue: str = "amends-reversals",
        budget: Budget | None = None,
        heartbeat_timeout: float = 5.0,
        local_batch_seconds: float = 300.0,
    ) -> None:
        check_timing(heartbeat_timeout, local_batch_seconds)
        check_task_queue("reversal_task_queue", reversal_task_queue)
        _check_options(engine, tools, budget)
        self.engine = engine
        self.tools = frozenset(tools if tools is not None else (s.name for s in engine.catalog))
        self.saga_id = saga_id
        self.undo_on_cancel = undo_on_cancel
        self.reversal_task_queue = reversal_task_queue
        self.budget = budget or Budget()
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.local_batch_seconds = float(local_batch_seconds)
        self._sagas: dict[str, Saga] = {}
        self._done: dict[str, list[Step]] = {}
        self._runs: dict[str, dict[str, int]] = {}
        """Per saga, the workflow runs whose activities it records, numbered in the order seen."""
        self._lock = asyncio.Lock()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ToolActivity(next, self)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        if not self.undo_on_cancel:
            return None
        # the workflow sandbox gets plain data, never this object
        return type(
            "_UndoOnCancel",
            (_UndoOnCancel,),
            {
                "tools": self.tools,
                "queue": self.reversal_task_queue,
                "budget": self.budget.to_dict(),
                # the same settings a TemporalRunner gives the reversal it starts
                "settings": reversal_settings(
                    self.engine,
                    heartbeat_timeout=self.heartbeat_timeout,
                    local_batch_seconds=self.local_batch_seconds,
                ),
                "task_timeout": default_task_timeout(self.heartbeat_timeout),
            },
        )

    async def saga_for(self, info: activity.Info) -> Saga:
        """The open saga of this activity's workflow in this process (opened on first use).

        Raises:
            ConfigError: The saga was started by another worker process.
        """
        sid = self.saga_id(info)
        async with self._lock:
            saga = self._sagas.get(sid)
            if saga is None:
                saga = self.engine.saga(
                    f"Temporal workflow {info.workflow_type} {info.workflow_id}",
                    actor=f"temporal:{info.workflow_type}",
                    saga_id=sid,
                )
                try:
                    await saga.__aenter__()
                except ConfigError as exc:
                    raise ConfigError(
                        f"{exc}; the tool activities of workflow {info.workflow_id!r} ran on "
                        f"more than one worker process: route them to one worker (a task queue "
                        f"per worker) so that they are one saga",
                        saga_id=sid,
                    ) from None
                self._sagas[sid] = saga
                self._done[sid] = []
                self._runs[sid] = {}
            return saga

    async def close(self) -> None:
        """Close every saga this process holds: call it when the worker shuts down (an open
        saga stays ``running`` in the log until then; ``amends recover`` takes over the sagas of
        a process that died without closing them)."""
        async with self._lock:
            sagas, self._sagas = self._sagas, {}
        for saga in sagas.values():
            # A step whose activity was cancelled failed in Temporal already: the log has it,
            # and closing the saga is not the place to raise it again.
            with contextlib.suppress(StepFailedError):
                await saga.__aexit__(None, None, None)


def _named(fn: Callable[..., Any], args: Any) -> dict[str, Any]:
    """An activity's positional arguments by parameter name (the step's logged arguments)."""
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if params and params[0] == "self":
        params = params[1:]
    return {params[i] if i < len(params) else f"arg{i}": a for i, a in enumerate(args)}


def _step_id(info: activity.Info, runs: dict[str, int], saga: Saga) -> str:
    """The step id of one activity attempt, unique in its saga: activity ids restart at 1 in
    each workflow run, so a run after the first (continue-as-new, or another workflow that
    ``saga_id=`` puts in the same saga) prefixes its own number (``r2.a1``); its first activity
    failed as a duplicate step id before its tool ran. A local activity is ``l<id>``; it runs
    again when its workflow task is retried (a second call, so a step of its own: ``l1-2``)."""
    n = runs.setdefault(info.workflow_run_id or "", len(runs) + 1)
    kind = "l" if info.is_local else "a"
    own = f"{kind}{info.activity_id}" + (f".{info.attempt}" if info.attempt > 1 else "")
    own = own if n == 1 else f"r{n}.{own}"
    if info.is_local:
        taken = {s.id for s in saga.steps}
        again = 1
        while (f"{own}-{again}" if again > 1 else own) in taken:
            again += 1
        own = f"{own}-{again}" if again > 1 else own
    return own


class _ToolActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, root: AmendsInterceptor) -> None:
        super().__init__(next)
        self.root = root

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        # local activities too: a tool the workflow runs as one is an effect like any other
        if info.activity_type not in self.root.tools:
            return await self.next.execute_activity(input)
        try:
            saga = await self.root.saga_for(info)
        except ConfigError as exc:
            # the tool is not called: an effect that no saga records would be undone by no one
            raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
        raised: list[BaseException] = []
        running = [False]

        async def run(call: Any, /, **_: Any) -> Any:  # `call`: an activity argument's name too
            running[0] = True
            try:
                return await self.next.execute_activity(input)
            except BaseException as exc:
                raised.append(exc)
                raise
            finally:
                running[0] = False

        done = self.root._done[saga.id]
        step_id = _step_id(info, self.root._runs[saga.id], saga)
        step = saga.call_with(
            run,
            info.activity_type,
            # the activity's arguments as one mapping: whatever their names, they are its own
            _named(input.fn, input.args),
            # a later activity depends on every step the workflow had seen done
            after=[s for s in done if s.state == "done"],
            step_id=step_id,
        )
        try:
            result = await step
        except asyncio.CancelledError:
            # Temporal cancelled the activity (its workflow was cancelled, or it timed out): the
            # cancellation reaches the tool, as without amends, and the step ends in_doubt (or
            # compensable, if the tool recorded its inverse first) right away (rule 9).
            if running[0] and step.task is not None and not step.task.done():
                step.task.cancel()
            raise
        except StepFailedError as exc:
            if raised:
                raise raised[0] from None  # the activity's own error, as without amends
            raise ApplicationError(
                f"{info.activity_type} was not called: {exc}", type="StepNotRun", non_retryable=True
            ) from None
        done.append(step)
        return result


class _UndoOnCancel(WorkflowInboundInterceptor):
    tools: frozenset[str] = frozenset()
    queue: str = "amends-reversals"
    budget: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    task_timeout: float = 5.0

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self.used = False
        self.unsure = False
        """Whether an earlier run may have called tools, or not (a retried run cannot tell)."""
        super().init(_SeeTools(outbound, self))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if _USED in input.headers:  # an earlier run of this workflow called tools (continue-as-new)
            self.used = True
        elif workflow.info().attempt > 1:  # a retry (the workflow's retry policy): the failed
            self.used = self.unsure = True  # runs may have called tools; the log knows
        try:
            result = await super().execute_workflow(input)
        except BaseException as exc:
            if self.used and _cancelled(exc):
                await self._start_reversal()
            raise
        if self.used and _cancel_requested():  # it caught its cancellation and returned: the
            await self._start_reversal()  # person still asked to stop it (docs/temporal.md)
        return result

    async def _start_reversal(self) -> None:
        saga_id = workflow.info().workflow_id
        try:
            await workflow.start_child_workflow(
                WORKFLOW_NAME,
                ReversalInput(saga_id, dict(self.budget), **self.settings, missing_ok=self.unsure),
                id=workflow_id(saga_id),
                task_queue=self.queue,
                task_timeout=timedelta(seconds=self.task_timeout),
                # the reversal outlives this workflow: cancelling it must not cancel the undo
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError:
            pass  # rule 6: a reversal of this saga is already under way (someone asked for undo)


_USED = "amends-tools-used"
"""The header a workflow run that called tool activities hands the run it continues as."""


def _cancel_requested() -> bool:
    """Whether the server delivered a cancellation request to this workflow run."""
    reason = getattr(workflow, "cancellation_reason", None)  # temporalio >= 1.2x
    return reason is not None and reason() is not None


def _cancelled(exc: BaseException) -> bool:
    """Whether the workflow ends because it was cancelled, whatever the exception says: the
    SDK hands a workflow a cancellation that reaches a running activity as
    ``ActivityError(cause=CancelledError)`` (issue 25 item 11), and the workflow code may wrap
    or replace it."""
    if _cancel_requested():
        return True
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:  # the cause chain, as the SDK builds it
        seen.add(id(cur))
        if isinstance(cur, asyncio.CancelledError | CancelledError):
            return True
        cur = getattr(cur, "cause", None) or cur.__cause__
    return False


class _SeeTools(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, root: _UndoOnCancel) -> None:
        super().__init__(next)
        self.root = root

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity in self.root.tools:
            self.root.used, self.root.unsure = True, False
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity in self.root.tools:  # a tool run as a local activity is a step too
            self.root.used, self.root.unsure = True, False
        return super().start_local_activity(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        # the saga (the workflow id) goes on in the next run: so does what cancelling it must
        # undo, even before that run calls a tool of its own
        if self.root.used:
            input.headers = {**input.headers, _USED: workflow.payload_converter().to_payload(True)}
        super().continue_as_new(input)
