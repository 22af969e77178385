"""``GET /metrics``: what the saga log holds, in Prometheus' text format (issue 28).

The figures are read from the log, not counted in this process. Reversals run wherever undo was
asked: this server, ``amends undo``, an MCP gateway, a Temporal worker; they all write one log,
and the server an operator's Prometheus scrapes is only one of those processes. Read from the
log, every figure covers them all, and a restart of the server changes none of them.

Each scrape lists the reversals with their history heads (one query) and reads again only the
reports whose head moved (a reversal finished, was continued or had a manual action resolved):
the one report reader (:func:`amends._report.current_report`) and the one derivation of the
figures (:func:`amends._observe.figures`), as the OpenTelemetry metrics use. Kept apart from the
web page and the JSON API: it only reads.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from amends import (
    Event,
    HistoryAlteredError,
    Outcome,
    ReversalHead,
    SagaLog,
    UndoReport,
    current_report,
)

from .._log.unreadable import readable
from .._observe import Figures, LatencyPairs, figures
from .._visible import clean

__all__ = ["BUCKETS", "CONTENT_TYPE", "LogMetrics", "MetricsListener", "render", "router"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format."""

router = APIRouter()

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Upper bounds (seconds) of the compensation latency histogram's buckets."""

_READ_AT_ONCE = 16
"""Reports read concurrently when many changed (the first scrape of a large log)."""


@dataclass(frozen=True)
class _Reversal:
    """What one reversal contributes, as of its history head."""

    head: int
    tenant: str | None
    figures: Figures | None
    """``None`` while the reversal runs (it has no report yet)."""
    runs: tuple[str, ...] = ()
    """The outcome of each finished run (first run and continuations), from the history."""
    latencies: tuple[tuple[str, float], ...] = ()
    """(tool, seconds) of each compensation: from its dispatch to its final state."""
    residue: bool = False
    altered: bool = False
    """A record of its saga could not be read (rule 12): numbered as unverified, not counted."""


@dataclass
class _Totals:
    reversals: Counter[str] = field(default_factory=Counter)
    running: int = 0
    runs: Counter[str] = field(default_factory=Counter)
    steps: Counter[tuple[str, str]] = field(default_factory=Counter)
    residue: Counter[str] = field(default_factory=Counter)
    with_residue: int = 0
    manual: Counter[tuple[str, str]] = field(default_factory=Counter)
    drift: Counter[str] = field(default_factory=Counter)
    over_budget: int = 0
    latencies: dict[str, list[float]] = field(default_factory=dict)
    unverified: int = 0

    def add(self, r: _Reversal) -> None:
        if r.altered:
            self.unverified += 1
            return
        self.runs.update(r.runs)
        for tool, seconds in r.latencies:
            self.latencies.setdefault(tool, []).append(seconds)
        f = r.figures
        if f is None:
            self.running += 1
            return
        self.reversals[f.outcome] += 1
        self.steps.update(f.steps)
        self.residue.update(f.residue)
        self.with_residue += r.residue
        self.manual.update(f.manual)
        self.drift.update(f.drift)
        self.over_budget += f.over_budget


class LogMetrics:
    """The figures of one saga log, kept per reversal and refreshed as its history grows."""

    def __init__(self, log: SagaLog) -> None:
        self.log = log
        self.known: dict[str, _Reversal] = {}
        self.tenants: dict[str, str | None] = {}
        """Saga id -> tenant, of the altered sagas without a reversal (read once)."""
        self._lock = asyncio.Lock()

    async def scrape(self, *, tenant: str | None = None, unverified: Iterable[str] = ()) -> str:
        """The Prometheus text of the reversals of ``tenant`` (``None``: every tenant). Sagas in
        ``unverified`` (their history failed the hash-chain check, rule 12) are not counted,
        only numbered, whether or not they were undone."""
        async with self._lock:  # concurrent scrapes share one refresh
            heads = await self.log.reversal_heads()
            skip = set(unverified)
            # rule 12: an altered saga's records are not read (one of them may not even decode)
            await self._refresh([h for h in heads if h.saga_id not in skip])
            totals = _Totals()
            for h in heads:
                r = None if h.saga_id in skip else self.known.get(h.reversal_id)
                if r is not None and (tenant is None or r.tenant == tenant):
                    totals.add(r)
            # an altered saga is numbered whether or not it was undone: one edited before its
            # undo (a step record deleted so its charge is never refunded) is what to alert on
            totals.unverified += await self._unverified(skip, heads, tenant)
        return render(totals)

    async def _unverified(
        self, sagas: set[str], heads: list[ReversalHead], tenant: str | None
    ) -> int:
        """How many of ``sagas`` are ``tenant``'s (``None``: all of them), by the tenant their
        row names (read once per saga; one that cannot be read is no tenant's)."""
        if tenant is None:
            return len(sagas)
        tenants = {h.saga_id: h.tenant for h in heads}
        for saga_id in sagas - tenants.keys() - self.tenants.keys():
            try:
                saga = await self.log.get_saga(saga_id)
            except HistoryAlteredError:
                saga = None
            self.tenants[saga_id] = None if saga is None else saga.tenant
        return sum(1 for s in sagas if tenants.get(s, self.tenants.get(s)) == tenant)

    async def _refresh(self, heads: list[ReversalHead]) -> None:
        stale = [
            h for h in heads if (k := self.known.get(h.reversal_id)) is None or k.head != h.head
        ]
        for i in range(0, len(stale), _READ_AT_ONCE):
            got = await asyncio.gather(*(self._read(h) for h in stale[i : i + _READ_AT_ONCE]))
            for h, r in zip(stale[i : i + _READ_AT_ONCE], got, strict=True):
                self.known[h.reversal_id] = r

    async def _read(self, h: ReversalHead) -> _Reversal:
        try:
            return await readable(h.saga_id, self._decode(h))
        except HistoryAlteredError:
            # rule 12: a record altered since the last hash-chain check (or with the periodic
            # check off) costs that saga its figures, never every other saga's scrape
            return _Reversal(h.head, h.tenant, None, altered=True)

    async def _decode(self, h: ReversalHead) -> _Reversal:
        events = await self.log.events(h.saga_id)
        rev = await self.log.get_reversal(reversal_id=h.reversal_id)
        if h.state != "done" or rev is None or rev.report is None:
            return _Reversal(h.head, h.tenant, None, _runs(events, h.reversal_id))
        report = await current_report(self.log, UndoReport.from_dict(rev.report))
        tools = {s.step_id: s.tool for s in report.steps}
        return _Reversal(
            h.head,
            h.tenant,
            figures(report),
            _runs(events, h.reversal_id),
            _latencies(events, h.reversal_id, tools),
            bool(report.residue),
        )


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> PlainTextResponse:
    """The log's figures: every tenant's on the metrics listener (``--metrics-bind``), else the
    caller's tenant's (a bearer token, as every API route; every tenant with ``--no-auth``).

    Raises:
        ApiError: 401 without a valid token (not on the metrics listener).
    """
    from .security import authenticate
    from .state import _State

    st: _State = request.app.state.amends
    tenant = None if on_metrics_listener(request.scope, st) else authenticate(request).tenant
    if st.metrics is None:
        st.metrics = LogMetrics(st.engine.log)
    text = await st.metrics.scrape(tenant=tenant, unverified=st.tampered)
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def on_metrics_listener(scope: Mapping[str, Any], st: Any) -> bool:
    """Whether the connection came in on ``--metrics-bind``'s socket (by its local port)."""
    port = st.settings.metrics_port
    server = scope.get("server")
    return (
        port is not None
        and isinstance(server, tuple | list)
        and len(server) == 2
        and server[1] == port
    )


class MetricsListener:
    """On the metrics listener, ``GET /metrics`` and nothing else: it takes no token, so no
    other route may be reached through it (a 404 as for any unknown path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and on_metrics_listener(scope, scope["app"].state.amends)
            and (scope["path"] != "/metrics" or scope["method"] not in ("GET", "HEAD"))
        ):
            detail = "this listener serves GET /metrics only"
            await JSONResponse({"error": "not_found", "detail": detail}, 404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _runs(events: list[Event], reversal_id: str) -> tuple[str, ...]:
    return tuple(
        str(e.data.get("status"))
        for e in events
        if e.kind == "reversal.done" and e.reversal_id == reversal_id
    )


def _latencies(
    events: list[Event], reversal_id: str, tools: Mapping[str, str]
) -> tuple[tuple[str, float], ...]:
    pairs = LatencyPairs()
    out = []
    for e in events:
        if e.reversal_id == reversal_id and e.step_id and e.kind.startswith("compensation."):
            seconds = pairs.feed(reversal_id, e.step_id, e.kind, e.at)
            if seconds is not None:
                out.append((tools.get(e.step_id, "?"), seconds))
    return tuple(out)


# --- the text format ---------------------------------------------------------------------------
def _label(value: str) -> str:
    # the exposition format escapes backslash, double quote and newline in label values; other
    # control characters are shown as visible escapes (saga data is untrusted, issue 11)
    text = clean(value)
    assert isinstance(text, str)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_number(value)}")


def render(t: _Totals) -> str:
    """``t`` in the Prometheus text exposition format (version 0.0.4)."""
    out = _Text()
    out.family("amends_reversals", "gauge", "Finished reversals in the log, by current outcome.")
    for outcome in Outcome:
        out.sample("amends_reversals", {"outcome": outcome.value}, t.reversals[outcome.value])
    out.family("amends_reversals_running", "gauge", "Reversals running now.")
    out.sample("amends_reversals_running", {}, t.running)
    out.family(
        "amends_reversal_runs_total",
        "counter",
        "Reversal runs finished (first runs and continuations), by the outcome each reported.",
    )
    for outcome in Outcome:
        out.sample("amends_reversal_runs_total", {"outcome": outcome.value}, t.runs[outcome.value])
    out.family("amends_reversal_steps", "gauge", "Steps of finished reversals, by state and tool.")
    for (state, tool), n in sorted(t.steps.items()):
        out.sample("amends_reversal_steps", {"state": state, "tool": tool}, n)
    out.family("amends_residue_items", "gauge", "Residue items in finished reversals, by tool.")
    for tool, n in sorted(t.residue.items()):
        out.sample("amends_residue_items", {"tool": tool}, n)
    out.family(
        "amends_reversals_with_residue", "gauge", "Finished reversals whose report lists residue."
    )
    out.sample("amends_reversals_with_residue", {}, t.with_residue)
    out.family(
        "amends_manual_actions",
        "gauge",
        "Manual actions of finished reversals: open, handled, or in_doubt (a follow-up that may "
        "have gone out).",
    )
    for (status, tool), n in sorted(t.manual.items()):
        out.sample("amends_manual_actions", {"status": status, "tool": tool}, n)
    out.family(
        "amends_reversals_over_budget",
        "gauge",
        "Finished reversals that stopped with a step over budget (budget exhaustion).",
    )
    out.sample("amends_reversals_over_budget", {}, t.over_budget)
    out.family(
        "amends_drift_detections", "gauge", "Steps whose drift check found another value, by tool."
    )
    for tool, n in sorted(t.drift.items()):
        out.sample("amends_drift_detections", {"tool": tool}, n)
    _histogram(out, t.latencies)
    out.family(
        "amends_sagas_unverified",
        "gauge",
        "Sagas whose history failed the hash-chain check: not counted above (amends doctor).",
    )
    out.sample("amends_sagas_unverified", {}, t.unverified)
    return "\n".join(out.lines) + "\n"


def _histogram(out: _Text, latencies: Mapping[str, list[float]]) -> None:
    name = "amends_compensation_seconds"
    out.family(name, "histogram", "From a compensation's dispatch to its final state, by tool.")
    for tool, values in sorted(latencies.items()):
        for bound in (*BUCKETS, math.inf):
            n = sum(1 for v in values if v <= bound)
            le = "+Inf" if bound == math.inf else repr(bound)
            out.sample(f"{name}_bucket", {"tool": tool, "le": le}, n)
        out.sample(f"{name}_sum", {"tool": tool}, sum(values))
        out.sample(f"{name}_count", {"tool": tool}, len(values))
