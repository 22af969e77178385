"""Runs a compensation plan: drift checks, idempotency keys, retries, budget, parallel branches.

Every compensation is logged ``dispatched`` before its inverse is called and with its final state
after; a compensation logged in a final state is never dispatched again (rule 5). Every write is
fenced by the reversal's lease generation, so a worker that lost its lease stops at its next write.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from .budget import BudgetMeter
from .calls import RetryPolicy, idempotency_key, invoke
from .contracts import NOTHING, Acknowledgement, Call, Catalog, Expectation, ManualAction, Residue
from .errors import LeaseLostError, PermanentError, PreconditionFailed, TransientError
from .log.base import CompensationRecord, ReversalRecord, SagaLog, SagaRecord
from .planner import Plan, PlannedStep
from .report import NEUTRALISED, StepOutcome, StepState

__all__ = ["run_plan"]

_FINAL = frozenset(s.value for s in StepState)


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
        self.on_progress = on_progress

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
        await self.log.record_compensation(
            self.reversal.reversal_id,
            self.reversal.generation,
            p.step_id,
            state=state,
            attempts=attempts,
            detail=detail,
            data=data,
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
    ) -> tuple[Any, Call]:
        spec = self.catalog.get(tool)
        attempt = 0
        while True:
            attempt += 1
            why = self.meter.take_call()
            if why is not None:
                raise _Stop(
                    StepState.OVER_BUDGET if counter[0] == 0 else StepState.FAILED,
                    f"{why} before {tool} could {'run' if counter[0] == 0 else 'succeed'}"
                    + (f" (gave up after {counter[0]} attempt(s))" if counter[0] else ""),
                )
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
            timeout = spec.timeout
            remaining = self.meter.remaining_seconds()
            timeout = remaining if timeout is None else min(timeout, remaining)
            try:
                result = await invoke(spec.fn, call, args, max(timeout, 0.001))
            except TimeoutError:
                self.meter.tokens += call.tokens
                raise _Stop(
                    StepState.IN_DOUBT,
                    f"{tool} did not answer within {timeout:.2f}s; whether it took effect "
                    f"is unknown",
                ) from None
            except TransientError as exc:
                self.meter.tokens += call.tokens
                wait = self.retry.next_wait(attempt, exc.retry_after, self.rng)
                if wait is None:
                    raise _Stop(
                        StepState.FAILED,
                        f"{tool} kept failing transiently after {attempt} attempts: {exc}",
                    ) from exc
                if wait >= self.meter.remaining_seconds():
                    raise _Stop(
                        StepState.FAILED,
                        f"{tool} failed transiently ({exc}) and the "
                        f"time budget leaves no room to retry",
                    ) from exc
                await asyncio.sleep(wait)
                continue
            except PreconditionFailed as exc:
                self.meter.tokens += call.tokens
                raise _Stop(
                    StepState.DRIFTED,
                    f"the vendor refused the write because the "
                    f"world changed since the agent acted: {exc}",
                ) from exc
            except PermanentError as exc:
                self.meter.tokens += call.tokens
                raise _Stop(StepState.FAILED, f"{tool} failed permanently: {exc}") from exc
            except LeaseLostError:
                raise
            except Exception as exc:  # any other exception counts as permanent (DESIGN.md)
                self.meter.tokens += call.tokens
                raise _Stop(StepState.FAILED, f"{tool} raised {type(exc).__name__}: {exc}") from exc
            self.meter.tokens += call.tokens
            return result, call

    # --- one step -------------------------------------------------------------------------
    async def _step(self, p: PlannedStep) -> StepOutcome:
        def base(state: StepState, detail: str, **more: Any) -> StepOutcome:
            return StepOutcome(
                step_id=p.step_id,
                tool=p.step.tool,
                verb=p.verb,
                state=state,
                detail=detail,
                reversibility=p.reversibility.value,
                violation=p.step.violation,
                **more,
            )

        if p.action == "cancel":
            return base(StepState.CANCELLED, p.reason)
        if p.action == "skip":
            return base(StepState.NOT_NEEDED, p.reason)
        if p.action == "acknowledge":
            return base(
                StepState.ACKNOWLEDGED,
                p.reason,
                manual_action=self._manual(p, StepState.ACKNOWLEDGED, p.reason),
            )
        if p.action in ("in_doubt", "wait"):
            detail = (
                p.reason
                if p.action == "in_doubt"
                else "still running in another process when undo finished; whether it took effect "
                "is unknown"
            )
            return base(
                StepState.IN_DOUBT,
                detail,
                manual_action=self._manual(p, StepState.IN_DOUBT, detail),
            )
        prior = self.done.get(p.step_id)
        if prior is not None and prior.state in _FINAL:
            # rule 5: logged done is never dispatched again, even after a crash.
            return self._from_record(p, prior)
        for dep in p.waits_for:  # rule 3: dependents' inverses first
            outcome = await self.futures[dep]
            if outcome.state not in NEUTRALISED:
                detail = (
                    f"not attempted: it must wait for {dep} ({outcome.tool}) to be undone "
                    f"first, and that step is {outcome.state.value}"
                )
                await self._record(
                    p,
                    StepState.BLOCKED.value,
                    attempts=0,
                    detail=detail,
                    data={},
                    event="compensation.blocked",
                )
                return base(
                    StepState.BLOCKED,
                    detail,
                    manual_action=self._manual(p, StepState.BLOCKED, detail),
                )
        assert p.inverse is not None
        counter = [0]
        redispatch = prior is not None and prior.state == "dispatched"
        try:
            if p.expectation is not None and not redispatch:
                await self._check_drift(p, counter)
            key = idempotency_key(self.saga.saga_id, p.step_id, "undo")
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
            )
            # what the compensation observed supersedes what the forward call expected
            residue = list(call.recorded_residue) or list(p.expected_residue)
            for i, fu in enumerate(call.recorded_follow_ups):  # rule 7: follow-ups spend budget
                _, fcall = await self._call(
                    fu.tool,
                    fu.args,
                    phase="follow_up",
                    key=f"{key}:follow_up:{i}",
                    step_id=p.step_id,
                    counter=[1],
                )
                residue += fcall.recorded_residue
        except _Stop as stop:
            if redispatch and stop.state is not StepState.IN_DOUBT:
                # rule 8: an earlier attempt was sent before a crash; this retry's failure says
                # nothing about whether that attempt took effect.
                stop = _Stop(
                    StepState.IN_DOUBT,
                    f"an earlier attempt of {p.inverse.tool} was sent before a worker stopped, "
                    f"and this retry did not complete ({stop.detail}); whether the earlier "
                    f"attempt took effect is unknown",
                )
            manual = self._manual(p, stop.state, stop.detail)
            await self._record(
                p,
                stop.state.value,
                attempts=counter[0],
                detail=stop.detail,
                data={"manual_action": manual.to_dict()},
                event=f"compensation.{stop.state.value}",
            )
            return base(
                stop.state,
                stop.detail,
                attempts=counter[0],
                manual_action=manual,
            )
        state = StepState.REVERTED if p.action == "revert" else StepState.COMPENSATED
        detail = (
            f"{'reverted' if p.action == 'revert' else 'compensated'} with "
            f"{p.inverse.tool}" + (f" after {counter[0]} attempts" if counter[0] > 1 else "")
        )
        await self._record(
            p,
            state.value,
            attempts=counter[0],
            detail=detail,
            data={"residue": [r.to_dict() for r in residue]},
            event=f"compensation.{state.value}",
        )
        return base(state, detail, attempts=counter[0], residue=tuple(residue))

    async def _check_drift(self, p: PlannedStep, counter: list[int]) -> None:
        """Rule 4: re-observe the expectation before dispatching; never overwrite others' writes."""
        exp = p.expectation
        assert exp is not None
        spec = self.catalog.get(exp.probe) if exp.probe in self.catalog else None
        if spec is None or spec.reversibility.value != "read_only":
            raise _Stop(
                StepState.DRIFTED,
                f"cannot check the world: probe {exp.probe!r} is "
                f"{'not in the catalog' if spec is None else 'not read_only'}; "
                f"not touched",
            )
        try:
            observed, _ = await self._call(
                exp.probe,
                exp.args,
                phase="probe",
                key=idempotency_key(self.saga.saga_id, p.step_id, "probe"),
                step_id=p.step_id,
                counter=[0],
            )
        except _Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            raise _Stop(
                StepState.DRIFTED,
                f"could not check the world before undoing "
                f"({stop.detail}); not touched, needs review",
            ) from None
        value = exp.extract(observed)
        if value != exp.equals:
            shown = "nothing" if value is NOTHING else repr(value)
            raise _Stop(
                StepState.DRIFTED,
                f"someone changed it since the agent acted: expected "
                f"{exp.equals!r}, found {shown}; left as it is",
            )

    def _from_record(self, p: PlannedStep, rec: CompensationRecord) -> StepOutcome:
        state = StepState(rec.state)
        ma = rec.data.get("manual_action")
        return StepOutcome(
            step_id=p.step_id,
            tool=p.step.tool,
            verb=p.verb,
            state=state,
            detail=rec.detail or state.value,
            reversibility=p.reversibility.value,
            attempts=rec.attempts,
            residue=tuple(Residue.from_dict(r) for r in rec.data.get("residue", ())),
            manual_action=ManualAction(
                ma["step_id"], ma["what"], ma["who"], tuple(ma.get("parties", ())), ma.get("draft")
            )
            if ma
            else None,
            violation=p.step.violation,
        )

    def _manual(self, p: PlannedStep, state: StepState, detail: str) -> ManualAction:
        ack = Acknowledgement.from_dict(p.step.acknowledgement) if p.step.acknowledgement else None
        asker = (
            f"the person who asked the agent ({self.saga.actor})"
            if self.saga.actor
            else "the person who asked the agent"
        )
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(p.step.args.items()))
        did = f"{p.step.tool}({args})"
        if state is StepState.ACKNOWLEDGED:
            what = (ack.what if ack and ack.what else f"{did} cannot be taken back") + (
                "" if not p.step.violation else f" (contract violation: {p.step.violation})"
            )
            return ManualAction(
                p.step_id,
                what,
                ack.who if ack else asker,
                ack.parties if ack else (),
                ack.draft if ack else None,
            )
        parties = ack.parties if ack else ()
        if state is StepState.DRIFTED:
            what = f"Review {did}: {detail}. Decide whether to undo it by hand."
        elif state is StepState.IN_DOUBT:
            what = f"Check whether {did} took effect, and undo it by hand if it did: {detail}"
        elif state is StepState.BLOCKED:
            what = f"Undo {did} by hand once the step it waits for is resolved: {detail}"
        elif state is StepState.OVER_BUDGET:
            what = f"Undo {did} by hand or run undo again with a larger budget: {detail}"
        else:
            what = f"Undo {did} by hand: its inverse failed ({detail})"
        return ManualAction(p.step_id, what, asker, parties, ack.draft if ack else None)

    async def run(self) -> list[StepOutcome]:
        loop = asyncio.get_running_loop()
        self.futures = {p.step_id: loop.create_future() for p in self.plan.steps}

        async def one(p: PlannedStep) -> None:
            fut = self.futures[p.step_id]
            try:
                outcome = await self._step(p)
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
) -> list[StepOutcome]:
    """Run ``plan`` as the given reversal (generation-fenced); returns per-step outcomes."""
    done = await log.get_compensations(reversal.reversal_id)
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
    )
    return await runner.run()
