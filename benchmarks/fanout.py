"""2. Fan-out: one saga with k concurrent steps; amortized recording cost per step, as a ratio to
the minimal write-ahead design measured in the same run (issue 29)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

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
