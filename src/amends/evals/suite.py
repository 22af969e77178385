"""Runs many scenarios concurrently in one event loop and tallies the invariants."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import Engine
from ..log.sqlite import SqliteLog
from .broken import BROKEN_ENGINES
from .generator import FAMILIES, generate
from .invariants import INVARIANTS, check
from .runner import SagaResult, run_scenario, run_scenario_both

__all__ = ["ENGINES", "EngineTally", "run_suite"]

ENGINES: tuple[str, ...] = ("amends", "naive", *BROKEN_ENGINES)


@dataclass
class EngineTally:
    """What one engine did over the whole run."""

    engine: str
    sagas: int = 0
    silently_wrong: int = 0
    """Sagas whose report claimed something the world does not show (honesty violated)."""
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    """Invariant -> sagas violating it."""
    by_family: dict[str, dict[str, int]] = field(default_factory=dict)
    """Family -> {"sagas", "wrong", "violated"}."""
    failing: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INVARIANTS})
    """Invariant -> SEED:INDEX of failing sagas (first 20)."""
    examples: dict[str, str] = field(default_factory=dict)
    """Invariant -> one violation message."""

    def rate(self, invariant: str) -> float:
        return 1.0 - self.violations[invariant] / self.sagas if self.sagas else 1.0

    @property
    def silent_failure_rate(self) -> float:
        return self.silently_wrong / self.sagas if self.sagas else 0.0

    def add(self, r: SagaResult, v: dict[str, list[str]]) -> None:
        self.sagas += 1
        fam = self.by_family.setdefault(r.scenario.family, {"sagas": 0, "wrong": 0, "violated": 0})
        fam["sagas"] += 1
        if v["honesty"]:
            self.silently_wrong += 1
            fam["wrong"] += 1
        if any(v.values()):
            fam["violated"] += 1
        for name, msgs in v.items():
            if msgs:
                self.violations[name] += 1
                if len(self.failing[name]) < 20:
                    self.failing[name].append(r.scenario.ref)
                self.examples.setdefault(name, f"{r.scenario.ref}: {msgs[0]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "sagas": self.sagas,
            "silently_wrong": self.silently_wrong,
            "silent_failure_rate": round(self.silent_failure_rate, 4),
            "invariants": {
                k: {
                    "violated": self.violations[k],
                    "rate": round(self.rate(k), 4),
                    "failing": self.failing[k],
                    "example": self.examples.get(k),
                }
                for k in INVARIANTS
            },
            "families": {f: self.by_family[f] for f in FAMILIES if f in self.by_family},
        }


def _factory(engine: str) -> tuple[str, Callable[..., Engine] | None]:
    if engine == "amends":
        return "amends", None
    if engine == "naive":
        return "naive", None
    return "amends", BROKEN_ENGINES[engine]


async def run_suite(
    sagas: int,
    seed: int,
    engines: Sequence[str] = ("amends", "naive"),
    *,
    concurrency: int = 48,
    shared_logs: int = 4,
    on_done: Callable[[], None] | None = None,
) -> dict[str, EngineTally]:
    """Run ``sagas`` scenarios of ``seed`` on each engine; ``concurrency`` at a time.

    Scenarios without a crash point share ``shared_logs`` in-memory logs (creating and closing
    one SQLite log per saga would dominate the run); each crash scenario gets its own.
    """
    tallies = {e: EngineTally(e) for e in engines}
    gate = asyncio.Semaphore(concurrency)
    logs = [SqliteLog(":memory:", synchronous="OFF") for _ in range(shared_logs)]

    async def one(engine: str, index: int) -> None:
        kind, factory = _factory(engine)
        log = logs[index % len(logs)]
        sc = generate(seed, index)
        async with gate:
            if engine == "amends" and "naive" in engines:  # one forward pass for both
                rs = await run_scenario_both(sc, log=log)
            else:
                rs = [await run_scenario(sc, kind, engine_factory=factory, log=log)]
        for r in rs:
            tallies[r.engine if factory is None else engine].add(r, check(r))
            if on_done is not None:
                on_done()

    jobs = [
        one(e, i)
        for e in engines
        if not (e == "naive" and "amends" in engines)
        for i in range(sagas)
    ]
    try:
        await asyncio.gather(*jobs)
    finally:
        for log in logs:
            await log.close()
    return tallies
