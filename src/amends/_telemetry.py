"""What amends shows of its work in the tools operators already watch (issue 28).

Three outputs, each off until the application asks for it:

* **OpenTelemetry spans and metrics**, through the OpenTelemetry API (``amends[otel]``). amends
  never imports OpenTelemetry itself: it uses it only when the application has imported it and
  set a tracer (meter) provider, which is also the only way a span could be recorded. Without
  that, each helper here costs a dictionary lookup and hands back a shared no-op.
* **Log records** on the ``amends.events`` logger, one per reversal event, their fields in
  ``record.amends``; :class:`JsonLines` writes them as one JSON object per line
  (``--log-format json``).

Nothing here ever sees an argument value: span attributes and log fields are ids, names, states
and counts (rule 11: a secret never reaches a sink amends writes to), and an exception is named
by its type only (its message may quote what the tool was given).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from ._visible import clean

__all__ = [
    "EVENTS",
    "NO_SAGA_TRACE",
    "NO_SPAN",
    "JsonLines",
    "SagaTrace",
    "Span",
    "add_log_format",
    "call_span",
    "clean",
    "configure_logging",
    "emit",
    "instruments",
    "json_logs",
    "saga_trace",
    "say",
    "span",
    "tracer",
]

TRACER_NAME = "amends"
"""The instrumentation scope of amends' spans and metrics."""

EVENTS = logging.getLogger("amends.events")
"""One record per reversal event (``reversal.started``, ``compensation.<state>``,
``follow_up.<state>``, ``reversal.finished``), its fields in ``record.amends``. Silent unless
a handler is configured: ``--log-format json`` or the application's own logging setup."""

_SPAN_NAMES = {
    "forward": "amends.call",
    "probe": "amends.probe",
    "compensate": "amends.compensation",
    "follow_up": "amends.follow_up",
}


# --- OpenTelemetry, only when the application uses it ---------------------------------------
class _Providers:
    """The tracer and instruments bound to the providers last seen (re-bound if they change)."""

    tracer_provider: Any = None
    tracer: Any = None
    meter_provider: Any = None
    instruments: Instruments | None = None


_BOUND = _Providers()


def tracer() -> Any | None:
    """amends' OpenTelemetry tracer, or ``None`` when no tracer provider is set.

    ``opentelemetry.trace`` absent from ``sys.modules`` means nobody imported it, so nobody set
    a provider: nothing is imported here (no cost when not installed or not used)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if provider is _BOUND.tracer_provider:
        return _BOUND.tracer
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        found = None  # the API's defaults: every span would be dropped
    else:
        found = provider.get_tracer(TRACER_NAME, _version())
    _BOUND.tracer_provider, _BOUND.tracer = provider, found
    return found


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amends")
    except PackageNotFoundError:  # running from a source tree
        return None


class Instruments:
    """amends' OpenTelemetry metrics (names and units: docs/operations.md)."""

    def __init__(self, meter: Any) -> None:
        self.reversals = meter.create_counter(
            "amends.reversals", unit="{reversal}", description="reversal runs finished, by outcome"
        )
        self.steps = meter.create_counter(
            "amends.reversal.steps", unit="{step}", description="step outcomes, by state and tool"
        )
        self.residue = meter.create_counter(
            "amends.residue.items", unit="{item}", description="residue left by compensations"
        )
        self.manual_actions = meter.create_counter(
            "amends.manual_actions",
            unit="{action}",
            description="manual actions in finished reversals, by status (open, handled or "
            "in_doubt)",
        )
        self.budget_exhausted = meter.create_counter(
            "amends.budget.exhausted",
            unit="{reversal}",
            description="reversal runs that stopped with a step over budget",
        )
        self.drift = meter.create_counter(
            "amends.drift.detections",
            unit="{step}",
            description="steps whose drift check found another value",
        )
        self.latency = meter.create_histogram(
            "amends.compensation.duration",
            unit="s",
            description="from a compensation's dispatch to its final state (retries included)",
        )


def instruments() -> Instruments | None:
    """amends' metric instruments, or ``None`` when no meter provider is set."""
    api = sys.modules.get("opentelemetry.metrics")
    if api is None:
        return None
    provider = api.get_meter_provider()
    if provider is _BOUND.meter_provider:
        return _BOUND.instruments
    found = None
    if not isinstance(provider, api.NoOpMeterProvider) and type(provider).__name__ not in (
        "_ProxyMeterProvider",  # the API's default until a provider is set
    ):
        found = Instruments(provider.get_meter(TRACER_NAME, _version()))
    _BOUND.meter_provider, _BOUND.instruments = provider, found
    return found


class Span:
    """One recording span, seen through the few things amends does with it."""

    __slots__ = ("otel",)

    def __init__(self, otel: Any) -> None:
        self.otel = otel

    def set(self, attrs: Mapping[str, Any]) -> None:
        """Set attributes (``None`` values are left out)."""
        self.otel.set_attributes(_present(attrs))

    def fail(self, why: str) -> None:
        """Mark the span as an error; ``why`` is a type or state name, never a message."""
        from opentelemetry.trace import Status, StatusCode

        self.otel.set_status(Status(StatusCode.ERROR, why))

    def link(self, ref: Any) -> None:
        """Link to the span ``ref`` names (a saga's ``meta["trace"]``), if it is well formed
        (rule 12: log contents are data; a malformed reference is ignored, never trusted)."""
        ctx = _span_context(ref)
        if ctx is not None:
            self.otel.add_link(ctx, {"amends.link": "saga"})

    def ref(self) -> dict[str, str]:
        """This span's ids, as the log keeps them (``{"trace_id": ..., "span_id": ...}``)."""
        ctx = self.otel.get_span_context()
        return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}

    def end(self) -> None:
        self.otel.end()


class _NoSpan:
    """The span of disabled tracing: every method does nothing."""

    __slots__ = ()

    def set(self, attrs: Mapping[str, Any]) -> None:
        return None

    def fail(self, why: str) -> None:
        return None

    def link(self, ref: Any) -> None:
        return None

    def ref(self) -> dict[str, str]:
        return {}

    def end(self) -> None:
        return None


NO_SPAN = _NoSpan()
"""What :func:`span` yields when tracing is off."""
_NO_CALL_SPAN = contextlib.nullcontext(NO_SPAN)  # reusable: it holds no state

_HEX = re.compile(r"[0-9a-f]+")


def _span_context(ref: Any) -> Any | None:
    if not isinstance(ref, Mapping):
        return None
    trace_id, span_id = ref.get("trace_id"), ref.get("span_id")
    if not (
        isinstance(trace_id, str)
        and isinstance(span_id, str)
        and len(trace_id) == 32
        and len(span_id) == 16
        and _HEX.fullmatch(trace_id)
        and _HEX.fullmatch(span_id)
        and int(trace_id, 16)
        and int(span_id, 16)
    ):
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(TraceFlags.SAMPLED))


@contextlib.contextmanager
def span(
    name: str, attrs: Mapping[str, Any], *, parent: Span | _NoSpan | None = None
) -> Iterator[Span | _NoSpan]:
    """A span, current while the block runs (a child of ``parent``, else of the current span).

    An exception leaving the block marks it failed by its type name only."""
    t = tracer()
    if t is None:
        yield NO_SPAN
        return
    from opentelemetry import trace

    ctx = trace.set_span_in_context(parent.otel) if isinstance(parent, Span) else None
    with t.start_as_current_span(
        name,
        context=ctx,
        attributes=_present(attrs),
        record_exception=False,  # rule 11: an exception's message may quote an argument
        set_status_on_exception=False,
    ) as otel:
        s = Span(otel)
        try:
            yield s
        except BaseException as exc:
            s.fail(type(exc).__name__)
            raise


def call_span(phase: str, tool: str, saga_id: str, step_id: str, attempt: int) -> Any:
    """The span of one tool call (forward, probe, compensation, follow-up), or a no-op."""
    if tracer() is None:
        return _NO_CALL_SPAN
    return span(
        _SPAN_NAMES.get(phase, "amends.call"),
        {
            "amends.saga_id": saga_id,
            "amends.step_id": step_id,
            "amends.tool": tool,
            "amends.phase": phase,
            "amends.attempt": attempt,
        },
    )


# --- the forward side: a span per saga, a child span per step ---------------------------------
class SagaTrace:
    """The span of one saga (started, not made current: the agent's own spans between steps
    stay where they are) and the spans of its steps, children of it."""

    def __init__(self, otel_span: Span | None, saga_id: str = "") -> None:
        self.span = otel_span
        self.saga_id = saga_id

    def meta(self) -> dict[str, Any]:
        """What the saga's log entry keeps, so a reversal in any process can link to it."""
        if self.span is None or not self.span.otel.is_recording():
            return {}  # a span the sampler dropped is nothing to link to
        return {"trace": self.span.ref()}

    def step(self, coro: Coroutine[Any, Any, None], step: Any) -> Coroutine[Any, Any, None]:
        """``coro`` (the run of ``step``, an :class:`amends.Step`) inside the step's span;
        ``coro`` itself when tracing is off (issue 12: no extra coroutine on the hot path)."""
        if self.span is None:
            return coro
        return self._traced(coro, step)

    async def _traced(self, coro: Coroutine[Any, Any, None], step: Any) -> None:
        attrs = {
            "amends.saga_id": self.saga_id,
            "amends.step_id": step.id,
            "amends.tool": step.tool,
            "amends.reversibility": step.spec.reversibility.value,
        }
        with span("amends.step", attrs, parent=self.span) as s:
            try:
                await coro
            finally:
                s.set({"amends.state": step.state})
                if step.state in ("failed", "in_doubt"):
                    s.fail(step.state)

    def end(self, state: str) -> None:
        if self.span is not None:
            self.span.set({"amends.state": state})
            self.span.end()


def saga_trace(saga_id: str, tenant: str | None) -> SagaTrace:
    """A started saga span (a child of the current span, e.g. the agent run's), or a no-op."""
    t = tracer()
    if t is None:
        return NO_SAGA_TRACE
    attrs = {"amends.saga_id": saga_id, "amends.tenant": tenant}
    return SagaTrace(Span(t.start_span("amends.saga", attributes=_present(attrs))), saga_id)


NO_SAGA_TRACE = SagaTrace(None)
"""The trace of a saga when tracing is off."""


def _present(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A span's attributes: ``None`` left out, control characters in text shown as escapes
    (:func:`clean`, as the log records and metrics show them: a tenant, a tool's or a step's
    name comes from agents and callers, and a trace viewer renders it)."""
    return {k: clean(v) if type(v) is str else v for k, v in attrs.items() if v is not None}


# --- log records -----------------------------------------------------------------------------
def emit(event: str, fields: Mapping[str, Any], *, level: int = logging.INFO) -> None:
    """One record on :data:`EVENTS` (nothing is built when nobody listens)."""
    if not EVENTS.isEnabledFor(level):
        return
    t = tracer()
    more: dict[str, Any] = {}
    if t is not None:  # correlate the line with the trace it belongs to
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            more = {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
    EVENTS.log(level, event, extra={"amends": {"event": event, **fields, **more}})


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line of printable ASCII: ``ts``, ``level``,
    ``logger``, ``message``, then the record's amends fields (or an HTTP access line's)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
        }
        fields = getattr(record, "amends", None)
        if isinstance(fields, Mapping):
            out.update(fields)
        elif record.name == "uvicorn.access" and isinstance(record.args, tuple):
            out.update(_access(record.args))
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = record.exc_info[0].__name__  # the type: a message may hold a secret
        # ensure_ascii: non-ASCII is escaped too, so the line is plain printable ASCII
        return json.dumps(clean(out), ensure_ascii=True, default=str)


def _message(record: logging.LogRecord) -> str:
    """The record's message; its format string alone when its arguments do not fit it (else
    logging prints a traceback and the arguments themselves on stderr: not JSON, and the
    arguments may hold what the format would have left out)."""
    try:
        return record.getMessage()
    except (TypeError, ValueError, KeyError):
        return str(record.msg)


def _access(args: tuple[Any, ...]) -> dict[str, Any]:
    """uvicorn's access record ``(client, method, path, http_version, status)`` as fields."""
    if len(args) != 5:
        return {}
    client, method, path, version, status = args
    return {"client": client, "method": method, "path": path, "http": version, "status": status}


LOG_FORMATS = ("text", "json")


def add_log_format(parser: Any) -> None:
    """``--log-format text|json`` on an argparse parser (``serve``, ``undo``, ``worker``,
    ``mcp serve``)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="json: one JSON line on stderr per reversal event and per server log line, no "
        "secrets, no control characters (default text)",
    )


_JSON: list[bool] = []


def json_logs() -> bool:
    """Whether ``--log-format json`` is in force in this process."""
    return bool(_JSON)


def say(text: str, *, level: int = logging.INFO) -> None:
    """A command's own message on stderr: as it always was, or, under ``--log-format json``, a
    record of the ``amends`` logger (so every line on stderr is JSON)."""
    if _JSON:
        logging.getLogger("amends").log(level, text)
    else:
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()


_VOUCHED = ("amends", "uvicorn")
"""Loggers whose INFO records the JSON lines carry: amends' own (events, messages, an MCP
upstream's stderr) and the server's (its access line redacted by ``RedactCredentials``)."""


class _OnlyVouched(logging.Filter):
    """Below WARNING, only the records of :data:`_VOUCHED` loggers: another library's INFO line
    is not amends' to publish (httpx logs each request's full URL, an ``api_key`` query
    parameter filled from a secret included; rule 11)."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        return record.levelno >= logging.WARNING or any(
            name == v or name.startswith(v + ".") for v in _VOUCHED
        )


def configure_logging(fmt: str, *, level: int = logging.INFO) -> Callable[[], None]:
    """``--log-format``: ``json`` sends amends' records (its events, a command's messages) and
    the server's lines to stderr as JSON lines, and every other library's warnings and errors
    as they would reach stderr without it; ``text`` leaves logging as it is. Returns a
    function undoing it."""
    if fmt == "text" or _JSON:  # text, or json already in force: nothing (more) to do
        return lambda: None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    handler.addFilter(_OnlyVouched())
    root = logging.getLogger()
    # rule 11: the root's level stays (WARNING unless the application set one), so no other
    # library's INFO record is even made; amends' own loggers are lowered to ``level``
    ours = logging.getLogger("amends")
    old = ours.level
    root.addHandler(handler)
    ours.setLevel(min(level, old) if old != logging.NOTSET else level)
    _JSON.append(True)

    def undo() -> None:
        root.removeHandler(handler)
        ours.setLevel(old)
        _JSON.pop()

    return undo
