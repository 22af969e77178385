"""The reversal workflow: amends' planner and per-step rules, run deterministically by Temporal.

The workflow runs the *same* step logic as the local engine (:func:`amends._reversal.run_plan`):
the plan comes from :func:`amends._planner.plan`, and each step goes through the local runner's
drift check, retry, budget, follow-up and recording rules. Only the edges differ: the calls of one
workflow activation are one ``amends.call_tools`` activity (a local one when short), its log writes
one ``amends.record_many`` local activity, a call lost with its worker is the runner's
``CallLost`` (the crash rules, rule 5), and time is workflow time. Nothing here touches the world
or the log directly (workflow code must be deterministic).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetry
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from amends import (
        Budget,
        Call,
        CompensationRecord,
        CompensationWrite,
        FollowUp,
        LeaseLostError,
        PermanentError,
        PreconditionFailed,
        Redaction,
        Residue,
        RetryPolicy,
        ReversalRecord,
        SagaRecord,
        SecretRequest,
        StepOutcome,
        ToolSpec,
        TransientError,
        plan,
    )
    from amends._budget import BudgetMeter
    from amends._describe import sentence
    from amends._report import build_report
    from amends._reversal import (
        BaseDispatcher,
        CallLost,
        ReversalPorts,
        RunInput,
        described,
        run_plan,
    )
    from amends._secrets import marker, redactions_from
    from amends._selection import restrict

    from ._activities import (
        CallBatch,
        CallBatchResult,
        CallOutcome,
        ClaimInput,
        ClaimResult,
        FinishInput,
        ReadInput,
        ReadResult,
        RecordBatch,
        RecordInput,
        ToolCallInput,
        Wire,
    )
    from ._codec import compensation_from_dict, reversal_from_dict, saga_from_dict, spec_from_dict

__all__ = ["ReversalInput", "ReversalWorkflow", "reversal_owner", "workflow_id"]

WORKFLOW_NAME = "amends.Reversal"


def workflow_id(saga_id: str, steps: Sequence[str] | None = None) -> str:
    """The id of the reversal workflow of ``saga_id``: one per saga, whoever asks (rule 6).

    ``steps``: the steps a selective undo asked for (issue 27), after ``since=`` is read as
    the steps after the checkpoint: the same selection asked twice is one workflow (one run),
    two different selections are two, each extending the saga's one reversal in the log in
    turn, as the local engine joins requests by the steps asked (``Engine.undo``). Saga and
    step ids never hold ``/`` or ``,`` (``check_id``), so the id is unambiguous; a selection
    too long for Temporal's ids is named by its SHA-256."""
    base = f"amends-reversal:{saga_id}"
    if steps is None:
        return base
    joined = ",".join(steps)
    if len(joined) <= _MAX_STEPS_IN_ID:
        return f"{base}/steps={joined}"
    return f"{base}/steps#{hashlib.sha256(joined.encode()).hexdigest()[:32]}"


def reversal_owner(owner: str | None, saga_id: str) -> bool:
    """Whether ``owner`` (of a reversal in the log) is one of this saga's reversal workflows."""
    base = f"temporal:{workflow_id(saga_id)}"
    return owner is not None and (owner == base or owner.startswith(f"{base}/steps"))


_MAX_STEPS_IN_ID = 600
"""Characters of step ids a workflow id shows (Temporal's ids are limited to 1,000 bytes)."""


# Log reads and writes are idempotent, so Temporal may retry them freely (a database restart).
# They run as local activities: in the worker that runs the workflow task, without a round trip
# through the server's task queues (the log is the system of record, not Temporal's history).
_LOG_RETRY = TemporalRetry(
    initial_interval=timedelta(seconds=0.2),
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=["LeaseLostError"],
)
# Tool calls are never retried by Temporal: amends' own policy retries within the budget (rule 7),
# and a call whose worker died goes through the crash rules (rule 5), not a blind re-send.
_ONCE = TemporalRetry(maximum_attempts=1)


@dataclass
class ReversalInput:
    """What a client asks the reversal workflow for."""

    saga_id: str
    budget: dict[str, Any]
    """The reversal's budget (a second caller's budget is ignored: the reversal keeps its own)."""
    retry: dict[str, Any] = field(default_factory=dict)
    """amends' retry policy for transient tool errors (fields of :class:`amends.RetryPolicy`)."""
    heartbeat_timeout: float = 5.0
    """Seconds without a heartbeat after which a tool call's worker counts as dead."""
    lease_seconds: float = 3600.0
    """How long the reversal's claim in the log lasts: local engines take it over only after."""
    poll_interval: float = 0.2
    """Seconds between looks at the log while waiting for steps in flight or another owner."""
    resume: bool = False
    """A continuation of the saga's finished reversal with ``budget`` (``Engine.resume``)."""
    after_continuation: int | None = None
    """For ``resume``: how many continuations the client saw (rule 6: never continue twice)."""
    local_batch_seconds: float = 0.0
    """A batch of probes and first attempts of compensations that its tools' timeouts and the
    budget bound to at most this many seconds runs as a local activity (``0``: never)."""
    steps: list[str] | None = None
    """Issue 27: an undo of these steps and what depends on them (``None``: the whole saga).
    A continuation (``resume``) keeps the reversal's own selection and ignores it."""
    missing_ok: bool = False
    """Started on a cancellation that cannot tell whether any run called a tool (a retried
    run): no saga in the log means nothing to undo, and the run returns ``{}``."""


_NAMED: dict[str, type[Exception]] = {}


def _named(name: str) -> type[Exception]:
    # the report says "<tool> raised <ExceptionName>: ...", as the local engine does
    cls = _NAMED.get(name)
    if cls is None:
        cls = _NAMED[name] = type(name, (Exception,), {})
    return cls


def _translate(kind: str, msg: str, d: Mapping[str, Any]) -> BaseException:
    if kind == "TransientError":
        return TransientError(msg, retry_after=d.get("retry_after"))
    if kind == "PreconditionFailed":
        return PreconditionFailed(msg)
    if kind == "PermanentError":
        return PermanentError(msg)
    if kind == "Timeout":
        return TimeoutError(msg)
    if kind == "LeaseLostError":
        return LeaseLostError(msg)
    return _named(str(d.get("name") or kind or "Exception"))(msg)


class _Specs:
    """The worker's catalog as data (a :class:`~amends._planner.ToolDirectory`): the contracts
    the runner plans and decides with; calls go through :class:`_Dispatcher`, never a function
    here."""

    def __init__(self, specs: Mapping[str, ToolSpec]) -> None:
        self._specs = dict(specs)

    def __contains__(self, name: object, /) -> bool:
        return name in self._specs

    def get(self, name: str, /) -> ToolSpec:
        return self._specs[name]

    def describe(self, tool: str, args: Mapping[str, Any], /) -> str:
        # manual actions name the step in the catalog's words, as the local engine's do
        spec = self._specs.get(tool)
        return spec.sentence(args) if spec is not None else sentence(tool, args)


class _LeaseLost(BaseException):
    """The log refused a compensation activity's "dispatched" write: another worker holds the
    reversal now. A BaseException so that it ends this run (and is joined), rather than count
    as the tool failing."""


class _ActivityLog:
    """The one log method the runner writes through, as idempotent activities.

    Two costs are cut here (issue 16), without changing what is written or in which order:

    * A compensation's "dispatched" event is not written on its own: it rides with the
      compensation's activity, which commits it before sending the call (rule 5). If the call
      is never sent (the budget ran out first), it is written before the step's next event.
    * The other writes of one workflow activation go to the log as one local activity, so a
      group-committing log commits them together, as it does the local engine's.
    """

    def __init__(self) -> None:
        self.writes = 0
        self.deferred: dict[str, RecordInput] = {}
        """Per step: its "dispatched" event, waiting for the compensation activity to carry it."""
        self.queue: list[tuple[RecordInput, asyncio.Future[None]]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.running: set[str] | None = None
        """The steps of the plan still running (``None`` before the plan runs)."""
        self.carried: list[RecordInput] = []
        """The last steps' outcome events, carried by ``amends.finish`` (written before the
        report, in the same local activity)."""
        self.read: Any = None
        """The workflow's log-read activity (set when the run starts)."""

    async def record_compensation(self, write: CompensationWrite, /) -> None:
        self.writes += 1  # deterministic: the workflow issues writes in a replayable order
        inp = RecordInput.of(write, event_key=f"{workflow.info().run_id}:{self.writes}")
        if write.event == "compensation.dispatched" and not write.data.get("returned"):
            self.deferred[write.step_id] = inp  # written by the compensation's activity, first
            return
        await self._submit(inp)

    async def get_compensations(self, reversal_id: str, /) -> dict[str, CompensationRecord]:
        """Read again after a lost call (rule 5: the crash rules), through a log activity."""
        assert self.read is not None
        got = await self.read(reversal_id)
        return {k: compensation_from_dict(v) for k, v in got.compensations.items()}

    def _last(self, batch: list[tuple[RecordInput, asyncio.Future[None]]]) -> bool:
        running = self.running
        if running is None:
            return False
        # an outcome event is a step's last action (the runner returns right after it)
        return bool(running) and running == {
            w.step_id for w, _ in batch if w.event != "compensation.dispatched"
        } == {w.step_id for w, _ in batch}

    def settled(self, outcome: StepOutcome) -> None:
        """The runner's progress hook: ``outcome``'s step has finished."""
        if self.running is not None:
            self.running.discard(outcome.step_id)

    def take_dispatched(self, step_id: str) -> RecordInput | None:
        """The step's "dispatched" event, for its compensation activity to write first."""
        return self.deferred.pop(step_id, None)

    async def _submit(self, inp: RecordInput) -> None:
        earlier = self.deferred.pop(inp.step_id, None)
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[None]] = []
        # a "dispatched" whose call never left (e.g. the budget ran out) is still written, just
        # before the step's next event: the log reads as the local engine's does
        for w in (earlier, inp):
            if w is not None:
                fut: asyncio.Future[None] = loop.create_future()
                self.queue.append((w, fut))
                futs.append(fut)
        if self.flusher is None:
            self.flusher = asyncio.create_task(self._flush())
        for fut in futs:
            await fut

    async def _flush(self) -> None:
        # Let every step this activation woke up reach its write first (each wake-up passes
        # through a few futures), then send them all in one local activity. Deterministic: the
        # workflow's event loop runs ready callbacks in a fixed order.
        for _ in range(8):
            await asyncio.sleep(0)
        batch, self.queue, self.flusher = self.queue, [], None
        if self._last(batch):
            # Every step still running is waiting for its outcome event in this batch and ends
            # right after it: what follows is the report. Both go to the log in one local
            # activity, events first (amends.finish); if that fails, the run fails with it.
            self.carried.extend(w for w, _ in batch)
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)
            return
        err: Exception | None = None
        try:
            await workflow.execute_local_activity(
                "amends.record_many", RecordBatch([w for w, _ in batch]).to_wire(),
                start_to_close_timeout=timedelta(seconds=30), retry_policy=_LOG_RETRY,
            )  # fmt: skip
        except ActivityError as exc:
            err = exc
            if isinstance(exc.cause, ApplicationError) and exc.cause.type == "LeaseLostError":
                err = LeaseLostError(exc.cause.message)
        except asyncio.CancelledError:  # the run is being cancelled: so are its waiters
            for _, fut in batch:
                fut.cancel()
            raise
        for _, fut in batch:
            if fut.done():
                continue
            if err is None:
                fut.set_result(None)
            else:
                fut.set_exception(err)
                fut.exception()  # the first waiter re-raises it; the others are cancelled


class _Batch:
    """The tool calls of one workflow activation: one ``amends.call_tools`` activity."""

    def __init__(self) -> None:
        self.calls: list[ToolCallInput] = []
        self.futures: list[asyncio.Future[CallOutcome]] = []
        self.timeout = 0.0
        self.waiting = 0
        self.handle: workflow.ActivityHandle[Wire] | None = None

    def leave(self) -> None:
        """A caller stopped waiting (cancelled); the last one out cancels the activity."""
        self.waiting -= 1
        if self.waiting == 0 and self.handle is not None:
            self.handle.cancel()


_MAX_BATCH = 100
"""Calls per ``amends.call_tools`` activity (keeps its payload well under Temporal's limits)."""


@workflow.defn(name=WORKFLOW_NAME)
class ReversalWorkflow:
    """One saga's one reversal (rule 6); its id is derived from the saga id by the client."""

    def __init__(self) -> None:
        self.inp: ReversalInput | None = None
        self.meter: BudgetMeter | None = None
        self.specs: dict[str, ToolSpec] = {}
        self.log = _ActivityLog()
        self.batch: _Batch | None = None
        self.reversal_id = ""
        self.senders: set[asyncio.Task[None]] = set()
        """The tool calls this activation is gathering (sent when its steps have all run)."""

    @workflow.run
    async def run(self, inp: ReversalInput) -> dict[str, Any]:
        self.inp = inp
        owner = f"temporal:{workflow.info().workflow_id}"
        while True:
            claim = ClaimResult.from_wire(
                await workflow.execute_local_activity(
                    "amends.claim",
                    ClaimInput(
                        inp.saga_id,
                        inp.budget,
                        owner,
                        inp.lease_seconds,
                        inp.resume,
                        inp.after_continuation,
                        inp.steps,
                    ).to_wire(),
                    result_type=Wire,
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=_LOG_RETRY,
                )
            )
            if claim.outcome == "not_found":
                if inp.missing_ok:
                    return {}
                raise ApplicationError(
                    f"no saga {inp.saga_id!r} in the workers' log", type="SagaNotFoundError",
                    non_retryable=True,
                )  # fmt: skip
            assert claim.reversal is not None
            rev = reversal_from_dict(claim.reversal)
            if claim.outcome == "done":  # amends.claim extended it if it did not cover this
                assert rev.report is not None
                return rev.report
            if claim.outcome == "running_elsewhere":
                report = await self._wait_elsewhere(rev)
                if report is not None and claim.covered:
                    return report
                continue  # its lease expired, or it did not cover this request: claim again
            try:
                report = await self._execute(claim, rev)
            except LeaseLostError:
                continue  # another worker took the reversal over: join it
            if claim.covered:
                return report
            # issue 27: this run finished another selection's reversal (taken over from its
            # workflow); the claim again extends it to this request's selection

    async def _read(self, reversal_id: str | None = None) -> ReadResult:
        assert self.inp is not None
        read = await workflow.execute_local_activity(
            "amends.read",
            ReadInput(self.inp.saga_id, reversal_id).to_wire(),
            result_type=Wire,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_LOG_RETRY,
        )
        return ReadResult.from_wire(read)

    async def _wait_elsewhere(self, rev: ReversalRecord) -> dict[str, Any] | None:
        assert self.inp is not None
        while True:
            await workflow.sleep(self.inp.poll_interval)
            read = await self._read(rev.reversal_id)
            assert read.reversal is not None
            cur = reversal_from_dict(read.reversal)
            if cur.state == "done" and cur.report is not None:
                return cur.report
            if cur.lease_until is None or cur.lease_until <= read.now:
                return None

    async def _tool(self, call: Call, args: Mapping[str, Any], at: Sequence[Redaction] = ()) -> Any:
        """Every call of the run (the :class:`_Dispatcher`'s): it joins this activation's
        batch, made by one ``amends.call_tools`` activity."""
        assert self.inp is not None and self.meter is not None
        spec = self.specs[call.tool]
        # the bound the runner puts around this call (its own formula, in workflow time)
        remaining = self.meter.remaining_seconds()
        bound = remaining if spec.timeout is None else min(spec.timeout, remaining)
        deadline = workflow.time() + bound
        inp = ToolCallInput(
            call.tool,
            dict(args),
            call.saga_id,
            call.step_id,
            call.phase,
            call.idempotency_key,
            call.attempt,
            None if call.precondition is None else call.precondition.to_dict(),
            timeout=max(bound, 0.001),
            dispatched=(
                self.log.take_dispatched(call.step_id) if call.phase == "compensate" else None
            ),
            # rule 12: the activity gives a secret back only where amends recorded its marker
            redacted=[r.to_dict() for r in at],
        )
        batch = self.batch
        if batch is None or len(batch.calls) >= _MAX_BATCH:
            batch = self.batch = _Batch()
            sender = asyncio.create_task(self._send(batch))
            self.senders.add(sender)  # keep a reference until it is done
            sender.add_done_callback(self.senders.discard)
        fut: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        batch.calls.append(inp)
        batch.futures.append(fut)
        # the activity enforces each tool's timeout itself; this one only catches a worker
        # that stopped heartbeating without dying (a frozen process)
        batch.timeout = max(batch.timeout, bound + 3 * self.inp.heartbeat_timeout)
        batch.waiting += 1
        try:
            out = await asyncio.shield(fut)
        except asyncio.CancelledError:
            if workflow.time() + 0.001 < deadline:
                batch.leave()  # cancelled for another reason: stop the call too (when alone)
                raise
            # The runner's timeout for this call fired, but that time included Temporal's
            # queueing. The tool's timeout counts the tool's own time (as locally), and
            # the activity enforces it: wait for its verdict (the result, or a timeout).
            out = await fut
        if out.result is None:
            if out.error == "DispatchLeaseLost":
                raise _LeaseLost(out.message)
            if out.error == "Lost":
                # rule 5: the runner re-reads the log and runs the step through the crash rules;
                # rule 8 (issue 23): with what lost the call, as far as the workers can tell
                causes = await self._lost_causes([call.step_id])
                cause = causes.get(call.step_id, "a worker stopped")
                raise CallLost(f"{call.tool} was lost: {out.message}", cause=cause)
            call.tokens += int(out.details.get("tokens") or 0)
            raise _translate(out.error, out.message, out.details)
        res = out.result
        call.tokens += res.tokens
        call.recorded_residue.extend(Residue.from_dict(r) for r in res.residue)
        call.recorded_follow_ups.extend(
            FollowUp(f["tool"], f["args"], redactions_from(f.get("redacted")))
            for f in res.follow_ups
        )
        return res.result

    async def _lost_causes(self, step_ids: list[str]) -> dict[str, str]:
        """``amends.lost_cause``: what lost the calls in flight of these steps (issue 23)."""
        causes: dict[str, str] = await workflow.execute_local_activity(
            "amends.lost_cause",
            {
                "reversal_id": self.reversal_id,
                "steps": step_ids,
                "queue": workflow.info().task_queue,
            },
            result_type=dict,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_LOG_RETRY,
        )
        return causes

    async def _send(self, batch: _Batch) -> None:
        """Make ``batch``'s calls in one activity, once every step this activation woke up has
        added its call (each wake-up passes through a few futures first). Deterministic: the
        workflow's event loop runs ready callbacks in a fixed order."""
        assert self.inp is not None
        for _ in range(8):
            await asyncio.sleep(0)
        if self.batch is batch:
            self.batch = None
        outcomes: list[CallOutcome]
        if batch.waiting == 0:
            return  # every caller left before anything was sent
        if self._local(batch):
            # In the worker running this workflow task: no trip through the server's task
            # queues and no workflow task of its own to deliver the answers. A worker that dies
            # fails the workflow task, which Temporal hands to a live worker after its timeout;
            # re-run there, the batch answers every call an earlier run dispatched "Lost"
            # (rule 5: crash rules, never a blind re-send).
            batch.handle = workflow.start_local_activity(
                "amends.call_tools",
                CallBatch(batch.calls).to_wire(),
                result_type=Wire,
                start_to_close_timeout=timedelta(seconds=batch.timeout),
                retry_policy=_ONCE,
            )
        else:
            batch.handle = workflow.start_activity(
                "amends.call_tools",
                CallBatch(batch.calls).to_wire(),
                result_type=Wire,
                start_to_close_timeout=timedelta(seconds=batch.timeout),
                heartbeat_timeout=timedelta(seconds=self.inp.heartbeat_timeout),
                retry_policy=_ONCE,
            )
        try:
            outcomes = CallBatchResult.from_wire(await batch.handle).results
        except ActivityError as exc:
            # rule 5: the worker stopped (or the batch broke): whether each call landed is
            # unknown; every step of the batch goes through the crash rules
            outcomes = [CallOutcome(None, "Lost", str(exc.cause or exc))] * len(batch.calls)
        except asyncio.CancelledError:
            for fut in batch.futures:
                fut.cancel()
            raise
        for fut, out in zip(batch.futures, outcomes, strict=True):
            if not fut.done():
                fut.set_result(out)

    def _local(self, batch: _Batch) -> bool:
        """Whether ``batch`` runs as a local activity: it is short (its calls' bounds are within
        ``local_batch_seconds``), and a re-run can tell which of its calls may have been made.
        A probe may be made again (it is read-only); a compensation's first attempt carries its
        "dispatched" event, which a re-run finds in the log. A retry or a follow-up carries
        none: a re-run could not tell it was sent, so those go as a regular activity, whose
        lost worker the workflow hears of (rule 5)."""
        assert self.inp is not None
        limit = self.inp.local_batch_seconds
        return limit > 0 and all(
            c.timeout is not None
            and c.timeout <= limit
            and (c.phase == "probe" or c.dispatched is not None)
            for c in batch.calls
        )

    async def _settled_saga(
        self, claim: ClaimResult, rev: ReversalRecord
    ) -> tuple[SagaRecord, dict[str, CompensationRecord]]:
        """As the local engine: steps in flight finish first, within the budget (rule 7)."""
        assert self.inp is not None and self.meter is not None and claim.saga is not None
        saga, compensations, now = saga_from_dict(claim.saga), claim.compensations, claim.now
        while True:
            running = [s for s in saga.steps if s.state == "intent"]
            expired = saga.lease_until is None or saga.lease_until <= now
            if not running or expired or self.meter.remaining_seconds() <= 0:
                break
            await workflow.sleep(self.inp.poll_interval)
            read = await self._read(rev.reversal_id)
            assert read.saga is not None
            saga, compensations, now = saga_from_dict(read.saga), read.compensations, read.now
        return saga, {k: compensation_from_dict(v) for k, v in compensations.items()}

    async def _execute(self, claim: ClaimResult, rev: ReversalRecord) -> dict[str, Any]:
        inp = self.inp
        assert inp is not None and claim.saga is not None
        budget = Budget.from_dict(rev.budget)
        # the budget in workflow time: deterministic on replay
        meter = self.meter = BudgetMeter(
            budget, calls_spent=rev.calls_spent, tokens_spent=rev.tokens_spent, clock=workflow.time
        )
        # issue 23: the seconds count from the request (this run's start), so a reversal no
        # worker took up in time has spent them, as the caller was told (TemporalRunner._run)
        meter.started = min(meter.started, workflow.info().workflow_start_time.timestamp())
        self.log.deferred.clear()  # a run that lost the lease left nothing to carry over
        self.specs = {d["name"]: _spec(d) for d in claim.tools}
        catalog = _Specs(self.specs)
        saga, compensations = await self._settled_saga(claim, rev)
        # undo windows (inverse deadlines) judged at workflow time: the same on replay
        # issue 27: a selection's reversal runs only its closure (amends.claim computed it
        # with the engine's one closure, from the saga the claim read)
        scope = None if claim.selection is None else claim.selection["steps"]
        the_plan = restrict(plan(saga, catalog, now=workflow.time()), scope)
        self.log.running = {p.step_id for p in the_plan.steps}
        self.log.carried = []
        self.log.read = self._read
        self.reversal_id = rev.reversal_id
        in_flight = [k for k, c in compensations.items() if c.state == "dispatched"]
        lost_by = await self._lost_causes(in_flight) if in_flight else {}  # rule 8, issue 23
        # the local engine's runner; only its edges differ (calls, log writes, clock)
        ports = ReversalPorts(self.log, catalog, workflow.time, _Dispatcher(self), self.log.settled)
        try:
            got = await run_plan(
                RunInput(
                    ports,
                    saga,
                    rev,
                    the_plan,
                    meter,
                    RetryPolicy(**inp.retry),
                    compensations,
                    lost=lost_by,
                )
            )
        except _LeaseLost as lost:
            raise LeaseLostError(str(lost)) from None
        index = {s.step_id: s for s in saga.steps}
        # the steps in plain language, by the engine's own describer and the workers' catalog
        outcomes = [described(catalog, index.get(o.step_id), o) for o in got]
        report = build_report(
            saga, rev, outcomes, meter, finished_at=workflow.time(), selection=claim.selection
        )
        try:
            stored: dict[str, Any] = await workflow.execute_local_activity(
                "amends.finish",
                FinishInput(
                    rev.reversal_id,
                    rev.generation,
                    report.to_dict(),
                    saga.saga_id,
                    self.log.carried,
                ).to_wire(),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_LOG_RETRY,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, ApplicationError) and exc.cause.type == "LeaseLostError":
                raise LeaseLostError(exc.cause.message) from None
            raise
        if "report" in stored:  # an earlier run of this task stored it: that one stands
            report_dict: dict[str, Any] = stored["report"]
            return report_dict
        # as amends.finish stored it: this report with the resolutions it stored with it
        return report.with_resolutions(stored["resolutions"]).to_dict()


def _keep_marker(request: SecretRequest) -> str:
    # Rule 11 on Temporal: a secret must never enter the workflow's history, so the workflow
    # keeps the "[redacted:NAME]" marker and the activity resolves it with the worker's own
    # resolver, right before the call (and scrubs it from what the call returns).
    return marker(request.name)


def _no_call(call: Call, **args: Any) -> Any:
    # the workflow's contracts are data: every call goes through _Dispatcher to an activity
    raise AssertionError(f"{call.tool} must be called through the workflow's dispatcher")


def _spec(data: Mapping[str, Any]) -> ToolSpec:
    spec = spec_from_dict(data, _no_call)
    if data.get("resolves_secrets") and hasattr(spec, "resolve_secret"):
        spec = dataclasses.replace(spec, resolve_secret=_keep_marker)
    return spec


class _Dispatcher(BaseDispatcher):
    """The run's calls, as the workflow makes them (a :class:`~amends._reversal.Dispatcher`):
    secrets stay markers (the catalog's resolvers are ``_keep_marker``; the activity resolves
    them on the worker, rule 11), and each call joins the activation's batch activity, which
    bounds it on the worker by the same formula the runner uses (a workflow-side bound would
    only add a timer per call)."""

    def __init__(self, wf: ReversalWorkflow) -> None:
        self.wf = wf

    async def call(
        self,
        spec: ToolSpec,
        call: Call,
        args: Mapping[str, Any],
        timeout: float,
        *,
        at: Sequence[Redaction] = (),
    ) -> Any:
        return await self.wf._tool(call, args, at)
