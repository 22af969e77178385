"""5. Eval throughput: adversarial sagas checked per second, and peak memory of a large run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

from .common import REPO, Section, Spread, Target

_CHILD = """
import asyncio, json, resource, sys, time
from amends.evals.suite import run_suite
n, seed = int(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
tallies = asyncio.run(run_suite(n, seed, engines=("amends",)))
wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "sagas": tallies["amends"].sagas,
                  "wrong": tallies["amends"].silently_wrong,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _child(n: int, seed: int) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n), str(seed)],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=1200,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"eval run of {n} sagas failed: {proc.stderr[-2000:]}")
    out: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    sec = Section(
        "5. Eval throughput (amends.evals.suite.run_suite, engine 'amends')",
        ["run", "sagas", "sagas/s median [p10-p90]", "peak RSS MiB", "silently wrong"],
    )
    try:
        from amends.evals.suite import run_suite
    except ImportError as exc:
        sec.notes.append(f"not measured: amends.evals is not importable ({exc})")
        sec.targets.append(
            Target("adversarial sagas checked per second", "not measured", ">= 500/s", None)
        )
        return [sec]
    n = 30 if quick else 200
    rounds = 2 if quick else 3
    rates: list[float] = []
    wrong = 0
    for r in range(rounds + 1):
        t = time.perf_counter()
        tallies = loop.run_until_complete(run_suite(n, 1 + r, engines=("amends",)))
        if r:
            rates.append(n / (time.perf_counter() - t))
            wrong += tallies["amends"].silently_wrong
    s = Spread.of(rates)
    sec.rows.append([f"in-process, {rounds} seeds", f"{n:,}", s.fmt(digits=0), "-", str(wrong)])
    big = 10_000
    if quick:
        sec.notes.append("--quick: the 10,000-saga peak-memory run is skipped (full run only).")
    else:
        child = _child(big, 7)
        sec.rows.append([
            "subprocess (fresh interpreter)", f"{int(child['sagas']):,}",
            f"{child['sagas'] / child['wall']:.0f}", f"{child['maxrss_kib'] / 1024:.0f}",
            str(int(child["wrong"])),
        ])  # fmt: skip
    sec.targets.append(
        Target(
            "adversarial sagas checked per second", f"{s.median:.0f}/s", ">= 500/s", s.median >= 500
        )
    )
    sec.notes.append(
        "Each saga: generate an adversarial scenario (drift, faults, crashes), run it forward on "
        "an in-memory log against the eval world, undo it, and check every invariant "
        "(run_suite's default concurrency 48). Peak RSS is ru_maxrss of the subprocess "
        f"running {big:,} sagas."
    )
    return [sec]
