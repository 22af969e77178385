"""Shared pieces: statistics, the no-op catalog, machine description, result tables."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import amends

REPO = Path(__file__).resolve().parent.parent
SCRATCH = REPO / ".bench" / str(os.getpid())
"""Scratch directory on the repository's own disk (not tmpfs), one per run, for every file."""

LATENCY = 0.05
"""Simulated vendor latency of one compensation, seconds."""


def scratch(name: str) -> Path:
    """A fresh path in the scratch dir (any old file and its -wal/-shm removed)."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / name
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class Spread:
    """Median and p10/p90 of repeated measurements."""

    median: float
    p10: float
    p90: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread:
        s = sorted(xs)
        if len(s) == 1:
            return cls(s[0], s[0], s[0], 1)
        q = statistics.quantiles(s, n=10, method="inclusive")
        return cls(statistics.median(s), q[0], q[-1], len(s))

    def fmt(self, scale: float = 1.0, digits: int = 1) -> str:
        return (
            f"{self.median * scale:.{digits}f} "
            f"[{self.p10 * scale:.{digits}f}-{self.p90 * scale:.{digits}f}]"
        )


@dataclass
class Target:
    """One target from the issue and the measured value."""

    name: str
    measured: str
    goal: str
    met: bool | None  # None: not measured


@dataclass
class Section:
    """One benchmark's result: a table, notes and targets."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)


def noop_catalog(latency: float = LATENCY) -> amends.Catalog:
    """``bench.noop``: a reversible no-op that records itself as inverse (the cheapest step);
    ``bench.slow``, whose inverse ``bench.slow_undo`` takes ``latency`` seconds at its vendor."""
    catalog = amends.Catalog()

    @catalog.tool("bench.noop", reversibility="reversible")
    async def noop(call: amends.Call, i: int) -> int:
        call.inverse("bench.noop", i=i)
        call.no_drift_check(reason="a benchmark no-op: there is no state anyone could change")
        return i

    @catalog.tool("bench.slow", reversibility="reversible")
    async def slow(call: amends.Call, i: int) -> int:
        call.inverse("bench.slow_undo", i=i)
        call.no_drift_check(reason="a benchmark no-op: there is no state anyone could change")
        return i

    @catalog.tool("bench.slow_undo", reversibility="reversible")
    async def slow_undo(call: amends.Call, i: int) -> int:
        import asyncio

        await asyncio.sleep(latency)  # simulated vendor latency
        return i

    return catalog


def bare_noop(i: int) -> int:
    """The bare tool call, without amends: what a step costs when nothing is recorded."""
    return i


def machine() -> dict[str, str]:
    """CPU, memory, disk and software versions of this machine."""
    info: dict[str, str] = {}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        models = [
            ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")
        ]
        info["cpu"] = f"{len(models)} x {models[0]}" if models else "unknown"
    except OSError:
        info["cpu"] = "unknown"
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory"] = f"{int(mem) / 1024 / 1024:.1f} GiB"
    except (OSError, IndexError, ValueError):
        info["memory"] = "unknown"
    try:
        df = (
            subprocess.run(["df", "-hT", str(REPO)], capture_output=True, text=True, check=False)
            .stdout.splitlines()[-1]
            .split()
        )
        dev = df[0].rsplit("/", 1)[-1]
        rot = Path(f"/sys/block/{dev}/queue/rotational")
        kind = (
            ("rotational" if rot.read_text().strip() == "1" else "non-rotational")
            if rot.exists()
            else "?"
        )
        info["disk"] = f"{df[0]} ({df[1]}, {kind}, {df[2]} total) mounted on {df[6]}"
    except (OSError, IndexError):
        info["disk"] = "unknown"
    import sqlite3

    info["software"] = (
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"Linux {platform.release()}"
    )
    return info


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for pkg in ("amends", "dbos", "psycopg"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            parts.append(f"{pkg} (not installed)")
    return ", ".join(parts)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def as_str(x: Any) -> str:
    return str(x)


def postgres_log(url: str) -> amends.SagaLog:
    """``amends.PostgresLog(url)`` (the optional backend, imported only when used)."""
    from amends._log.postgres import PostgresLog

    return PostgresLog(url)
