"""Where the time of a durable step and of a wide reversal goes: ``python -m benchmarks.profile``.

Times the SQLite log's writer thread (``_commit``: SQL + COMMIT + fsync) against the wall time, and
profiles the event-loop thread with pyinstrument.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import amends
from amends._log import sqlite as sqlite_backend

from . import reversal
from .common import noop_catalog, scratch
from .durable import amends_steps, fsync_floor


class _CommitClock:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.batches = 0
        self.writes = 0
        self._orig: Any = sqlite_backend._SqliteDatabase._commit

    def install(self) -> None:
        clock, orig = self, self._orig

        def commit(db: Any, batch: list[Any]) -> None:
            t = time.perf_counter()
            orig(db, batch)
            clock.seconds += time.perf_counter() - t
            clock.batches += 1
            clock.writes += len(batch)

        sqlite_backend._SqliteDatabase._commit = commit  # type: ignore[method-assign,assignment]

    def remove(self) -> None:
        sqlite_backend._SqliteDatabase._commit = self._orig  # type: ignore[method-assign]


def main() -> None:
    from pyinstrument import Profiler

    loop = asyncio.new_event_loop()
    clock = _CommitClock()
    clock.install()
    engine = amends.Engine(noop_catalog(), log=amends.SqliteLog(str(scratch("profile.db"))))
    n = 200
    loop.run_until_complete(amends_steps(engine, 10))
    floor = fsync_floor(50)
    clock.seconds = clock.batches = clock.writes = 0
    prof = Profiler(async_mode="disabled")
    prof.start()
    per_step = loop.run_until_complete(amends_steps(engine, n))
    prof.stop()
    print(
        f"durable step: {per_step * 1e6:.0f} us/step; fsync floor {floor * 1e6:.0f} us; "
        f"{clock.batches / n:.2f} commits/step, {clock.writes / n:.2f} writes/step; writer thread "
        f"in _commit {clock.seconds / n * 1e6:.0f} us/step ({clock.seconds / (per_step * n):.0%} "
        f"of wall); the rest is event loop + thread hand-off"
    )
    print(prof.output_text(unicode=False, color=False)[:5000])
    shape = reversal.Shape("100 independent", 100, 1)
    saga_id = loop.run_until_complete(reversal.forward(engine, shape))
    clock.seconds = clock.batches = clock.writes = 0
    prof = Profiler(async_mode="disabled")
    prof.start()
    wall = loop.run_until_complete(reversal.undo(engine, saga_id, 100))
    prof.stop()
    print(
        f"100 independent compensations: {wall * 1e3:.0f} ms; {clock.batches} commits for "
        f"{clock.writes} writes; writer in _commit {clock.seconds * 1e3:.0f} ms"
    )
    print(prof.output_text(unicode=False, color=False)[:6000])
    loop.run_until_complete(engine.close())
    clock.remove()
    loop.close()


if __name__ == "__main__":
    main()
