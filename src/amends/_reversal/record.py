"""What a reversal run writes and reports for a step: its compensation events (rule 5) and its
:class:`~amends.StepOutcome`, with the manual action its state calls for (rule 8).

Every detail, residue and manual action passes the run's vault first: a secret resolved for this
reversal never reaches the log or the report (rule 11).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Sequence
from typing import Any

from .._budget import BudgetMeter
from .._contracts import FollowUp, ManualAction, Residue
from .._jsondata import MAX_DETAIL, bounded, bounded_words, wordy
from .._log.base import CompensationRecord, CompensationWrite, ReversalRecord, SagaRecord
from .._manual import CONTINUE_HINT, Wording, did, missing_follow_ups
from .._planner import VERBS, PlannedStep
from .._report import StepOutcome, StepState, verb_for
from .._secrets import Vault, scrub_record
from .ports import ReversalPorts

__all__ = ["Recorder", "bounded_residue"]


class Recorder:
    """Writes a run's compensation events and builds its step outcomes."""

    def __init__(
        self,
        ports: ReversalPorts,
        saga: SagaRecord,
        reversal: ReversalRecord,
        meter: BudgetMeter,
        vault: Vault,
        continue_hint: str | None = None,
    ) -> None:
        self.ports = ports
        self.reversal = reversal
        self.meter = meter
        self.vault = vault
        self.wording = Wording(saga.saga_id, saga.title, saga.actor, continue_hint)
        self.describe = ports.describe
        self.fresh: set[str] = set()
        """Steps whose compensation was recorded in this run (after every known resolution)."""

    def record(
        self,
        p: PlannedStep,
        state: str,
        *,
        attempts: int,
        detail: str,
        data: Any,
        event: str,
    ) -> Awaitable[None]:
        """The step's compensation event, written when awaited (issue 29: the log's own
        awaitable, no coroutine of this function's around it)."""
        step_id = p.step_id
        self.fresh.add(step_id)
        vault, meter, reversal = self.vault, self.meter, self.reversal
        redacted: tuple[Any, ...] = ()
        if vault:  # issue 29: a vault with no secret (most reversals) changes nothing
            logged, where = vault.scrub_at(data)  # rule 12: and where it put each marker
            detail = vault.scrub(detail)  # rule 11: no resolved secret in the log
            data, redacted = logged, tuple(where)
        if len(detail) > MAX_DETAIL:  # rule 12: what a tool said is bounded (after the scrub)
            detail = bounded(detail)
        # issue 29: every field by position, in CompensationWrite's order (binding ten keywords
        # cost ~3 k instructions of each record, two per compensation)
        return self.ports.log.record_compensation(
            CompensationWrite(
                reversal.reversal_id,
                reversal.generation,
                step_id,
                state,  # state
                attempts,  # attempts
                detail,  # detail
                data,  # data
                meter.calls,  # calls_spent
                meter.tokens,  # tokens_spent
                event,  # event
                self.ports.clock(),  # now
                redacted,  # redacted
            )
        )

    def outcome(
        self,
        p: PlannedStep,
        state: StepState,
        detail: str,
        *,
        attempts: int = 0,
        residue: tuple[Residue, ...] = (),
        manual_action: ManualAction | None = None,
    ) -> StepOutcome:
        vault = self.vault
        if vault:  # rule 11: a secret resolved for this reversal never reaches the report
            detail = vault.scrub(detail)
            if manual_action is not None:
                manual_action = scrub_record(vault, manual_action)
            if residue:
                residue = tuple(scrub_record(vault, r) for r in residue)
        if len(detail) > MAX_DETAIL:  # rule 12: what a tool said is bounded (after the scrub)
            detail = bounded(detail)
        step, describe = p.step, self.describe
        # issue 29: described as it is built (no copy per step to describe it), every field by
        # position, in StepOutcome's order
        text, inverse_text = describe(p.step_id) if describe is not None else ("", "")
        return StepOutcome(
            p.step_id,
            step.tool,
            verb_for(state, VERBS[p.action]),  # rule 8: one verb per state, whatever the cause
            state,
            detail,
            p.reversibility._value_,  # issue 29: not the enum's property
            attempts,
            residue,
            manual_action,
            step.violation,
            text,  # description
            inverse_text,  # inverse_description
            step.explicit,  # declared
        )

    def manual(self, p: PlannedStep, state: StepState, detail: str) -> ManualAction:
        """The manual action of ``p`` left in ``state`` (rule 8: who can act, and a draft)."""
        step, catalog, inv = p.step, self.ports.catalog, p.inverse
        sentence = None
        if step.tool in catalog and catalog.get(step.tool).describe:
            sentence = catalog.describe(step.tool, step.args)  # issue 17: a sentence
        inverse = None
        if state is StepState.IN_DOUBT and inv is not None and p.action in ("revert", "compensate"):
            # the inverse was sent and may have acted (rule 5): the person checks it first
            known = inv.tool in catalog and catalog.get(inv.tool).describe
            inverse = (
                repr(catalog.describe(inv.tool, inv.args)) if known else did(inv.tool, inv.args)
            )
        return self.wording.manual(step, state, detail, sentence, inverse)

    def standing(self, p: PlannedStep, state: StepState, detail: str) -> StepOutcome:
        """An outcome whose effect stands, with its manual action, not recorded."""
        manual = self.manual(p, state, detail)
        return self.outcome(p, state, detail, manual_action=manual)

    async def stopped(
        self,
        p: PlannedStep,
        state: StepState,
        detail: str,
        *,
        attempts: int = 0,
        in_flight: bool | None = None,
        lost: str | None = None,
        unchecked: bool = False,
    ) -> StepOutcome:
        """The step's effect still stands: record its state with a manual action, and report
        it. ``in_flight`` (logged when given) says whether a call was in flight at the stop;
        ``lost``, what cut it off (a continuation names it, rule 8); ``unchecked``, that its
        drift check could not run (``engine.retry`` may check again, issue 23)."""
        manual = self.manual(p, state, detail)
        if lost is not None:  # rule 6: a continuation looks first; the person may let it
            w = self.wording
            how = (w.continue_hint or CONTINUE_HINT).replace("{saga_id}", w.saga_id)
            manual = dataclasses.replace(
                manual,
                what=f"{manual.what} Or continue with a new budget, which looks first: {how}",
            )
        data: dict[str, Any] = {"manual_action": manual.to_dict()}
        if in_flight is not None:
            data["in_flight"] = in_flight
        if lost is not None:
            data["lost"], data["recheck"] = lost, True  # _resolution.rechecks
        if unchecked:
            data["unchecked"] = True  # _resolution.retryable
        await self.record(
            p, state._value_, attempts=attempts, detail=detail, data=data,
            event=f"compensation.{state._value_}",
        )  # fmt: skip
        return self.outcome(p, state, detail, attempts=attempts, manual_action=manual)

    async def succeeded(
        self,
        p: PlannedStep,
        attempts: int,
        residue: list[Residue],
        missing: Sequence[tuple[FollowUp, str]],
        detail: str,
    ) -> StepOutcome:
        """The inverse took the step back: record and report it (rule 7: a missing follow-up is
        residue and a manual action; it never changes what the inverse achieved)."""
        state = StepState.REVERTED if p.action == "revert" else StepState.COMPENSATED
        manual = None
        if missing:
            residue = residue + missing_follow_ups(p.step, missing)
            manual = self.wording.follow_ups(p.step, missing)
            detail += f"; {len(missing)} follow-up(s) missing"
        if residue:  # rule 12: what an inverse said it left is bounded (after the scrub)
            residue = bounded_residue(self.vault, residue)
        data: dict[str, Any] = {"residue": [r.to_dict() for r in residue] if residue else []}
        if manual:
            data["manual_action"] = manual.to_dict()
        await self.record(
            p, state._value_, attempts=attempts, detail=detail, data=data,
            event=f"compensation.{state._value_}",
        )  # fmt: skip
        return self.outcome(
            p, state, detail, attempts=attempts, residue=tuple(residue), manual_action=manual
        )

    def from_record(self, p: PlannedStep, rec: CompensationRecord) -> StepOutcome:
        """Rule 5: a step logged in a final state is reported as logged, never run again."""
        state = StepState(rec.state)
        ma = rec.data.get("manual_action")
        return self.outcome(
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


def bounded_residue(vault: Vault | None, residue: list[Residue]) -> list[Residue]:
    """``residue`` with the words of each bounded (:func:`amends._jsondata.bounded_words`): an
    inverse fills them from a vendor's answer, which may be megabytes."""
    out = []
    for r in residue:
        data = r.to_dict()
        if wordy(data):
            kept = scrub_record(vault, r) if vault else r
            r = Residue.from_dict(bounded_words(kept.to_dict()))
        out.append(r)
    return out
