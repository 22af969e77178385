"""Deliberately broken engines: each one breaks one rule, so a test can prove its invariant bites.

They are the real :class:`amends.Engine` given a different planner through its ``planner=`` seam
(the plan loses its expectations, or its dependency order), a catalog whose compensations reach
the vendor with a fresh idempotency key, or a report rewritten after the fact. Nothing in the core
is patched: every other engine in the process is untouched.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from amends import (
    Budget,
    Call,
    Catalog,
    Engine,
    Plan,
    PlannedStep,
    SagaRecord,
    StepOutcome,
    StepState,
    UndoReport,
    plan,
)

__all__ = [
    "BROKEN_ENGINES",
    "IgnoresCapEngine",
    "LooseEqualityEngine",
    "NoDriftCheckEngine",
    "NoIdempotencyEngine",
    "ResendAfterCrashEngine",
    "ReverseTimeOrderEngine",
    "UncheckedReportEngine",
    "WaitsForInFlightEngine",
]


def _no_drift_check(saga: SagaRecord, catalog: Catalog) -> Plan:
    p = plan(saga, catalog)
    return Plan(p.saga_id, tuple(dataclasses.replace(s, expectation=None) for s in p.steps))


def _reverse_time_order(saga: SagaRecord, catalog: Catalog) -> Plan:
    p = plan(saga, catalog)
    steps: list[PlannedStep] = [dataclasses.replace(s, waits_for=()) for s in p.steps]
    return Plan(p.saga_id, tuple(reversed(steps)))


def _loose(value: Any) -> Any:
    """A JSON value as Python's ``==`` sees it: ``True`` is ``1``, ``1.0`` is ``1``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_loose(v) for v in value]
    if isinstance(value, dict):
        return {k: _loose(v) for k, v in value.items()}
    return value


def _loose_plan(saga: SagaRecord, catalog: Catalog) -> Plan:
    p = plan(saga, catalog)
    steps = tuple(
        s
        if s.expectation is None
        else dataclasses.replace(
            s, expectation=dataclasses.replace(s.expectation, equals=_loose(s.expectation.equals))
        )
        for s in p.steps
    )
    return Plan(p.saga_id, steps)


def _loose_probe(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def probe(call: Call, **args: Any) -> Any:
        out = fn(call, **args)
        return _loose(await out if hasattr(out, "__await__") else out)

    return probe


class LooseEqualityEngine(Engine):
    """Checks drift with Python's ``==``: its probes and expectations lose the difference
    between ``True`` and ``1``, so a person's ``True`` where the agent wrote ``1`` looks
    unchanged and undo overwrites it (rule 4)."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        wrapped = Catalog()
        for spec in catalog:
            read_only = spec.reversibility.value == "read_only"
            wrapped.register(
                spec.name,
                _loose_probe(spec.fn) if read_only else spec.fn,
                reversibility=spec.reversibility.value,
                resources=spec.resources,
                timeout=spec.timeout,
                idempotent=spec.idempotent,
            )
        super().__init__(wrapped, *args, planner=_loose_plan, **kwargs)


class NoDriftCheckEngine(Engine):
    """Skips drift checks: its planner drops every expectation (no probe, no precondition)."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        super().__init__(catalog, *args, planner=_no_drift_check, **kwargs)


class ReverseTimeOrderEngine(Engine):
    """Iterates in reverse time order instead of dependency order: no inverse waits for the
    inverses of the steps that depend on it (so a failed dependent does not block it)."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        super().__init__(catalog, *args, planner=_reverse_time_order, **kwargs)


class ResendAfterCrashEngine(Engine):
    """Believes every vendor honours idempotency keys: a compensation in flight at a crash is
    re-sent blindly, even to the legacy ledger, which books it twice (rule 5)."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        wrapped = Catalog()
        for spec in catalog:
            wrapped.register(
                spec.name,
                spec.fn,
                reversibility=spec.reversibility.value,
                resources=spec.resources,
                timeout=spec.timeout,
                idempotent=True,
            )
        super().__init__(wrapped, *args, **kwargs)


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
                idempotent=spec.idempotent,  # it still claims the vendor replays keys
            )
        super().__init__(wrapped, *args, **kwargs)


def _fresh_key(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def tool(call: Call, **args: Any) -> Any:
        if call.phase != "forward":
            call.idempotency_key = f"broken:{uuid.uuid4().hex}"
        out = fn(call, **args)
        return await out if hasattr(out, "__await__") else out

    return tool


class WaitsForInFlightEngine(Engine):
    """Waits for every step still running forward before undoing, however long it takes: the
    seconds budget no longer bounds waiting for an in-flight step (rule 7)."""

    async def undo(self, saga_id: str, *, budget: Budget | None = None, **more: Any) -> UndoReport:
        live = self.live_sagas.get(saga_id)
        if live is not None:
            await live.settle()
        return await super().undo(saga_id, budget=budget, **more)


class UncheckedReportEngine(Engine):
    """Reports "reverted" without checking: every step that still stands is claimed undone."""

    async def undo(self, saga_id: str, *, budget: Budget | None = None, **more: Any) -> UndoReport:
        report = await super().undo(saga_id, budget=budget, **more)
        steps = tuple(
            s
            if s.state.neutralised or s.verb is None
            else StepOutcome(s.step_id, s.tool, s.verb, StepState.REVERTED, "reverted")
            for s in report.steps
        )
        return dataclasses.replace(report, steps=steps)


class IgnoresCapEngine(Engine):
    """Ignores the caller's budget: its reversal runs on the largest budget there is, so an
    agent's cascade of follow-ups goes on past the calls and tokens it was given (rule 7)."""

    async def undo(self, saga_id: str, *, budget: Budget | None = None, **more: Any) -> UndoReport:
        given = budget or Budget()
        unbounded = Budget(tool_calls=Budget.MAX_TOOL_CALLS, tokens=Budget.MAX_TOKENS,
                           seconds=given.seconds)  # fmt: skip
        return await super().undo(saga_id, budget=unbounded, **more)


BROKEN_ENGINES: dict[str, type[Engine]] = {
    "broken-ignores-cap": IgnoresCapEngine,
    "broken-loose-equality": LooseEqualityEngine,
    "broken-no-drift-check": NoDriftCheckEngine,
    "broken-no-idempotency": NoIdempotencyEngine,
    "broken-resend-after-crash": ResendAfterCrashEngine,
    "broken-reverse-time-order": ReverseTimeOrderEngine,
    "broken-unchecked-report": UncheckedReportEngine,
    "broken-waits-for-in-flight": WaitsForInFlightEngine,
}
"""Selectable with ``amends eval --engine NAME``."""
