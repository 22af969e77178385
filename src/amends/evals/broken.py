"""Deliberately broken engines: each one breaks one rule, so a test can prove its invariant bites.

They wrap the real :class:`amends.Engine` without modifying the core: the plan is rewritten through
a context variable read by a wrapper around ``amends.engine.plan`` (installed once; for every other
engine it returns the real plan unchanged), catalog functions are wrapped, or the report is
rewritten after the fact.
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from .. import engine as _engine_module
from ..budget import Budget
from ..contracts import Call, Catalog
from ..engine import Engine
from ..planner import Plan, PlannedStep
from ..planner import plan as _real_plan
from ..report import NEUTRALISED, StepOutcome, StepState, UndoReport

__all__ = [
    "BROKEN_ENGINES",
    "NoDriftCheckEngine",
    "NoIdempotencyEngine",
    "ReverseTimeOrderEngine",
    "UncheckedReportEngine",
]

PlanRewrite = Callable[[Plan], Plan]
_REWRITE: contextvars.ContextVar[PlanRewrite | None] = contextvars.ContextVar(
    "amends_evals_plan_rewrite", default=None
)


def _dispatching_plan(saga: Any, catalog: Catalog | None = None) -> Plan:
    p = _real_plan(saga, catalog)
    rewrite = _REWRITE.get()
    return rewrite(p) if rewrite is not None else p


def _install() -> None:
    if getattr(_engine_module, "plan", None) is not _dispatching_plan:
        setattr(_engine_module, "plan", _dispatching_plan)  # noqa: B010 - patching the core


class _PlanRewritingEngine(Engine):
    def rewrite(self, p: Plan) -> Plan:
        raise NotImplementedError

    async def undo(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        _install()
        token = _REWRITE.set(self.rewrite)
        try:
            return await super().undo(saga_id, budget=budget)
        finally:
            _REWRITE.reset(token)


class NoDriftCheckEngine(_PlanRewritingEngine):
    """Skips drift checks: its planner drops every expectation (no probe, no precondition)."""

    def rewrite(self, p: Plan) -> Plan:
        return Plan(p.saga_id, tuple(dataclasses.replace(s, expectation=None) for s in p.steps))


class ReverseTimeOrderEngine(_PlanRewritingEngine):
    """Iterates in reverse time order instead of dependency order: no inverse waits for the
    inverses of the steps that depend on it (so a failed dependent does not block it)."""

    def rewrite(self, p: Plan) -> Plan:
        steps: list[PlannedStep] = [dataclasses.replace(s, waits_for=()) for s in p.steps]
        return Plan(p.saga_id, tuple(reversed(steps)))


class NoIdempotencyEngine(Engine):
    """Ignores idempotency: every compensation attempt reaches the vendor with a fresh key, so a
    re-dispatch after a crash applies the inverse again."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        wrapped = Catalog()
        for spec in catalog:
            wrapped.register(
                spec.name,
                _fresh_key(spec.fn),
                reversibility=spec.reversibility.value,
                resources=spec.resources,
                timeout=spec.timeout,
            )
        super().__init__(wrapped, *args, **kwargs)


def _fresh_key(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def tool(call: Call, **args: Any) -> Any:
        if call.phase != "forward":
            call.idempotency_key = f"broken:{uuid.uuid4().hex}"
        out = fn(call, **args)
        return await out if hasattr(out, "__await__") else out

    return tool


class UncheckedReportEngine(Engine):
    """Reports "reverted" without checking: every step that still stands is claimed undone."""

    async def undo(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        report = await super().undo(saga_id, budget=budget)
        steps = tuple(
            s
            if s.state in NEUTRALISED or s.verb is None
            else StepOutcome(s.step_id, s.tool, s.verb, StepState.REVERTED, "reverted")
            for s in report.steps
        )
        return dataclasses.replace(report, steps=steps)


BROKEN_ENGINES: dict[str, type[Engine]] = {
    "broken-no-drift-check": NoDriftCheckEngine,
    "broken-no-idempotency": NoIdempotencyEngine,
    "broken-reverse-time-order": ReverseTimeOrderEngine,
    "broken-unchecked-report": UncheckedReportEngine,
}
"""Selectable with ``amends eval --engine NAME``."""
