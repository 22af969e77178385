"""The compensation plan: what undo will do to each step, and what each inverse must wait for.

Pure function of the logged saga and the catalog; it calls no tool and writes nothing, so the
service can show it before the user clicks (``GET /sagas/{id}/preview``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .contracts import Catalog, Expectation, Inverse, Residue, Reversibility
from .log.base import SagaRecord, StepRecord

__all__ = ["Action", "Plan", "PlannedStep", "plan"]

Action = Literal["revert", "compensate", "cancel", "acknowledge", "skip", "in_doubt", "wait"]
"""What undo does to a step: run its inverse (revert / compensate), nothing because it never
committed (cancel) or had no effect (skip), ask a person (acknowledge, in_doubt), or wait for a
step still running in another process (wait)."""

VERBS: Mapping[str, str | None] = {
    "revert": "Revert",
    "compensate": "Compensate",
    "cancel": "Cancel",
    "acknowledge": "Acknowledge",
    "in_doubt": "Acknowledge",
    "skip": None,
    "wait": None,
}

# Actions whose inverse another step must wait for (rule 3). An acknowledged, skipped or
# cancelled dependent has no inverse to wait for: its effect (if any) stands whatever we do.
_GATING: frozenset[str] = frozenset({"revert", "compensate", "in_doubt", "wait"})


@dataclass(frozen=True)
class PlannedStep:
    """One step of the plan."""

    step: StepRecord
    action: Action
    verb: str | None
    """Revert / Compensate / Cancel / Acknowledge, or ``None`` when there is nothing to undo."""
    reversibility: Reversibility
    """The class undo acts on (irreversible after a contract violation)."""
    inverse: Inverse | None
    expectation: Expectation | None
    waits_for: tuple[str, ...]
    """Steps whose inverses must succeed before this one runs (dependents, transitively)."""
    expected_residue: tuple[Residue, ...]
    reason: str
    """Why this action, in plain language (shown in the preview)."""

    @property
    def step_id(self) -> str:
        return self.step.step_id

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
            "needs_person": self.action in ("acknowledge", "in_doubt"),
            "reason": self.reason,
            "violation": self.step.violation,
        }


@dataclass(frozen=True)
class Plan:
    saga_id: str
    steps: tuple[PlannedStep, ...]

    def __getitem__(self, step_id: str) -> PlannedStep:
        for p in self.steps:
            if p.step_id == step_id:
                return p
        raise KeyError(step_id)

    def to_dict(self) -> dict[str, Any]:
        return {"saga_id": self.saga_id, "steps": [p.to_dict() for p in self.steps]}


def _classify(step: StepRecord, catalog: Catalog | None) -> tuple[Action, Reversibility, str]:
    declared = Reversibility(step.declared)
    effective = Reversibility(step.effective) if step.effective else declared
    if step.state == "cancelled":
        return "cancel", effective, "undo was asked before this step started, so it never ran"
    if step.state == "skipped":
        return "skip", effective, step.error or "never ran: a step it waited for failed"
    if step.state == "failed":
        return "skip", effective, f"the call failed, so it had no effect ({step.error})"
    if step.state == "in_doubt":
        return (
            "in_doubt",
            effective,
            (
                "the call's outcome is unknown (its process stopped before logging a result); "
                "check whether it happened"
            ),
        )
    if step.state == "intent":
        return "wait", effective, "still running; undo waits for its result"
    if effective is Reversibility.READ_ONLY:
        return "skip", effective, "read-only: nothing to undo"
    if effective is Reversibility.IRREVERSIBLE:
        why = step.violation or "irreversible: no call can take it back"
        return "acknowledge", effective, why
    if catalog is not None and step.inverse and step.inverse["tool"] not in catalog:
        return (
            "acknowledge",
            Reversibility.IRREVERSIBLE,
            (f"its inverse tool {step.inverse['tool']!r} is not in this catalog"),
        )
    action: Action = "revert" if effective is Reversibility.REVERSIBLE else "compensate"
    return action, effective, f"{action} with {step.inverse['tool'] if step.inverse else '?'}"


def _dependents(steps: Iterable[StepRecord]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for s in steps:
        out.setdefault(s.step_id, set())
        for d in s.deps:
            out.setdefault(d, set()).add(s.step_id)
    return out


def plan(saga: SagaRecord, catalog: Catalog | None = None) -> Plan:
    """The compensation plan of ``saga``: the forward dependency graph, reversed (rule 3)."""
    steps = list(saga.steps)
    classified = {s.step_id: _classify(s, catalog) for s in steps}
    dependents = _dependents(steps)
    order = {x.step_id: x.seq for x in steps}
    planned = []
    for s in steps:
        action, cls, reason = classified[s.step_id]
        waits: list[str] = []
        if action in ("revert", "compensate"):
            seen: set[str] = set()
            todo = list(dependents.get(s.step_id, ()))
            while todo:  # transitive: a skipped probe between two writes still orders them
                d = todo.pop()
                if d in seen:
                    continue
                seen.add(d)
                if d in classified and classified[d][0] in _GATING:
                    waits.append(d)
                todo.extend(dependents.get(d, ()))
        waits.sort(key=lambda d: order.get(d, 0))
        inverse = (
            Inverse.from_dict(s.inverse)
            if s.inverse and action in ("revert", "compensate")
            else None
        )
        expectation = Expectation.from_dict(s.expectation) if s.expectation and inverse else None
        residue = tuple(Residue.from_dict(r) for r in s.residue) if inverse else ()
        planned.append(
            PlannedStep(
                s, action, VERBS[action], cls, inverse, expectation, tuple(waits), residue, reason
            )
        )
    return Plan(saga.saga_id, tuple(planned))
