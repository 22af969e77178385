"""Instructions per eval saga, counted by callgrind (issue 29), and the eval's deterministic counts.

``python benchmarks/eval_instructions.py ROOT [ROOT ...] [--annotate] [--counts]`` runs, for
each source tree ``ROOT`` (a checkout or a ``git archive`` snapshot, so two trees compare side
by side), ``asyncio.run(run_indexes(range(N), 1))`` (both engines: the amends engine's saga and
the naive stack on a copy of its world) after a warm-up of ``WARM`` sagas, under
``valgrind --tool=callgrind --instr-atstart=no`` with client requests around the measured run
only (``_callgrind.py``; every thread counted). Printed per tree: instructions per saga.

With ``--annotate`` the measured dump is kept and ``callgrind_annotate --inclusive=yes`` prints
its top C-level functions by inclusive cost, then the self cost by library.

With ``--counts`` the same run is made again without valgrind (one process per tree), once
under cProfile (Python calls per saga; event-loop passes per saga are ``_run_once``'s calls;
the top Python callers of the costly C functions) and once with counters: SQL statements per
saga (``sqlite3`` trace callbacks on every connection the run opens), garbage collections per
saga by generation (``gc.callbacks``).

``EVAL_SAGAS=400`` measures that many sagas instead of 100; ``EVAL_CG_KEEP=DIR`` keeps the
callgrind dumps in ``DIR`` (for ``callgrind_annotate --tree=caller``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

N = int(os.environ.get("EVAL_SAGAS", "100"))
WARM = 10
SEED = 1

# the C functions whose Python callers ``--counts`` lists (cProfile names of builtins)
_C_CALLEES = (
    "execute",
    "marshal",
    "dumps",
    "loads",
    "deepcopy",
    "sleep",
    "create_task",
    "to_thread",
    "signature",
    "format",
    "sub",
    "match",
    "search",
    "compile",
    "hmac",
    "sha256",
    "digest",
)


def _setup(root: str) -> None:
    sys.path[:0] = [os.path.join(root, "src"), root]


def child(root: str, client: str) -> None:
    import asyncio
    import ctypes
    import gc

    _setup(root)
    from amends.evals.suite import run_indexes

    cg = ctypes.CDLL(client)
    asyncio.run(run_indexes(range(N, N + WARM), SEED))  # imports, catalog, first-call caches
    gc.collect()
    cg.cg_start()
    cg.cg_dump()
    asyncio.run(run_indexes(range(N), SEED))
    cg.cg_dump()
    cg.cg_stop()


def counts_child(root: str) -> None:
    import asyncio
    import cProfile
    import gc
    import pstats
    import sqlite3

    _setup(root)
    from amends.evals.suite import run_indexes

    asyncio.run(run_indexes(range(N, N + WARM), SEED))
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(run_indexes(range(N), SEED))
    prof.disable()
    st = pstats.Stats(prof)
    calls = sum(v[1] for v in st.stats.values())  # type: ignore[attr-defined]
    passes = sum(v[1] for k, v in st.stats.items() if k[2] == "_run_once")  # type: ignore[attr-defined]
    print(f"{root}: Python calls per saga {calls / N:,.0f}; loop passes per saga {passes / N:,.1f}")
    rows = []
    for k, v in st.stats.items():  # type: ignore[attr-defined]
        name = k[2]
        if k[0] == "~" and any(c in name for c in _C_CALLEES):
            rows.append((v[3], v[1], name, v[4]))
    rows.sort(reverse=True)
    print("  C functions by inclusive time (cProfile), calls per saga, top Python callers:")
    for cum, ncalls, name, callers in rows[:15]:
        top = sorted(callers.items(), key=lambda kv: -kv[1][1])[:3]
        who = ", ".join(f"{os.path.basename(c[0])}:{c[2]} {v[1] / N:.1f}" for c, v in top)
        print(f"    {cum:7.3f} s {ncalls / N:8.1f}  {name}  <- {who}")

    # SQL statements and collections, without the profiler
    statements: dict[str, int] = {}

    def trace(sql: str) -> None:
        word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
        statements[word] = statements.get(word, 0) + 1

    real = sqlite3.connect

    def connect(*a: object, **k: object) -> sqlite3.Connection:
        conn = real(*a, **k)  # type: ignore[arg-type]
        conn.set_trace_callback(trace)
        return conn

    sqlite3.connect = connect  # type: ignore[assignment]
    collections = [0, 0, 0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    gc.collect()
    gc.callbacks.append(on_gc)
    asyncio.run(run_indexes(range(N), SEED))
    gc.callbacks.remove(on_gc)
    sqlite3.connect = real  # type: ignore[assignment]
    total = sum(statements.values())
    detail = ", ".join(
        f"{w} {n / N:.1f}" for w, n in sorted(statements.items(), key=lambda kv: -kv[1])
    )
    print(f"  SQL statements per saga {total / N:.1f} ({detail})")
    print("  collections per saga (gen 0/1/2): " + " / ".join(f"{c / N:.2f}" for c in collections))


def measure(root: str, client: str, tmp: str, annotate: bool) -> float:
    from benchmarks._callgrind import annotate as annotate_dump
    from benchmarks._callgrind import dump_total, print_by_library, run_child

    out = os.path.join(os.environ.get("EVAL_CG_KEEP", tmp), f"cg.{abs(hash(root))}.out")
    run_child(__file__, [root, client], out)
    dump = f"{out}.2"
    total = dump_total(dump)
    if annotate:
        print(f"--- {root}: top C functions by inclusive cost (share of the measured run)")
        for n, name, _obj in annotate_dump(dump, inclusive=True)[:60]:
            print(f"  {n / total:6.1%}  {name[:90]}")
        print_by_library(dump, f"--- {root}: self cost by library", 10)
    return total / N


def main(roots: list[str], annotate: bool, counts: bool) -> None:
    from benchmarks._callgrind import build_client

    if counts:
        for root in roots:
            subprocess.run([sys.executable, __file__, "--counts-child", root], check=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        client = build_client(tmp)
        for root in roots:
            per_saga = measure(root, client, tmp, annotate)
            print(f"{root}: {per_saga / 1e6:8.2f} M instr. per saga ({N} sagas of seed {SEED})")


if __name__ == "__main__":
    # run as a script, this file's folder would shadow the standard library's ``profile``
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--counts-child":
        counts_child(sys.argv[2])
    else:
        sys.path.insert(0, os.path.dirname(here))  # benchmarks._callgrind
        flags = {"--annotate", "--counts"}
        args = [a for a in sys.argv[1:] if a not in flags]
        main(args, "--annotate" in sys.argv, "--counts" in sys.argv)
