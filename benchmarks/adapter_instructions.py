"""Instructions per tool call of each adapter over ``saga.call``, counted by callgrind: the
deterministic twin of section 10 (issue 25 item 6), whatever the machine's load.

``python benchmarks/adapter_instructions.py ROOT FRAMEWORK [KINDS]`` runs, under
``valgrind --tool=callgrind``, the runs of ``benchmarks/adapters.py`` for one framework (a prefix
of a ``FRAMEWORKS`` key, e.g. ``LangChain`` or ``"Pydantic AI (Agent.run, c"``) from the source
tree at ``ROOT`` (a checkout or a ``git archive`` snapshot, so two trees compare side by side),
``KINDS`` a comma-separated subset of ``bare,hooked,adapted,ref`` (default all), and prints the
instructions per tool call of each kind and the three differences of section 10:

    over saga.call = adapted - bare - ref;  hook = hooked - bare;  own = adapted - hooked - ref

Every thread's instructions count (LangChain runs a sync tool and LangSmith's span set-up on its
thread pool). Each kind runs once to warm up uninstrumented, then once instrumented between two
callgrind dumps (client requests from a tiny library built with ``gcc`` against
``valgrind/callgrind.h``): only the run itself is counted, not the interpreter's start or the
framework's imports. Needs valgrind, its headers and gcc; a run of all four kinds takes several
minutes per framework. The CPU figures of section 10 move with the load by more than the goal;
an instruction count does not depend on the load.
"""

from __future__ import annotations

import os
import sys
import tempfile

KINDS = ("bare", "hooked", "adapted", "ref")
N = 100


def child(root: str, framework: str, kinds: list[str], client: str) -> None:
    """Inside valgrind: warm each kind up, then run each once between two dumps."""
    import asyncio
    import ctypes
    import gc

    sys.path[:0] = [os.path.join(root, "src"), root]
    from benchmarks import adapters

    name = next(k for k in adapters.FRAMEWORKS if k.startswith(framework))
    fn = adapters.FRAMEWORKS[name]
    cg = ctypes.CDLL(client)
    loop = asyncio.new_event_loop()

    def run(kind: str, measure: bool) -> None:
        engine = adapters.fresh_engine(loop) if kind in ("adapted", "ref") else None
        coro = {
            "bare": lambda: fn(None, N),
            "hooked": lambda: fn(adapters.PASS, N),
            "adapted": lambda: fn(engine, N),
            "ref": lambda: adapters.plain(engine, N),  # type: ignore[arg-type]
        }[kind]()
        gc.collect()
        gc.freeze()
        if measure:
            cg.cg_start()
            cg.cg_dump()  # ends what came before: the next dump holds the run alone
        loop.run_until_complete(coro)
        if measure:
            cg.cg_dump()
            cg.cg_stop()
        gc.unfreeze()
        if engine is not None:
            loop.run_until_complete(engine.close())

    for kind in kinds:
        run(kind, False)
    for kind in kinds:
        run(kind, True)


def main(root: str, framework: str, kinds: list[str]) -> None:
    from benchmarks._callgrind import build_client, dump_total, run_child

    with tempfile.TemporaryDirectory() as tmp:
        client = build_client(tmp)
        out = os.path.join(tmp, "cg.out")
        run_child(__file__, [root, framework, ",".join(kinds), client], out)
        per_call: dict[str, float] = {}
        for i, kind in enumerate(kinds):
            # odd dumps: what came before each run
            per_call[kind] = dump_total(f"{out}.{2 * i + 2}") / N
    for kind in kinds:
        print(f"{kind:8} {per_call[kind] / 1e6:9.3f} M instructions per tool call")
    differences = {
        "over saga.call": ("adapted", "bare", "ref"),
        "hook": ("hooked", "bare"),
        "own": ("adapted", "hooked", "ref"),
    }
    for label, (plus, *minus) in differences.items():
        if plus in per_call and all(k in per_call for k in minus):
            value = per_call[plus] - sum(per_call[k] for k in minus)
            print(f"{label:14} {value / 1e6:+.3f} M")


if __name__ == "__main__":
    # run as a script, this file's folder would shadow the standard library's ``profile``
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5])
    else:
        sys.path.insert(0, os.path.dirname(here))  # benchmarks._callgrind
        main(
            sys.argv[1],
            sys.argv[2],
            (sys.argv[3] if len(sys.argv) > 3 else ",".join(KINDS)).split(","),
        )
