"""Runs a compensation plan: drift checks, idempotency keys, retries, budget, parallel branches.

Every compensation is logged ``dispatched`` before its inverse is called and with its final state
after; a compensation logged in a final state is never dispatched again (rule 5). Every write is
fenced by the reversal's lease generation, so a worker that lost its lease stops at its next write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ._budget import BudgetMeter
from ._calls import RetryPolicy, idempotency_key, invoke
from ._contracts import (
    NOTHING,
    Acknowledgement,
    Call,
    Catalog,
    Expectation,
    FollowUp,
    ManualAction,
    Residue,
    same_value,
)
from ._errors import (
    ContractError,
    PermanentError,
    PreconditionFailed,
    TransientError,
)
from ._log.base import (
    CompensationRecord,
    Resolution,
    ReversalRecord,
    SagaLog,
    SagaRecord,
    StepRecord,
)
from ._planner import Plan, PlannedStep, PreviewStep
from ._report import NEUTRALISED, StepOutcome, StepState, UndoReport, verb_for
from ._secrets import markers_in, resolve_call_args, scrub_record, vault_for

__all__ = ["CallLost", "current_report", "current_resolutions", "described", "run_plan"]

_Described = TypeVar("_Described", StepOutcome, PreviewStep)


def described(catalog: Catalog, step: StepRecord | None, item: _Described) -> _Described:
    """Issue 17: ``item`` (a step's outcome or preview) with the step and its inverse in plain
    language, from the catalog's ``describe=`` templates and the logged (redacted, rule 11)
    arguments. The one describer of the engine, the preview and a Temporal worker."""
    if step is None:
        return item
    inv = step.inverse
    return dataclasses.replace(
        item,
        description=catalog.describe(step.tool, step.args),
        inverse_description=(catalog.describe(inv["tool"], inv.get("args", {})) if inv else ""),
    )


def current_resolutions(
    resolutions: Mapping[str, Resolution], compensations: Mapping[str, CompensationRecord]
) -> dict[str, Resolution]:
    """The resolutions that still speak for their step's outcome (rule 6, rule 8).

    A person resolves the manual action they saw. If the step was attempted again after that
    (a continuation retried an over-budget or blocked step, and its inverse then failed), the
    resolution predates the outcome: it neither marks the new manual action as handled nor
    unblocks the inverses that wait for the step (rule 3).
    """
    out: dict[str, Resolution] = {}
    for step_id, res in resolutions.items():
        rec = compensations.get(step_id)
        if rec is None or res.at >= rec.updated_at:
            out[step_id] = res
    return out


async def current_report(log: SagaLog, report: UndoReport) -> UndoReport:
    """``report`` (as stored) with the resolutions that still speak for its steps' outcomes:
    the one way every reader — the engine, the CLI, a Temporal worker — shows manual actions as
    open or handled (rule 6; rule 8: a stale resolution never marks a newer failure handled)."""
    saga = await log.get_saga(report.saga_id)
    if saga is None or not saga.resolutions:
        return report
    comps = await log.get_compensations(report.reversal_id)
    return report.with_resolutions(current_resolutions(saga.resolutions, comps))


_FINAL = frozenset(s.value for s in StepState)
_RETRY = frozenset({StepState.OVER_BUDGET.value, StepState.BLOCKED.value})
"""Recorded states that were never dispatched: a continuation attempts them (rule 6)."""


_UNKNOWN_FOLLOW_UP = (
    "it may have been made before a worker stopped, and its vendor does not honour idempotency "
    "keys, so it was not sent again; whether it was made is unknown"
)
"""Why a follow-up in flight at a crash is not re-sent (rule 5) and is reported unknown."""


class CallLost(BaseException):
    """A tool call's maker lost it (the worker making it died): whether it landed is unknown.

    Raised by a tool function whose calls are made elsewhere (a Temporal activity). A
    BaseException, so that "any other exception is a failed call" does not swallow it: the runner
    re-reads the reversal's compensation records (``reread``) and runs the step again through the
    crash rules, exactly as after a crash of the local engine (rule 5). Every attempt spends
    budget, so this ends (rule 7)."""


class _Stop(Exception):
    """The call could not be completed; carries the step state and a plain-language detail."""

    def __init__(self, state: StepState, detail: str) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail


class _Runner:
    def __init__(
        self,
        *,
        catalog: Catalog,
        log: SagaLog,
        saga: SagaRecord,
        reversal: ReversalRecord,
        plan: Plan,
        done: Mapping[str, CompensationRecord],
        meter: BudgetMeter,
        retry: RetryPolicy,
        clock: Callable[[], float],
        on_progress: Callable[[StepOutcome], None] | None,
        reload: Callable[[], Awaitable[SagaRecord]] | None = None,
        replan: Callable[[SagaRecord], Plan] | None = None,
        poll_interval: float = 0.02,
        bounded: bool = True,
        reread: Callable[[], Awaitable[Mapping[str, CompensationRecord]]] | None = None,
    ) -> None:
        self.catalog = catalog
        self.log = log
        self.saga = saga
        self.reversal = reversal
        self.plan = plan
        self.done = done
        self.meter = meter
        self.retry = retry
        self.clock = clock
        self.rng = random.Random(f"{reversal.reversal_id}:{reversal.generation}")
        self.futures: dict[str, asyncio.Future[StepOutcome]] = {}
        self.fresh: set[str] = set()
        """Steps whose compensation was recorded in this run (after every known resolution)."""
        self.on_progress = on_progress
        self.reload = reload
        """Reads the saga again (to wait for a step still in flight, rule 7); ``None``: no wait."""
        self.replan = replan
        """Plans a re-read saga with the same planner (a step that finished while we waited)."""
        self.poll_interval = poll_interval
        self.bounded = bounded
        self.reread = reread
        """Reads the compensation records again after a :class:`CallLost`; ``None``: re-raise."""
        """Whether this runner bounds each call by its timeout itself; ``False`` where the call's
        maker enforces the same bound (a Temporal activity), which saves a timer per call."""
        self.vault = vault_for(self)
        """Rule 11: secrets resolved for this reversal, scrubbed from what it logs and reports
        (kept here: no weak-dict lookup per record, issue 12)."""

    async def _record(
        self,
        p: PlannedStep,
        state: str,
        *,
        attempts: int,
        detail: str,
        data: Mapping[str, Any],
        event: str,
    ) -> None:
        self.fresh.add(p.step_id)
        await self.log.record_compensation(
            self.reversal.reversal_id,
            self.reversal.generation,
            p.step_id,
            state=state,
            attempts=attempts,
            detail=self.vault.scrub(detail),  # rule 11: no resolved secret in the log
            data=self.vault.scrub(data),
            calls_spent=self.meter.calls,
            tokens_spent=self.meter.tokens,
            event=event,
            now=self.clock(),
        )

    # --- one call, with retries ------------------------------------------------------------
    async def _call(
        self,
        tool: str,
        args: Mapping[str, Any],
        *,
        phase: Any,
        key: str,
        step_id: str,
        precondition: Expectation | None = None,
        counter: list[int],
        prepaid: bool = False,
    ) -> tuple[Any, Call]:
        """Rule 11: give redacted secrets back to this call, and keep them out of what it yields.

        ``[redacted:NAME]`` markers in ``args`` are resolved by the tool's resolver (or the
        forward tool's); a detail, residue or follow-up it produces is scrubbed of the values.
        """
        vault = self.vault
        try:
            real = await resolve_call_args(self.catalog, self.saga, tool, step_id, args, vault)
        except ContractError as exc:
            raise _Stop(StepState.FAILED, f"{tool} was not called: {exc}") from None
        try:
            result, call = await self._call_raw(
                tool,
                real,
                phase=phase,
                key=key,
                step_id=step_id,
                precondition=precondition,
                counter=counter,
                prepaid=prepaid,
            )
        except _Stop as stop:
            raise _Stop(stop.state, vault.scrub(stop.detail)) from None
        if vault:
            call.recorded_residue = [scrub_record(vault, r) for r in call.recorded_residue]
        return result, call

    async def _call_raw(
        self,
        tool: str,
        args: Mapping[str, Any],
        *,
        phase: Any,
        key: str,
        step_id: str,
        precondition: Expectation | None = None,
        counter: list[int],
        prepaid: bool = False,
    ) -> tuple[Any, Call]:
        """``prepaid``: the first attempt's call was taken from the budget already (the
        compensation's dispatch record carries it, so a take-over counts it)."""
        if tool not in self.catalog:  # rule 7: an unknown tool fails this call only
            raise _Stop(
                StepState.FAILED,
                f"{tool} was not called: no tool of that name is in the catalog; register it "
                f"or fix the name the tool recorded",
            )
        spec = self.catalog.get(tool)
        attempt = 0
        while True:
            attempt += 1
            if not (prepaid and attempt == 1):
                self._take_call(tool, counter)
            counter[0] += 1
            call = Call(
                saga_id=self.saga.saga_id,
                step_id=step_id,
                tool=tool,
                phase=phase,
                idempotency_key=key,
                attempt=attempt,
                precondition=precondition,
            )
            remaining = self.meter.remaining_seconds()
            timeout = remaining if spec.timeout is None else min(spec.timeout, remaining)
            try:
                result = await invoke(
                    spec.fn, call, args, max(timeout, 0.001) if self.bounded else None
                )
            except Exception as exc:
                self.meter.tokens += call.tokens
                await asyncio.sleep(self._retry_wait(tool, exc, attempt, timeout, spec.timeout))
                continue
            self.meter.tokens += call.tokens
            return result, call

    def _take_call(self, tool: str, counter: list[int]) -> None:
        """Spend one call of the budget on ``tool``, or stop the step (rule 7)."""
        why = self.meter.take_call()
        if why is not None:
            raise _Stop(
                StepState.OVER_BUDGET if counter[0] == 0 else StepState.FAILED,
                f"{why} before {tool} could {'run' if counter[0] == 0 else 'succeed'}"
                + (f" (gave up after {counter[0]} attempt(s))" if counter[0] else ""),
            )

    def _retry_wait(
        self, tool: str, exc: Exception, attempt: int, timeout: float, own: float | None
    ) -> float:
        """What a failed call means (raises :class:`_Stop`), or how long to wait before the next
        try: the one retry decision, ``RetryPolicy.next_wait``, as on the forward side."""
        if isinstance(exc, TransientError):
            wait = self.retry.next_wait(attempt, exc.retry_after, self.rng)
            if wait is None:
                raise _Stop(StepState.FAILED, self.retry.gave_up(tool, attempt, exc)) from exc
            if wait >= self.meter.remaining_seconds():
                raise _Stop(
                    StepState.FAILED,
                    f"{tool} failed transiently ({exc}) and the time budget leaves no room to "
                    f"retry",
                ) from exc
            return wait
        if isinstance(exc, TimeoutError):
            cause = (
                f"{tool} timed out after {timeout:.2f} s"
                if own is not None and own <= timeout
                else f"the time budget of {self.meter.budget.seconds:g} s ran out while {tool} "
                f"was running (after {timeout:.2f} s)"
            )
            raise _Stop(StepState.IN_DOUBT, f"{cause}; whether it took effect is unknown") from None
        if isinstance(exc, PreconditionFailed):
            raise _Stop(
                StepState.DRIFTED,
                f"the vendor refused the write because the world changed since the agent "
                f"acted: {exc}",
            ) from exc
        if isinstance(exc, PermanentError):
            raise _Stop(StepState.FAILED, f"{tool} failed permanently: {exc}") from exc
        # Any other exception counts as permanent (DESIGN.md) -- amends' own errors included: a
        # LeaseLostError from a nested engine is this inverse failing, never this reversal's
        # lease lost (rule 7: no take-over loop, no budget reset).
        raise _Stop(StepState.FAILED, f"{tool} raised {type(exc).__name__}: {exc}") from exc

    # --- one step -------------------------------------------------------------------------
    def _outcome(self, p: PlannedStep, state: StepState, detail: str, **more: Any) -> StepOutcome:
        vault = self.vault
        if vault:  # rule 11: a secret resolved for this reversal never reaches the report
            detail = vault.scrub(detail)
            if more.get("manual_action") is not None:
                more["manual_action"] = scrub_record(vault, more["manual_action"])
            if more.get("residue"):
                more["residue"] = tuple(scrub_record(vault, r) for r in more["residue"])
        return StepOutcome(
            step_id=p.step_id,
            tool=p.step.tool,
            verb=verb_for(state),  # rule 8: one verb per state, whatever the cause
            state=state,
            detail=detail,
            reversibility=p.reversibility.value,
            violation=p.step.violation,
            **more,
        )

    async def _step(self, p: PlannedStep) -> StepOutcome:
        if p.action == "wait":
            p = await self._await_in_flight(p)
        quick = self._without_inverse(p)
        if quick is not None:
            return quick
        prior = self.done.get(p.step_id)
        if prior is not None and prior.state in _RETRY:
            # rule 6: a continuation attempts what was not attempted (over budget) or may now be
            # unblocked; an attempt that was in flight before stays in flight (rule 5).
            prior = (
                dataclasses.replace(prior, state="dispatched")
                if prior.data.get("in_flight")
                else None
            )
        if prior is not None and prior.state in _FINAL:
            # rule 5: logged done is never dispatched again, even after a crash.
            return self._from_record(p, prior)
        blocked = await self._gate(p)
        if blocked is not None:
            return blocked
        closed = await self._window_closed(p, prior)
        if closed is not None:
            return closed
        return await self._compensate(p, prior)

    async def _window_closed(
        self, p: PlannedStep, prior: CompensationRecord | None
    ) -> StepOutcome | None:
        """Rule 10 at dispatch time: the undo window may close while the inverse waits for
        others (rule 3); after it the step is Acknowledge, as the planner would now say, not an
        inverse sent past its deadline. An attempt already in flight is still checked (rule 5)."""
        inv = p.inverse
        if (
            inv is None
            or inv.deadline is None
            or (prior is not None and prior.state == "dispatched")
        ):
            return None
        if not inv.deadline_passed(self.clock()):
            return None
        detail = (
            f"the undo window of {inv.tool} closed at {inv.deadline} while this step waited for "
            f"others to be undone first; it can no longer be taken back by a call"
        )
        return await self._stopped(p, StepState.ACKNOWLEDGED, detail)

    def _without_inverse(self, p: PlannedStep) -> StepOutcome | None:
        """Steps undo does not call an inverse for: their outcome follows from the plan."""
        if p.action == "cancel":
            return self._outcome(p, StepState.CANCELLED, p.reason)
        if p.action == "skip":
            return self._outcome(p, StepState.NOT_NEEDED, p.reason)
        if p.action == "acknowledge":
            manual = self._manual(p, StepState.ACKNOWLEDGED, p.reason)
            return self._outcome(p, StepState.ACKNOWLEDGED, p.reason, manual_action=manual)
        if p.action == "review":  # rule 4: never reverted blindly
            manual = self._manual(p, StepState.DRIFTED, p.reason)
            return self._outcome(p, StepState.DRIFTED, p.reason, manual_action=manual)
        if p.action in ("in_doubt", "wait"):
            detail = (
                p.reason
                if p.action == "in_doubt"
                else "still running in another process when undo finished; whether it took "
                "effect is unknown"
            )
            manual = self._manual(p, StepState.IN_DOUBT, detail)
            return self._outcome(p, StepState.IN_DOUBT, detail, manual_action=manual)
        return None

    async def _await_in_flight(self, p: PlannedStep) -> PlannedStep:
        """Rule 7: wait for a step still in flight (here or in another process) within the
        seconds budget, while independent steps proceed; then plan it as it ended."""
        if self.reload is None or self.replan is None:
            return p
        while True:
            saga = await self.reload()
            rec = next((s for s in saga.steps if s.step_id == p.step_id), None)
            if rec is not None and rec.state != "intent":
                fresh = self.replan(saga)[p.step_id]
                waits = tuple(d for d in fresh.waits_for if d in self.futures and d != p.step_id)
                return dataclasses.replace(fresh, waits_for=waits)
            why = None
            if saga.lease_until is None or saga.lease_until <= time.time():
                why = "the process running it stopped before it logged a result"
            elif self.meter.remaining_seconds() <= 0:
                why = (
                    f"it was still running when the time budget of "
                    f"{self.meter.budget.seconds:g} s ran out"
                )
            if why is not None:
                return dataclasses.replace(
                    p,
                    action="in_doubt",
                    verb="Acknowledge",
                    reason=f"the call's outcome is unknown ({why}); check whether it happened",
                )
            await asyncio.sleep(min(self.poll_interval, max(self.meter.remaining_seconds(), 0)))

    async def _gate(self, p: PlannedStep) -> StepOutcome | None:
        """Rule 3: the inverses this one waits for first; if one did not succeed, blocked."""
        for dep in p.waits_for:
            outcome = await self.futures[dep]
            if outcome.state in NEUTRALISED or self._resolved(dep):
                continue  # undone, or a person resolved this outcome (rule 6)
            detail = (
                f"not attempted: it must wait for {dep} ({outcome.tool}) to be undone "
                f"first, and that step is {outcome.state.value}"
            )
            return await self._stopped(p, StepState.BLOCKED, detail)
        return None

    def _resolved(self, step_id: str) -> bool:
        """A person resolved the outcome ``step_id`` has now: a step recorded again in this run
        got its outcome after every resolution the run knows of (rule 3: a failed inverse
        still blocks, whatever a person said about an earlier attempt)."""
        if step_id in self.fresh:
            return False
        return step_id in current_resolutions(self.saga.resolutions, self.done)

    async def _compensate(self, p: PlannedStep, prior: CompensationRecord | None) -> StepOutcome:
        assert p.inverse is not None
        counter = [0]
        key = idempotency_key(self.saga.saga_id, p.step_id, "undo")
        in_flight = prior is not None and prior.state == "dispatched"
        if prior is not None and in_flight and prior.data.get("returned"):
            return await self._after_return(p, prior, key)
        resent = False
        paid_at: int | None = None
        try:
            if in_flight:
                if await self._landed_before(p, counter):
                    return await self._succeeded(p, counter, list(p.expected_residue), [], True)
                resent = self._idempotent(p.inverse.tool)
            else:
                await self._check_drift(p, counter)
            # rule 7: the call is paid for before the dispatch record is written, so the record
            # carries it and a take-over after a crash counts the call that was in flight.
            self._take_call(p.inverse.tool, counter)
            paid_at = counter[0]
            await self._record(
                p,
                "dispatched",
                attempts=(prior.attempts if prior else 0),
                detail=f"dispatching {p.inverse.tool}",
                data={"key": key},
                event="compensation.dispatched",
            )
            _, call = await self._call(
                p.inverse.tool,
                p.inverse.args,
                phase="compensate",
                key=key,
                step_id=p.step_id,
                precondition=p.expectation,
                counter=counter,
                prepaid=True,
            )
        except _Stop as stop:
            if paid_at is not None and counter[0] == paid_at:
                self.meter.calls -= 1  # paid for, never made (no resolver, unknown tool)
            if in_flight and stop.state is StepState.OVER_BUDGET:
                # rule 7: no budget left to check or re-send; the step stays continuable (a
                # continuation treats the earlier attempt as still in flight, rule 5).
                stop = _Stop(
                    StepState.OVER_BUDGET,
                    f"{stop.detail}; an earlier attempt of {p.inverse.tool} was sent before a "
                    f"worker stopped and may have taken effect: continuing with a new budget "
                    f"checks it before anything is sent again",
                )
            elif resent and stop.state is not StepState.IN_DOUBT:
                # rule 8: an earlier attempt was sent before a crash; this retry's failure says
                # nothing about whether that attempt took effect.
                stop = _Stop(
                    StepState.IN_DOUBT,
                    f"an earlier attempt of {p.inverse.tool} was sent before a worker stopped, "
                    f"and this retry did not complete ({stop.detail}); whether the earlier "
                    f"attempt took effect is unknown",
                )
            return await self._stopped(
                p, stop.state, stop.detail, attempts=counter[0], in_flight=in_flight
            )
        # what the compensation observed supersedes what the forward call expected
        residue = list(call.recorded_residue) or list(p.expected_residue)
        if call.recorded_follow_ups:
            # rule 5: the inverse has acted; log that (and what it asked for) before the
            # follow-ups run, so a crash among them neither re-sends the inverse nor makes a
            # follow-up twice, and none is forgotten.
            await self._record(
                p,
                "dispatched",
                attempts=counter[0],
                detail=f"{p.inverse.tool} returned; making its follow-up(s)",
                data={
                    "key": key,
                    "returned": True,
                    "residue": [r.to_dict() for r in residue],
                    "follow_ups": [fu.to_dict() for fu in call.recorded_follow_ups],
                },
                event="compensation.dispatched",
            )
        more, missing = await self._follow_ups(p, call.recorded_follow_ups, key)
        return await self._succeeded(p, counter, residue + more, missing, False)

    async def _after_return(
        self, p: PlannedStep, prior: CompensationRecord, key: str
    ) -> StepOutcome:
        """Rule 5: a worker stopped after the inverse returned, while its follow-ups ran. The
        inverse is not sent again; each follow-up is re-sent only to a vendor honouring
        idempotency keys, the others are reported unknown (residue and a manual action)."""
        assert p.inverse is not None
        residue = [Residue.from_dict(r) for r in prior.data.get("residue", ())]
        follow = [FollowUp(f["tool"], dict(f["args"])) for f in prior.data.get("follow_ups", ())]
        more, missing = await self._follow_ups(p, follow, key, recovering=True)
        counter = [prior.attempts]
        return await self._succeeded(p, counter, residue + more, missing, False, returned=True)

    def _idempotent(self, tool: str) -> bool:
        return tool in self.catalog and self.catalog.get(tool).idempotent

    async def _landed_before(self, p: PlannedStep, counter: list[int]) -> bool:
        """Rule 5: the inverse was in flight at a crash. ``True``: it landed (do not send it
        again); ``False``: safe to send (the vendor dedups the key, or the world shows it did
        not land). Raises ``in_doubt`` when the engine cannot tell."""
        inv = p.inverse
        assert inv is not None
        if self._idempotent(inv.tool):
            return await self._resend_safe(p, counter)
        looked: list[str] = []
        try:
            if inv.landed is not None:
                looked.append(f"{inv.landed.probe} does not show it landed")
                if await self._holds(inv.landed, p, counter, "landed"):
                    return True
            if p.expectation is not None:
                looked.append(f"{p.expectation.probe} no longer shows the agent's write")
                if await self._holds(p.expectation, p, counter, "probe"):
                    return False  # the world is as the step left it: the attempt did not land
        except _Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            looked.append(f"a probe failed: {stop.detail}")
        seen = "; ".join(looked) if looked else "no probe can tell whether it landed"
        raise _Stop(
            StepState.IN_DOUBT,
            f"an earlier attempt of {inv.tool} was in flight when a worker stopped, and its "
            f"vendor does not honour idempotency keys, so it was not sent again; whether it "
            f"took effect is unknown ({seen})",
        )

    async def _resend_safe(self, p: PlannedStep, counter: list[int]) -> bool:
        """Rule 5 for a vendor honouring keys: a re-send is deduplicated if the first attempt
        landed, so it is safe unless the attempt did not land and someone changed the world
        since (rule 4: the re-send would overwrite them). With a landed probe the engine can
        tell: the world shows neither the agent's write nor the undo -> ``drifted``, not sent.
        Without one it cannot, and re-sends (``call.precondition`` still goes with it)."""
        inv = p.inverse
        assert inv is not None
        if inv.landed is None or p.expectation is None:
            return False
        try:
            if await self._holds(p.expectation, p, counter, "probe"):
                return False  # as the step left it: the attempt did not land
            if await self._holds(inv.landed, p, counter, "landed"):
                return False  # it landed: the vendor dedups the replay by its key
        except _Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            raise _Stop(
                StepState.DRIFTED,
                f"an earlier attempt of {inv.tool} was in flight when a worker stopped, and the "
                f"world could not be checked ({stop.detail}); not sent again, needs review",
            ) from None
        raise _Stop(
            StepState.DRIFTED,
            f"an earlier attempt of {inv.tool} was in flight when a worker stopped; the world "
            f"shows neither it ({inv.landed.probe} does not show it landed) nor the agent's "
            f"write ({p.expectation.probe}), so someone changed it since; not sent again, "
            f"needs review",
        )

    async def _observe(self, exp: Expectation, p: PlannedStep, kind: str) -> Any:
        """Run the read-only probe of ``exp`` (spends budget); what it returned."""
        if not self._is_probe(exp):
            raise _Stop(
                StepState.DRIFTED,
                f"cannot check the world: probe {exp.probe!r} is "
                f"{'not in the catalog' if exp.probe not in self.catalog else 'not read_only'}; "
                f"not touched",
            )
        observed, _ = await self._call(
            exp.probe,
            exp.args,
            phase="probe",
            key=idempotency_key(self.saga.saga_id, p.step_id, "probe")
            + ("" if kind == "probe" else f":{kind}"),
            step_id=p.step_id,
            counter=[0],
        )
        return observed

    async def _holds(self, exp: Expectation, p: PlannedStep, counter: list[int], kind: str) -> bool:
        """Whether the world shows ``exp``. A probe that errors raises: never a match (rule 4)."""
        observed = await self._observe(exp, p, kind)
        return (await self._with_secrets(exp, p)).holds(observed)

    async def _with_secrets(self, exp: Expectation, p: PlannedStep) -> Expectation:
        """``exp`` with the secrets its expected value held resolved again (rule 11 redacted
        them in the log; compared with the marker, the world would never match)."""
        if not markers_in(exp.equals):
            return exp
        try:
            got = await resolve_call_args(
                self.catalog,
                self.saga,
                exp.probe,
                p.step_id,
                {"equals": exp.equals},
                self.vault,
            )
        except ContractError as exc:
            raise _Stop(
                StepState.DRIFTED,
                f"cannot check the world: its expected value holds a "
                f"secret that could not be resolved ({exc}); not touched",
            ) from None
        return dataclasses.replace(exp, equals=got["equals"])

    async def _check_drift(self, p: PlannedStep, counter: list[int]) -> None:
        """Rule 4: re-observe the expectation before dispatching; never overwrite others' writes."""
        exp = p.expectation
        if exp is None:  # the tool said why no check is needed (the planner reviewed the rest)
            return
        if not self._is_probe(exp):
            await self._observe(exp, p, "probe")  # raises: cannot check, not touched
        try:
            observed = await self._observe(exp, p, "probe")
        except _Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            raise _Stop(
                StepState.DRIFTED,
                f"could not check the world before undoing ({stop.detail}); not touched, "
                f"needs review",
            ) from None
        exp = await self._with_secrets(exp, p)
        value = exp.extract(observed)
        if not same_value(value, exp.equals):  # rule 4: True is not 1, None is not missing
            shown = "nothing" if value is NOTHING else repr(value)
            raise _Stop(
                StepState.DRIFTED,
                f"someone changed it since the agent acted: expected {exp.equals!r}, found "
                f"{shown}; left as it is",
            )

    def _is_probe(self, exp: Expectation) -> bool:
        return (
            exp.probe in self.catalog
            and self.catalog.get(exp.probe).reversibility.value == "read_only"
        )

    async def _follow_ups(
        self, p: PlannedStep, follow_ups: list[FollowUp], key: str, *, recovering: bool = False
    ) -> tuple[list[Residue], list[tuple[FollowUp, str]]]:
        """Rule 7: follow-ups (and theirs, breadth first) each spend budget. One that fails or is
        cut off is returned as missing; it never changes what the inverse achieved.

        ``recovering``: a worker stopped while these ran, so any of them may have been made
        already; only those whose vendor honours idempotency keys are sent again (rule 5)."""
        residue: list[Residue] = []
        missing: list[tuple[FollowUp, str]] = []
        queue = deque((fu, f"{key}:follow_up:{i}") for i, fu in enumerate(follow_ups))
        while queue:
            fu, fkey = queue.popleft()
            if recovering and not self._idempotent(fu.tool):
                missing.append((fu, _UNKNOWN_FOLLOW_UP))
                continue
            try:
                _, fcall = await self._call(
                    fu.tool, fu.args, phase="follow_up", key=fkey, step_id=p.step_id, counter=[1]
                )
            except _Stop as stop:
                missing.append((fu, stop.detail))
                continue
            residue += fcall.recorded_residue
            queue.extend(
                (sub, f"{fkey}:follow_up:{j}") for j, sub in enumerate(fcall.recorded_follow_ups)
            )
        return residue, missing

    async def _succeeded(
        self,
        p: PlannedStep,
        counter: list[int],
        residue: list[Residue],
        missing: list[tuple[FollowUp, str]],
        landed: bool,
        *,
        returned: bool = False,
    ) -> StepOutcome:
        assert p.inverse is not None
        state = StepState.REVERTED if p.action == "revert" else StepState.COMPENSATED
        detail = f"{'reverted' if p.action == 'revert' else 'compensated'} with {p.inverse.tool}"
        if counter[0] > 1:
            detail += f" after {counter[0]} attempts"
        if returned:
            detail += " (it had returned before a worker stopped; not sent again)"
        if landed:
            detail += (
                " (the attempt in flight when a worker stopped had landed, as "
                f"{p.inverse.landed.probe if p.inverse.landed else 'a probe'} shows)"
            )
        if p.inverse.no_drift_check:
            detail += f"; no drift check: {p.inverse.no_drift_check}"
        manual = None
        if missing:  # rule 7: the missing follow-up is residue and a manual action
            residue += [
                Residue(
                    f"follow-up {_did(fu.tool, fu.args)} "
                    f"{'may not have been made' if why == _UNKNOWN_FOLLOW_UP else 'was not made'}"
                    f" ({why})",
                    self._parties(p),
                )
                for fu, why in missing
            ]
            manual = self._manual_follow_ups(p, missing)
            detail += f"; {len(missing)} follow-up(s) missing"
        await self._record(
            p,
            state.value,
            attempts=counter[0],
            detail=detail,
            data={
                "residue": [r.to_dict() for r in residue],
                **({"manual_action": manual.to_dict()} if manual else {}),
            },
            event=f"compensation.{state.value}",
        )
        return self._outcome(
            p,
            state,
            detail,
            attempts=counter[0],
            residue=tuple(residue),
            manual_action=manual,
        )

    async def _stopped(
        self,
        p: PlannedStep,
        state: StepState,
        detail: str,
        *,
        attempts: int = 0,
        in_flight: bool | None = None,
    ) -> StepOutcome:
        """The step's effect still stands: record its state with a manual action, and report
        it. ``in_flight`` (logged when given) says whether a call was in flight at the stop."""
        manual = self._manual(p, state, detail)
        data: dict[str, Any] = {"manual_action": manual.to_dict()}
        if in_flight is not None:
            data["in_flight"] = in_flight
        await self._record(
            p,
            state.value,
            attempts=attempts,
            detail=detail,
            data=data,
            event=f"compensation.{state.value}",
        )
        return self._outcome(p, state, detail, attempts=attempts, manual_action=manual)

    def _from_record(self, p: PlannedStep, rec: CompensationRecord) -> StepOutcome:
        state = StepState(rec.state)
        ma = rec.data.get("manual_action")
        return self._outcome(
            p,
            state,
            rec.detail or state.value,
            attempts=rec.attempts,
            residue=tuple(Residue.from_dict(r) for r in rec.data.get("residue", ())),
            manual_action=ManualAction(
                ma["step_id"], ma["what"], ma["who"], tuple(ma.get("parties", ())), ma.get("draft")
            )
            if ma
            else None,
        )

    # --- manual actions (rule 8: who can act, and a draft naming the parties) ----------------
    def _asker(self) -> str:
        if self.saga.actor:
            return f"the person who asked the agent ({self.saga.actor})"
        return "the person who asked the agent"

    def _parties(self, p: PlannedStep) -> tuple[str, ...]:
        ack = Acknowledgement.from_dict(p.step.acknowledgement) if p.step.acknowledgement else None
        if ack and ack.parties:
            return ack.parties
        found: list[str] = []
        for r in p.step.residue:
            for party in r.get("parties", ()):
                if party not in found:
                    found.append(party)
        return tuple(found)

    def _manual(self, p: PlannedStep, state: StepState, detail: str) -> ManualAction:
        ack = Acknowledgement.from_dict(p.step.acknowledgement) if p.step.acknowledgement else None
        parties = self._parties(p)
        did = _did(p.step.tool, p.step.args)
        if p.step.tool in self.catalog and self.catalog.get(p.step.tool).describe:
            did = repr(self.catalog.describe(p.step.tool, p.step.args))  # issue 17: a sentence
        to = ", ".join(parties) if parties else "team"
        who = self._asker()
        if state is StepState.ACKNOWLEDGED:
            what = (ack.what if ack and ack.what else f"{did} cannot be taken back") + (
                "" if not p.step.violation else f" (contract violation: {p.step.violation})"
            )
            draft = (ack.draft if ack else None) or (
                f"Hello {to}: an assistant acting for us did {did} ({self.saga.title!r}), "
                f"which cannot be undone automatically. Please tell us if it affects you, and "
                f"we will put it right by hand."
            )
            return ManualAction(p.step_id, what, ack.who if ack else who, parties, draft)
        if state is StepState.DRIFTED:
            what = f"Review {did}: {detail}. Decide whether to undo it by hand."
            draft = (
                f"Hello {to}: {did}, done by an assistant acting for us, was not undone "
                f"automatically because it needs review ({detail}). Please check it and tell us "
                f"whether it should be reverted."
            )
        elif state is StepState.IN_DOUBT:
            what = f"Check whether {did} took effect, and undo it by hand if it did: {detail}"
            draft = (
                f"Hello {to}: we cannot tell whether {did}, asked by an assistant acting for us, "
                f"went through. Please check on your side and, if it did, reverse it."
            )
        elif state is StepState.OVER_BUDGET:
            what = (
                f"Undo {did}, which was not attempted ({detail}): continue with a larger "
                f"budget: amends undo {self.saga.saga_id} --continue --budget-calls N "
                f"--budget-seconds S, or undo it by hand"
            )
            who = f"{who}, or whoever runs amends for this saga"
            draft = (
                f"Hello {to}: {did}, done by an assistant acting for us, has not been undone "
                f"yet. We will undo it shortly; no action is needed from you unless it "
                f"caused a problem."
            )
        else:  # failed, blocked
            reason = "its inverse failed" if state is StepState.FAILED else "it was not attempted"
            what = f"Undo {did} by hand: {reason} ({detail})"
            draft = (
                f"Hello {to}: {did}, done by an assistant acting for us, could not be undone "
                f"automatically. Please undo it on your side or tell us how to proceed."
            )
        return ManualAction(p.step_id, what, who, parties, draft)

    def _manual_follow_ups(
        self, p: PlannedStep, missing: list[tuple[FollowUp, str]]
    ) -> ManualAction:
        parties = self._parties(p)
        to = ", ".join(parties) if parties else "team"
        calls = "; ".join(f"{_did(fu.tool, fu.args)} ({why})" for fu, why in missing)
        return ManualAction(
            p.step_id,
            f"The undo of {p.step.tool} succeeded, but follow-up(s) it asked for were not made: "
            f"{calls}. Make them by hand."
            if all(why != _UNKNOWN_FOLLOW_UP for _, why in missing)
            else f"The undo of {p.step.tool} succeeded, but follow-up(s) it asked for may not "
            f"have been made: {calls}. Check each one and make it by hand if it is missing.",
            self._asker(),
            parties,
            f"Hello {to}: we undid {_did(p.step.tool, p.step.args)}, but could not complete "
            f"every follow-up step automatically; we are finishing it by hand.",
        )

    async def _settle(self, p: PlannedStep) -> StepOutcome:
        while True:
            try:
                return await self._step(p)
            except CallLost:
                if self.reread is None:
                    raise
                # rule 5: as if this engine had crashed with the call in flight
                self.done = await self.reread()

    async def run(self) -> list[StepOutcome]:
        loop = asyncio.get_running_loop()
        self.futures = {p.step_id: loop.create_future() for p in self.plan.steps}

        async def one(p: PlannedStep) -> None:
            fut = self.futures[p.step_id]
            try:
                outcome = await self._settle(p)
            except BaseException as exc:
                fut.set_exception(exc)
                raise
            fut.set_result(outcome)
            if self.on_progress is not None:
                self.on_progress(outcome)

        tasks = [asyncio.create_task(one(p)) for p in self.plan.steps]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for f in self.futures.values():
                if f.done() and not f.cancelled():
                    f.exception()  # mark retrieved
            raise
        return [self.futures[p.step_id].result() for p in self.plan.steps]


def _did(tool: str, args: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
    return f"{tool}({shown})"


async def run_plan(
    *,
    catalog: Catalog,
    log: SagaLog,
    saga: SagaRecord,
    reversal: ReversalRecord,
    plan: Plan,
    retry: RetryPolicy,
    clock: Callable[[], float] = time.time,
    meter: BudgetMeter,
    on_progress: Callable[[StepOutcome], None] | None = None,
    reload: Callable[[], Awaitable[SagaRecord]] | None = None,
    replan: Callable[[SagaRecord], Plan] | None = None,
    poll_interval: float = 0.02,
    fresh: bool = False,
    done: Mapping[str, CompensationRecord] | None = None,
    bounded: bool = True,
    reread: Callable[[], Awaitable[Mapping[str, CompensationRecord]]] | None = None,
) -> list[StepOutcome]:
    """Run ``plan`` as the given reversal (generation-fenced); returns per-step outcomes.

    ``reload`` and ``replan`` let the runner wait for a step still in flight (rule 7).
    ``fresh``: the reversal was created by this worker's claim just now, so it has no
    compensation records yet and none are read (issue 12). ``done``: the records, when the
    caller has them (a Temporal workflow reads the log through activities only). ``bounded``:
    see :class:`_Runner`; ``reread``: see :class:`CallLost`.
    """
    if done is None:
        done = {} if fresh else await log.get_compensations(reversal.reversal_id)
    runner = _Runner(
        catalog=catalog,
        log=log,
        saga=saga,
        reversal=reversal,
        plan=plan,
        done=done,
        meter=meter,
        retry=retry,
        clock=clock,
        on_progress=on_progress,
        reload=reload,
        replan=replan,
        poll_interval=poll_interval,
        bounded=bounded,
        reread=reread,
    )
    return await runner.run()
