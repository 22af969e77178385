"""The compensation plan: what undo will do to each step, and what each inverse must wait for.

Pure function of the logged saga and the catalog; it calls no tool and writes nothing, so the
service can show it before the user clicks (``GET /sagas/{id}/preview``). The preview and undo
use the same plan (rule 10).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, overload

from ._contracts import Expectation, Inverse, Residue, Reversibility, ToolSpec
from ._log.base import SagaRecord, StepRecord
from ._report import STANDING, StepState

__all__ = [
    "Action",
    "Plan",
    "PlannedStep",
    "Preview",
    "PreviewStep",
    "ToolDirectory",
    "plan",
    "undo_cycle",
    "undo_waits",
]


class ToolDirectory(Protocol):
    """What undo reads of a catalog (``amends.Catalog`` is one): whether it has a tool, the
    tool's contract, and a call of it in plain language. A runner whose tools live elsewhere
    (a Temporal workflow) supplies its own, holding the contracts as data."""

    def __contains__(self, tool: object, /) -> bool: ...

    def get(self, name: str, /) -> ToolSpec: ...

    def describe(self, tool: str, args: Mapping[str, Any], /) -> str: ...


Action = Literal[
    "revert", "compensate", "cancel", "acknowledge", "skip", "in_doubt", "wait", "review"
]
"""What undo does to a step: run its inverse (revert / compensate), nothing because it never
committed (cancel) or had no effect (skip), ask a person (acknowledge, in_doubt, review: an
inverse that may not run blindly, rule 4), or wait for a step still running (wait)."""

VERBS: Mapping[str, str | None] = {
    "revert": "Revert",
    "compensate": "Compensate",
    "cancel": "Cancel",
    "acknowledge": "Acknowledge",
    "in_doubt": "Acknowledge",
    "review": "Acknowledge",
    "skip": None,
    "wait": None,
}

# Actions whose inverse another step must wait for (rule 3). An acknowledged, skipped or
# cancelled dependent has no inverse to wait for: its effect (if any) stands whatever we do.
_GATING: frozenset[str] = frozenset({"revert", "compensate", "in_doubt", "wait", "review"})


class _StepId:
    """:attr:`PlannedStep.step_id`: its step's id, stored in the instance's dict at the first
    read, so every later read is a plain attribute read. Unlike ``functools.cached_property``
    (which, on Python 3.11, takes a lock at every first read: issue 29) it takes none: the
    value is the same whichever thread stores it."""

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _StepId: ...

    @overload
    def __get__(self, obj: PlannedStep, owner: type | None = None) -> str: ...

    def __get__(self, obj: PlannedStep | None, owner: type | None = None) -> str | _StepId:
        if obj is None:
            return self
        value: str = obj.step.step_id
        obj.__dict__["step_id"] = value
        return value


@dataclass(frozen=True)
class PlannedStep:
    """One step of the plan."""

    step: StepRecord
    """The step as the log recorded it (tool, arguments, result, inverse, expectation)."""
    action: Action
    """What undo does to the step: ``revert``, ``compensate``, ``cancel``, ``acknowledge``,
    ``skip`` (nothing to undo), ``in_doubt``, ``wait`` or ``review`` (a person decides)."""
    verb: str | None
    """Revert / Compensate / Cancel / Acknowledge, or ``None`` when there is nothing to undo."""
    reversibility: Reversibility
    """The class undo acts on (irreversible after a contract violation)."""
    inverse: Inverse | None
    """The call that takes the step back, as recorded when it ran; ``None``: none recorded."""
    expectation: Expectation | None
    """What the world must still show for the inverse to be safe (rule 4); ``None``: no drift
    check (the step then says why, or undo will not revert it blindly)."""
    waits_for: tuple[str, ...]
    """Steps whose inverses must succeed before this one runs (dependents, transitively, and
    undo-order declarations, rule 3)."""
    expected_residue: tuple[Residue, ...]
    """What a compensation is known to leave behind (cancellation notices, a refund that
    settles later), as the step declared it."""
    reason: str
    """Why this action, in plain language (shown in the preview)."""

    step_id = _StepId()
    """The step's id (``step.step_id``), kept in the instance at its first read: issue 29, read
    ~850 times per eval saga (undo order, gates, futures, records). A class attribute, not a
    dataclass field: equality, ``replace()`` and :meth:`to_dict`'s fields ignore it."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "tool": self.step.tool,
            "action": self.action,
            "verb": self.verb,
            "reversibility": self.reversibility.value,
            "inverse": self.inverse.to_dict() if self.inverse else None,
            "expectation": self.expectation.to_dict() if self.expectation else None,
            "waits_for": list(self.waits_for),
            "expected_residue": [r.to_dict() for r in self.expected_residue],
            "needs_person": self.action in ("acknowledge", "in_doubt", "review"),
            "reason": self.reason,
            "violation": self.step.violation,
            "declared": self.step.explicit,
            "deadline": self.inverse.deadline if self.inverse else None,
            "no_drift_check": self.inverse.no_drift_check if self.inverse else None,
        }


@dataclass(frozen=True)
class Plan:
    """The compensation plan of one saga (:func:`amends.plan`): what undo does to each step."""

    saga_id: str
    """The saga this plan undoes."""
    steps: tuple[PlannedStep, ...]
    """Every step of the saga in forward order, each with its action and what it waits for."""

    def __getitem__(self, step_id: str) -> PlannedStep:
        return self._index[step_id]

    @functools.cached_property
    def _index(self) -> dict[str, PlannedStep]:
        return {p.step_id: p for p in self.steps}

    def to_dict(self) -> dict[str, Any]:
        return {"saga_id": self.saga_id, "steps": [p.to_dict() for p in self.steps]}


@dataclass(frozen=True)
class PreviewStep(PlannedStep):
    """One step of a :class:`Preview`: the planned step, with what undo is predicted to do to it
    (the reversal's own run, simulated: rule 10). Its ``expected_residue`` is what that run
    leaves: none for a step predicted to stand (drifted, blocked, over budget), whose
    compensation never runs."""

    needs_review: bool = False
    """The world changed since the agent acted (or could not be checked, or the step has no drift
    check and no reason): undo will not revert it; a person should look (rule 10)."""
    check: str = ""
    """What re-observing the step's expectation found, in plain language."""
    description: str = ""
    """The step in plain language, from its tool's ``describe=`` (issue 17)."""
    inverse_description: str = ""
    """What undo would call, in plain language; empty when the step has no inverse."""
    predicted: StepState | None = None
    """The state undo will report for this step if the world does not change before it runs
    (reverted, compensated, drifted, blocked, over_budget, ...)."""
    detail: str = ""
    """The predicted outcome in plain language, as the report would word it."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "needs_review": self.needs_review,
            "needs_person": (
                self.predicted in STANDING
                if self.predicted is not None
                else super().to_dict()["needs_person"]
            ),
            "check": self.check,
            "description": self.description,
            "inverse_description": self.inverse_description,
            "predicted": self.predicted.value if self.predicted is not None else None,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Preview(Plan):
    """What undo would do now (``engine.preview``): the reversal simulated by the same runner —
    every expectation re-observed by its read-only probe, nothing else dispatched (rule 10)."""

    steps: tuple[PreviewStep, ...]
    """Every step with what undo is predicted to do to it."""
    checked_at: float = 0.0
    """When the probes ran (epoch seconds)."""
    tool_calls: int = 0
    """Tool calls the undo is predicted to make: probes and inverses (a retry or a follow-up an
    inverse asks for at undo time comes on top, from what the budget leaves)."""
    budget: Mapping[str, Any] = field(default_factory=dict)
    """The budget the prediction assumed (``tool_calls``, ``tokens``, ``seconds``)."""
    selection: Mapping[str, Any] | None = None
    """For a selective undo (issue 27, ``preview(steps=...)``): the steps asked for
    (``asked``), every step it covers (``steps``), each step its closure added with the reason
    (``added``: ``step_id``, ``because_of``, ``why``, ``reason``), and the steps kept as they
    are (``kept``); ``None``: the whole saga."""
    missing_tools: tuple[str, ...] = ()
    """Tools the saga's undo needs that this catalog does not have (renamed in an upgrade?).
    Undo refuses such a saga unless asked with ``allow_missing_tools=True``; the predicted
    states are that undo's (rule 10: the preview never promises an undo that will refuse)."""

    @property
    def needs_review(self) -> list[str]:
        """Steps a person should look at before undo (drifted, or no drift check)."""
        return [p.step_id for p in self.steps if p.needs_review]

    @property
    def retry_reserve(self) -> int:
        """Tool calls the budget leaves beyond the predicted ones: what retries and follow-ups
        may spend before the undo is cut short."""
        return max(0, int(self.budget.get("tool_calls", 0)) - self.tool_calls)

    def __getitem__(self, step_id: str) -> PreviewStep:
        return cast(PreviewStep, super().__getitem__(step_id))

    @property
    def would(self) -> str:
        """What undo would do, counted by predicted state, for people: "revert 2 · compensate 2
        · ask a person about 1" ("do nothing" when nothing is planned). ``amends show`` and the
        web list say it (issue 26 items 6 and 7); an effect that would stand, or is not
        predicted, counts for a person (rule 8: unsure goes to a person)."""
        return undo_would(p.predicted for p in self.steps)

    def predicted(self, step_id: str) -> StepState | None:
        """The state undo is predicted to report for ``step_id``."""
        return self[step_id].predicted

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "checked_at": self.checked_at,
            "needs_review": self.needs_review,
            "tool_calls": self.tool_calls,
            "budget": dict(self.budget),
            "retry_reserve": self.retry_reserve,
            "would": self.would,
            "selection": dict(self.selection) if self.selection is not None else None,
            "missing_tools": list(self.missing_tools),
            "undo_windows": [
                {"step_id": p.step_id, "closes_at": p.inverse.deadline}
                for p in self.steps
                if p.inverse is not None and p.inverse.deadline is not None
            ],
        }


_WOULD: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("revert", ("reverted",)),
    ("compensate", ("compensated",)),
    ("cancel", ("cancelled",)),
    # not attempted for lack of budget: continuing the reversal runs its inverse (rule 6)
    ("leave for a continued undo", ("over_budget",)),
    ("ask a person about", ()),  # every other state in which the effect still stands (rule 8)
    ("nothing to undo for", ("not_needed",)),
)
"""How :attr:`Preview.would` counts the predicted states, in this order."""


def undo_would(predicted: Iterable[StepState | str | None]) -> str:
    """:attr:`Preview.would` of steps predicted to end in these states."""
    counts = dict.fromkeys((words for words, _ in _WOULD), 0)
    for state in predicted:
        value = state.value if isinstance(state, StepState) else state
        counts[next((w for w, states in _WOULD if value in states), "ask a person about")] += 1
    return " · ".join(f"{words} {n}" for words, n in counts.items() if n) or "do nothing"


REVIEW = (
    "amends cannot check this step safely: its tool does not say how to see whether someone "
    "changed it since, so it is not undone blindly; a person must check it"
)
"""Why a step without a drift check is left for review (rule 4, issue 26)."""

NOT_DECLARED = (
    "not declared — treated as irreversible: its tool's owner never said whether a call can "
    "take it back"
)
"""Why an undeclared tool's step is acknowledged (issue 26): the safe default (rule 2), never
confused with a tool declared irreversible."""


def _in_doubt_reason(step: StepRecord) -> str:
    # rule 8: name the real cause (timed out, contract violation, process stopped).
    cause = step.error or "its process stopped before it logged a result"
    return f"the call's outcome is unknown ({cause}); check whether it happened"


_REVERSIBILITY: dict[str, Reversibility] = {r.value: r for r in Reversibility}
"""Each class by its logged name: a lookup, not the enum's constructor (issue 29: twice per
step per plan); a name not in it goes to the constructor, which says what is wrong."""


def _read_only(tool: str, catalog: ToolDirectory | None) -> bool:
    """Whether ``tool`` is a read-only tool of ``catalog``. An inverse tool missing from the
    catalog (renamed in an upgrade; undo runs without it only when asked to,
    allow_missing_tools) is not: its step stays planned, the reversal reports it failed, not
    attempted, so it gates what waits for it (rule 3) and can be retried with the tool back."""
    return (
        catalog is not None
        and tool in catalog
        and catalog.get(tool).reversibility is Reversibility.READ_ONLY
    )


def _classify(
    step: StepRecord,
    catalog: ToolDirectory | None,
    now: float,
    read_only: dict[str, bool],
) -> tuple[Action, Reversibility, str, Inverse | None]:
    declared = _REVERSIBILITY.get(step.declared) or Reversibility(step.declared)
    effective = (
        (_REVERSIBILITY.get(step.effective) or Reversibility(step.effective))
        if step.effective
        else declared
    )
    if step.state == "cancelled":
        why = step.error or "undo was asked before this step started, so it never ran"
        return "cancel", effective, why, None
    if step.state == "skipped":
        return "skip", effective, step.error or "never ran: a step it waited for failed", None
    if step.state == "failed":
        return "skip", effective, f"the call failed, so it had no effect ({step.error})", None
    if step.state == "in_doubt":
        return "in_doubt", effective, _in_doubt_reason(step), None
    if step.state == "intent":
        return "wait", effective, "still running; undo waits for its result", None
    if effective is Reversibility.READ_ONLY:
        return "skip", effective, "read-only: nothing to undo", None
    if effective is Reversibility.IRREVERSIBLE or not step.inverse:
        why = step.violation or (
            "irreversible: no call can take it back" if step.explicit else NOT_DECLARED
        )
        return "acknowledge", Reversibility.IRREVERSIBLE, why, None
    inverse = Inverse.from_dict(step.inverse)
    reads = read_only.get(inverse.tool)
    if reads is None:  # issue 29: the catalog asked once per inverse tool per plan
        reads = read_only[inverse.tool] = _read_only(inverse.tool, catalog)
    if reads:
        # rule 2 / rule 8: a read-only tool changes nothing; calling it and saying "reverted"
        # would be a lie.
        return (
            "acknowledge",
            Reversibility.IRREVERSIBLE,
            f"contract violation: its inverse tool {inverse.tool!r} is read_only, so calling "
            f"it cannot take the step back",
            None,
        )
    if inverse.deadline is not None and inverse.deadline_passed(now):
        return (
            "acknowledge",
            effective,
            f"the undo window of {inverse.tool} closed at {inverse.deadline}; it can no longer "
            f"be taken back by a call",
            None,
        )
    if step.expectation is None and inverse.no_drift_check is None:
        # rule 4: no drift check means no blind overwrite.
        # issue 26: a person reads what it means; the violation itself stays for engineers
        return "review", effective, REVIEW, inverse
    action: Action = "revert" if effective is Reversibility.REVERSIBLE else "compensate"
    return action, effective, f"{action} with {inverse.tool}", inverse


def undo_waits(
    steps: Iterable[tuple[str, Sequence[str], Sequence[str]]],
) -> dict[str, set[str]]:
    """Rule 3: for each step, every step whose inverse its inverse must wait for (transitively).

    ``steps`` are ``(step_id, forward deps, undo_after)`` in call order (a step's deps come
    before it). Forward edges reversed: a step's inverse waits for the inverses of every step
    that depends on it, directly or through other steps. A declaration ``undo_after=[o]`` on
    ``s`` replaces the reversed forward edge between the two: ``s`` waits for ``o``, ``o`` no
    longer waits for ``s``; every other step that ``s`` depends on still waits for ``s``, also
    one it depends on only through ``o`` (the finance lock: the deal's delete still waits for
    the refund of its charge, made after the close that the refund waits for). A step that
    appears in its own set is on a cycle (see :func:`undo_cycle`).
    """
    items = list(steps)
    dependents: dict[str, set[str]] = {sid: set() for sid, _, _ in items}
    for sid, deps, _ in items:
        for d in deps:
            dependents.setdefault(d, set()).add(sid)
    waits: dict[str, set[str]] = {}
    for sid, _, _ in reversed(items):  # dependents come later: their sets are built first
        out: set[str] = set()
        for t in dependents.get(sid, ()):
            out.add(t)
            out |= waits.get(t, set())
        waits[sid] = out
    declared = [(sid, o) for sid, _, after in items for o in after]
    if not declared:
        return waits
    # the forward waits, transitive, less the declared pairs: a declaration replaces the edge
    # between its two steps only, never what the rest of the graph orders through them
    direct: dict[str, set[str]] = {sid: set(w) for sid, w in waits.items()}
    for sid, o in declared:
        direct.setdefault(o, set()).discard(sid)
        direct.setdefault(sid, set()).add(o)
    return {sid: _reach(direct, sid) for sid in direct}


def _reach(direct: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(direct.get(start, ()))
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(direct.get(d, ()))
    return seen


def undo_cycle(steps: Iterable[tuple[str, Sequence[str], Sequence[str]]]) -> list[str]:
    """The steps whose inverses would each wait for the other (rule 3), in call order."""
    items = list(steps)
    waits = undo_waits(items)
    return [sid for sid, _, _ in items if sid in waits.get(sid, ())]


def _waits(steps: Sequence[StepRecord]) -> dict[str, set[str]]:
    """:func:`undo_waits` of ``steps``. Issue 29: a saga whose steps neither depend on others
    nor declare an undo order (most sagas of sequential calls) has none to work out: none
    waits, none is on a cycle (``{}``)."""
    if not any(s.deps or (s.inverse and s.inverse.get("undo_after")) for s in steps):
        return {}
    return undo_waits(
        (s.step_id, s.deps, tuple(s.inverse.get("undo_after", ())) if s.inverse else ())
        for s in steps
    )


def plan(
    saga: SagaRecord, catalog: ToolDirectory | None = None, *, now: float | None = None
) -> Plan:
    """The compensation plan of ``saga``: the forward dependency graph reversed, with undo-order
    declarations (rule 3), each step classified (rules 4, 9, 10).

    Args:
        saga: The logged saga.
        catalog: The catalog undo will use (an inverse tool missing from it is Acknowledge).
        now: Seconds since the epoch for undo windows (``call.inverse(..., deadline=...)``);
            default the current time.
    """
    at = time.time() if now is None else now
    steps = list(saga.steps)
    # per step: action, class, reason, and the inverse when classifying read it (issue 29:
    # the plan keeps that one, not a second decode of the same record)
    read_only: dict[str, bool] = {}
    classified = {s.step_id: _classify(s, catalog, at, read_only) for s in steps}
    waits_all = _waits(steps)
    for sid, (act, cls, _, inv) in list(classified.items()) if waits_all else ():
        if sid in waits_all.get(sid, ()) and act in ("revert", "compensate"):
            # a log written outside saga.call (which refuses cycles) must not deadlock undo
            classified[sid] = (
                "review",
                cls,
                "needs review: its undo-order declarations form a cycle, so no order is safe",
                inv,
            )
    order = {x.step_id: x.seq for x in steps} if waits_all else {}
    planned = []
    for s in steps:
        action, cls, reason, built = classified[s.step_id]
        waits: list[str] = []
        if action in ("revert", "compensate") and waits_all.get(s.step_id):
            waits = [
                d
                for d in waits_all[s.step_id]
                if d != s.step_id and d in classified and classified[d][0] in _GATING
            ]
        if len(waits) > 1:  # issue 29: no key function made for nothing to sort
            waits.sort(key=lambda d: order.get(d, 0))
        inverse = built if action in ("revert", "compensate", "review") else None
        expectation = Expectation.from_dict(s.expectation) if s.expectation and inverse else None
        residue = tuple(Residue.from_dict(r) for r in s.residue) if inverse and s.residue else ()
        planned.append(
            PlannedStep(
                s, action, VERBS[action], cls, inverse, expectation, tuple(waits), residue, reason
            )
        )
    return Plan(saga.saga_id, tuple(planned))
