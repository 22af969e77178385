"""CPU per fan-out step and per 100-compensation undo, A/B between two checkouts, side by side.

``python benchmarks/ab_cpu.py BEFORE AFTER [ROUNDS]`` alternates processes of the two source trees
(each a checkout or a ``git archive`` snapshot: ``git archive 7f53a95 | tar -x -C /tmp/before``)
and prints, per side, the medians of the process CPU (``time.process_time``: the event loop and
the log's writer and reader threads) and of the event-loop thread alone (``time.thread_time``).
``python benchmarks/ab_cpu.py --one ROOT`` measures one tree once (what each round runs).
``python benchmarks/ab_cpu.py --instructions BEFORE AFTER`` counts instead of timing: the
instructions per fan-out step (every thread) under ``valgrind --tool=callgrind``, as the
difference between a process running 3 fan-outs of 1,000 and one running 1 (each after a warm-up
fan-out), so the interpreter's start and the imports cancel out. It does not move with the
load; group commit's batch sizes still do (valgrind runs one thread at a time), about 1 %
between repeats of one tree. Needs valgrind; about a minute per tree (both run at once).

On a shared machine the wall clock follows the load; CPU time taken in alternating processes of
the same run is what a change is judged by (docs/benchmarks.md). The load is printed before and
after.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time


def one(root: str) -> str:
    """Measure the tree at ``root``: 5 fan-outs of 1,000 steps, 6 undos of 100 compensations."""
    sys.path[:0] = [os.path.join(root, "src"), root]
    import asyncio

    import amends
    from benchmarks import reversal
    from benchmarks.common import noop_catalog
    from benchmarks.fanout import fan_out

    scratch = os.path.join(root, ".bench")  # on the tree's own disk, as the benchmarks are
    os.makedirs(scratch, exist_ok=True)
    where = tempfile.mkdtemp(dir=scratch)
    loop = asyncio.new_event_loop()
    log = amends.SqliteLog(os.path.join(where, "fanout.db"), synchronous="FULL")
    engine = amends.Engine(noop_catalog(), log=log)
    loop.run_until_complete(fan_out(engine, 1000))  # warm-up
    fan: list[tuple[float, float]] = []
    for _ in range(5):
        cpu, main = time.process_time(), time.thread_time()
        loop.run_until_complete(fan_out(engine, 1000))
        fan.append(((time.process_time() - cpu) * 1e3, (time.thread_time() - main) * 1e3))
    loop.run_until_complete(engine.close())
    log = amends.SqliteLog(os.path.join(where, "undo.db"), synchronous="FULL")
    engine = amends.Engine(noop_catalog(), log=log)
    shape = reversal.Shape("100 independent", 100, 1)
    undo: list[tuple[float, float]] = []
    for i in range(6):  # the first is a warm-up
        saga_id = loop.run_until_complete(reversal.forward(engine, shape))
        cpu, main = time.process_time(), time.thread_time()
        loop.run_until_complete(reversal.undo(engine, saga_id, 100))
        if i:
            undo.append(((time.process_time() - cpu) * 1e3, (time.thread_time() - main) * 1e3))
    loop.run_until_complete(engine.close())
    f = [statistics.median(x[k] for x in fan) for k in (0, 1)]
    u = [statistics.median(x[k] for x in undo) for k in (0, 1)]
    return f"{f[0]:.1f} {f[1]:.1f} {u[0] / 100 * 1e3:.1f} {u[1] / 100 * 1e3:.1f}"


def fanouts(root: str, k: int) -> None:
    """Run ``k`` fan-outs of 1,000 steps after a warm-up one (what ``--instructions`` counts)."""
    sys.path[:0] = [os.path.join(root, "src"), root]
    import asyncio

    import amends
    from benchmarks.common import noop_catalog
    from benchmarks.fanout import fan_out

    scratch = os.path.join(root, ".bench")
    os.makedirs(scratch, exist_ok=True)
    where = tempfile.mkdtemp(dir=scratch)
    loop = asyncio.new_event_loop()
    log = amends.SqliteLog(os.path.join(where, "fanout.db"), synchronous="FULL")
    engine = amends.Engine(noop_catalog(), log=log)
    for _ in range(k + 1):
        loop.run_until_complete(fan_out(engine, 1000))
    loop.run_until_complete(engine.close())


def _instructions(root: str, k: int) -> subprocess.Popen[str]:
    out = os.path.join(tempfile.mkdtemp(), "callgrind.out")
    return subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         __file__, "--fanouts", root, str(k)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip


def _total(proc: subprocess.Popen[str]) -> int:
    """The instructions callgrind counted in ``proc`` (every thread), from its summary."""
    _out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(err)
    for line in err.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].replace(",", "").strip())
    raise SystemExit(f"no instruction count in valgrind's output:\n{err}")


def instructions(sides: dict[str, str]) -> None:
    """Instructions per fan-out step of each tree: (3 fan-outs - 1 fan-out) / 2,000."""
    print("load before:", os.getloadavg())
    procs = {(name, k): _instructions(root, k) for name, root in sides.items() for k in (1, 3)}
    totals = {key: _total(proc) for key, proc in procs.items()}
    print("load after:", os.getloadavg())
    for name in sides:
        per_step = (totals[name, 3] - totals[name, 1]) / 2000
        print(f"{name:8s} {per_step:,.0f} instructions per fan-out step (every thread)")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--fanouts":
        fanouts(os.path.abspath(sys.argv[2]), int(sys.argv[3]))
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--instructions":
        before, after = (os.path.abspath(a) for a in sys.argv[2:4])
        instructions({"before": before, "after": after})
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(one(os.path.abspath(sys.argv[2])))
        return
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    sides = {"before": os.path.abspath(sys.argv[1]), "after": os.path.abspath(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) == 4 else 4
    print("load before:", os.getloadavg())
    got: dict[str, list[list[float]]] = {k: [] for k in sides}
    for _ in range(rounds):
        for name, root in sides.items():
            out = subprocess.run(
                [sys.executable, __file__, "--one", root],
                capture_output=True,
                text=True,
                check=True,
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            ).stdout.split()
            got[name].append([float(x) for x in out])
    print("load after:", os.getloadavg())
    print("side     fan-out CPU us/step (loop thread)   undo CPU us/compensation (loop thread)")
    for name, rows in got.items():
        med = [statistics.median(r[k] for r in rows) for k in range(4)]
        print(f"{name:8s} {med[0]:6.1f} ({med[1]:.1f}){'':22s}{med[2]:6.1f} ({med[3]:.1f})")


if __name__ == "__main__":
    main()
