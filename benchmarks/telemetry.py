"""9. Telemetry (issue 28): what tracing costs a saga and its undo, off and on.

OpenTelemetry's global providers can be set once per process and never unset, and "not imported
at all" cannot be undone either, so each mode runs in a process of its own; rounds are
interleaved (modes rotated) so the modes see the same machine. ``AMENDS_BENCH_BASELINE_SRC=DIR``
adds a mode running another source tree (e.g. ``git archive`` of the commit before) the same way:
the before/after figure of a change, side by side (``AMENDS_BENCH_BASELINE_NAME`` names it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import REPO, Section, Spread, scratch

_CHILD = r"""
import asyncio, json, os, sys, time
mode = os.environ["AMENDS_BENCH_MODE"]
if mode in ("api", "sdk"):
    import opentelemetry.metrics, opentelemetry.trace
if mode == "sdk":
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(tp)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
import amends
from benchmarks.common import noop_catalog

async def fan_out(engine, k):
    t, c = time.perf_counter(), time.process_time()  # CPU of every thread (the log's writer too)
    async with engine.saga(f"bench: fan-out {k}") as saga:
        await saga.gather(*(saga.call("bench.noop", i=i) for i in range(k)))
    return (time.perf_counter() - t) / k, (time.process_time() - c) / k, saga.id

async def main(path):
    mem = amends.Engine(noop_catalog(), log=amends.SqliteLog(":memory:"))
    full = amends.Engine(noop_catalog(), log=amends.SqliteLog(path, synchronous="FULL"))
    await fan_out(mem, 100); await fan_out(full, 100)  # warm-up
    out = {"mem": [], "cpu": [], "full": [], "undo": []}
    for _ in range(5):
        wall, cpu, _ = await fan_out(mem, 1000)
        out["mem"].append(wall); out["cpu"].append(cpu)
        out["full"].append((await fan_out(full, 1000))[0])
        *_, saga_id = await fan_out(mem, 100)
        c = time.process_time()
        await mem.undo(saga_id, budget=amends.Budget(tool_calls=1000))
        out["undo"].append(time.process_time() - c)
    await mem.close(); await full.close()
    print(json.dumps({k: sorted(v)[2] for k, v in out.items()}))

asyncio.run(main(sys.argv[1]))
"""

_MODES = {
    "off": "OpenTelemetry not imported",
    "api": "API imported, no provider set",
    "sdk": "SDK provider set: every span recorded (dropped by the exporter), metrics kept",
}


def _child(mode: str, src: Path, db: Path) -> dict[str, float]:
    env = {**os.environ, "AMENDS_BENCH_MODE": "off" if mode == "before" else mode}
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(REPO)])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db)],
        env=env, capture_output=True, text=True, timeout=600, check=True, cwd=str(REPO),
    )  # fmt: skip
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def run(loop: Any, quick: bool) -> list[Section]:
    del loop  # every mode runs in a process of its own
    modes = dict(_MODES)
    sources = {m: REPO / "src" for m in modes}
    baseline = os.environ.get("AMENDS_BENCH_BASELINE_SRC")
    if baseline:
        name = os.environ.get("AMENDS_BENCH_BASELINE_NAME", f"the tree in {baseline}")
        modes = {"before": f"{name} (OpenTelemetry not imported)", **modes}
        sources["before"] = Path(baseline)
    rounds = 2 if quick else 7
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(rounds):
        for mode in names[r % len(names) :] + names[: r % len(names)]:
            samples[mode].append(_child(mode, sources[mode], scratch(f"telemetry-{mode}.db")))
    sec = Section(
        "9. Telemetry: a 1,000-step fan-out and a 100-step undo, tracing off and on (issue 28)",
        [
            "mode",
            "fan-out CPU µs/step, :memory: log",
            "fan-out wall µs/step, :memory: log",
            "fan-out wall µs/step, SqliteLog FULL",
            "undo of 100 steps, CPU ms",
        ],
    )
    for mode, what in modes.items():
        got = samples[mode]
        sec.rows.append(
            [
                what,
                Spread.of([g["cpu"] for g in got]).fmt(1e6),
                Spread.of([g["mem"] for g in got]).fmt(1e6),
                Spread.of([g["full"] for g in got]).fmt(1e6),
                Spread.of([g["undo"] for g in got]).fmt(1e3),
            ]
        )
    sec.notes.append(
        f"Each mode in its own process (a global provider cannot be unset), {rounds} interleaved "
        f"rounds (modes rotated); each process takes the median of 5 sagas per figure after a "
        f"warm-up. CPU is the process's (every thread, the log's writer included): the figure "
        f"least moved by other jobs on a shared machine. The :memory: log shows what amends "
        f"adds per step; the FULL file log is section 2's setting, where fsync dominates."
    )
    return [sec]
