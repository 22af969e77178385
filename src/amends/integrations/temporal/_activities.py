"""The activities of the reversal workflow: every effect on the world or the log happens here.

Each drift probe, compensation and follow-up is a call carrying amends' idempotency key, made by
an ``amends.call_tools`` activity (the calls of one workflow activation together); every
compensation event is written to the saga log once, by that activity ("dispatched", before the
call) or by ``amends.record_many``, both idempotent (an activity Temporal retries never writes
an event twice). Activities never decide
what an outcome *means* for a step: the workflow applies the same rules as the local engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from amends import (
    Call,
    Catalog,
    Claim,
    CompensationRecord,
    CompensationWrite,
    Expectation,
    LeaseLostError,
    PermanentError,
    PreconditionFailed,
    SagaLog,
    SagaNotFoundError,
    SagaRecord,
    TransientError,
    UndoReport,
    current_report,
)
from amends._calls import invoke
from amends._observe import ObservedLog, reversal_finished, reversal_started
from amends._reversal.record import bounded_residue
from amends._secrets import Vault, redactions_from, resolve_call_args
from amends._selection import covers, selection_of, widen

from ._codec import spec_to_dict, to_dict
from ._refs import expand, has_refs, shrink, shrink_answer, shrink_saga, values_of

__all__ = [
    "CallBatch",
    "CallBatchResult",
    "CallOutcome",
    "ClaimInput",
    "ClaimResult",
    "FinishInput",
    "ReadInput",
    "ReadResult",
    "RecordBatch",
    "RecordInput",
    "ReversalActivities",
    "ToolCallInput",
    "ToolCallResult",
    "Wire",
]

EVENT_KEY = "temporal_event"
"""Key of the compensation data that names the workflow write it came from (idempotency)."""

Wire = Any
"""An activity's input or result as it crosses Temporal: the dataclass, or its JSON object.

Activities and the workflow declare their payloads as ``Wire`` and rebuild the dataclass with its
``from_wire``: the SDK's own decoder of a typed dataclass walks every field of every nested
record (measured: 25-50 ms for the 100 calls of one batch, 20-35 ms for their answers, on the
development box), while ``from_wire`` is a constructor call per record (issue 16). Likewise
``to_wire`` builds the JSON object directly: the SDK encodes a dataclass with
``dataclasses.asdict``, which deep-copies every value and, run inside the workflow sandbox, took
most of the workflow's CPU time."""

_P = TypeVar("_P", bound="_Payload")


class _Payload:
    """An activity payload: a dataclass that crosses Temporal as a plain JSON object."""

    _nested: tuple[str, ...] = ()
    """Fields holding payloads (or lists of them); every other field is plain JSON data."""

    def to_wire(self) -> dict[str, Any]:
        """This payload as the JSON object Temporal carries (nested payloads too, no copies)."""
        out = dict(vars(self))
        for name in self._nested:
            out[name] = _to_wire(out[name])
        return out

    @classmethod
    def from_wire(cls: type[_P], value: Wire) -> _P:
        """The payload from its JSON object (or the payload itself, passed as is)."""
        return value if isinstance(value, cls) else cls(**value)


def _to_wire(value: Any) -> Any:
    if isinstance(value, _Payload):
        return value.to_wire()
    if isinstance(value, list) and value and isinstance(value[0], _Payload):
        return [v.to_wire() for v in value]
    return value


@dataclass
class ClaimInput(_Payload):
    saga_id: str
    budget: dict[str, Any]
    owner: str
    """Who holds the reversal in the log: ``temporal:<workflow id>``."""
    lease_seconds: float
    resume: bool = False
    """Continue the saga's finished reversal with this budget (rule 6), not start it."""
    after_continuation: int | None = None
    """For ``resume``: the continuations the client saw; if someone continued since, join."""
    steps: list[str] | None = None
    """Issue 27: the steps an undo asked for (``None``: the whole saga); ``resume`` keeps the
    reversal's selection."""


@dataclass
class ClaimResult(_Payload):
    outcome: str
    """``new``, ``taken_over``, ``done``, ``running_elsewhere`` or ``not_found``."""
    reversal: dict[str, Any] | None = None
    saga: dict[str, Any] | None = None
    compensations: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The worker's catalog as data (no functions): the workflow's planner and runner read it."""
    now: float = 0.0
    covered: bool = True
    """Issue 27: the reversal covers what the request asked for (its closure is inside the
    reversal's); if not, the workflow claims again once this run is over, to extend it."""
    selection: dict[str, Any] | None = None
    """The reversal's selection and its closure (``Selection.to_dict()``), for the plan and the
    report; ``None``: the whole saga."""


@dataclass
class ReadInput(_Payload):
    saga_id: str
    reversal_id: str | None = None


@dataclass
class ReadResult(_Payload):
    saga: dict[str, Any] | None
    reversal: dict[str, Any] | None
    compensations: dict[str, dict[str, Any]]
    now: float


@dataclass
class RecordInput(_Payload):
    reversal_id: str
    generation: int
    step_id: str
    state: str
    attempts: int
    detail: str | None
    data: dict[str, Any]
    calls_spent: int
    tokens_spent: int
    event: str
    now: float
    event_key: str
    """Unique per write of one workflow run: a retried activity finds it and writes nothing."""
    redacted: list[dict[str, Any]] = field(default_factory=list)
    """Where amends put a secret's marker in ``data`` (rule 12)."""

    @classmethod
    def of(cls, write: CompensationWrite, event_key: str) -> RecordInput:
        """The log's write record as a payload, tagged with its ``event_key``."""
        return cls(
            write.reversal_id, write.generation, write.step_id, write.state, write.attempts,
            write.detail, dict(write.data), write.calls_spent, write.tokens_spent, write.event,
            write.now, event_key, [r.to_dict() for r in write.redacted],
        )  # fmt: skip

    def write(self) -> CompensationWrite:
        """The log's write record, its data carrying the event key (a re-run finds it)."""
        return CompensationWrite(
            self.reversal_id, self.generation, self.step_id, self.state, self.attempts,
            self.detail, {**self.data, EVENT_KEY: self.event_key}, self.calls_spent,
            self.tokens_spent, self.event, self.now, redactions_from(self.redacted),
        )  # fmt: skip


@dataclass
class ToolCallInput(_Payload):
    _nested = ("dispatched",)

    tool: str
    args: dict[str, Any]
    saga_id: str
    step_id: str
    phase: str
    key: str
    """amends' idempotency key of this call (the same for every retry of one compensation)."""
    attempt: int
    precondition: dict[str, Any] | None = None
    timeout: float | None = None
    """Seconds the tool itself may take (its own timeout, or what the budget leaves)."""
    dispatched: RecordInput | None = None
    """A compensation's "dispatched" event, written to the log by this activity before the
    call is sent (rule 5), saving the workflow a separate log write per step."""
    redacted: list[dict[str, Any]] = field(default_factory=list)
    """Where amends recorded a secret's marker in ``args`` (rule 12): the only places this
    worker gives a secret back; any other marker-looking text is sent as it is."""

    @classmethod
    def from_wire(cls, value: Wire) -> ToolCallInput:
        if isinstance(value, cls):
            return value
        d = value.get("dispatched")
        return cls(**{**value, "dispatched": None if d is None else RecordInput.from_wire(d)})


@dataclass
class ToolCallResult(_Payload):
    result: Any
    tokens: int = 0
    residue: list[dict[str, Any]] = field(default_factory=list)
    follow_ups: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CallBatch(_Payload):
    """The tool calls one workflow activation made, for one ``amends.call_tools`` activity."""

    _nested = ("calls",)

    calls: list[ToolCallInput]

    @classmethod
    def from_wire(cls, value: Wire) -> CallBatch:
        if isinstance(value, cls):
            return value
        return cls([ToolCallInput.from_wire(c) for c in value["calls"]])


@dataclass
class CallOutcome(_Payload):
    """One call's answer in a batch: its result, or the error it ended with."""

    _nested = ("result",)

    result: ToolCallResult | None
    error: str = ""
    """The error's kind (``TransientError``, ``ToolRaised``, ...; ``Lost``: unknown); ``""``."""
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, value: Wire) -> CallOutcome:
        if isinstance(value, cls):
            return value
        r = value.get("result")
        return cls(**{**value, "result": None if r is None else ToolCallResult.from_wire(r)})


@dataclass
class CallBatchResult(_Payload):
    _nested = ("results",)

    results: list[CallOutcome]

    @classmethod
    def from_wire(cls, value: Wire) -> CallBatchResult:
        if isinstance(value, cls):
            return value
        return cls([CallOutcome.from_wire(r) for r in value["results"]])


@dataclass
class RecordBatch(_Payload):
    """The log writes one workflow activation issued, written together (one group commit)."""

    _nested = ("writes",)

    writes: list[RecordInput]

    @classmethod
    def from_wire(cls, value: Wire) -> RecordBatch:
        if isinstance(value, cls):
            return value
        return cls([RecordInput.from_wire(w) for w in value["writes"]])


@dataclass
class FinishInput(_Payload):
    _nested = ("writes",)

    reversal_id: str
    generation: int
    report: dict[str, Any]
    saga_id: str = ""
    writes: list[RecordInput] = field(default_factory=list)
    """The steps' last outcome events, written (each once) before the report."""

    @classmethod
    def from_wire(cls, value: Wire) -> FinishInput:
        if isinstance(value, cls):
            return value
        return cls(**{**value, "writes": [RecordInput.from_wire(w) for w in value["writes"]]})


def _app_error(kind: str, message: str, **details: Any) -> ApplicationError:
    # non_retryable: a tool's answer is final for this attempt; amends' own retry policy (in the
    # workflow, within budget) decides what happens next, exactly as in the local engine.
    return ApplicationError(message, details, type=kind, non_retryable=True)


class ReversalActivities:
    """The activities one worker serves: its catalog's tools and its saga log.

    Args:
        catalog: The tools (the same catalog the agents ran with).
        log: The saga log, normally a :class:`amends.PostgresLog` shared by every worker.
        heartbeat_seconds: How often a running tool call heartbeats; Temporal moves the call to
            another worker after ``3 x`` this without a heartbeat.
    """

    def __init__(
        self,
        catalog: Catalog,
        log: SagaLog,
        *,
        heartbeat_seconds: float = 1.0,
        client: Client | None = None,
        identity: str | None = None,
    ) -> None:
        self.catalog = catalog
        self.log = log
        self.heartbeat_seconds = heartbeat_seconds
        self.observed = ObservedLog(log, reader=log)
        """Issue 28: the compensation writes, each reported (a JSON line, its latency)."""
        self.client = client
        """The worker's Temporal client (to ask which workers still poll, see lost_cause)."""
        self.identity = identity or (client.identity if client is not None else None)
        """The worker's identity, written with each "dispatched" event it commits."""

    def all(self) -> list[Any]:
        """The activity functions, for ``Worker(activities=...)``."""
        return [
            self.claim, self.read, self.call_tool, self.call_tools, self.record, self.record_many,
            self.finish, self.lost_cause,
        ]  # fmt: skip

    @activity.defn(name="amends.lost_cause")
    async def lost_cause(self, wire: Wire) -> dict[str, str]:
        """What lost the calls in flight of ``wire["steps"]``, in the words of the report (issue
        23, rule 8), from the worker each one's "dispatched" event names: this very worker,
        still running, means Temporal lost its answer while the server was unreachable; a
        worker no longer polling the queue stopped; one still polling may have stopped
        answering or been cut off from the server, and the engine cannot tell which."""
        comps = await self.log.get_compensations(str(wire["reversal_id"]))
        out: dict[str, str] = {}
        for step_id in wire["steps"]:
            rec = comps.get(step_id)
            worker = rec.data.get("worker") if rec is not None else None
            out[step_id] = await self._cause(worker, str(wire.get("queue") or ""))
        return out

    async def _cause(self, worker: Any, queue: str) -> str:
        if not isinstance(worker, str) or not worker:
            return "a worker stopped"
        if worker == self.identity:
            return (
                f"the Temporal server was unreachable (worker {worker}, which made the call, "
                f"kept running)"
            )
        if not await self._still_polling(worker, queue):
            return f"its worker {worker} stopped"
        return f"its worker {worker} stopped answering or the Temporal server was unreachable"

    async def _still_polling(self, worker: str, queue: str) -> bool:
        if self.client is None or not queue:
            return False
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        for kind in (
            TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        ):
            try:
                answer = await self.client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=self.client.namespace,
                        task_queue=TaskQueue(name=queue),
                        task_queue_type=kind,
                    )
                )
            except Exception:  # the question is only asked to word a report; unknown: say so
                return True
            if any(p.identity == worker for p in answer.pollers):
                return True
        return False

    @activity.defn(name="amends.claim")
    async def claim(self, wire: Wire) -> Wire:
        """Create the saga's one reversal in the log, or find it (rule 6): a ClaimResult."""
        return (await self._claim(ClaimInput.from_wire(wire))).to_wire()

    async def _claim(self, inp: ClaimInput) -> ClaimResult:
        if inp.resume:
            if await self.log.get_saga(inp.saga_id) is None:
                return ClaimResult("not_found", now=time.time())
            # as Engine.resume claims: a continuation in progress is joined (or, being this
            # workflow's own, taken over by a retried task); one continued since is not repeated
            claim = await self._continue(inp, inp.after_continuation)
        else:
            now = time.time()
            try:
                # as Engine.undo claims: the saga is read in the claim's own transaction (a
                # step written after it is refused), once
                claim = await self.log.claim_reversal(
                    inp.saga_id,
                    reversal_id=_new_reversal_id(),
                    budget=inp.budget,
                    owner=inp.owner,
                    lease_until=now + inp.lease_seconds,
                    now=now,
                    check=_found,
                    selection=inp.steps,
                )
            except SagaNotFoundError:
                return ClaimResult("not_found", now=time.time())
        saga = claim.saga or await self.log.get_saga(inp.saga_id)  # issue 12: the claim's read
        assert saga is not None
        covered = True
        if not inp.resume:  # a continuation keeps the reversal's selection
            claim = await self._extended(inp, saga, claim)
            covered = covers(saga, claim.reversal.selection, inp.steps)
        rev = claim.reversal
        if claim.outcome in ("done", "running_elsewhere"):
            return ClaimResult(claim.outcome, to_dict(rev), now=time.time(), covered=covered)
        reversal_started(inp.saga_id, rev)  # issue 28
        saga = claim.saga or saga
        # a reversal created by this claim has no compensation yet
        comps = {} if claim.outcome == "new" else await self.log.get_compensations(rev.reversal_id)
        return ClaimResult(
            claim.outcome,
            to_dict(rev),
            shrink_saga(to_dict(saga)),  # long values by reference (_refs)
            {k: to_dict(v) for k, v in comps.items()},
            [spec_to_dict(s) for s in self.catalog],
            now=time.time(),
            covered=covered,
            # the engine's one closure (issue 27), from the full saga (long values included)
            selection=None
            if rev.selection is None
            else selection_of(saga, rev.selection).to_dict(),
        )

    async def _extended(self, inp: ClaimInput, saga: SagaRecord, claim: Claim) -> Claim:
        """Issue 27, as ``Engine.undo`` does: a finished reversal that does not cover the steps
        asked for is continued to cover them too (one reversal per saga, rule 6; what it
        already neutralised is never dispatched again, rule 5). If another caller continued it
        first, that continuation is looked at in turn."""
        while claim.outcome == "done" and not covers(saga, claim.reversal.selection, inp.steps):
            rev = claim.reversal
            claim = await self._continue(
                inp, rev.continuations, selection=widen(rev.selection, inp.steps)
            )
        return claim

    async def _continue(self, inp: ClaimInput, after: int | None, **selection: Any) -> Claim:
        """Continue the saga's finished reversal with ``inp``'s budget, for ``inp``'s workflow
        (``selection``: what it covers from now on; by default what it covered)."""
        now = time.time()
        return await self.log.continue_reversal(
            inp.saga_id,
            budget=inp.budget,
            owner=inp.owner,
            lease_until=now + inp.lease_seconds,
            now=now,
            after_continuation=after,
            reversal_id=_new_reversal_id(),
            **selection,
        )

    @activity.defn(name="amends.read")
    async def read(self, wire: Wire) -> Wire:
        """The saga, its reversal and the compensations logged so far: a ReadResult."""
        inp = ReadInput.from_wire(wire)
        saga = await self.log.get_saga(inp.saga_id)
        rev = await self.log.get_reversal(
            **({"reversal_id": inp.reversal_id} if inp.reversal_id else {"saga_id": inp.saga_id})
        )
        comps = await self.log.get_compensations(rev.reversal_id) if rev else {}
        return ReadResult(
            None if saga is None else shrink_saga(to_dict(saga)),
            None if rev is None else to_dict(rev),
            {k: to_dict(v) for k, v in comps.items()},
            time.time(),
        ).to_wire()

    @activity.defn(name="amends.call_tool")
    async def call_tool(self, wire: Wire) -> Wire:
        """One probe, compensation or follow-up: the tool called once with amends' key (a
        ToolCallResult)."""
        inp = ToolCallInput.from_wire(wire)
        beating = asyncio.create_task(self._beat())
        try:
            seen = await self._logged([inp.dispatched] if inp.dispatched else [])
            return (await self._call(inp, seen)).to_wire()
        finally:
            beating.cancel()

    @activity.defn(name="amends.call_tools")
    async def call_tools(self, wire: Wire) -> Wire:
        """The calls one workflow activation made (independent steps, rule 3), made together.

        Each call is exactly what ``amends.call_tool`` would make of it (its own key, timeout,
        "dispatched" write first, its own answer); one activity instead of one per call saves
        Temporal's server a task dispatch and a history update per call. A worker that dies
        loses the whole batch: the workflow takes every call of it through the crash rules
        (rule 5), as it would each lost call.

        Run as a local activity (the workflow's choice for short batches), it is run again from
        the start when the workflow task that ran it is retried (its worker died): a call whose
        "dispatched" event an earlier run committed may have left, so it is not made again but
        answered ``Lost``, and the workflow takes it through the crash rules (rule 5)."""
        inp = CallBatch.from_wire(wire)
        writes = [c.dispatched for c in inp.calls if c.dispatched is not None]
        seen = await self._logged(writes)
        local = activity.info().is_local  # a local activity cannot heartbeat (nor needs to)
        beating = None if local else asyncio.create_task(self._beat())
        try:
            got = await asyncio.gather(
                *(self._call(c, seen) for c in inp.calls), return_exceptions=True
            )
        finally:
            if beating is not None:
                beating.cancel()
        out = CallBatchResult([])
        for g in got:
            if isinstance(g, ToolCallResult):
                out.results.append(CallOutcome(g))
            elif isinstance(g, ApplicationError):
                out.results.append(CallOutcome(None, g.type or "", g.message, dict(details(g))))
            elif isinstance(g, Exception):  # not a tool's answer (a bug): the call's fate unknown
                out.results.append(CallOutcome(None, "Lost", f"{type(g).__name__}: {g}"))
            else:
                assert isinstance(g, BaseException)
                raise g  # cancelled: the workflow stopped waiting for this batch
        return out.to_wire()

    async def _call(
        self, inp: ToolCallInput, seen: Mapping[str, CompensationRecord]
    ) -> ToolCallResult:
        if inp.tool not in self.catalog:
            raise _app_error(
                "ToolRaised",
                f"tool {inp.tool!r} is not in this worker's catalog; run every worker with the "
                f"same catalog",
                name="ContractError",
                tokens=0,
            )
        spec = self.catalog.get(inp.tool)
        call = Call(
            saga_id=inp.saga_id,
            step_id=inp.step_id,
            tool=inp.tool,
            phase=inp.phase,  # type: ignore[arg-type]
            idempotency_key=inp.key,
            attempt=inp.attempt,
            precondition=None
            if inp.precondition is None
            else Expectation.from_dict(inp.precondition),
        )
        if inp.dispatched is not None:
            # rule 5: "dispatched" is committed before the call can leave this worker; a worker
            # that dies after this line leaves the step in flight for the crash rules.
            if _logged_before(seen, inp.dispatched):
                raise _app_error(
                    "Lost",
                    f"an earlier run of this call batch dispatched {inp.tool}, and its answer "
                    f"never reached the workflow; whether it landed is unknown",
                )
            dispatched = inp.dispatched
            if self.identity is not None:  # who made the call, should it be lost (lost_cause)
                dispatched = dataclasses.replace(
                    dispatched, data={**dispatched.data, "worker": self.identity}
                )
            try:
                await self._write_once(dispatched, seen)
            except LeaseLostError as exc:
                raise _app_error("DispatchLeaseLost", str(exc)) from exc
        vault = Vault()
        call.redact = vault.scrub  # rule 11: a tool cutting its vendor's words redacts first
        try:
            inp = await self._with_values(inp)
            args = await self._secrets(inp, vault)
            # the tool's own time, as the local engine bounds it (Temporal's queueing excluded)
            result = await invoke(spec.fn, call, args, inp.timeout)
        # rule 11: nothing a call returns or raises carries a resolved secret into Temporal's
        # history (error messages, residue, follow-ups and results are scrubbed)
        except TransientError as exc:
            raise _app_error(
                "TransientError", vault.scrub(str(exc)), tokens=call.tokens,
                retry_after=exc.retry_after,
            ) from None  # fmt: skip
        except PreconditionFailed as exc:
            raise _app_error(
                "PreconditionFailed", vault.scrub(str(exc)), tokens=call.tokens
            ) from None
        except PermanentError as exc:
            raise _app_error("PermanentError", vault.scrub(str(exc)), tokens=call.tokens) from None
        except TimeoutError as exc:
            raise _app_error("Timeout", vault.scrub(str(exc)), tokens=call.tokens) from None
        except LeaseLostError as exc:
            raise _app_error("LeaseLostError", vault.scrub(str(exc)), tokens=call.tokens) from None
        except Exception as exc:
            raise _app_error(
                "ToolRaised", vault.scrub(str(exc)), name=type(exc).__name__, tokens=call.tokens
            ) from None
        answer = shrink(vault.scrub(result))  # a long string goes back by reference (_refs)
        return ToolCallResult(
            # what the workflow does not compare (all but a probe's answer): long lists too
            answer if inp.phase == "probe" else shrink_answer(answer),
            call.tokens,
            # rule 12: the residue's words bounded after the scrub, before they cross the
            # history (a vendor's megabytes in them hit Temporal's payload limit first)
            [vault.scrub(r.to_dict()) for r in bounded_residue(vault, call.recorded_residue)],
            [_scrubbed_follow_up(vault, f.to_dict()) for f in call.recorded_follow_ups],
        )

    async def _with_values(self, inp: ToolCallInput) -> ToolCallInput:
        """Issue 25: the call's arguments and precondition with each reference to a long value
        resolved from the saga in the log (see :mod:`._refs`), right before the call.

        Raises:
            PermanentError: A reference names a value the saga does not hold; the call is not
                made.
        """
        if not (has_refs(inp.args) or has_refs(inp.precondition)):
            return inp
        saga = await self.log.get_saga(inp.saga_id)
        table = values_of(to_dict(saga)) if saga is not None else {}
        try:
            return dataclasses.replace(
                inp,
                args=expand(inp.args, lambda d, n: table.get((d, n))),
                precondition=expand(inp.precondition, lambda d, n: table.get((d, n))),
            )
        except LookupError as exc:
            raise PermanentError(f"{inp.tool} was not called: {exc}") from None

    async def _secrets(self, inp: ToolCallInput, vault: Vault) -> dict[str, Any]:
        """Rules 11 and 12: the call's arguments with the secrets amends recorded at
        ``inp.redacted`` resolved by this worker's resolvers (the tool's own, then the forward
        tool's), by the local engine's own function; other marker-looking text is data."""
        if not inp.redacted:
            return dict(inp.args)
        saga = await self.log.get_saga(inp.saga_id)
        if saga is None:
            raise SagaNotFoundError(
                f"saga {inp.saga_id!r} is not in this worker's log; no secret is given back",
                saga_id=inp.saga_id,
            )
        return await resolve_call_args(
            self.catalog,
            saga,
            inp.tool,
            inp.step_id,
            inp.args,
            vault,
            at=redactions_from(inp.redacted),
        )

    async def _beat(self) -> None:
        # activities heartbeat so a dead worker's call moves to a live one within seconds, and
        # so a cancellation from the workflow (timeout, budget) reaches the tool
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.heartbeat_seconds)

    @activity.defn(name="amends.record")
    async def record(self, wire: Wire) -> None:
        """Write one compensation event, once, however often Temporal runs this activity."""
        inp = RecordInput.from_wire(wire)
        try:
            await self._write_once(inp, await self._logged([inp]))
        except LeaseLostError as exc:
            raise _app_error("LeaseLostError", str(exc)) from exc

    @activity.defn(name="amends.record_many")
    async def record_many(self, wire: Wire) -> None:
        """Write the events of one workflow activation: each once, in order per step.

        Different steps' writes go to the log together, so a group-committing log (PostgreSQL)
        commits them at once, as it does the local engine's concurrent writes."""
        inp = RecordBatch.from_wire(wire)
        await self._write_all(inp.writes, await self._logged(inp.writes))

    async def _write_all(
        self, writes: list[RecordInput], seen: Mapping[str, CompensationRecord]
    ) -> None:
        by_step: dict[str, list[RecordInput]] = {}
        for w in writes:
            by_step.setdefault(w.step_id, []).append(w)

        async def in_order(writes: list[RecordInput]) -> None:
            for w in writes:
                await self._write_once(w, seen)

        results = await asyncio.gather(
            *(in_order(ws) for ws in by_step.values()), return_exceptions=True
        )
        for r in results:
            if isinstance(r, LeaseLostError):
                raise _app_error("LeaseLostError", str(r)) from r
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def _logged(self, writes: list[RecordInput]) -> Mapping[str, CompensationRecord]:
        """What the log holds of these writes' reversal when this activity may be a re-run of
        one that committed some of them (``{}`` when it cannot be): one read per activity.

        A regular activity is re-run only as Temporal's retry (``attempt > 1``). A local
        activity is also run again from the start, as attempt 1, when the workflow task that
        ran it is retried after its worker died: it always looks."""
        info = activity.info()
        if not writes or (info.attempt == 1 and not info.is_local):
            return {}
        return await self.log.get_compensations(writes[0].reversal_id)

    async def _write_once(self, inp: RecordInput, seen: Mapping[str, CompensationRecord]) -> None:
        if _logged_before(seen, inp):
            return  # an earlier run of this activity committed it
        await self.observed.record_compensation(inp.write())

    @activity.defn(name="amends.finish")
    async def finish(self, wire: Wire) -> dict[str, Any]:
        """Store the report (once). Returns ``{"resolutions": ...}``, the resolutions stored with
        it (the workflow adds them to the report it sent: the report does not cross Temporal's
        history twice), or ``{"report": ...}``, the report an earlier run already stored."""
        inp = FinishInput.from_wire(wire)
        seen = await self._logged(inp.writes)
        # A run that stored the report had written the carried events first: only when one of
        # them is in the log (or none is carried) can this be a re-run that finds it done.
        if not inp.writes or any(_logged_before(seen, w) for w in inp.writes):
            rev = await self.log.get_reversal(reversal_id=inp.reversal_id)
            if rev is not None and rev.state == "done" and rev.report is not None:
                return {"report": rev.report}
        # the last activation's outcome events, before the report (one trip), each once
        await self._write_all(inp.writes, seen)
        # as the local engine stores it: with the resolutions that still speak for each step's
        # outcome (the one reader every report goes through; the workflow described the steps)
        report = await current_report(  # stored: the follow-ups' cost is added by readers
            self.log, UndoReport.from_dict(inp.report), follow_ups=False
        )
        final = report.to_dict()
        try:
            await self.log.finish_reversal(inp.reversal_id, inp.generation, final, now=time.time())
        except LeaseLostError as exc:
            raise _app_error("LeaseLostError", str(exc)) from exc
        reversal_finished(report)  # issue 28: counted once, by the worker that stored it
        return {"resolutions": final["resolutions"]}


def _new_reversal_id() -> str:
    return f"rev_{time.time_ns():x}{uuid.uuid4().hex[:10]}"


def _found(saga: SagaRecord | None) -> None:
    """The claim's check: the saga must exist (nothing is written otherwise)."""
    if saga is None:
        raise SagaNotFoundError("no such saga")


def _logged_before(seen: Mapping[str, CompensationRecord], inp: RecordInput) -> bool:
    """Whether ``seen`` (the log, read once by this activity) holds the write ``inp``."""
    cur = seen.get(inp.step_id)
    return cur is not None and _written(cur.data.get(EVENT_KEY), inp.event_key)


def _written(current: Any, key: str) -> bool:
    """Whether the step's current event key ``current`` shows ``key`` was already written.

    Keys are ``<workflow run id>:<n>``, ``n`` counting the run's writes in order; one step's
    writes are made one after another, so a step whose current key is ``key`` or a later one of
    the same run has ``key`` committed (a batch holding two writes of one step, retried)."""
    if not isinstance(current, str):
        return False
    run, _, n = current.rpartition(":")
    mine, _, m = key.rpartition(":")
    if run != mine or not n.isdigit() or not m.isdigit():
        return current == key
    return int(n) >= int(m)


def details(exc: ApplicationError) -> Mapping[str, Any]:
    """The structured details of an activity's ApplicationError (``{}`` when none)."""
    d = exc.details[0] if exc.details else {}
    return d if isinstance(d, Mapping) else {}


def _scrubbed_follow_up(vault: Vault, follow_up: dict[str, Any]) -> dict[str, Any]:
    """A follow-up an inverse asked for, as it may enter Temporal's history: its arguments
    scrubbed of every secret resolved here (rule 11), with where each marker was put (rule 12),
    so the worker that makes it gives the secret back there and only there."""
    args, found = vault.scrub_at(follow_up.get("args") or {})
    out = {**follow_up, "args": args}
    if found:
        out["redacted"] = [*follow_up.get("redacted", ()), *(r.to_dict() for r in found)]
    return out
