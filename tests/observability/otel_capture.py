"""Helpers and fixtures of the observability tests (issue 28): the OpenTelemetry SDK's in-memory
exporter and metric reader, and the ``amends.events`` log records as JSON lines.

OpenTelemetry allows one global tracer (meter) provider per process, so the first test that
asks installs them for the session. Spans are sampled only while a test holds the ``spans``
fixture (a gate in the sampler): outside it every amends span is dropped unrecorded, so the
other test areas of the session log and report exactly what they would without these providers.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from amends._telemetry import EVENTS, JsonLines

sys.path.insert(0, str(Path(__file__).parent))


class _Gate(Sampler):
    """Samples every span while open, none while closed."""

    def __init__(self) -> None:
        self.open = False

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if not self.open:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "amends test gate"


@dataclass
class _Otel:
    gate: _Gate
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader


_LOCK = threading.Lock()
_INSTALLED: list[_Otel] = []


def otel() -> _Otel:
    """The session's providers, installed on first use."""
    with _LOCK:
        if not _INSTALLED:
            gate, exporter, reader = _Gate(), InMemorySpanExporter(), InMemoryMetricReader()
            provider = TracerProvider(sampler=gate)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            _INSTALLED.append(_Otel(gate, exporter, reader))
        return _INSTALLED[0]


class Spans:
    """The spans finished while the test held the gate open."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name == name]

    def one(self, name: str, **attrs: Any) -> ReadableSpan:
        found = [
            s
            for s in self.named(name)
            if all((s.attributes or {}).get(f"amends.{k}") == v for k, v in attrs.items())
        ]
        assert len(found) == 1, f"{len(found)} spans {name} {attrs}: {[s.name for s in self.all()]}"
        return found[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [
            s for s in self.all() if s.parent is not None and s.parent.span_id == span_id(parent)
        ]


def span_id(s: ReadableSpan) -> int:
    assert s.context is not None
    return s.context.span_id


@pytest.fixture
def spans() -> Iterator[Spans]:
    o = otel()
    o.exporter.clear()
    o.gate.open = True
    try:
        yield Spans(o.exporter)
    finally:
        o.gate.open = False
        o.exporter.clear()


class Points:
    """Cumulative metric points, read as differences from when the test started."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader
        self.base = self.read()

    def read(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
        out: dict[tuple[str, frozenset[tuple[str, Any]]], Any] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                if sm.scope.name != "amends":
                    continue
                for m in sm.metrics:
                    for p in m.data.data_points:
                        key = (m.name, frozenset(dict(p.attributes or {}).items()))
                        out[key] = (p.count, p.sum) if hasattr(p, "bucket_counts") else p.value
        return out

    def delta(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
        """What changed since the test started (histograms: (count, sum) added)."""
        out: dict[tuple[str, frozenset[tuple[str, Any]]], Any] = {}
        for key, value in self.read().items():
            before = self.base.get(key)
            if isinstance(value, tuple):
                b = before or (0, 0.0)
                if value[0] != b[0]:
                    out[key] = (value[0] - b[0], value[1] - b[1])
            elif value != (before or 0):
                out[key] = value - (before or 0)
        return out

    def counts(self, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        return {attrs: v for (n, attrs), v in self.delta().items() if n == name}


@pytest.fixture
def points() -> Points:
    return Points(otel().reader)


class Lines:
    """What the ``amends.events`` logger wrote, through the ``--log-format json`` formatter."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def raw(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def parsed(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.raw()]

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.parsed() if not kinds or e.get("event") in kinds]


@pytest.fixture
def lines() -> Iterator[Lines]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    old = EVENTS.level
    EVENTS.addHandler(handler)
    EVENTS.setLevel(logging.INFO)
    try:
        yield Lines(stream)
    finally:
        EVENTS.removeHandler(handler)
        EVENTS.setLevel(old)


def attrs(s: ReadableSpan) -> Mapping[str, Any]:
    return dict(s.attributes or {})


def everything(items: Sequence[ReadableSpan]) -> str:
    """Every name, attribute, event, link and status of ``items`` as one text (to search)."""
    return repr(
        [
            (
                s.name,
                dict(s.attributes or {}),
                [(e.name, dict(e.attributes or {})) for e in s.events],
                [dict(link.attributes or {}) for link in s.links],
                s.status.description,
            )
            for s in items
        ]
    )
