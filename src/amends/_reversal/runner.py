"""Runs a compensation plan: every step in undo order, independent branches in parallel.

Per step, the one decision undo makes (rule 10: the preview runs this same code with simulated
edges): the plan's verdict for steps without an inverse, a step logged done is never run again
(rule 5), the gate (rule 3: the inverses it waits for must have succeeded), the undo window, and
then the compensation (:mod:`.compensate`). Every write is fenced by the reversal's lease
generation, so a worker that lost its lease stops at its next write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from .._budget import BudgetMeter
from .._calls import RetryPolicy
from .._describe import left_out, named
from .._fields import replaced
from .._log.base import CompensationRecord, ReversalRecord, SagaRecord, StepRecord
from .._native import python_class
from .._planner import Plan, PlannedStep, PreviewStep, ToolDirectory
from .._report import NEUTRALISED, StepOutcome, StepState, current_resolutions
from .._resolution import rechecks
from .._secrets import vault_for
from .compensate import Compensator
from .dispatch import Caller, CallLost, Unchecked
from .inline import cancelled, lead
from .ports import InFlightWait, ReversalPorts
from .record import Recorder

__all__ = ["RunInput", "described", "run_plan", "sentences", "undo_order"]

_Described = TypeVar("_Described", StepOutcome, PreviewStep)


def described(catalog: ToolDirectory, step: StepRecord | None, item: _Described) -> _Described:
    """Issue 17: ``item`` (a step's outcome or preview) with the step and its inverse in plain
    language, from the catalog's ``describe=`` templates and the logged (redacted, rule 11)
    arguments. The one describer of the engine, the preview and a Temporal worker."""
    if step is None:
        return item
    text, inverse_text = sentences(catalog, step)
    # issue 29: one undo describes every step; the copy without replace()'s per-field checks
    return replaced(item, description=text, inverse_description=inverse_text)


_LEFT_OUT: dict[tuple[int, str, tuple[str, ...]], tuple[ToolDirectory, tuple[str, ...]]] = {}
"""Per catalog, inverse tool and argument names: the names its ``describe=`` leaves out (issue
29: found once, not per compensation)."""


def _left_out_names(
    catalog: ToolDirectory, tool: str, args: Mapping[str, object]
) -> tuple[str, ...]:
    names: tuple[str, ...] = ()
    if tool in catalog:
        template = catalog.get(tool).describe
        if template:
            names = tuple(n for n in args if n not in named(template))
    with _SENTENCES_LOCK:
        _LEFT_OUT[(id(catalog), tool, tuple(args))] = (catalog, names)
        if len(_LEFT_OUT) > 1024:
            del _LEFT_OUT[next(iter(_LEFT_OUT))]
    return names


def sentences(catalog: ToolDirectory, step: StepRecord | None) -> tuple[str, str]:
    """The step's and its inverse's sentences as :func:`described` gives them (``""`` each for
    no step, and for the inverse of a step without one)."""
    if step is None:
        return "", ""
    key = (id(catalog), id(step))
    seen = _SENTENCES.get(key)
    if seen is not None and seen[0] is catalog and seen[1] is step:
        return seen[2], seen[3]
    inv = step.inverse
    text = catalog.describe(step.tool, step.args)
    inverse_text = ""
    if inv:
        tool, args = inv["tool"], inv.get("args", {})
        inverse_text = catalog.describe(tool, args)
        # rule 12: the person is shown every argument undo sends, also those the inverse's
        # sentence leaves out ("Refund 12500 cents" hid which charge)
        found = _LEFT_OUT.get((id(catalog), tool, tuple(args)))
        unsaid = found[1] if found is not None and found[0] is catalog else None
        if unsaid is None:
            unsaid = _left_out_names(catalog, tool, args)
        if unsaid:
            inverse_text += f"; it also sends {left_out(catalog.get(tool), args, unsaid)}"
    with _SENTENCES_LOCK:
        _SENTENCES[key] = (catalog, step, text, inverse_text)
        if len(_SENTENCES) > 1024:
            del _SENTENCES[next(iter(_SENTENCES))]
    return text, inverse_text


_SENTENCES: dict[tuple[int, int], tuple[ToolDirectory, StepRecord, str, str]] = {}
"""Issue 29: the sentences of a step as one catalog describes it, by the identity of both (the
step a preview and then its undo describe is one object: the log's read cache shares it; both
are immutable). Held objects keep their ids from being reused while they are here."""
_SENTENCES_LOCK = threading.Lock()  # engines may run on several threads' event loops


_FINAL = frozenset(s.value for s in StepState)
_RETRY = frozenset({StepState.OVER_BUDGET.value, StepState.BLOCKED.value})
"""Recorded states that were never dispatched: a continuation attempts them (rule 6)."""


@dataclass(frozen=True)
class RunInput:
    """One run of a reversal (its first run, a take-over, or a continuation): issue 22."""

    ports: ReversalPorts
    """The run's edges: log, catalog, clock, dispatcher, progress."""
    saga: SagaRecord
    """The saga as the claim read it."""
    reversal: ReversalRecord
    """The reversal this run belongs to (its generation fences every write)."""
    plan: Plan
    """What to do to each step (the planner's)."""
    meter: BudgetMeter
    """What the run may still spend, and has spent."""
    retry: RetryPolicy
    """How transient refusals are retried within the budget."""
    done: Mapping[str, CompensationRecord] | None = None
    """The reversal's compensation records when the caller has them; ``None``: read them."""
    fresh: bool = False
    """The reversal was created by this worker's claim just now: it has no records yet."""
    waiting: InFlightWait | None = None
    """How to wait for steps still in flight; ``None``: do not wait (rule 7)."""
    continue_hint: str | None = None
    """How a person continues this reversal if it stops short (``Engine(continue_hint=)``)."""
    lost: Mapping[str, str] = field(default_factory=dict)
    """Per step whose call was in flight when this run began, what lost it, when the caller
    knows better than "a worker stopped" (a Temporal workflow asks its workers; rule 8)."""


def undo_order(plan: Plan) -> list[PlannedStep]:
    """The plan's steps in undo order: a step after every step it waits for, steps that wait
    for none in the plan's order (rule 3). ``waits_for`` is transitive, so a step waits for
    more steps than any step it waits for."""
    steps = plan.steps
    if not any(p.waits_for for p in steps):  # issue 29: the plan's order, nothing to sort
        return list(steps)
    at = {p.step_id: i for i, p in enumerate(steps)}
    return sorted(steps, key=lambda p: (len(p.waits_for), at[p.step_id]))


def _waiters(order: list[PlannedStep]) -> dict[str, list[str]]:
    """Per step, the steps that wait for it, last in undo order first."""
    out: dict[str, list[str]] = {}
    for p in reversed(order):
        for dep in p.waits_for:
            out.setdefault(dep, []).append(p.step_id)
    return out


async def run_plan(inp: RunInput) -> list[StepOutcome]:
    """Run ``inp.plan`` as ``inp.reversal`` (generation-fenced); returns per-step outcomes."""
    done = inp.done
    if done is None:
        done = {} if inp.fresh else await inp.ports.log.get_compensations(inp.reversal.reversal_id)
    return await _Runner(inp, done).run()


@python_class
class _Runner:
    def __init__(self, inp: RunInput, done: Mapping[str, CompensationRecord]) -> None:
        self.inp = inp
        self.saga = inp.saga
        self.done = done
        rev = inp.reversal
        rng = random.Random(f"{rev.reversal_id}:{rev.generation}")
        self.vault = vault_for(self)
        """Rule 11: secrets resolved for this reversal, scrubbed from what it logs and reports
        (kept here: no weak-dict lookup per record, issue 12)."""
        self.order = undo_order(inp.plan)
        self.caller = Caller(
            inp.ports, inp.saga, inp.meter, inp.retry, rng, self.vault, _waiters(self.order)
        )
        self.recorder = Recorder(inp.ports, inp.saga, rev, inp.meter, self.vault, inp.continue_hint)
        self.compensator = Compensator(self.caller, self.recorder)
        self.compensator.lost.update(inp.lost)
        self.futures: dict[str, asyncio.Future[StepOutcome]] = {}
        self._ended: asyncio.Future[None] | None = None
        """An inline run's end: set when its last step settles, or with its first error."""
        self._left = 0
        """Steps of an inline run not settled yet."""
        self.absent: set[str] = set()
        """Inverse tools this catalog lacks (``allow_missing_tools``): their steps call nothing,
        so no budget is set aside for them or for the steps waiting on them (rules 7, 8)."""

    async def run(self) -> list[StepOutcome]:
        loop = asyncio.get_running_loop()
        steps = self.inp.plan.steps
        self.futures = {p.step_id: loop.create_future() for p in steps}
        meter = self.inp.meter
        stuck: dict[str, bool] = {}  # per step waited for: _cannot_clear, asked once
        tools = {p.inverse.tool for p in steps if p.inverse is not None}  # asked once per tool
        self.absent = {t for t in tools if t not in self.caller.catalog}  # allow_missing_tools
        for p in self.order:  # rule 10: who the budget covers, decided once
            meter.reserve(p.step_id, self._need(p, stuck))
        if self.inp.ports.run_inline:
            await self._inline(loop)
            return [self.futures[p.step_id].result() for p in steps]
        tasks = [asyncio.create_task(self._one(p)) for p in steps]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            await cancelled(tasks, self.futures)
            raise
        return [self.futures[p.step_id].result() for p in steps]

    async def _one(self, p: PlannedStep) -> None:
        """Settle ``p``: its outcome (or error) on its future, its reservation given back, the
        progress hook; in an inline run, the run's end when it was the last (or failed)."""
        fut, ended = self.futures[p.step_id], self._ended
        try:
            try:
                outcome = await self.inp.ports.watch_step(p, self._settle(p))
            except BaseException as exc:
                fut.set_exception(exc)
                raise
            finally:
                self.inp.meter.release(p.step_id)
            fut.set_result(outcome)
            progress = self.inp.ports.progress
            if progress is not None:
                progress(outcome)  # a hook that raises fails the run, as with gather
        except BaseException as exc:
            if ended is not None and not ended.done():
                ended.set_exception(exc)  # the run's first error stops it, as gather's does
            raise
        if ended is not None:
            self._left -= 1
            if not self._left and not ended.done():
                ended.set_result(None)

    async def _inline(self, loop: asyncio.AbstractEventLoop) -> None:
        """Issue 29: the steps without a task each, as long as none waits for anything but
        another step (:func:`.inline.lead`); the run ends when its last step settles, or with
        its first error (the other steps cancelled, as with ``gather``)."""
        steps = self.inp.plan.steps
        self._left = len(steps)
        if not self._left:
            return
        self._ended = ended = loop.create_future()
        tasks: list[asyncio.Task[None]] = []
        tasks.append(loop.create_task(lead(steps, self._one, self.futures, ended, tasks)))
        try:
            await ended
        except BaseException:
            await cancelled(tasks, self.futures)
            raise

    def _prior(self, p: PlannedStep) -> CompensationRecord | None:
        """The step's record as this run takes it up (rule 6): a continuation attempts what was
        not attempted (over budget) or may now be unblocked, unless a person resolved it (they
        may have done by hand what its inverse does, in a way no probe sees: attempted again
        only once the resolution is withdrawn); an attempt that was in flight before stays in
        flight (rule 5)."""
        prior = self.done.get(p.step_id)
        if prior is None:
            return None
        if prior.state == "in_doubt" and rechecks(prior) and not self._resolved(p.step_id):
            return dataclasses.replace(prior, state="dispatched")  # cut off in flight: look
        if prior.state in _RETRY:
            if self._resolved(p.step_id):  # a person handled it: theirs while that stands
                return prior
            return (
                dataclasses.replace(prior, state="dispatched")
                if prior.data.get("in_flight")
                else None
            )
        return prior

    def _need(self, p: PlannedStep, stuck: dict[str, bool]) -> int:
        """The calls ``p``'s check and first attempt need (rule 7; none when it will not call:
        no inverse, logged done, or waiting for a step that cannot end undone). ``stuck``
        keeps :meth:`_cannot_clear`'s answer per step across the run's steps (issue 29: a
        step many others wait for was asked about once per waiter)."""
        if p.action not in ("revert", "compensate") or p.inverse is None:
            return 0
        if p.inverse.tool in self.absent:
            return 0  # allow_missing_tools: not attempted, nothing called (rules 7, 8)
        prior = self._prior(p)
        if prior is not None and (prior.state in _FINAL or prior.data.get("returned")):
            return 0
        for d in p.waits_for:
            cannot = stuck.get(d)
            if cannot is None:
                cannot = stuck[d] = self._cannot_clear(d)
            if cannot:
                return 0
        if prior is not None:  # in flight at a crash: what tells whether it landed, a re-send
            return 1 + (p.inverse.landed is not None) + (p.expectation is not None)
        return 1 + (p.expectation is not None)

    def _cannot_clear(self, dep: str) -> bool:
        """Whether ``dep`` (a step this one waits for) is sure to end not undone and
        unresolved, so this one will be blocked."""
        rec = self.done.get(dep)
        if rec is not None and rec.state in _FINAL and rec.state not in _RETRY:
            if rechecks(rec) and not self._resolved(dep):
                return False  # looked at again first: it may end undone
            return StepState(rec.state) not in NEUTRALISED and not self._resolved(dep)
        q = self.inp.plan[dep]
        if q.inverse is not None and q.inverse.tool in self.absent:
            return q.action in ("revert", "compensate") and not self._resolved(dep)  # not sent
        return q.action in ("review", "in_doubt") and not self._resolved(dep)

    async def _settle(self, p: PlannedStep) -> StepOutcome:
        while True:
            try:  # issue 29: the step's decision inline (no coroutine of its own per step)
                q = await self._await_in_flight(p) if p.action == "wait" else p
                quick = self._without_inverse(q)
                if quick is not None:
                    return quick
                prior = self._prior(q)
                if prior is not None and prior.state in _FINAL:
                    # rule 5: logged done is never dispatched again, even after a crash.
                    return self.recorder.from_record(q, prior)
                # issue 29: no coroutine for a gate with nothing to wait for, nor a window that
                # never closes (most steps)
                if q.waits_for:
                    blocked = await self._gate(q)
                    if blocked is not None:
                        return blocked
                inv = q.inverse
                if inv is not None and inv.deadline is not None:
                    closed = await self._window_closed(q, prior)
                    if closed is not None:
                        return closed
                return await self.compensator.run(q, prior)
            except Unchecked as why:  # a preview cannot tell whether an attempt landed
                detail = f"checked at undo time: {why}, which a preview never resolves (rule 11)"
                return self.recorder.standing(p, StepState.IN_DOUBT, detail)
            except CallLost as lost:
                # rule 5: as if this engine had crashed with the call in flight; rule 8: with
                # what lost it
                self.compensator.lost[p.step_id] = lost.cause
                self.done = await self.inp.ports.log.get_compensations(
                    self.inp.reversal.reversal_id
                )

    def _without_inverse(self, p: PlannedStep) -> StepOutcome | None:
        """Steps undo does not call an inverse for: their outcome follows from the plan."""
        rec = self.recorder
        if p.action == "cancel":
            return rec.outcome(p, StepState.CANCELLED, p.reason)
        if p.action == "skip":
            return rec.outcome(p, StepState.NOT_NEEDED, p.reason)
        if p.action == "acknowledge":
            return rec.standing(p, StepState.ACKNOWLEDGED, p.reason)
        if p.action == "review":  # rule 4: never reverted blindly
            return rec.standing(p, StepState.DRIFTED, p.reason)
        if p.action in ("in_doubt", "wait"):
            detail = (
                p.reason
                if p.action == "in_doubt"
                else "still running in another process when undo finished; whether it took "
                "effect is unknown"
            )
            return rec.standing(p, StepState.IN_DOUBT, detail)
        return None

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
            return await self.recorder.stopped(p, StepState.BLOCKED, detail)
        return None

    def _resolved(self, step_id: str) -> bool:
        """A person resolved the outcome ``step_id`` has now: a step recorded again in this run
        got its outcome after every resolution the run knows of (rule 3: a failed inverse
        still blocks, whatever a person said about an earlier attempt)."""
        if step_id in self.recorder.fresh:
            return False
        return step_id in current_resolutions(self.saga.resolutions, self.done)

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
        if not inv.deadline_passed(self.inp.ports.clock()):
            return None
        detail = (
            f"the undo window of {inv.tool} closed at {inv.deadline} while this step waited for "
            f"others to be undone first; it can no longer be taken back by a call"
        )
        return await self.recorder.stopped(p, StepState.ACKNOWLEDGED, detail)

    async def _await_in_flight(self, p: PlannedStep) -> PlannedStep:
        """Rule 7: wait for a step still in flight (here or in another process) within the
        seconds budget, while independent steps proceed; then plan it as it ended."""
        waiting, meter = self.inp.waiting, self.inp.meter
        if waiting is None:
            return p
        while True:
            saga = await waiting.reload()
            rec = next((s for s in saga.steps if s.step_id == p.step_id), None)
            if rec is not None and rec.state != "intent":
                fresh = waiting.replan(saga)[p.step_id]
                waits = tuple(d for d in fresh.waits_for if d in self.futures and d != p.step_id)
                return dataclasses.replace(fresh, waits_for=waits)
            why = None
            if saga.lease_until is None or saga.lease_until <= time.time():
                why = "the process running it stopped before it logged a result"
            elif meter.remaining_seconds() <= 0:
                why = (
                    f"it was still running when the time budget of "
                    f"{meter.budget.seconds:g} s ran out; once it has finished, continuing the "
                    f"reversal undoes it"
                )
            if why is not None:
                return dataclasses.replace(
                    p,
                    action="in_doubt",
                    verb="Acknowledge",
                    reason=f"the call's outcome is unknown ({why}); check whether it happened",
                )
            await asyncio.sleep(min(waiting.poll_interval, max(meter.remaining_seconds(), 0)))
