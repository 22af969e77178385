"""2. Fan-out: one saga with k concurrent steps; amortized recording cost per step."""

from __future__ import annotations

import asyncio
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


def run(loop: asyncio.AbstractEventLoop, quick: bool) -> list[Section]:
    sizes = [1, 12, 100] if quick else [1, 12, 100, 1000]
    rounds = 3 if quick else 7
    log = amends.SqliteLog(str(scratch("fanout.db")), synchronous="FULL")
    engine = amends.Engine(noop_catalog(), log=log)
    samples: dict[int, list[float]] = {k: [] for k in sizes}
    for k in sizes:  # warm-up
        loop.run_until_complete(fan_out(engine, k))
    for r in range(rounds):
        order = sizes[r % len(sizes) :] + sizes[: r % len(sizes)]
        for k in order:
            samples[k].append(loop.run_until_complete(fan_out(engine, k)))
    loop.run_until_complete(engine.close())
    sec = Section(
        "2. Fan-out: amortized recording cost per step (SqliteLog, synchronous=FULL)",
        ["concurrent steps", "µs/step median [p10-p90]", "saga wall ms (median)"],
    )
    for k in sizes:
        s = Spread.of(samples[k])
        sec.rows.append([f"{k:,}", s.fmt(1e6), f"{s.median * k * 1e3:.1f}"])
    sec.notes.append(
        f"{rounds} interleaved rounds (sizes rotated). Concurrent steps share commits through the "
        f"SQLite log's group commit (one writer thread, up to 256 writes per transaction)."
    )
    if 1000 in samples:
        s = Spread.of(samples[1000])
        sec.targets.append(
            Target(
                "1,000-step fan-out, amortized",
                f"{s.median * 1e6:.1f} µs/step",
                "<= 50 µs/step",
                s.median <= 50e-6,
            )
        )
    else:
        sec.targets.append(
            Target("1,000-step fan-out, amortized", "not run (--quick)", "<= 50 µs/step", None)
        )
    return [sec]
