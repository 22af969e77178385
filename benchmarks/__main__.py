"""``python -m benchmarks [--quick]``: run everything, print tables, write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import (
    adapters,
    durable,
    evals,
    fanout,
    mcp_gateway,
    pgload,
    reversal,
    scale,
    telemetry,
    temporal,
)
from .common import SCRATCH, Section
from .report import print_sections, write_markdown


def _pg_launcher() -> Any:
    """tests/pg.py: the repository's one PostgreSQL launcher (issue 9), shared with the tests."""
    path = Path(__file__).resolve().parents[1] / "tests" / "pg.py"
    spec = importlib.util.spec_from_file_location("amends_tests_pg", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the PostgreSQL launcher {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def postgres(
    loop: asyncio.AbstractEventLoop, quick: bool, parts: tuple[str, ...] = ("pg", "pgload")
) -> list[Section]:
    """Items 1 and 3 on the PostgreSQL log, and the 4-worker load (``pgload``), against a local
    server started for the run."""
    try:
        import amends

        amends.PostgresLog  # noqa: B018 - the optional backend must import
        pg = _pg_launcher()
    except (ImportError, AttributeError) as exc:
        return [Section("6. PostgreSQL", ["status"], [[f"not measured: {exc}"]])]
    try:
        server = pg.PgServer(SCRATCH)
    except (pg.PgUnavailable, OSError) as exc:
        return [Section("6. PostgreSQL", ["status"], [[f"not measured: {exc}"]])]
    try:
        out: list[Section] = []
        if "pg" in parts:
            out += durable.run(loop, quick, pg_url=server.new_database())
            out += reversal.run(loop, quick, pg_url=server.new_database())
        if "pgload" in parts:
            out += pgload.run(server, quick)
    finally:
        server.stop()
    for sec in out:
        if not sec.title.startswith("6. PostgreSQL: "):
            sec.title = "6. PostgreSQL: " + sec.title.split(". ", 1)[1]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smallest sizes (under a minute)")
    parser.add_argument(
        "--only",
        default="",
        help="comma list: durable,interleaved,fanout,reversal,scale,evals,pg,pgload,mcp,temporal,"
        "telemetry,adapters"
        " (pg includes pgload, the 4-worker load)",
    )
    parser.add_argument(
        "--out", default="docs/benchmarks.md", help="markdown report path ('' = none)"
    )
    args = parser.parse_args(argv)
    cmd = sys.argv[1:] if argv is None else argv
    only = {x for x in args.only.split(",") if x}
    started = time.time()
    loop = asyncio.new_event_loop()
    sections: list[Section] = []
    try:
        plan: list[tuple[str, Callable[[], list[Section]]]] = [
            ("durable", lambda: durable.run(loop, args.quick)),
            ("interleaved", lambda: [durable.interleaved_section(loop, args.quick)]),
            ("fanout", lambda: fanout.run(loop, args.quick)),
            ("reversal", lambda: reversal.run(loop, args.quick)),
            ("scale", lambda: scale.run(loop, args.quick)),
            ("evals", lambda: evals.run(loop, args.quick)),
            ("pg", lambda: postgres(loop, args.quick)),
            ("pgload", lambda: postgres(loop, args.quick, ("pgload",))),
            ("mcp", lambda: mcp_gateway.run(loop, args.quick)),
            ("temporal", lambda: temporal.run(loop, args.quick)),
            ("telemetry", lambda: telemetry.run(loop, args.quick)),
            ("adapters", lambda: adapters.run(loop, args.quick)),
        ]
        for name, fn in plan:
            if only and name not in only:
                continue
            if name == "pgload" and (not only or "pg" in only):
                continue  # already part of "pg"
            t = time.perf_counter()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            before = os.getloadavg()
            produced = fn()
            after = os.getloadavg()
            for sec in produced:  # every figure with the machine load it was taken under
                sec.notes.append(
                    f"Machine load average (1 min) while this ran: {before[0]:.2f} at the start, "
                    f"{after[0]:.2f} at the end (5 min: {after[1]:.2f}); 2 cores."
                )
            sections.extend(produced)
            print(f"  {name}: {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
            if args.out:  # write as we go, so a late failure keeps the figures already taken
                write_markdown(args.out, sections, quick=args.quick, argv=cmd, started=started)
    finally:
        loop.close()
        shutil.rmtree(SCRATCH, ignore_errors=True)
        with contextlib.suppress(OSError):
            SCRATCH.parent.rmdir()  # only if no other run is using it
    print_sections(sections)
    if args.out:
        write_markdown(
            args.out,
            sections,
            quick=args.quick,
            argv=sys.argv[1:] if argv is None else argv,
            started=started,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
