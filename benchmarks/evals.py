"""5. Eval throughput: ``amends eval --sagas N --seed S`` exactly as a user runs it.

Each round is the command in a fresh process (``python -m amends.cli eval ... --json``): its
default engines (amends and the naive stack, on the same sagas), its default jobs (one process
per core) and concurrency; start-up, worker spawn and import included. Sagas per second are
taken from outside (the process's wall time); CPU is the operating system's count for the
command and its workers (``RUSAGE_CHILDREN``), so a loaded machine shows in wall time, not in
CPU per saga. Peak RSS is the largest single process (``ru_maxrss``).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from .common import REPO, Section, Spread, Target


def _eval(n: int, seed: int) -> dict[str, Any]:
    """One ``amends eval`` in a fresh process: its JSON, plus wall, CPU and load from outside."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "amends.cli", "eval", "--sagas", str(n), "--seed", str(seed),
         "--json"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=3600,
    )  # fmt: skip
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1: amends violated an invariant (shown in the table)
        raise RuntimeError(f"amends eval --sagas {n} --seed {seed} failed: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    out["wall"] = wall
    out["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["maxrss_mib"] = after.ru_maxrss / 1024  # the largest child so far, in KiB on Linux
    out["load_range"] = (load0, os.getloadavg()[0])
    return out


def _row(label: str, n: int, r: dict[str, Any]) -> list[str]:
    amends_ = r["engines"]["amends"]
    naive = r["engines"]["naive"]
    violated = sum(v["violated"] for v in amends_["invariants"].values())
    return [
        label,
        f"{n:,}",
        str(r["jobs"]),
        f"{r['wall']:.1f}",
        f"{n / r['wall']:.0f}",
        f"{1000 * r['cpu'] / n:.1f}",
        f"{r['maxrss_mib']:.0f}",
        f"{r['load_range'][0]:.1f}-{r['load_range'][1]:.1f}",
        f"{amends_['sagas'] - violated:,}/{amends_['sagas']:,}",
        f"{100 * naive['silent_failure_rate']:.1f}%",
    ]


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    del loop  # every round is its own process, as a user runs it
    sec = Section(
        "5. Eval throughput (`amends eval --sagas N --seed S`, default jobs = cores)",
        ["run", "sagas", "jobs", "wall s", "sagas/s", "CPU ms/saga", "peak RSS MiB", "load",
         "amends held every invariant", "naive silently wrong"],
    )  # fmt: skip
    n = 300 if quick else 2000
    seeds = (1, 2) if quick else (1, 2, 3)
    rates: list[float] = []
    cpu: list[float] = []
    for seed in seeds:
        r = _eval(n, seed)
        rates.append(n / r["wall"])
        cpu.append(r["cpu"] / n)
        sec.rows.append(_row(f"`amends eval --sagas {n} --seed {seed}`", n, r))
    big = 10_000
    if quick:
        sec.notes.append("--quick: the 10,000-saga run (peak memory) is skipped.")
    else:
        r = _eval(big, 7)
        sec.rows.append(_row(f"`amends eval --sagas {big} --seed 7`", big, r))
    s = Spread.of(rates)
    cores = os.cpu_count() or 1
    ceiling = cores / Spread.of(cpu).median
    sec.targets.append(
        Target(
            "`amends eval` sagas checked per second (2 cores)",
            f"{s.median:.0f}/s [{s.p10:.0f}-{s.p90:.0f}]",
            ">= 500/s",
            s.median >= 500,
        )
    )
    sec.notes.append(
        f"sagas/s: median {s.fmt(digits=0)} over seeds {', '.join(map(str, seeds))}. Each saga: "
        "generate an adversarial scenario, run it forward on an in-memory SQLite saga log "
        "(a saga whose worker crashes: a SQLite file, reopened by the recovering engine) "
        "against the sandbox vendors, let other actors mutate the world, undo it with amends "
        "and (on a copy of the same world) with the naive undo stack, and check the "
        "invariants for both (five on the world, the preview's, and which forward steps ran). "
        "CPU ms/saga counts both engines, every process."
    )
    sec.notes.append(
        f"With {cores} idle cores the CPU per saga would allow ~{ceiling:.0f} sagas/s; the gap "
        "to the wall figure is the machine's other load (see the load column) and the waits "
        "the crash family makes for a dead worker's lease to run out."
    )
    return [sec]
