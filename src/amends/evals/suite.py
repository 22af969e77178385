"""Runs many scenarios and tallies the invariants: concurrently in one event loop per process,
sharded over processes (``jobs``), each saga on the real SQL log (an in-memory ``SqliteLog``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import math
import multiprocessing
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from amends import ConfigError, Engine, SagaLog, SqliteLog

from .broken import BROKEN_ENGINES
from .generator import FAMILIES, generate
from .invariants import INVARIANTS, applicable, check
from .runner import SagaResult, crash_log_file, reopen, run_scenario, run_scenario_both

__all__ = [
    "CONCURRENCY",
    "ENGINES",
    "EngineTally",
    "default_jobs",
    "engine_factory",
    "run_indexes",
    "run_suite",
]

ENGINES: tuple[str, ...] = ("amends", "naive", *BROKEN_ENGINES)
CONCURRENCY = 4
"""Scenarios computing at once per process by default. More only adds CPU (more live objects
for the garbage collector, longer ready queues): side by side, 48 cost ~12 % more CPU per saga
than 8, and 8 ~4 % more than 4; 2 is no better than 4 (issue 12). The sandbox answers at once,
so a few sagas keep the loop busy; those sleeping (stall, crash) wait outside this limit."""


BATCH_GC_THRESHOLD = (50_000, 50, 100)
"""The collector's thresholds while a batch of sagas runs (:func:`batch_gc`)."""


@contextlib.contextmanager
def batch_gc() -> Iterator[None]:
    """The garbage collector tuned for a batch of thousands of sagas, put back afterwards.

    What lives through the whole batch (modules, the catalog, the world templates) is frozen out
    of the collector's scans, and young collections run every 50,000 allocations instead of 700:
    a saga's objects are almost all freed by reference counting, and full collections scanning
    the process's long-lived objects cost ~12 % of the eval's CPU (issue 29: 7 full collections
    per 300 sagas -> 1, 0.74-0.99x CPU per saga in four alternating pairs at load 7-15). What is
    checked does not change: the same sagas, engines, logs and invariants.
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*BATCH_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


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
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    """Invariant -> sagas it applied to (``preview``: those whose world did not change between
    preview and undo)."""

    def rate(self, invariant: str) -> float:
        n = self.checked[invariant]
        return 1.0 - self.violations[invariant] / n if n else 1.0

    @property
    def silent_failure_rate(self) -> float:
        return self.silently_wrong / self.sagas if self.sagas else 0.0

    def add(self, r: SagaResult, v: dict[str, list[str]]) -> None:
        self.sagas += 1
        for name in applicable(r):
            self.checked[name] += 1
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

    def merge(self, other: EngineTally) -> None:
        """Add ``other``'s counts (another shard of the same run) to this tally."""
        self.sagas += other.sagas
        self.silently_wrong += other.silently_wrong
        for name in INVARIANTS:
            self.violations[name] += other.violations[name]
            self.checked[name] += other.checked[name]
            room = 20 - len(self.failing[name])
            self.failing[name].extend(other.failing[name][:room])
            if name in other.examples:
                self.examples.setdefault(name, other.examples[name])
        for fam, counts in other.by_family.items():
            mine = self.by_family.setdefault(fam, {"sagas": 0, "wrong": 0, "violated": 0})
            for k, n in counts.items():
                mine[k] += n

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "sagas": self.sagas,
            "silently_wrong": self.silently_wrong,
            "silent_failure_rate": round(self.silent_failure_rate, 4),
            "invariants": {
                k: {
                    "violated": self.violations[k],
                    "checked": self.checked[k],
                    "rate": round(self.rate(k), 4),
                    "failing": self.failing[k],
                    "example": self.examples.get(k),
                }
                for k in INVARIANTS
            },
            "families": {f: self.by_family[f] for f in FAMILIES if f in self.by_family},
        }


def engine_factory(engine: str) -> tuple[str, Callable[..., Engine] | None]:
    """The kind of run (``"amends"`` or ``"naive"``) and the engine class for an ``ENGINES`` name
    (``None``: the real :class:`amends.Engine`; a deliberately broken engine otherwise)."""
    if engine == "amends":
        return "amends", None
    if engine == "naive":
        return "naive", None
    return "amends", BROKEN_ENGINES[engine]


def default_jobs() -> int:
    """Processes ``amends eval`` shards over by default: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


async def run_suite(
    sagas: int,
    seed: int,
    engines: Sequence[str] = ("amends", "naive"),
    *,
    jobs: int = 1,
    concurrency: int = CONCURRENCY,
    shared_logs: int = 4,
    on_done: Callable[[int], None] | None = None,
) -> dict[str, EngineTally]:
    """Run ``sagas`` scenarios of ``seed`` on each engine and tally the invariants.

    Args:
        sagas: How many scenarios (indexes ``0 .. sagas-1``).
        seed: The generator seed.
        engines: ``"amends"``, ``"naive"`` and/or names of :data:`BROKEN_ENGINES`.
        jobs: Processes to shard the scenarios over (1: all in this process). Worker
            processes are spawned, so a script calling this with ``jobs > 1`` needs the usual
            ``if __name__ == "__main__":`` guard.
        concurrency: Scenarios computing at once in one event loop (those waiting out a
            stall or a crashed worker's lease wait outside this limit).
        shared_logs: In-memory SQLite logs shared by the scenarios of one process.
        on_done: Called with a number of finished sagas (per engine) as they finish.

    Raises:
        ConfigError: ``sagas``, ``jobs`` or ``concurrency`` is not positive, or an engine is
            unknown.
    """
    for name, value in (("sagas", sagas), ("jobs", jobs), ("concurrency", concurrency)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        raise ConfigError(f"unknown engine {unknown[0]!r}; use one of {', '.join(ENGINES)}")
    if jobs == 1 or sagas < 2 * jobs:
        return await run_indexes(range(sagas), seed, engines, concurrency=concurrency,
                                 shared_logs=shared_logs, on_done=on_done)  # fmt: skip
    # Chunks small enough that the progress bar moves, large enough that the end of a chunk
    # (a few sagas left, sleeping out a crashed worker's lease while the loop idles) is rare:
    # at least ~500 sagas, at most 8 chunks a process. Each chunk is every ``n_chunks``-th
    # index, so every chunk has every family and takes about as long as the others.
    n_chunks = min(sagas, jobs * max(1, min(8, sagas // (500 * jobs))))
    chunks = [range(k, sagas, n_chunks) for k in range(n_chunks)]
    tallies = {e: EngineTally(e) for e in engines}
    loop = asyncio.get_running_loop()
    ctx = multiprocessing.get_context(_start_method())
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        futures = [
            loop.run_in_executor(
                pool, _run_chunk, list(chunk), seed, tuple(engines), concurrency, shared_logs
            )
            for chunk in chunks
        ]
        try:
            for fut in asyncio.as_completed(futures):
                part = await fut
                for e, t in part.items():
                    tallies[e].merge(t)
                    if on_done is not None:
                        on_done(t.sagas)
        finally:
            for f in futures:
                f.cancel()
            await asyncio.gather(*futures, return_exceptions=True)
    return tallies


def _start_method() -> str:
    """How worker processes start: ``fork`` when this process runs a single thread on a system
    that has it (a worker then starts with amends, the catalog's modules and the generator
    already imported: issue 29, a spawned worker spends ~0.4 s of CPU importing them again);
    ``spawn`` otherwise, since forking a process with other threads running can copy a lock
    one of them holds (the terminal's progress bar runs a thread)."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _run_chunk(
    indexes: list[int], seed: int, engines: tuple[str, ...], concurrency: int, shared_logs: int
) -> dict[str, EngineTally]:
    """One shard, in a worker process (its own event loop, catalog and logs)."""
    return asyncio.run(
        run_indexes(indexes, seed, engines, concurrency=concurrency, shared_logs=shared_logs)
    )


async def run_indexes(
    indexes: Iterable[int],
    seed: int,
    engines: Sequence[str] = ("amends", "naive"),
    *,
    concurrency: int = CONCURRENCY,
    shared_logs: int = 4,
    on_done: Callable[[int], None] | None = None,
) -> dict[str, EngineTally]:
    """Run the scenarios ``seed:i`` for ``i`` in ``indexes`` in this process's event loop.

    Scenarios without a crash point share ``shared_logs`` in-memory logs (creating and closing
    one SQLite log per saga would dominate the run). A crash scenario's recovery scans its whole
    log, so it runs on a log of its own while it runs: a SQLite file in this batch's temporary
    directory, which its recovery reopens (a new connection reading what the crashed worker
    committed, issue 29), from a pool reused by the next crash scenario once no reversal on it
    is unfinished (issue 12: a new SQLite log per crash saga cost ~1.7 ms of CPU). The files
    are closed and removed when the batch ends.
    """
    with batch_gc():
        return await _run_indexes(list(indexes), seed, engines, concurrency, shared_logs, on_done)


async def _run_indexes(
    indexes: list[int],
    seed: int,
    engines: Sequence[str],
    concurrency: int,
    shared_logs: int,
    on_done: Callable[[int], None] | None,
) -> dict[str, EngineTally]:
    tallies = {e: EngineTally(e) for e in engines}
    gate = asyncio.Semaphore(concurrency)
    # a stall or crash scenario mostly sleeps (for its budget, or for the dead worker's lease
    # to run out): a gate of their own, so they do not hold the others' slots while they sleep
    sleepy_gate = asyncio.Semaphore(4 * concurrency)
    logs = [SqliteLog(":memory:", synchronous="OFF") for _ in range(shared_logs)]
    # crash logs no scenario is using, each with the connection a restarted worker reopens it
    # with (kept with its file: opening one per crash saga cost a connection, its schema check
    # and a writer thread each time)
    free: list[tuple[SqliteLog, SagaLog | None]] = []
    files = contextlib.AsyncExitStack()  # the batch's crash log files, closed and removed after
    directory = files.enter_context(tempfile.TemporaryDirectory(prefix="amends-eval-"))

    async def one(engine: str, index: int) -> None:
        kind, factory = engine_factory(engine)
        log = logs[index % len(logs)]
        sc = generate(seed, index)
        async with sleepy_gate if sc.stall or sc.crash is not None else gate:
            crash_log = restarted = None
            if sc.crash is not None:  # a file: its recovery reopens it, as a restart would
                if free:
                    crash_log, restarted = free.pop()
                else:
                    crash_log = await files.enter_async_context(crash_log_file(directory))
                    restarted = reopen(crash_log)
                    if restarted is not None:
                        files.push_async_callback(restarted.close)
            try:
                if engine == "amends" and "naive" in engines:  # one forward pass for both
                    rs = await run_scenario_both(sc, log=log, crash_log=crash_log,
                                                 restarted=restarted)  # fmt: skip
                else:
                    rs = [await run_scenario(sc, kind, engine_factory=factory, log=log,
                                             crash_log=crash_log, restarted=restarted)]  # fmt: skip
            finally:
                # reused only when no reversal on it is left unfinished: the next scenario's
                # recovery would resume it against the wrong world
                if crash_log is not None and not await crash_log.expired_reversals(math.inf):
                    free.append((crash_log, restarted))
        for r in rs:
            tallies[r.engine if factory is None else engine].add(r, check(r))
            if on_done is not None:
                on_done(1)

    jobs = [
        one(e, i) for e in engines if not (e == "naive" and "amends" in engines) for i in indexes
    ]
    async with files:
        try:
            await asyncio.gather(*jobs)
        finally:
            for log in logs:
                await log.close()
    return tallies
