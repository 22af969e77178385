"""Selective undo (issue 27): which steps a selection covers, and why each was added.

``engine.undo(saga_id, steps=[...])`` undoes the chosen steps and every step that depends on
them, transitively: a later step that used one's output, declared ``after=`` it, or touched a
resource it touched (rule 3: those inverses must run first); and a step whose inverse a chosen
one declared it must wait for (``undo_after=``). Nothing else: the rest of the saga stays as
it is and can be undone later. ``since="s7"`` chooses every step after ``s7``.

Pure functions of the logged saga: they call no tool and write nothing, so a bad selection is
refused before the log is touched, and the preview and the undo compute the same closure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._budget import Budget
from ._errors import ConfigError, ContractError, SagaStateError
from ._log.base import ReversalRecord, SagaRecord, StepRecord
from ._planner import Plan

__all__ = ["Added", "Selection", "Want", "covers", "restrict", "select", "selection_of", "widen"]


@dataclass(frozen=True)
class Added:
    """A step the closure added to a selection, and why (shown by the preview and the report)."""

    step_id: str
    """The step added."""
    because_of: str
    """The selected (or already added) step it depends on."""
    why: str
    """``output`` (used its result), ``resource`` (touched the same resource later),
    ``after`` (declared ``after=`` it, or used its result), or ``undo_after`` (the chosen
    step's inverse must wait for this one's)."""
    reason: str
    """The same in plain language: "undoing s1 (payments.charge) also undoes s3 ..."."""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Selection:
    """What a selective undo covers: the steps asked for and their closure."""

    asked: tuple[str, ...]
    """The steps a person chose (after ``since=``: every step after the checkpoint)."""
    steps: tuple[str, ...]
    """Every step the selection covers, in forward order: ``asked`` and ``added``."""
    added: tuple[Added, ...]
    """Steps the closure added, each with its reason, in forward order."""
    kept: tuple[str, ...]
    """The saga's other steps, left as they are."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "asked": list(self.asked),
            "steps": list(self.steps),
            "added": [a.to_dict() for a in self.added],
            "kept": list(self.kept),
        }


def select(
    saga: SagaRecord,
    steps: Sequence[str] | None = None,
    since: str | None = None,
    *,
    running_here: bool = False,
) -> tuple[str, ...] | None:
    """The steps asked for, checked against the saga; ``None`` when neither ``steps`` nor
    ``since`` is given (the whole saga). ``running_here``: the asking engine runs the saga
    forward itself (the run takes back part of what it did, e.g. an agent's undo tool).

    Raises:
        ConfigError: Both ``steps`` and ``since``, an empty or malformed ``steps``, or a
            ``since`` with no step after it.
        SagaStateError: The saga is still running (its later steps are not known yet).
        ContractError: The saga has no such step.
    """
    if steps is None and since is None:
        return None
    if not running_here:
        _finished(saga)
    if steps is not None and since is not None:
        raise ConfigError(
            f"give steps= or since=, not both (got steps={steps!r}, since={since!r}); "
            f"e.g. steps=['s3'] undoes s3 and what depends on it, since='s7' every step after s7"
        )
    ids = [s.step_id for s in saga.steps]
    if since is not None:
        _known(saga, ids, since)
        after = [s.step_id for s in saga.steps if s.seq > _seq(saga, since)]
        if not after:
            raise ConfigError(
                f"nothing to undo after {since!r}: it is the last step of saga "
                f"{saga.saga_id!r}; name an earlier checkpoint (steps: {', '.join(ids)})",
                saga_id=saga.saga_id,
                step_id=since,
            )
        return tuple(after)
    text = isinstance(steps, str | bytes | bytearray)  # a sequence of letters, not of ids
    if text or not isinstance(steps, Sequence | set | frozenset):
        raise ConfigError(
            f"steps= must be a list of step ids, got {steps!r}; e.g. steps=['s3', 's5']"
        )
    if not steps:
        raise ConfigError(
            "steps= is empty: name at least one step to undo (e.g. steps=['s3']), or leave it "
            "out to undo the whole saga"
        )
    for sid in steps:
        _known(saga, ids, sid)
    return tuple(sid for sid in ids if sid in set(steps))


def _finished(saga: SagaRecord) -> None:
    """A selection asked from outside a saga still running is refused: its closure needs the
    saga's every step (one the agent has not run yet may depend on a chosen one), and a
    reversal claimed now stops the agent's later steps, the kept ones too. The run itself
    may (``running_here``); joining a reversal already running (recovery) is no new
    selection."""
    if saga.state == "running" and (saga.reversal is None or saga.reversal.state == "done"):
        raise SagaStateError(
            f"saga {saga.saga_id!r} is still running: undoing only some steps takes back what "
            f"depends on them, and a step the agent has not run yet may; wait until it "
            f"finishes (if its process stopped, `amends recover` ends it), or undo the whole "
            f"saga now (what it has not run yet is then cancelled)",
            saga_id=saga.saga_id,
        )


def _known(saga: SagaRecord, ids: Sequence[str], step_id: object) -> None:
    if not isinstance(step_id, str) or step_id not in ids:
        raise ContractError(
            f"saga {saga.saga_id!r} has no step {step_id!r}; its steps are "
            f"{', '.join(ids) or '(none)'} (`amends show {saga.saga_id}` lists them)",
            saga_id=saga.saga_id,
            step_id=step_id if isinstance(step_id, str) else None,
        )


def _seq(saga: SagaRecord, step_id: str) -> int:
    return next(s.seq for s in saga.steps if s.step_id == step_id)


def selection_of(saga: SagaRecord, asked: Sequence[str]) -> Selection:
    """``asked`` and every step that must be undone with them, each added one with its reason
    (the first reason found, walking the selection in forward order)."""
    index = {s.step_id: s for s in saga.steps}
    dependents: dict[str, list[StepRecord]] = {}
    for s in saga.steps:
        for d in s.deps:
            dependents.setdefault(d, []).append(s)
    chosen = {sid for sid in asked if sid in index}
    added: dict[str, Added] = {}
    # a chosen step with nothing to take back (a probe, a call that had no effect) has no
    # inverse for a later one's to go before (rule 3): what stands on it is not needed on its
    # account ("Undo only this" on a read must not refund the charge made after it). Reached
    # from a chosen step with an effect, it passes that dependency on, as any step does.
    todo = sorted(
        (sid for sid in chosen if not _no_effect(index[sid])), key=lambda sid: index[sid].seq
    )
    expanded: set[str] = set()
    while todo:
        cur = index[todo.pop(0)]
        if cur.step_id in expanded:
            continue
        expanded.add(cur.step_id)
        for other, why in _needs(cur, dependents, index):
            if other.step_id not in chosen:
                chosen.add(other.step_id)
                reason = _reason(cur, other, why)
                added[other.step_id] = Added(other.step_id, cur.step_id, why, reason)
            todo.append(other.step_id)
    order = [s.step_id for s in saga.steps]
    return Selection(
        asked=tuple(sid for sid in order if sid in set(asked)),
        steps=tuple(sid for sid in order if sid in chosen),
        added=tuple(added[sid] for sid in order if sid in added),
        kept=tuple(sid for sid in order if sid not in chosen),
    )


def _no_effect(step: StepRecord) -> bool:
    """Whether undoing ``step`` has nothing to take back, as the planner decides it: a
    read-only call, or one that failed or never ran (rule 9: the vendor refused it)."""
    kind = step.effective or step.declared
    return kind == "read_only" or step.state in ("failed", "skipped")


def _needs(
    step: StepRecord, dependents: Mapping[str, list[StepRecord]], index: Mapping[str, StepRecord]
) -> Iterator[tuple[StepRecord, str]]:
    """The steps undoing ``step`` needs undone too (rule 3), each with the kind of need."""
    for later in dependents.get(step.step_id, ()):
        yield later, _kind(step, later)
    for o in (step.inverse or {}).get("undo_after", ()) or ():
        if o in index:
            yield index[o], "undo_after"


def _kind(step: StepRecord, later: StepRecord) -> str:
    if set(step.resources) & set(later.resources):
        return "resource"
    if _leaves(step.result) & _leaves(later.args):
        return "output"
    return "after"


def _leaves(value: Any) -> set[str]:
    """The text values in ``value`` long enough to be an id a later step passed on."""
    out: set[str] = set()
    if isinstance(value, str):
        if len(value) >= 3:
            out.add(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            out |= _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            out |= _leaves(v)
    return out


def _reason(step: StepRecord, other: StepRecord, why: str) -> str:
    head = f"undoing {step.step_id} ({step.tool}) also undoes {other.step_id} ({other.tool})"
    if why == "resource":
        shared = sorted(set(step.resources) & set(other.resources))
        return f"{head}: it changed {', '.join(shared)} after {step.step_id} did"
    if why == "output":
        value = sorted(_leaves(step.result) & _leaves(other.args))[0]
        return f"{head}: it used {step.step_id}'s result ({value!r})"
    if why == "undo_after":
        return (
            f"{head}: {step.step_id}'s inverse must wait for {other.step_id}'s "
            f"(declared undo_after=)"
        )
    return f"{head}: it was declared to run after {step.step_id} (after=) or used its result"


def covers(saga: SagaRecord, have: Sequence[str] | None, want: Sequence[str] | None) -> bool:
    """Whether a reversal covering ``have`` (``None``: the whole saga) covers ``want``."""
    if have is None:
        return True
    if want is None:
        return False
    return set(selection_of(saga, want).steps) <= set(selection_of(saga, have).steps)


def widen(have: Sequence[str] | None, want: Sequence[str] | None) -> tuple[str, ...] | None:
    """The selection a reversal covers after ``want`` is added to ``have``."""
    if have is None or want is None:
        return None
    return tuple(dict.fromkeys([*have, *want]))


def restrict(plan: Plan, steps: Iterable[str] | None) -> Plan:
    """``plan`` limited to ``steps`` (``None``: all of it). A selection is closed under what
    its steps wait for, so no step waits for one outside it; waits on steps outside (a custom
    planner's) are dropped rather than waited for forever."""
    if steps is None:
        return plan
    keep = set(steps)
    return Plan(
        plan.saga_id,
        tuple(
            dataclasses.replace(p, waits_for=tuple(w for w in p.waits_for if w in keep))
            for p in plan.steps
            if p.step_id in keep
        ),
    )


@dataclass(frozen=True)
class Want:
    """What an undo asked for (issue 27), to tell whether a reversal's run covered it."""

    saga: SagaRecord | None
    """The saga as the request read it (for the closures); ``None``: not read (whole saga)."""
    asked: tuple[str, ...] | None
    """The steps asked for; ``None``: the whole saga."""
    budget: Budget
    allow: bool
    """``allow_missing_tools``."""

    def covered_by(self, rev: ReversalRecord) -> bool:
        if self.asked is None or self.saga is None:
            return rev.selection is None
        return covers(self.saga, rev.selection, self.asked)
