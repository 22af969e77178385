"""Counting a measured region's instructions under callgrind, for the scripts that compare two
source trees by instructions (``adapter_instructions.py``, ``step_instructions.py``,
``eval_instructions.py``, ``gateway_instructions.py``).

The child process runs under ``valgrind --tool=callgrind --instr-atstart=no`` and brackets each
measured run with client requests from a tiny library built here with ``gcc`` against
``valgrind/callgrind.h`` (``cg_start``, ``cg_dump`` before and after the run, ``cg_stop``): an
even-numbered dump file holds one measured run alone. The child imports nothing from this
module (it runs with the measured tree's ``benchmarks`` first on ``sys.path``, which may be a
tree from before this module existed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

CLIENT = """
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_dump(void) { CALLGRIND_DUMP_STATS; }
"""


def build_client(tmp: str) -> str:
    """Build the client-request library in ``tmp``; its path."""
    client = os.path.join(tmp, "cgclient.so")
    src = os.path.join(tmp, "cgclient.c")
    with open(src, "w") as f:
        f.write(CLIENT)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", client, src], check=True)
    return client


def run_child(script: str, args: list[str], out: str) -> None:
    """Run ``script --child ARGS`` under callgrind, its dumps written to ``out.N``."""
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            script,
            "--child",
            *args,
        ],
        check=True,
        capture_output=True,
    )


def dump_total(path: str) -> int:
    """The instructions a callgrind dump file counted (every thread)."""
    with open(path) as f:
        return int(next(line for line in f if line.startswith("totals:")).split()[1])


ANNOTATED = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+)(?:\s+\[(.*)\])?$")
"""A function's line in ``callgrind_annotate``'s output: its count, its name, its object file."""


def annotate(dump: str, *, inclusive: bool = False) -> list[tuple[int, str, str | None]]:
    """``callgrind_annotate``'s functions of ``dump``, most costly first: (instructions, name,
    object file or ``None`` for an inlined function), self cost unless ``inclusive``."""
    args = ["callgrind_annotate", "--threshold=100", dump]
    if inclusive:
        args.insert(1, "--inclusive=yes")
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in text.splitlines():
        m = ANNOTATED.match(line)
        if m is not None and m[2] != "PROGRAM":
            rows.append((int(m[1].replace(",", "")), m[2], m[3]))
    return rows


def print_by_library(dump: str, title: str, top: int) -> None:
    """Print ``dump``'s self cost summed by library (the interpreter, SQLite, libc, ...)."""
    by_lib: dict[str, int] = {}
    for n, name, obj in annotate(dump):
        if obj is not None:
            lib = os.path.basename(obj)
        else:  # an inlined function: named by its source file only
            lib = "libpython (inlined)" if "Python-3" in name else name.split(":")[0]
        by_lib[lib] = by_lib.get(lib, 0) + n
    whole = sum(by_lib.values())
    print(title)
    for lib, n in sorted(by_lib.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {n / whole:6.1%}  {lib}")
