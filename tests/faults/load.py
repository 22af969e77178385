"""The PostgreSQL load (issue 12), shared by ``tests/faults/test_load.py`` and
``benchmarks/pgload.py``: N sagas x 12 steps recorded by 4 worker processes on one log, then
undone by 4 processes, and an audit of the world the vendor saw.

The workers are ``worker.py`` (real child processes); each range of sagas has its own vendor
file (``vendor.py``, durable across SIGKILL, every request and effect countable), so what is
under load is the saga log. CPU is measured for the workers (``RUSAGE_CHILDREN``) and, when the
server's data directory is given, for the PostgreSQL server (its processes' ``/proc`` times).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import vendor

import amends

WORKER = Path(__file__).with_name("worker.py")
STEPS, WORKERS = 12, 4
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    """One direction of the load (forward or undo)."""

    seconds: float
    """Wall time from starting the workers to the last one exiting."""
    worker_cpu: float
    """User + system CPU seconds of the worker processes together."""
    server_cpu: float | None
    """User + system CPU seconds of the PostgreSQL server's processes (None: not measured)."""
    outs: list[dict[str, Any]] = field(default_factory=list)
    """Each worker's JSON result line."""


def _proc_cpu(pid: int, children: bool) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime of reaped backends
    return ticks / _TICK


def server_cpu(data_dir: Path) -> float:
    """CPU seconds used so far by a PostgreSQL server: the postmaster (with its exited
    backends) and every live child process."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = _proc_cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == postmaster:
            total += _proc_cpu(int(entry.name), children=False)
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_phase(
    log_url: str,
    vpath: Path,
    mode: str,
    sagas: int,
    *,
    data_dir: Path | None = None,
    workers: int = WORKERS,
    extra: tuple[str, ...] = (),
) -> Phase:
    """Run ``mode`` (``record-many`` or ``undo-many``) over ``sagas`` sagas split across
    ``workers`` processes; waits for all of them (each must exit 0)."""
    per = sagas // workers
    cpu0 = _children_cpu()
    srv0 = server_cpu(data_dir) if data_dir is not None else None
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                log_url,
                str(vpath),
                mode,
                "load",
                "--lease",
                "30",
                "--count",
                str(per),
                "--offset",
                str(i * per),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    outs = []
    failed = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        if proc.returncode != 0:
            failed.append(f"worker exited {proc.returncode}: {stderr[-3000:]}")
            continue
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    seconds = time.perf_counter() - t0
    if failed:
        raise RuntimeError("\n".join(failed))
    srv = server_cpu(data_dir) - srv0 if data_dir is not None and srv0 is not None else None
    return Phase(seconds, _children_cpu() - cpu0, srv, outs)


@dataclass
class World:
    """What the log and the vendor hold after the load, counted."""

    statuses: Counter[str]
    step_states: dict[str, int]
    completed_sagas: int
    reversal_states: dict[str, int]
    compensation_states: dict[str, int]
    effects: int
    undo_effects: int
    duplicates: int
    """Effects applied more than once for one idempotency key (must be 0)."""
    compensations_sent: int
    """Distinct compensation idempotency keys the vendor received."""
    most_sends: int
    """Most requests the vendor received for one compensation key (1: none resent)."""
    log_problems: list[str]
    """What the log's tamper-evidence check (``verify()``) finds after both phases (must be
    none: concurrent writers keep every saga's chain and the shards of the log's heads)."""


async def _log_problems(log_url: str) -> list[str]:
    """What ``verify()`` finds in the whole log, a line per problem."""
    log = amends.PostgresLog(log_url)
    try:
        return [f"{p.saga_id}: {p.what}: {p.detail}" for p in await log.verify()]
    finally:
        await log.close()


def audit(log_url: str, vpath: Path, sagas: int, undo: Phase, workers: int = WORKERS) -> World:
    """Count what the log and every vendor file hold after a forward and an undo phase."""
    import psycopg

    statuses: Counter[str] = Counter()
    for out in undo.outs:
        statuses.update(out["statuses"])
    with psycopg.connect(log_url) as conn:
        steps = dict(conn.execute("SELECT state, count(*) FROM steps GROUP BY state").fetchall())
        done = conn.execute("SELECT count(*) FROM sagas WHERE state='completed'").fetchone()
        revs = dict(conn.execute("SELECT state, count(*) FROM reversals GROUP BY state").fetchall())
        comps = dict(
            conn.execute("SELECT state, count(*) FROM compensations GROUP BY state").fetchall()
        )
    effects: list[tuple[str, str, str]] = []
    requests: list[tuple[str, ...]] = []
    per = sagas // workers
    for i in range(workers):
        _kv, eff, req = vendor.world(f"{vpath}.{i * per}")
        effects += eff
        requests += req
    idems = Counter(e[2] for e in effects)
    sent = Counter(r[2] for r in requests if r[1] == "compensate")
    return World(
        statuses=statuses,
        step_states=steps,
        completed_sagas=int(done[0]) if done else 0,
        reversal_states=revs,
        compensation_states=comps,
        effects=len(effects),
        undo_effects=sum(1 for e in effects if e[2].endswith(":undo")),
        duplicates=sum(n - 1 for n in idems.values() if n > 1),
        compensations_sent=len(sent),
        most_sends=max(sent.values(), default=0),
        log_problems=asyncio.run(_log_problems(log_url)),
    )
