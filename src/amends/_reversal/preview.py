"""The preview: the reversal's own run, simulated (rule 10: the preview is the undo's own
evaluation).

:func:`simulate` runs the plan through the same runner an undo uses — the same per-step decision
(drift check, gate, undo window, budget), in the same undo order — with three edges swapped: the
log writes nothing, the dispatcher sends nothing but read-only probes (an inverse or follow-up is
"sent" only in the simulation, and succeeds there), and no secret is ever resolved (a probe that
needs one is predicted "checked at undo time", rule 11). A value a later step of the same saga
wrote is what that step's simulated inverse will put back: its earlier step is predicted with its
normal verb, not as drift.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._budget import Budget, BudgetMeter
from .._calls import RetryPolicy, invoke
from .._contracts import Call, Expectation, ToolSpec, same_value
from .._fields import field_values
from .._log.base import CompensationRecord, CompensationWrite, ReversalRecord, SagaRecord
from .._planner import VERBS, Plan, PlannedStep, Preview, PreviewStep, ToolDirectory
from .._report import NEUTRALISED, StepOutcome, StepState, current_resolutions, verb_for
from .._resolution import rechecks
from .._secrets import Redaction, SecretRequest, marker
from .dispatch import Unchecked
from .ports import BaseDispatcher, ReversalPorts
from .runner import RunInput, run_plan

__all__ = ["PROBE_SECONDS", "PreviewInput", "simulate"]

PROBE_SECONDS = 10.0
"""How long one preview probe may take when its tool declares no timeout."""


@dataclass(frozen=True)
class PreviewInput:
    """What a preview simulates: the saga's plan, as its next run would take it up."""

    catalog: ToolDirectory
    saga: SagaRecord
    plan: Plan
    budget: Budget
    retry: RetryPolicy
    done: Mapping[str, CompensationRecord]
    """The records of the saga's reversal so far (a continuation takes them up; none: a first
    undo)."""


async def simulate(inp: PreviewInput) -> Preview:
    """What undo would do now, predicted by running it with simulated edges."""
    sim = _Simulation(inp.catalog, inp.plan)
    rev = inp.saga.reversal or ReversalRecord(
        "preview", inp.saga.saga_id, "running", inp.budget.to_dict(), None, 0, None,
        time.time(), None, 0, 0, None,
    )  # fmt: skip
    meter = BudgetMeter(inp.budget)
    ports = ReversalPorts(
        _NoLog(inp.done), _SecretFree(inp.catalog), time.time, sim, model=sim, run_inline=True
    )
    outcomes = await run_plan(RunInput(ports, inp.saga, rev, inp.plan, meter, inp.retry, inp.done))
    again = {  # cut off in flight for want of budget: looked at again, as undo will (rule 6)
        k for k, c in inp.done.items() if rechecks(c)
    } - set(current_resolutions(inp.saga.resolutions, inp.done))
    steps = tuple(
        _settled(p, o, inp.done[p.step_id], rev)
        if _final(inp.done.get(p.step_id)) and p.step_id not in again
        else _entry(p, o, sim.checks.get(p.step_id))
        for p, o in zip(inp.plan.steps, outcomes, strict=True)
    )
    return Preview(
        inp.plan.saga_id,
        steps,
        checked_at=time.time(),
        tool_calls=meter.calls,
        budget=inp.budget.to_dict(),
    )


def _final(rec: CompensationRecord | None) -> bool:
    """Whether the reversal settled the step for good (rule 5: never dispatched again)."""
    return rec is not None and rec.state in _SETTLED


_SETTLED = frozenset(s.value for s in StepState) - {"over_budget", "blocked"}


def _settled(
    p: PlannedStep, o: StepOutcome, rec: CompensationRecord, rev: ReversalRecord
) -> PreviewStep:
    """Rules 5, 6, 10: a step the saga's reversal already settled is never dispatched again, so
    the preview shows what happened, not a fresh plan (whose probe would see the inverse's own
    write and call it someone else's change)."""
    base = field_values(p)  # issue 29: without a getattr per field
    base["expected_residue"] = o.residue  # what the reversal left, as its report says (rule 10)
    why = f"already {o.state.value} by reversal {rev.reversal_id}: {rec.detail or o.state.value}"
    base.update(action="skip", verb=VERBS["skip"], reason=why)
    return PreviewStep(
        **base,
        needs_review=o.state not in NEUTRALISED,
        # issue 26 item 6: said as what happened, never "not needed" under "needs a person"
        check=(
            f"already undone ({o.state.value.replace('_', ' ')}); nothing will be sent again"
            if o.state in NEUTRALISED
            else f"undo already ran and left it {o.state.value.replace('_', ' ')}; nothing "
            f"will be sent again: a person must follow up as its manual action says"
        ),
        predicted=o.state,
        detail=o.detail,
    )


def _entry(p: PlannedStep, o: StepOutcome, check: str | None) -> PreviewStep:
    """The preview's line for one step: the plan's, with the predicted outcome and the residue
    the simulated undo left (rule 10): what a compensation predicted to run will leave, its
    settle dates counted as undo counts them (the same code, clock and computation); nothing for
    a step predicted to stand (drifted, blocked, over budget), whose compensation never runs."""
    base = field_values(p)  # issue 29: without a getattr per field
    base["expected_residue"] = o.residue
    state = o.state
    if state is StepState.DRIFTED and p.action in ("revert", "compensate"):
        # rule 4: shown as what a person must review, as undo will leave it
        base.update(action="review", verb=VERBS["review"], reason=f"needs review: {check}")
    else:
        base.update(verb=verb_for(state, VERBS[p.action]) if p.action != "wait" else None)
    if check is None:
        check = _check_of(p, o)
    return PreviewStep(
        **base,
        needs_review=state is StepState.DRIFTED,
        check=check,
        predicted=state,
        detail=o.detail,
    )


def _check_of(p: PlannedStep, o: StepOutcome) -> str:
    if p.action in ("wait", "review"):
        # a step the plan already sends to a person (a contract violation, an undo-order
        # cycle): its check is why, never "not needed" under "needs review" (issue 26 item 2)
        return p.reason
    if p.action in ("revert", "compensate") and o.state in (
        StepState.BLOCKED,
        StepState.OVER_BUDGET,
    ):
        return f"not checked: {o.detail}"
    return "not needed" if p.action not in ("revert", "compensate") else o.detail


class _Simulation(BaseDispatcher):
    """The preview's dispatcher and world model: probes are real (read-only), everything else is
    only recorded as sent. Its arguments are refused as undo would refuse them (no resolver) but
    never resolved: the catalog it sees (:class:`_SecretFree`) answers with the markers."""

    def __init__(self, catalog: ToolDirectory, plan: Plan) -> None:
        self.catalog = catalog
        self.plan = plan
        self.sent: set[str] = set()
        """Steps whose inverse the simulation sent (it succeeds there)."""
        self.checks: dict[str, str] = {}

    async def call(
        self,
        spec: ToolSpec,
        call: Call,
        args: Mapping[str, Any],
        timeout: float,
        *,
        at: Sequence[Redaction] = (),
    ) -> Any:
        if call.phase != "probe":
            if call.phase == "compensate":
                self.sent.add(call.step_id)
            return None  # rule 10: nothing but probes is dispatched
        if at:  # rule 12: where amends recorded a secret's marker
            raise Unchecked(f"the arguments of probe {spec.name} hold a secret")
        bound = min(timeout, spec.timeout or PROBE_SECONDS)
        return await invoke(spec.fn, call, args, bound)

    def restorer(self, p: PlannedStep, exp: Expectation, observed: Any) -> str | None:
        """A step ``p`` waits for, whose simulated inverse puts back what ``exp`` expects: what
        ``observed`` shows is that step's own write (its expectation, on the same probe), or
        its inverse declared that it lands exactly ``exp`` (``call.landed``: a file moved back
        to the path ``p`` wrote, which the probe cannot read now)."""
        for dep in reversed(p.waits_for):
            if dep not in self.sent:
                continue
            q = self.plan[dep]
            other, landed = q.expectation, q.inverse.landed if q.inverse else None
            if other is not None and _same_probe(other, exp) and other.holds(observed):
                return dep
            if (
                landed is not None
                and _same_probe(landed, exp)
                and same_value(landed.equals, exp.equals)
            ):
                return dep
        return None

    def noted(self, step_id: str, check: str) -> None:
        self.checks[step_id] = check


class _SecretFree:
    """The catalog as the preview sees it: every secret resolver answers with the marker it
    was asked for, so a call needing a secret is refused as undo would refuse it (no resolver)
    but no secret is ever read (rule 11)."""

    def __init__(self, catalog: ToolDirectory) -> None:
        self.catalog = catalog

    def __contains__(self, tool: object, /) -> bool:
        return tool in self.catalog

    def get(self, name: str, /) -> ToolSpec:
        spec = self.catalog.get(name)
        if spec.resolve_secret is None:
            return spec
        return dataclasses.replace(spec, resolve_secret=_marker_of)

    def describe(self, tool: str, args: Mapping[str, Any], /) -> str:
        return self.catalog.describe(tool, args)


def _same_probe(a: Expectation, b: Expectation) -> bool:
    """Whether ``a`` and ``b`` look at the same thing (probe, arguments, path)."""
    return (a.probe, dict(a.args), a.path) == (b.probe, dict(b.args), b.path)


def _marker_of(request: SecretRequest) -> str:
    return marker(request.name)


class _NoLog:
    """The preview writes nothing (rule 10); it reads the reversal's records as they are."""

    def __init__(self, done: Mapping[str, CompensationRecord]) -> None:
        self.done = dict(done)

    async def record_compensation(self, write: CompensationWrite, /) -> None:
        return None

    async def get_compensations(self, reversal_id: str, /) -> dict[str, CompensationRecord]:
        return dict(self.done)
