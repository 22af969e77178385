"""2. Fan-out: one saga with k concurrent steps; amortized recording cost per step, as a ratio to
the minimal write-ahead design measured in the same run (issue 29)."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import amends

from .common import Section, Spread, Target, noop_catalog, scratch


async def fan_out(engine: amends.Engine, k: int) -> float:
    """Seconds per step of one saga whose ``k`` steps start at once (open/close included)."""
    t = time.perf_counter()
    async with engine.saga(f"bench: fan-out {k}") as saga:
        steps = [saga.call("bench.noop", i=i) for i in range(k)]
        await saga.gather(*steps)
    return (time.perf_counter() - t) / k


async def _noop(i: int) -> int:
    return i


class MinimalWal:
    """The minimal write-ahead design issue 29 measures the fan-out against: plain sqlite3 on
    the same disk, WAL, synchronous=FULL, one JSON row per step per phase, batched, two
    commits per fan-out (every intent durable before any call, then every result), the ``k``
    tool calls run concurrently on the loop. No chain, no saga row, no inverse, no contract
    check, no crash recovery: what any write-ahead log of a fan-out must at least do."""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(scratch("minimal-wal.db"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE rows (id INTEGER PRIMARY KEY, saga TEXT NOT NULL, step INTEGER NOT "
            "NULL, phase TEXT NOT NULL, body TEXT NOT NULL)"
        )
        self.sagas = 0

    def _commit(self, rows: list[tuple[str, int, str, str]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("INSERT INTO rows (saga, step, phase, body) VALUES (?,?,?,?)", rows)
        self.conn.execute("COMMIT")

    async def fan_out(self, k: int) -> float:
        """Seconds per step of one fan-out of ``k`` no-op tool calls."""
        t = time.perf_counter()
        self.sagas += 1
        saga = f"saga_{self.sagas}"
        intent = [
            (saga, i, "intent", json.dumps({"tool": "bench.noop", "args": {"i": i}}))
            for i in range(k)
        ]
        self._commit(intent)
        results = await asyncio.gather(*(_noop(i) for i in range(k)))
        self._commit(
            [(saga, i, "result", json.dumps({"result": r})) for i, r in enumerate(results)]
        )
        return (time.perf_counter() - t) / k


@contextmanager
def _counting(target: Any, name: str, counts: Counter[str], key: str) -> Iterator[None]:
    """Count calls of ``target.name`` (an instance or a module attribute) while inside."""
    real: Callable[..., Any] = getattr(target, name)
    own = name in vars(target)  # a module's function; else an instance's (class) method

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return real(*args, **kwargs)

    setattr(target, name, counted)
    try:
        yield
    finally:
        if own:
            setattr(target, name, real)
        else:
            delattr(target, name)  # the class's method again


def budget(loop: asyncio.AbstractEventLoop, engine: amends.Engine, k: int) -> dict[str, float]:
    """What one fan-out of ``k`` steps costs per step, in counts that do not depend on the
    machine's load (issue 29 item 1): Tasks, futures and callbacks the event loop ran, JSON
    encodes (the log's one encoder) and chain hashes, durable commits, garbage collections."""
    from amends._log import records, sql

    counts: Counter[str] = Counter()
    db: Any = engine.log.db  # type: ignore[attr-defined]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            counts["garbage collections"] += 1

    with (
        _counting(loop, "create_task", counts, "Tasks"),
        _counting(loop, "create_future", counts, "futures"),
        _counting(loop, "call_soon", counts, "loop callbacks"),
        _counting(loop, "call_soon_threadsafe", counts, "writer-thread wake-ups"),
        _counting(records, "dumps", counts, "JSON encodes"),
        _counting(sql, "dumps", counts, "JSON encodes"),
        _counting(sql, "chain_hash", counts, "chain hashes"),
        _counting(db, "_commit", counts, "commits"),
    ):
        gc.callbacks.append(on_gc)
        try:
            loop.run_until_complete(fan_out(engine, k))
        finally:
            gc.callbacks.remove(on_gc)
    return {name: n / k for name, n in sorted(counts.items())}


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    sizes = [1, 12, 100] if quick else [1, 12, 100, 1000]
    rounds = 3 if quick else 7
    log = amends.SqliteLog(str(scratch("fanout.db")), synchronous="FULL")
    engine = amends.Engine(noop_catalog(), log=log)
    minimal = MinimalWal()
    samples: dict[int, list[float]] = {k: [] for k in sizes}
    refs: dict[int, list[float]] = {k: [] for k in sizes}
    ratios: dict[int, list[float]] = {k: [] for k in sizes}
    for k in sizes:  # warm-up
        loop.run_until_complete(fan_out(engine, k))
        loop.run_until_complete(minimal.fan_out(k))
    cpu_ratios: dict[int, list[float]] = {k: [] for k in sizes}
    cpu = time.process_time  # every thread of the process: amends' writer thread counts too
    for r in range(rounds):
        order = sizes[r % len(sizes) :] + sizes[: r % len(sizes)]
        for k in order:
            # side by side: the reference right before amends, each round, each size
            c0 = cpu()
            ref = loop.run_until_complete(minimal.fan_out(k))
            c1 = cpu()
            ours = loop.run_until_complete(fan_out(engine, k))
            c2 = cpu()
            refs[k].append(ref)
            samples[k].append(ours)
            ratios[k].append(ours / ref)
            # CPU is what a loaded machine does not stretch (the wall ratio is noisier)
            cpu_ratios[k].append((c2 - c1) / max(c1 - c0, 1e-6))
    per_step = budget(loop, engine, max(sizes))
    loop.run_until_complete(engine.close())
    minimal.conn.close()
    sec = Section(
        "2. Fan-out: amortized recording cost per step (SqliteLog, synchronous=FULL)",
        ["concurrent steps", "µs/step median [p10-p90]", "saga wall ms (median)",
         "minimal write-ahead µs/step", "ratio to minimal [p10-p90]", "CPU ratio [p10-p90]"],
    )  # fmt: skip
    for k in sizes:
        s = Spread.of(samples[k])
        sec.rows.append(
            [f"{k:,}", s.fmt(1e6), f"{s.median * k * 1e3:.1f}", Spread.of(refs[k]).fmt(1e6),
             Spread.of(ratios[k]).fmt(digits=2) + "x", Spread.of(cpu_ratios[k]).fmt(digits=2) + "x"]
        )  # fmt: skip
    sec.notes.append(
        f"{rounds} interleaved rounds (sizes rotated). Concurrent steps share commits through the "
        f"SQLite log's group commit (one writer thread, up to 256 writes per transaction). The "
        f"minimal write-ahead design (issue 29) runs on the same disk right before each amends "
        f"fan-out: one JSON row per step per phase, batched, two commits, the tool calls "
        f"concurrent; the ratio is taken round by round, of wall time and of process CPU time "
        f"(both threads; a loaded machine stretches the wall ratio, hardly the CPU one)."
    )
    sec.notes.append(
        f"Per step of one {max(sizes):,}-step fan-out, counted (these do not move with the "
        f"load): {', '.join(f'{name} {v:.3g}' for name, v in per_step.items())}. The minimal "
        f"design has no Task per step, no future per write, no chain hash."
    )
    biggest = max(sizes)
    s = Spread.of(ratios[biggest])
    c = Spread.of(cpu_ratios[biggest])
    sec.targets.append(
        Target(
            f"{biggest:,}-step fan-out, amortized, vs the minimal write-ahead design"
            + (" (--quick: 1,000 not run)" if quick else ""),
            f"{Spread.of(samples[biggest]).median * 1e6:.1f} µs/step = {s.median:.2f}x "
            f"[{s.p10:.2f}-{s.p90:.2f}] wall, {c.median:.2f}x CPU",
            "<= 2x the minimal design",
            s.median <= 2.0,
        )
    )
    return [sec]
