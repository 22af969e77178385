"""Instructions per sequential ``saga.call`` step and per compensation on ``SqliteLog(":memory:")``,
counted by callgrind (issue 29): the path the eval and every adapter run, whatever the load.

``python benchmarks/step_instructions.py ROOT [ROOT ...]`` runs, under
``valgrind --tool=callgrind --instr-atstart=no``, for each source tree ``ROOT`` (a checkout or a
``git archive`` snapshot, so two trees compare side by side): one saga of ``N`` sequential
``await saga.call("bench.noop", i=i)`` steps that commits, and one of the same ``N`` steps that
is then undone (``engine.undo``: a compensation per step). Each runs once uninstrumented to warm up,
then once between two callgrind dumps (client requests from a tiny library built with ``gcc``
against ``valgrind/callgrind.h``; every thread counted). Printed per step:

    step = committed run / N;  compensation = (run with the undo - committed run) / N

With ``--file`` the log is a ``SqliteLog`` file (synchronous=FULL) instead: the durable step of
section 1, its writer thread and fsyncs included (instructions, not the wait for the disk).
With ``--annotate`` the measured dumps are kept and ``callgrind_annotate`` prints their C-level
self cost (SQLite, hashing, JSON, malloc, the interpreter).
"""

from __future__ import annotations

import os
import sys
import tempfile

N = 200


def child(root: str, client: str, file: bool = False) -> None:
    import asyncio
    import ctypes
    import gc

    sys.path[:0] = [os.path.join(root, "src"), root]
    import amends
    from benchmarks.common import noop_catalog

    cg = ctypes.CDLL(client)
    loop = asyncio.new_event_loop()

    async def saga_of(engine: amends.Engine, n: int, undo: bool) -> None:
        async with engine.saga("bench: steps") as saga:
            for i in range(n):
                await saga.call("bench.noop", i=i)
        if undo:
            budget = amends.Budget(tool_calls=10_000, seconds=600)
            report = await engine.undo(saga.id, budget=budget)
            if report.status != "fully_reversed":
                raise AssertionError(report.status)

    def run(undo: bool, measure: bool) -> None:
        if file:
            path = os.path.join(os.path.dirname(client), f"steps-{undo}-{measure}.db")
            log = amends.SqliteLog(path, synchronous="FULL")
        else:
            log = amends.SqliteLog(":memory:")
        engine = amends.Engine(noop_catalog(), log=log)
        loop.run_until_complete(saga_of(engine, 1, undo))  # catalog look-up, schema: not counted
        gc.collect()
        gc.freeze()
        if measure:
            cg.cg_start()
            cg.cg_dump()
        loop.run_until_complete(saga_of(engine, N, undo))
        if measure:
            cg.cg_dump()
            cg.cg_stop()
        gc.unfreeze()
        loop.run_until_complete(engine.close())

    for undo in (False, True):
        run(undo, False)
    for undo in (False, True):
        run(undo, True)


def measure(
    root: str, client: str, tmp: str, annotate: bool, file: bool = False
) -> tuple[float, float]:
    from benchmarks._callgrind import dump_total, print_by_library, run_child

    out = os.path.join(tmp, f"cg.{abs(hash(root))}.out")
    run_child(__file__, [root, client, *(["--file"] if file else [])], out)
    totals = []
    for dump in (2, 4):
        totals.append(dump_total(f"{out}.{dump}"))
        if annotate:
            run = "undone" if dump == 4 else "committed"
            print_by_library(f"{out}.{dump}", f"--- {root} {run} run, self cost by library", 8)
    return totals[0] / N, (totals[1] - totals[0]) / N


def main(roots: list[str], annotate: bool, file: bool = False) -> None:
    from benchmarks._callgrind import build_client

    with tempfile.TemporaryDirectory() as tmp:
        client = build_client(tmp)
        for root in roots:
            step, comp = measure(root, client, tmp, annotate, file)
            print(f"{root}: step {step / 1e3:8.1f} k  compensation {comp / 1e3:8.1f} k instr.")


if __name__ == "__main__":
    # run as a script, this file's folder would shadow the standard library's ``profile``
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], "--file" in sys.argv[4:])
    else:
        sys.path.insert(0, os.path.dirname(here))  # benchmarks._callgrind
        args = [a for a in sys.argv[1:] if a not in ("--annotate", "--file")]
        main(args, "--annotate" in sys.argv, "--file" in sys.argv)
