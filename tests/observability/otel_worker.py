"""``amends worker`` in a process of its own with an OpenTelemetry SDK, its spans written to a
file (one JSON object per line), for the test that follows a reversal's trace across workers.

usage: otel_worker.py SPANS_FILE --temporal HOST:PORT --db URL --catalog ledger:catalog ...
(the ledger file comes from $AMENDS_TEST_LEDGER, as for tests/temporal/worker_proc.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "temporal"))  # ledger.py

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 - lives with the process

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for s in spans:
            assert s.context is not None
            self.file.write(
                json.dumps(
                    {
                        "name": s.name,
                        "trace_id": f"{s.context.trace_id:032x}",
                        "span_id": f"{s.context.span_id:016x}",
                        "parent": f"{s.parent.span_id:016x}" if s.parent else None,
                        "attributes": dict(s.attributes or {}),
                        "status": s.status.description,
                    }
                )
                + "\n"
            )
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(sys.argv[1])))
trace.set_tracer_provider(provider)

from amends.cli.worker import register  # noqa: E402 - after the provider, as an app does

parser = argparse.ArgumentParser(prog="amends")
register(parser.add_subparsers(dest="command"))
args = parser.parse_args(["worker", *sys.argv[2:]])
raise SystemExit(args.handler(args))
