"""Build a mypyc-compiled copy of this tree, to measure (issue 29) or to run.

    python scripts/compile.py OUT [--modules SET] [--opt-level N]

copies the tree's git-tracked ``src/`` and ``benchmarks/`` (a plain copy outside git) to OUT and
compiles a named module set there with mypyc (it ships inside the ``mypy`` package of the dev
environment). OUT is then importable with ``PYTHONPATH=OUT/src`` (Python prefers the ``.so``
next to a ``.py`` of the same name) and measurable as a ROOT by the benchmarks, e.g.
``python benchmarks/ab_cpu.py --instructions . OUT``. The dev tree itself is never built in
place: a ``.so`` beside the ``.py`` would shadow every later edit of it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The fan-out path: a step, its log record, the SQLite log's writer.
LOG = [
    "amends/_log/records.py",
    "amends/_log/rows.py",
    "amends/_log/cache.py",
    "amends/_log/sql.py",
    "amends/_log/sqlite.py",
    "amends/_log/sqlite_cursor.py",
]
ENGINE = [
    "amends/_jsondata.py",
    "amends/_outcome.py",
    "amends/_calls.py",
    "amends/_saga.py",
]
# The undo path: plan, compensate, report. Not _engine.py: Engine stays a Python class (its
# base is interpreted, applications subclass it), and mypyc 2.4.1 fails on a closure in a method
# of a Python class (an internal error); nor _contracts.py, for the same reason (Catalog.tool's
# closure; Catalog is weakly referenced); nor _planner.py: its PlannedStep caches step_id through
# a descriptor in the instance's dict, which compiled code read as the descriptor itself; nor
# _reversal/runner.py and inline.py: compiled, an eval undo failed ("Token ... was created in a
# different Context" resetting the current call in _calls.invoke).
UNDO = [
    "amends/_report.py",
    "amends/_reversal/compensate.py",
    "amends/_reversal/dispatch.py",
    "amends/_reversal/record.py",
]
# Not the eval's own modules: compiled (sandbox/world.py, evals/invariants.py, naive.py,
# generator.py), `amends eval --sagas 200 --seed 1` found 7 never_worse violations in the drift
# family, and 7 still with world.py interpreted (none pure); sandbox/catalog.py cannot be (a
# Catalog checks each tool's signature, ``call`` first, which a compiled function has not).
SETS: dict[str, list[str]] = {
    "log": LOG,
    "fanout": LOG + ENGINE,
    "all": LOG + ENGINE + UNDO,
}


def tracked(root: Path) -> list[Path] | None:
    """The files of src/ and benchmarks/ git tracks or would (not ignored), None outside git."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "-co",
                "--exclude-standard",
                "src",
                "benchmarks",
            ],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [Path(p) for p in out.decode().split("\0") if p]


def copy_tree(root: Path, out: Path) -> None:
    files = tracked(root)
    if files is None:
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "build", "*.egg-info")
        for sub in ("src", "benchmarks"):
            shutil.copytree(root / sub, out / sub, ignore=ignore)
        return
    for rel in files:
        if (root / rel).is_file():  # a tracked file deleted in the work tree is skipped
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, out / rel)


SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(name="amends_compiled", ext_modules=mypycify({modules!r}, opt_level={opt!r}))
"""


def compile_modules(src: Path, modules: list[str], opt_level: str) -> None:
    build = src / "build"
    build.mkdir(exist_ok=True)
    (build / "setup.py").write_text(SETUP.format(modules=modules, opt=opt_level))
    # no mypy config of the tree applies in OUT/src: mypyc type-checks with its defaults
    env = {**os.environ, "MYPY_CACHE_DIR": str(build / ".mypy_cache")}
    cmd = [sys.executable, "build/setup.py", "build_ext", "--inplace"]
    done = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # mypyc's own errors are on stdout, the compiler's on stderr
        sys.stderr.write(done.stdout[-20000:] + done.stderr[-20000:])
        raise SystemExit(f"mypyc failed (exit {done.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory to create (must not exist)")
    parser.add_argument("--modules", choices=sorted(SETS), default="all")
    parser.add_argument("--opt-level", default="3", choices=["0", "1", "2", "3"])
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    if out.exists():
        parser.error(f"{out} exists; give a new directory")
    copy_tree(ROOT, out)
    modules = SETS[args.modules]
    started = time.monotonic()
    compile_modules(out / "src", modules, args.opt_level)
    took = time.monotonic() - started
    print(f"compiled {len(modules)} modules ({args.modules}) in {took:.1f} s into {out}")
    print(f"run with PYTHONPATH={out / 'src'}; measure as ROOT {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
