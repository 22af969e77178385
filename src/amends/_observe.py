"""A reversal as operators watch it (issue 28): its span, one log record per event, its figures.

:func:`figures` is the one derivation of what a finished reversal counts for (outcome, step
states by tool, residue, manual actions open, handled or in doubt, budget exhaustion, drift), and
:class:`LatencyPairs` the one definition of a compensation's latency (from its ``dispatched``
event to the final event that follows). Both feed the OpenTelemetry metrics a process records as
its reversals finish, and the Prometheus endpoint of ``amends serve``, which reads them from the
log (``amends.server.metrics``). This module writes nothing to the log and never sees an argument.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._follow_up_state import FOLLOW_UP_KEY
from ._log.base import CompensationRecord, CompensationWrite, ReversalRecord, SagaRecord
from ._report import StepOutcome, StepState, UndoReport
from ._resolution import UNCHECKED
from ._telemetry import EVENTS, NO_SPAN, Span, emit, instruments, span, tracer

__all__ = [
    "CompensationLog",
    "Figures",
    "LatencyPairs",
    "ObservedLog",
    "ReversalObserver",
    "drift_found",
    "figures",
    "observed",
    "remote_reversal",
    "reversal_finished",
    "reversal_started",
]


@dataclass(frozen=True)
class Figures:
    """What one finished reversal counts for, from its report (rule 8: the report is the truth)."""

    outcome: str
    """``fully_reversed``, ``partially_reversed`` or ``cannot_undo``."""
    steps: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(state, tool) -> steps in that state."""
    residue: Counter[str] = field(default_factory=Counter)
    """tool -> residue items its steps' compensations left."""
    manual: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(``open``, ``handled`` or ``in_doubt``, tool) -> manual actions."""
    drift: Counter[str] = field(default_factory=Counter)
    """tool -> steps whose drift check found another value (:func:`drift_found`)."""
    over_budget: bool = False
    """A step was not attempted, or a follow-up not made, because the budget was spent (rule 7)."""


def figures(report: UndoReport) -> Figures:
    """The figures of ``report`` (with the resolutions it carries: handled or open)."""
    tools = {s.step_id: s.tool for s in report.steps}
    return Figures(
        outcome=report.status.value,
        steps=Counter((s.state.value, s.tool) for s in report.steps),
        residue=Counter(s.tool for s in report.steps for _ in s.residue),
        manual=Counter(
            (_status(report, m.step_id), tools.get(m.step_id, "?")) for m in report.manual_actions
        ),
        drift=Counter(s.tool for s in report.steps if drift_found(s)),
        over_budget=any(
            s.state is StepState.OVER_BUDGET or any(_cut_by_budget(r.what) for r in s.residue)
            for s in report.steps
        ),
    )


_CUT_FOLLOW_UP = re.compile(
    r" was not made \((?:tool-call|token|time) budget of [^()]{1,40} spent"
    r"(?: or set aside for steps undone before this one)? before [\w.]{1,200} could run\)\Z"
)


def _cut_by_budget(residue: str) -> bool:
    """Whether ``residue`` is a follow-up the budget cut short (rule 7: its step stays what its
    inverse achieved, and the budget was spent all the same). Its end is amends' own words
    (``_manual.missing_follow_ups``), after the call's arguments."""
    return residue.endswith("could run)") and _CUT_FOLLOW_UP.search(residue) is not None


def drift_found(outcome: StepOutcome) -> bool:
    """Whether the drift check ran and the world showed another value (rule 4). A check that
    could not run leaves the step ``drifted`` too (unsure is never ``reverted``), but nobody
    was seen changing anything: a probe's outage is not a drift detection."""
    return outcome.state is StepState.DRIFTED and not outcome.detail.startswith(UNCHECKED)


def _status(report: UndoReport, step_id: str) -> str:
    """A manual action as the report counts it: ``handled`` (a person resolved it, or a
    follow-up went out), ``in_doubt`` (a follow-up may have gone out: check before acting,
    never send again), else ``open`` (issue 27: in doubt is not open)."""
    if report.handled(step_id) is not None:
        return "handled"
    return "in_doubt" if step_id in report.in_doubt else "open"


class LatencyPairs:
    """Pairs a step's ``compensation.dispatched`` event with the final event that follows it:
    the latency of that compensation (retries and follow-ups included)."""

    MAX_OPEN = 10_000
    """Dispatches kept waiting for their final event. A Temporal worker's pairs live as long as
    the worker, and the final event of a compensation it dispatched may be written by another
    worker: without a bound, each such dispatch stayed here for good."""

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], float] = {}

    def feed(self, reversal_id: str, step_id: str, event: str, at: float) -> float | None:
        """Seconds from the dispatch to this final event, or ``None`` (not a final event, or
        no dispatch seen: a step blocked or over budget was never sent)."""
        key = (reversal_id, step_id)
        if event == "compensation.dispatched":
            if key not in self.open and len(self.open) >= self.MAX_OPEN:
                del self.open[next(iter(self.open))]  # the oldest: its final went elsewhere
            self.open.setdefault(key, at)  # a second "dispatched" (follow-ups) keeps the first
            return None
        started = self.open.pop(key, None)
        return None if started is None else max(at - started, 0.0)


def _watching() -> bool:
    """Whether anyone takes reversal events now (a log handler, or a meter provider)."""
    return EVENTS.isEnabledFor(20) or instruments() is not None


def reversal_started(saga_id: str, reversal: ReversalRecord) -> None:
    """The ``reversal.started`` record: a run of ``reversal`` began (first run, take-over or
    continuation)."""
    emit(
        "reversal.started",
        {
            "saga_id": saga_id,
            "reversal_id": reversal.reversal_id,
            "generation": reversal.generation,
            "continuations": reversal.continuations,
            "budget": dict(reversal.budget),
        },
    )


def reversal_finished(report: UndoReport) -> Figures | None:
    """The ``reversal.finished`` record and the run's metrics (counted once, by the process
    that stored the report). Returns the figures, or ``None`` when nobody watches."""
    inst = instruments()
    if inst is None and not EVENTS.isEnabledFor(20):
        return None
    f = figures(report)
    if inst is not None:
        inst.reversals.add(1, {"outcome": f.outcome})
        for (state, tool), n in f.steps.items():
            inst.steps.add(n, {"state": state, "tool": tool})
        for tool, n in f.residue.items():
            inst.residue.add(n, {"tool": tool})
        for (status, tool), n in f.manual.items():
            inst.manual_actions.add(n, {"status": status, "tool": tool})
        for tool, n in f.drift.items():
            inst.drift.add(n, {"tool": tool})
        if f.over_budget:
            inst.budget_exhausted.add(1)
    emit(
        "reversal.finished",
        {
            "saga_id": report.saga_id,
            "reversal_id": report.reversal_id,
            "outcome": f.outcome,
            "headline": report.headline,
            "states": dict(Counter(s.state.value for s in report.steps)),
            "residue": len(report.residue),
            "manual_actions_open": len(report.open_manual_actions),
            "tool_calls": report.tool_calls,
            "tokens": report.tokens,
            "seconds": round(report.seconds, 3),
        },
    )
    return f


class CompensationLog(Protocol):
    """What writes a reversal's compensation records (a log, or one observed)."""

    async def record_compensation(self, write: CompensationWrite, /) -> None: ...

    async def get_compensations(self, reversal_id: str, /) -> dict[str, CompensationRecord]: ...


class _SagaReader(Protocol):
    async def get_reversal(
        self, *, saga_id: str | None = None, reversal_id: str | None = None
    ) -> ReversalRecord | None: ...

    async def get_saga(self, saga_id: str) -> SagaRecord | None: ...


class ObservedLog:
    """A compensation log that reports each write after it landed: one ``compensation.<state>``
    record, and the compensation's latency when a final state follows its dispatch (the
    reversal port of the local engine; the write path of a Temporal worker's activities).

    ``reader``: where the saga of a reversal not introduced with :meth:`knows` is read (a
    Temporal worker sees reversal ids only)."""

    def __init__(self, inner: CompensationLog, reader: _SagaReader | None = None) -> None:
        self.inner = inner
        self.reader = reader
        self.names: dict[str, tuple[str, dict[str, str]]] = {}
        """reversal id -> (saga id, step id -> tool)."""
        self.pairs = LatencyPairs()

    def knows(self, reversal_id: str, saga: SagaRecord) -> None:
        self.names[reversal_id] = (saga.saga_id, {s.step_id: s.tool for s in saga.steps})

    async def get_compensations(self, reversal_id: str, /) -> dict[str, CompensationRecord]:
        return await self.inner.get_compensations(reversal_id)

    async def record_compensation(self, write: CompensationWrite, /) -> None:
        await self.inner.record_compensation(write)
        if _watching():
            await self._observe(write)

    async def _observe(self, w: CompensationWrite) -> None:
        saga_id, tools = await self._names(w.reversal_id)
        follow_up = FOLLOW_UP_KEY.match(w.step_id)  # ``s3+f1``: a follow-up of step s3's
        tool = tools.get(w.step_id if follow_up is None else follow_up["step"])
        seconds = self.pairs.feed(w.reversal_id, w.step_id, w.event, w.now)
        inst = instruments()
        if seconds is not None and inst is not None:
            inst.latency.record(seconds, {"tool": tool or "?", "state": w.state})
        emit(
            w.event,
            {
                "saga_id": saga_id,
                "reversal_id": w.reversal_id,
                "step_id": w.step_id,
                "tool": tool,
                "state": w.state,
                "attempts": w.attempts,
                "detail": w.detail,  # scrubbed of this reversal's secrets (rule 11)
                "calls_spent": w.calls_spent,
                "tokens_spent": w.tokens_spent,
                **({} if seconds is None else {"seconds": round(seconds, 6)}),
            },
        )

    async def _names(self, reversal_id: str) -> tuple[str | None, dict[str, str]]:
        known = self.names.get(reversal_id)
        if known is not None:
            return known
        if self.reader is None:
            return None, {}
        rev = await self.reader.get_reversal(reversal_id=reversal_id)
        saga = None if rev is None else await self.reader.get_saga(rev.saga_id)
        if saga is None:
            return None, {}
        if len(self.names) > 1000:  # a long-lived worker: keep the cache bounded
            self.names.clear()
        self.knows(reversal_id, saga)
        return self.names[reversal_id]


class _ReadingLog(CompensationLog, _SagaReader, Protocol):
    pass


def observed(log: _ReadingLog) -> CompensationLog:
    """``log`` for a reversal record written outside a run of the reversal (a follow-up a
    person or an agent sends, a retry asked): observed when anyone watches, so each such event
    is a record of :data:`EVENTS` too (``follow_up.<state>``, ``compensation.retry_asked``)."""
    return ObservedLog(log, reader=log) if _watching() else log


class ReversalObserver:
    """One run of a reversal in this process, observed: its span (current while it runs, so
    the steps' spans are its children, linked to the saga's span), the ``reversal.started``
    record, the log its writes go through, and each step's span."""

    def __init__(self, saga_id: str, reversal: ReversalRecord) -> None:
        self.saga_id = saga_id
        self.reversal = reversal
        self.span: Any = NO_SPAN

    @contextlib.contextmanager
    def running(self) -> Iterator[ReversalObserver]:
        rev = self.reversal
        attrs = {
            "amends.saga_id": self.saga_id,
            "amends.reversal_id": rev.reversal_id,
            "amends.generation": rev.generation,
            "amends.continuations": rev.continuations,
            **{f"amends.budget.{k}": v for k, v in rev.budget.items() if v is not None},
        }
        with span("amends.reversal", attrs) as s:
            self.span = s
            reversal_started(self.saga_id, rev)
            yield self

    def log(self, inner: CompensationLog, saga: SagaRecord) -> CompensationLog:
        """The compensation log of this run: ``inner``, observed when anyone watches."""
        self.span.link(saga.meta.get("trace"))  # the forward side's span (any process)
        if not _watching():
            return inner
        observed = ObservedLog(inner)
        observed.knows(self.reversal.reversal_id, saga)
        return observed

    def watch_step(self, p: Any, settle: Awaitable[StepOutcome]) -> Awaitable[StepOutcome]:
        """The runner's per-step hook: ``settle`` inside the step's span (``settle`` itself when
        tracing is off)."""
        if not isinstance(self.span, Span) or tracer() is None:
            return settle
        return self._step(p, settle)

    async def _step(self, p: Any, settle: Awaitable[StepOutcome]) -> StepOutcome:
        attrs = {
            "amends.saga_id": self.saga_id,
            "amends.reversal_id": self.reversal.reversal_id,
            "amends.step_id": p.step_id,
            "amends.tool": p.step.tool,
            "amends.reversibility": p.reversibility.value,
            "amends.action": p.action,
        }
        with span("amends.undo_step", attrs) as s:
            outcome = await settle
            s.set(_outcome_attrs(outcome))
            if outcome.state in (StepState.FAILED, StepState.IN_DOUBT):
                s.fail(outcome.state.value)
            return outcome

    def finished(self, report: UndoReport) -> UndoReport:
        """The run stored ``report``: its outcome and what it spent on the span (rule 7:
        calls, tokens, seconds), the ``reversal.finished`` record and the metrics."""
        if isinstance(self.span, Span):  # nothing computed for a span nobody records
            self.span.set(_report_attrs(report))
        reversal_finished(report)
        return report


@contextlib.contextmanager
def remote_reversal(
    saga_id: str, saga: SagaRecord | None
) -> Iterator[Callable[[UndoReport], UndoReport]]:
    """The span of a reversal run elsewhere (a Temporal workflow): its workers' spans continue
    under it (temporalio's ``TracingInterceptor`` carries the context). Yields a function that
    puts the report's outcome on the span and returns the report. The records and metrics of
    the run are the workers' (the process that stores a report counts it, once)."""
    with span("amends.reversal", {"amends.saga_id": saga_id, "amends.remote": True}) as s:
        if saga is not None:
            s.link(saga.meta.get("trace"))

        def done(report: UndoReport) -> UndoReport:
            if isinstance(s, Span):
                s.set({"amends.reversal_id": report.reversal_id, **_report_attrs(report)})
            return report

        yield done


def _report_attrs(report: UndoReport) -> dict[str, Any]:
    return {
        "amends.outcome": report.status.value,
        "amends.spent.tool_calls": report.tool_calls,
        "amends.spent.tokens": report.tokens,
        "amends.spent.seconds": round(report.seconds, 6),
    }


def _outcome_attrs(o: StepOutcome) -> dict[str, Any]:
    return {
        "amends.state": o.state.value,
        "amends.verb": o.verb,
        "amends.attempts": o.attempts,
        "amends.drift_found": drift_found(o),
        "amends.residue": len(o.residue),
    }
