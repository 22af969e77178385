"""Steps of a saga running in this process that were asked for before undo but never ran."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from .._budget import BudgetMeter
from .._log.base import SagaRecord
from .._report import StepOutcome, StepState, verb_for
from .._saga import Step

__all__ = ["late_cancelled"]


async def late_cancelled(
    reload: Callable[[], Awaitable[SagaRecord]],
    called: Sequence[Step],
    outcomes: Sequence[StepOutcome],
    meter: BudgetMeter,
) -> list[StepOutcome]:
    """Steps of a saga running here, asked for before undo but still waiting for another
    step when the reversal was claimed: refused by the log (never ran); listed as Cancel."""
    if not called:
        return []
    pending = [s.task for s in called if s.task is not None and not s.task.done()]
    if pending and meter.remaining_seconds() > 0:
        await asyncio.wait(pending, timeout=meter.remaining_seconds())
    saga = await reload()
    seen = {o.step_id for o in outcomes} | {
        s.id for s in called if s.task is None or not s.task.done()
    }
    asked = {c.id for c in called}  # once, not per step of the saga (issue 29)
    seen |= {s.step_id for s in saga.steps if s.step_id not in asked}
    return [
        StepOutcome(
            step_id=s.step_id,
            tool=s.tool,
            verb=verb_for(StepState.CANCELLED),
            state=StepState.CANCELLED,
            detail="undo was asked before this step started, so it never ran",
            reversibility=s.declared,
            declared=s.explicit,
        )
        for s in saga.steps
        if s.step_id not in seen and s.state == "cancelled"
    ]
