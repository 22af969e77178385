"""1. Durable recording cost per step, side by side: bare call, fsync floor, amends, DBOS."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import amends

from .common import Section, Spread, Target, noop_catalog, postgres_log, scratch


async def _bare_async(i: int) -> int:
    return i


async def bare(n: int) -> float:
    """Seconds per bare (awaited) tool call."""
    t = time.perf_counter()
    for i in range(n):
        await _bare_async(i)
    return (time.perf_counter() - t) / n


def fsync_floor(n: int) -> float:
    """Seconds per ``write`` of 64 bytes + ``os.fsync`` on the benchmark disk."""
    path = scratch("fsync.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, b"x" * 64)
            os.fsync(fd)
        return (time.perf_counter() - t) / n
    finally:
        os.close(fd)
        path.unlink()


class RawSqlite:
    """Plain sqlite3, WAL, synchronous=FULL: two 1-row commits per step (what amends must do)."""

    def __init__(self) -> None:
        import sqlite3

        self.conn = sqlite3.connect(scratch("raw.db"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        self.k = 0

    def steps(self, n: int) -> float:
        payload = "x" * 300  # about one step's intent or result row
        t = time.perf_counter()
        for _ in range(2 * n):
            self.k += 1
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO t VALUES (?, ?)", (self.k, payload))
            self.conn.execute("COMMIT")
        return (time.perf_counter() - t) / n


async def amends_steps(engine: amends.Engine, n: int) -> float:
    """Seconds per step of one saga of ``n`` sequential no-op steps (saga open/close included)."""
    t = time.perf_counter()
    async with engine.saga("bench: sequential") as saga:
        for i in range(n):
            await saga.call("bench.noop", i=i)
    return (time.perf_counter() - t) / n


async def interleaved(
    engine: amends.Engine, raw: RawSqlite, n: int
) -> tuple[list[float], list[float], list[float]]:
    """Op by op in one loop (issue 12 item 5): one fsync, one raw-SQLite step, one amends step,
    each timed on its own, ``n`` times over; returns the three lists of seconds.

    Blocks of 100 steps taken seconds apart gave ratios from 0.4x to 12x on a shared disk: here
    each amends step is compared with references taken within the same few milliseconds.
    """
    path = scratch("fsync-interleaved.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fs: list[float] = []
    rs: list[float] = []
    am: list[float] = []
    clock = time.perf_counter
    try:
        async with engine.saga("bench: interleaved") as saga:
            for i in range(n):
                t = clock()
                os.write(fd, b"x" * 64)
                os.fsync(fd)
                fs.append(clock() - t)
                rs.append(raw.steps(1))
                t = clock()
                await saga.call("bench.noop", i=i)
                am.append(clock() - t)
    finally:
        os.close(fd)
        path.unlink()
    return fs, rs, am


def interleaved_section(loop: asyncio.AbstractEventLoop, quick: bool) -> Section:
    """The per-op interleaved measurement as its own table, with the target ratio."""
    n = 60 if quick else 400
    engine = amends.Engine(
        noop_catalog(), log=amends.SqliteLog(str(scratch("interleaved.db")), synchronous="FULL")
    )
    raw = RawSqlite()
    try:
        loop.run_until_complete(interleaved(engine, raw, 5))  # warm-up
        fs, rs, am = loop.run_until_complete(interleaved(engine, raw, n))
    finally:
        loop.run_until_complete(engine.close())
        raw.conn.close()
    sec = Section(
        "1b. Durable step, op by op: fsync, raw SQLite and amends interleaved in one loop",
        ["method", "µs/op median [p10-p90]", "per-op ratio to fsync, median [p10-p90]"],
    )
    f = Spread.of(fs)
    sec.rows.append(["fsync floor (64 B write + fsync)", f.fmt(1e6), "1.00"])
    r_raw = Spread.of([r / x for r, x in zip(rs, fs, strict=True)])
    sec.rows.append(
        ["raw sqlite3, 2 WAL FULL commits", Spread.of(rs).fmt(1e6), r_raw.fmt(digits=2)]
    )
    r_am = Spread.of([a / x for a, x in zip(am, fs, strict=True)])
    sec.rows.append(["amends step (SqliteLog FULL)", Spread.of(am).fmt(1e6), r_am.fmt(digits=2)])
    r_am_raw = Spread.of([a / r for a, r in zip(am, rs, strict=True)])
    sec.rows.append(["amends step / raw sqlite3 step", "", r_am_raw.fmt(digits=2)])
    sec.notes.append(
        f"{n} steps of one saga; before each amends step the loop takes one fsync and one raw "
        f"2-commit SQLite step, each timed alone, so the three see the same disk within "
        f"milliseconds. Ratios are taken per op, then the median (issue 12 item 5)."
    )
    sec.targets.append(
        Target(
            "durable step / fsync floor, per op interleaved (SQLite)",
            r_am.fmt(digits=2),
            "<= 2.5x",
            r_am.median <= 2.5,
        )
    )
    sec.targets.append(  # issue 29's table: "keep <= 1.0x" (it read 0.86x when the issue was filed)
        Target(
            "durable step / raw sqlite3 step making the same 2 WAL commits, per op interleaved",
            r_am_raw.fmt(digits=2),
            "<= 1.0x",
            r_am_raw.median <= 1.0,
        )
    )
    return sec


class Dbos:
    """DBOS with a SQLite system database: a workflow of ``n`` ``@DBOS.step()`` calls."""

    def __init__(self) -> None:
        import logging

        from dbos import DBOS

        path = scratch("dbos.db")
        DBOS(config={"name": "amends-bench", "system_database_url": f"sqlite:///{path}"})

        @DBOS.step()
        def noop(i: int) -> int:
            return i

        @DBOS.workflow()
        def workflow(n: int) -> int:
            total = 0
            for i in range(n):
                total += noop(i)
            return total

        self._dbos = DBOS
        self.workflow: Callable[[int], Any] = workflow
        DBOS.launch()
        logging.getLogger("dbos").setLevel(logging.WARNING)

    def steps(self, n: int) -> float:
        t = time.perf_counter()
        self.workflow(n)
        return (time.perf_counter() - t) / n

    def close(self) -> None:
        self._dbos.destroy()


def _dbos_or_reason() -> tuple[Dbos | None, str]:
    try:
        return Dbos(), ""
    except ImportError as exc:
        return None, f"DBOS not measured: {exc} (pip install -r benchmarks/requirements.txt)"


_SYSCALLS = ("fdatasync", "fsync", "pwrite64", "openat", "unlink")


def _child(which: str, n: int) -> None:
    """In a subprocess under strace: a warm-up of 20 steps, then ``n`` sequential steps."""
    if which == "amends":
        loop = asyncio.new_event_loop()
        engine = amends.Engine(
            noop_catalog(), log=amends.SqliteLog(str(scratch("sync-amends.db")), synchronous="FULL")
        )
        loop.run_until_complete(amends_steps(engine, 20))
        loop.run_until_complete(amends_steps(engine, n))
        loop.run_until_complete(engine.close())
    elif which == "dbos":
        dbos = Dbos()
        dbos.steps(20)
        dbos.steps(n)
        dbos.close()
    else:
        raw = RawSqlite()
        raw.steps(20)
        raw.steps(n)


def _strace_counts(which: str, n: int) -> dict[str, int]:
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run(
            [
                *("strace", "-f", "-c", "-e", "trace=" + ",".join(_SYSCALLS), "-o", out.name),
                *(sys.executable, "-m", "benchmarks.durable", "--child", which, str(n)),
            ],
            check=True,
            capture_output=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        counts: dict[str, int] = {}
        for line in out.read().splitlines():
            parts = line.split()
            if parts and parts[-1] in _SYSCALLS and len(parts) >= 5:
                counts[parts[-1]] = int(parts[3])
        return counts


def syscall_section() -> Section | None:
    """Issue 12 item 3: disk syscalls per sequential durable step, counted by strace (the
    difference between runs of 300 and 100 steps, so set-up and warm-up cancel out)."""
    import shutil

    if shutil.which("strace") is None:
        return None
    sec = Section(
        "1c. Disk syscalls per sequential durable step (strace -f -c)",
        ["method", *(f"{c}/step" for c in _SYSCALLS)],
    )
    methods = [("raw sqlite3, 2 WAL FULL commits", "raw"), ("amends SqliteLog FULL", "amends")]
    if _dbos_or_reason()[0] is not None:
        methods.append(("DBOS steps (SQLite)", "dbos"))
    for label, which in methods:
        small, big = _strace_counts(which, 100), _strace_counts(which, 300)
        sec.rows.append(
            [label, *(f"{(big.get(c, 0) - small.get(c, 0)) / 200:.2f}" for c in _SYSCALLS)]
        )
    sec.notes.append(
        "Each method runs in its own process under `strace -f -c`, once with 100 and once with "
        "300 steps after a warm-up of 20; per step = (300-step count - 100-step count) / 200. "
        "Rule 1 needs two durable commits per sequential step (the intent before the call, the "
        "result before the saga moves on): two fdatasyncs with WAL and synchronous=FULL."
    )
    return sec


def run(loop: asyncio.AbstractEventLoop, quick: bool, pg_url: str | None = None) -> list[Section]:
    """Interleave every method in each round; report µs/step medians and ratios."""
    n = 20 if quick else 100
    rounds = 3 if quick else 7
    if quick and pg_url is not None:
        rounds = 2
    engine = amends.Engine(
        noop_catalog(), log=amends.SqliteLog(str(scratch("durable.db")), synchronous="FULL")
    )
    pg_engine = None
    if pg_url is not None:
        pg_engine = amends.Engine(noop_catalog(), log=postgres_log(pg_url))
    raw = RawSqlite()
    dbos, why = _dbos_or_reason() if pg_url is None else (None, "")
    samples: dict[str, list[float]] = {}
    methods: list[tuple[str, Callable[[], float]]] = [
        ("bare tool call", lambda: loop.run_until_complete(bare(n * 100))),
        ("fsync floor", lambda: fsync_floor(n)),
        ("raw sqlite3, 2 WAL FULL commits", lambda: raw.steps(n)),
        ("amends SqliteLog FULL", lambda: loop.run_until_complete(amends_steps(engine, n))),
    ]
    if pg_engine is not None:
        pe = pg_engine
        methods.append(("amends PostgresLog", lambda: loop.run_until_complete(amends_steps(pe, n))))
    if dbos is not None:
        methods.append(("DBOS steps (SQLite)", lambda: dbos.steps(n)))
    # warm-up: schema creation, first connections, imports
    for _, fn in methods:
        fn()
    for r in range(rounds):
        order = methods[r % len(methods) :] + methods[: r % len(methods)]  # rotate the order
        for name, fn in order:
            samples.setdefault(name, []).append(fn())
    loop.run_until_complete(engine.close())
    raw.conn.close()
    if pg_engine is not None:
        loop.run_until_complete(pg_engine.close())
    if dbos is not None:
        dbos.close()
    spreads = {k: Spread.of(v) for k, v in samples.items()}
    fs = spreads["fsync floor"].median
    title = "1. Durable recording cost per step" + (" (PostgreSQL)" if pg_url else "")
    sec = Section(title, ["method", "µs/step median [p10-p90]", "x fsync floor"])
    for name, s in spreads.items():
        sec.rows.append([name, s.fmt(1e6), f"{s.median / fs:.2f}"])
    # per-round ratios (same round, same noise) are the fair comparison
    am = samples["amends SqliteLog FULL"]
    ratio_fs = Spread.of([a / f for a, f in zip(am, samples["fsync floor"], strict=True)])
    sec.notes.append(
        f"{n} sequential no-op steps per saga/workflow, {rounds} interleaved rounds (order rotated "
        f"each round), saga/workflow start and end included. Ratios are per round, then median."
    )
    sec.notes.append(
        "raw sqlite3 is the same disk work without amends: 2 single-row commits per step in WAL "
        "mode with synchronous=FULL, on the calling thread (no writer thread, no event loop)."
    )
    sec.notes.append(
        "amends commits twice per step (intent before the call, result + inverse after it), each "
        "commit fsynced (WAL, synchronous=FULL): the floor for a sequential step is about 2 fsyncs."
    )
    if pg_url is None:
        sec.targets.append(
            Target(
                "durable step / fsync floor (SQLite)",
                f"{ratio_fs.fmt(digits=2)}",
                "<= 2.5x",
                ratio_fs.median <= 2.5,
            )
        )
        if dbos is not None:
            ratio_db = Spread.of(
                [a / d for a, d in zip(am, samples["DBOS steps (SQLite)"], strict=True)]
            )
            sec.rows.append(["amends / DBOS (per round)", ratio_db.fmt(digits=3), ""])
            sec.targets.append(
                Target(
                    "durable step / DBOS step (SQLite)",
                    ratio_db.fmt(digits=3),
                    "<= 0.25x",
                    ratio_db.median <= 0.25,
                )
            )
            sec.notes.append(
                "DBOS runs as shipped: its SQLite system database uses SQLite's defaults "
                "(rollback journal `delete`, synchronous=FULL), so each of its commits costs "
                "several fsyncs (journal, database, directory)."
            )
        else:
            sec.targets.append(
                Target("durable step / DBOS step (SQLite)", "not measured", "<= 0.25x", None)
            )
            sec.notes.append(why)
        if not quick:
            counted = syscall_section()
            if counted is not None:
                return [sec, counted]
    else:
        pg = samples["amends PostgresLog"]
        ratio_pg = Spread.of([a / f for a, f in zip(pg, samples["fsync floor"], strict=True)])
        sec.rows.append(["PostgresLog / fsync floor (per round)", ratio_pg.fmt(digits=2), ""])
        sec.notes.append(
            "PostgreSQL runs locally on the same disk (fsync=on, synchronous_commit=on); each "
            "commit is a WAL flush plus a loopback round trip."
        )
    return [sec]


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        from .report import print_sections

        found = syscall_section()
        print_sections([found] if found else [])
