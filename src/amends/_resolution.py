"""What a person records about a reversal's steps, and what they may ask of it (rules 6, 8, 12).

A resolution says a person handled a manual action by hand; it applies only to a step whose
effect still stands, needs a note, names who made it, never erases an earlier one, and can be
withdrawn. A retry asks for a failed compensation to be tried again (after a person fixed its
cause); a continuation attempts what a reversal has not attempted yet. This module decides whether
such a request fits the saga's state now, in words a person can act on; it calls no tool.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ._budget import Budget
from ._errors import ConfigError, ContractError, SagaStateError
from ._log.base import CompensationRecord, ReversalRecord, SagaRecord
from ._planner import PlannedStep
from ._report import NEUTRALISED, StepState, UndoReport

__all__ = [
    "MAX_BY",
    "MAX_NOTE",
    "RETRY",
    "UNCHECKED",
    "check_who_and_note",
    "continuable",
    "continuable_now",
    "finished_since",
    "outcome_of",
    "rechecks",
    "resolvable",
    "retryable",
    "unchecked",
]

RETRY = "retry"
"""A compensation record's state after a person asked to retry a failed step: the next
continuation attempts it again, through the drift check (never a state a report shows)."""


def rechecks(rec: CompensationRecord | None) -> bool:
    """Whether a continuation looks again at this step (rules 5-7): its inverse was cut off in
    flight (the time budget ran out, its answer was lost) with no budget left to look with its
    probes, so it is ``in_doubt`` only for want of budget. A continuation checks whether it
    landed before anything is sent again, as after a crash."""
    return rec is not None and rec.state == "in_doubt" and bool(rec.data.get("recheck"))


MAX_BY = 200
"""The longest ``by`` a resolution or follow-up takes (one printable line)."""
MAX_NOTE = 2000
"""The longest note a resolution takes, from the library, the command line or HTTP."""


def check_who_and_note(by: object, note: object, what: str = "resolve") -> tuple[str, str]:
    """``by`` and ``note`` stripped, or :class:`ConfigError` naming what is missing or wrong:
    ``by`` one printable line of at most :data:`MAX_BY` characters, ``note`` at most
    :data:`MAX_NOTE` (the same limits whichever way the resolution comes in)."""
    if not isinstance(by, str) or not by.strip():
        raise ConfigError(
            f"{what}(by=...) must name who handled the manual action, got {by!r}; e.g. "
            f"by='ann@example.com' (the identity your application authenticated)"
        )
    if not isinstance(note, str) or not note.strip():
        raise ConfigError(
            f"{what}(note=...) must say what the person did or checked, got {note!r}; e.g. "
            f"note='refunded by bank transfer, ref 8812'"
        )
    by, note = by.strip(), note.strip()
    if len(by) > MAX_BY or not by.isprintable():
        raise ConfigError(
            f"{what}(by=...) must be one line of at most {MAX_BY} printable characters (a name "
            f"or an e-mail address), got {by[:80]!r}{'...' if len(by) > 80 else ''}; e.g. "
            f"by='ann@example.com'"
        )
    if len(note) > MAX_NOTE:
        raise ConfigError(
            f"{what}(note=...) is {len(note)} characters, more than {MAX_NOTE}; keep the note "
            f"to what the person did or checked and link to longer records (e.g. a ticket)"
        )
    return by, note


def _known(saga: SagaRecord, step_id: str) -> None:
    ids = [s.step_id for s in saga.steps]
    if step_id not in ids:
        raise ContractError(
            f"saga {saga.saga_id!r} has no step {step_id!r}; its steps are "
            f"{', '.join(ids) or '(none)'} (`amends show {saga.saga_id}` lists them)",
            saga_id=saga.saga_id,
            step_id=step_id,
        )


def outcome_of(
    saga: SagaRecord, comps: dict[str, CompensationRecord], step_id: str
) -> StepState | None:
    """The outcome the saga's reversal gave ``step_id`` as things stand: its report's state
    once the reversal finished (a continuation's record when newer), else a final record of
    the running one; ``None`` while it has none."""
    rec = comps.get(step_id)
    if rec is not None and rec.state in _STATES:
        return StepState(rec.state)
    rev = saga.reversal
    if rev is not None and rev.report is not None and rev.state == "done":
        for s in rev.report.get("steps", ()):
            if s.get("step_id") == step_id:
                return StepState(s["state"])
    return None


_STATES = frozenset(s.value for s in StepState)


def resolvable(saga: SagaRecord, comps: dict[str, CompensationRecord], step_id: str) -> None:
    """Raise unless ``step_id``'s effect still stands (rule 8: only then is there a manual
    action a person can have handled)."""
    _known(saga, step_id)
    state = outcome_of(saga, comps, step_id)
    if state is None:
        raise SagaStateError(
            f"step {step_id!r} of saga {saga.saga_id!r} has no outcome to resolve yet: "
            f"{_why_no_outcome(saga, step_id)}; a manual action exists only for an effect undo "
            f"left standing",
            saga_id=saga.saga_id,
            step_id=step_id,
        )
    if state in NEUTRALISED:
        raise SagaStateError(
            f"step {step_id!r} of saga {saga.saga_id!r} is {state.value}: its effect no longer "
            f"stands, so there is nothing a person must handle and nothing to resolve",
            saga_id=saga.saga_id,
            step_id=step_id,
        )


def _why_no_outcome(saga: SagaRecord, step_id: str) -> str:
    rev = saga.reversal
    if rev is None:
        return f"undo it first (`amends undo {saga.saga_id}`)"
    if rev.state == "done" and rev.selection is not None:  # issue 27: outside the selection
        return (
            f"a selective undo kept it as it is; undo it first "
            f"(`amends undo {saga.saga_id} --steps {step_id}`)"
        )
    return f"its reversal is still running (`amends undo {saga.saga_id}`)"


UNCHECKED = "could not check the world before undoing"
"""How the detail of a step whose drift check could not run begins (:func:`unchecked`)."""


def unchecked(rec: CompensationRecord | None, state: StepState | None) -> bool:
    """Whether the step is ``drifted`` only because its drift check could not run (its probe
    raised: the vendor unreachable): amends never saw the value and sent nothing, so a retry
    checks again (issue 23). Drift amends observed is never retried blindly (rule 4)."""
    return (
        state is StepState.DRIFTED
        and rec is not None
        and rec.state == StepState.DRIFTED.value
        and bool(rec.data.get("unchecked"))
    )


def retryable(
    saga: SagaRecord, comps: dict[str, CompensationRecord], step_ids: Sequence[str]
) -> list[str]:
    """The steps to retry, checked: each known, ``failed`` (an inverse that verifiably did not
    take effect: trying it again is no second effect) or ``drifted`` with a drift check that
    could not run (:func:`unchecked`: nothing sent), and not handled by a person since."""
    if isinstance(step_ids, str) or not step_ids:
        raise ConfigError(
            f"retry needs a list of step ids, got {step_ids!r}; e.g. retry(saga_id, ['s2'])"
        )
    if saga.reversal is not None and saga.reversal.state != "done":
        if _retrying(comps, step_ids):
            # rule 6: the run in progress (or whose worker stopped) is retrying them already:
            # asking again joins it, or takes it over once its lease ran out (the caller
            # writes nothing: rule 5, an inverse in flight stays in flight)
            return list(dict.fromkeys(step_ids))
        raise SagaStateError(
            f"saga {saga.saga_id!r} has no finished reversal, so no failed compensation to "
            f"retry; wait for it to finish (a run whose process stopped is taken over by "
            f"recovery, amends recover, or by continuing the undo)",
            saga_id=saga.saga_id,
        )
    if saga.reversal is None:
        raise SagaStateError(
            f"saga {saga.saga_id!r} has no finished reversal, so no failed compensation to "
            f"retry; undo it first",
            saga_id=saga.saga_id,
        )
    out: list[str] = []
    for step_id in dict.fromkeys(step_ids):
        _known(saga, step_id)
        state = outcome_of(saga, comps, step_id)
        if state is not StepState.FAILED and not unchecked(comps.get(step_id), state):
            raise SagaStateError(
                f"step {step_id!r} of saga {saga.saga_id!r} is "
                f"{state.value if state else 'not undone yet'}, not failed: only a failed "
                f"compensation, or one whose drift check could not run, is retried (a blocked "
                f"or over-budget one: continue the reversal; a drifted one: someone changed the "
                f"world, review it by hand; an in-doubt one may have acted: check it by hand)",
                saga_id=saga.saga_id,
                step_id=step_id,
            )
        res = saga.resolutions.get(step_id)
        if res is not None:
            raise SagaStateError(
                f"step {step_id!r} of saga {saga.saga_id!r} was handled by {res.by} "
                f"({res.note}); retrying it could undo it twice. Withdraw the resolution first "
                f"if it was not handled after all",
                saga_id=saga.saga_id,
                step_id=step_id,
            )
        out.append(step_id)
    return out


def _retrying(comps: Mapping[str, CompensationRecord], step_ids: Sequence[str]) -> bool:
    """Whether a run in progress is retrying every one of ``step_ids``: each was asked to be
    retried, or its inverse is in flight (logged ``dispatched``, its outcome not logged yet)."""
    pending = (RETRY, "dispatched")
    return all(
        (rec := comps.get(step_id)) is not None and rec.state in pending for step_id in step_ids
    )


def finished_since(
    report: UndoReport,
    actions: Mapping[str, str],
    comps: Mapping[str, CompensationRecord],
    resolved: Collection[str],
) -> list[str]:
    """Steps whose forward call was still running when the reversal that stored ``report`` ran
    (reported ``in_doubt``, nothing attempted: no record in ``comps``) and has since finished
    with an inverse (``actions``: the plan's now, ``revert``/``compensate``): a continuation
    undoes them (rules 6, 7), as the preview predicts. A step a person resolved is theirs."""
    return [
        s.step_id
        for s in report.steps
        if s.state is StepState.IN_DOUBT
        and s.step_id not in comps
        and s.step_id not in resolved
        and actions.get(s.step_id) in ("revert", "compensate")
    ]


def continuable(
    report: UndoReport,
    waits_for: Mapping[str, Sequence[str]],
    resolved: Collection[str],
) -> list[str]:
    """The steps a continuation of the finished reversal that stored ``report`` would attempt
    (rule 6): over budget, and blocked ones whose every step to wait for is now undone or
    resolved by a person (``waits_for``: the plan's; ``resolved``: steps with a current
    resolution, never attempted while it stands: the person may have done by hand what the
    inverse does). A step blocked behind a failure nobody handled would only be blocked again:
    not counted. (In doubt steps a continuation looks at again, :func:`rechecks`, are judged on
    their records.)"""
    steps = report.steps
    state = {s.step_id: s.state for s in steps}

    def clear(dep: str) -> bool:
        return state.get(dep) in NEUTRALISED or dep in resolved

    return [
        s.step_id
        for s in steps
        if s.step_id not in resolved  # a person handled it: not attempted while that stands
        and (
            s.state is StepState.OVER_BUDGET
            or (
                s.state is StepState.BLOCKED and all(clear(d) for d in waits_for.get(s.step_id, ()))
            )
        )
    ]


def continuable_now(
    rev: ReversalRecord,
    plan: Sequence[PlannedStep],
    comps: Mapping[str, CompensationRecord],
    resolved: Collection[str],
) -> list[str]:
    """The steps a continuation of the finished reversal ``rev`` would attempt now (rule 6):
    :func:`continuable`'s, those a person asked to retry, those cut off in flight for want of
    budget (:func:`rechecks`), and those still running when it ran that finished since
    (:func:`finished_since`), and those whose follow-ups the spent budget stopped
    (:func:`need_budget`). ``plan``: the saga's plan now; ``resolved``: steps with a current
    resolution. The stored report is decoded once, for all of them."""
    asked = [k for k, c in comps.items() if (c.state == RETRY or rechecks(c)) and k not in resolved]
    if rev.report is None:
        return asked
    report = UndoReport.from_dict(rev.report)
    waits = {p.step_id: p.waits_for for p in plan}
    late = finished_since(report, {p.step_id: p.action for p in plan}, comps, resolved)
    more = need_budget(rev, report, resolved)  # issue 27: follow-ups the budget stopped
    return list(dict.fromkeys([*continuable(report, waits, resolved), *asked, *late, *more]))


def need_budget(rev: ReversalRecord, report: UndoReport, resolved: Collection[str]) -> list[str]:
    """The steps whose manual actions (in ``report``, as ``rev`` stored it) are open while the
    finished reversal's budget is spent (by its follow-ups, or by the undo itself): no
    follow-up can be sent for them until the reversal is continued with a new budget (rule 6:
    what stopped short for the budget can be continued; rule 7: follow-ups spend the reversal's
    budget), so a continuation may renew it. ``resolved``: steps with a current resolution."""
    if rev.state != "done":
        return []
    budget = Budget.from_dict(rev.budget)
    tokens_spent = 0 < budget.tokens <= rev.tokens_spent  # as take_call judges it
    if rev.calls_spent < budget.tool_calls and not tokens_spent:
        return []
    return [m.step_id for m in report.manual_actions if m.step_id not in resolved]
