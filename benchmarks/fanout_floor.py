"""The fan-out's floor (issue 29): what the mechanisms amends' rules ask for cost on their own.

``python -m benchmarks.fanout_floor [ROUNDS]`` runs, in one process and round by round side by
side, 1,000-step fan-outs of section 2's minimal write-ahead design (``benchmarks/fanout.py``'s
``MinimalWal``: one JSON row per step per phase, batched, two commits, WAL, synchronous=FULL),
then the same design with, one by one, each mechanism a rule makes every write-ahead log of
amends' kind pay, then amends itself (``SqliteLog`` FULL, ``bench.noop``), and prints the
process CPU per step (every thread) and its ratio to the minimal design, with the load:

- ``+ chain``: each record chained to the one before it with an HMAC-SHA-256 over a header and
  its text, kept in the row (rule 11's tamper evidence);
- ``+ a Task per step``: each tool call its own asyncio Task (steps run concurrently and each
  can be cancelled, waited for and reported alone);
- ``+ writer thread``: the commits on a thread of their own, so that an fsync never blocks the
  event loop, handed over through a queue and settled with ``call_soon_threadsafe``;
- ``+ a future per record``: each step waits for its own record's future (a step goes on as
  soon as its own intent is durable, rule 1), not one future per batch.

What is left between the last variant and amends is the engine's own work per step: the
contract and its checks (rules 2 and 4), the inverse and expectation captured with the result,
the saga's bookkeeping (dependencies, resources, undo order), secrets' redaction, the result's
size and depth checks, the step's handle and its states. The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import queue
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

K = 1000
KEY = b"bench-floor-signing-key-32-bytes"
_Row = tuple[str, int, str, str]


async def _noop(i: int) -> int:
    return i


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)


class FloorWal:
    """The minimal write-ahead design, with the mechanisms named in the module's docstring
    switched on one by one."""

    def __init__(
        self,
        path: str,
        *,
        chain: bool = False,
        tasks: bool = False,
        thread: bool = False,
        per_record: bool = False,
    ) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE rows (id INTEGER PRIMARY KEY, saga TEXT NOT NULL, step INTEGER NOT "
            "NULL, phase TEXT NOT NULL, body TEXT NOT NULL, hash TEXT)"
        )
        self.chain, self.tasks, self.thread, self.per_record = chain, tasks, thread, per_record
        self.sagas = 0
        self.head = ""
        self.jobs: queue.SimpleQueue[tuple[list[_Row], Any, list[asyncio.Future[None]]]] = (
            queue.SimpleQueue()
        )
        if thread:
            threading.Thread(target=self._run, daemon=True).start()

    def _commit(self, rows: list[_Row]) -> None:
        stored: list[tuple[str, int, str, str, str | None]] = []
        head = self.head
        for saga, step, phase, body in rows:
            digest: str | None = None
            if self.chain:
                header = f"{head}\x00{saga}\x00{step}\x00{phase}\x00".encode()
                head = digest = hmac.new(KEY, header + body.encode(), hashlib.sha256).hexdigest()
            stored.append((saga, step, phase, body, digest))
        self.head = head
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO rows (saga, step, phase, body, hash) VALUES (?,?,?,?,?)", stored
        )
        self.conn.execute("COMMIT")

    def _run(self) -> None:
        while True:
            rows, loop, futures = self.jobs.get()
            self._commit(rows)
            loop.call_soon_threadsafe(_settle, futures)

    async def _write(self, rows: list[_Row]) -> None:
        if not self.thread:
            self._commit(rows)
            return
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in (rows if self.per_record else (0,))]
        self.jobs.put((rows, loop, futures))
        for fut in futures:
            await fut

    async def fan_out(self, k: int) -> None:
        self.sagas += 1
        saga = f"saga_{self.sagas}"
        intents = [
            (saga, i, "intent", json.dumps({"tool": "bench.noop", "args": {"i": i}}))
            for i in range(k)
        ]
        await self._write(intents)
        if self.tasks:
            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(_noop(i), name=f"s{i}") for i in range(k)]
            results = await asyncio.gather(*tasks)
        else:
            results = await asyncio.gather(*(_noop(i) for i in range(k)))
        await self._write(
            [(saga, i, "result", json.dumps({"result": r})) for i, r in enumerate(results)]
        )


VARIANTS: dict[str, dict[str, bool]] = {
    "minimal write-ahead design (section 2)": {},
    "+ chain (HMAC per record)": {"chain": True},
    "+ chain + a Task per step": {"chain": True, "tasks": True},
    "+ chain + Task + writer thread": {"chain": True, "tasks": True, "thread": True},
    "+ chain + Task + writer thread + a future per record": {
        "chain": True,
        "tasks": True,
        "thread": True,
        "per_record": True,
    },
}


def measure(rounds: int) -> dict[str, list[float]]:
    """CPU µs per step of each variant and of amends, ``rounds`` interleaved rounds."""
    import amends

    from .common import noop_catalog, scratch
    from .fanout import fan_out

    loop = asyncio.new_event_loop()
    engine = amends.Engine(
        noop_catalog(), log=amends.SqliteLog(str(scratch("floor-amends.db")), synchronous="FULL")
    )
    runs: dict[str, Callable[[], Awaitable[Any]]] = {}
    for i, (name, switches) in enumerate(VARIANTS.items()):
        wal = FloorWal(str(scratch(f"floor-{i}.db")), **switches)
        runs[name] = lambda wal=wal: wal.fan_out(K)  # type: ignore[misc]
    runs["amends (SqliteLog FULL, bench.noop)"] = lambda: fan_out(engine, K)
    for run in runs.values():  # warm-up
        loop.run_until_complete(run())
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            t = time.process_time()
            loop.run_until_complete(run())
            cpu[name].append((time.process_time() - t) / K * 1e6)
    loop.run_until_complete(engine.close())
    return cpu


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 15
    start = os.getloadavg()
    cpu = measure(rounds)
    base = statistics.median(cpu[next(iter(VARIANTS))])
    print(f"1,000-step fan-outs, {rounds} interleaved rounds, process CPU per step (median)")
    for name, values in cpu.items():
        median = statistics.median(values)
        print(f"  {name:56s} {median:6.1f} µs  {median / base:5.2f}x")
    print(f"load (1/5/15 min): {start} at the start, {os.getloadavg()} at the end; 2 cores")


if __name__ == "__main__":
    main(sys.argv[1:])
