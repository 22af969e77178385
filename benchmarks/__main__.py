"""``python -m benchmarks [--quick]``: run everything, print tables, write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time

from . import durable, evals, fanout, reversal, scale
from .common import SCRATCH, Section
from .report import print_sections, write_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smallest sizes (under a minute)")
    parser.add_argument("--only", default="", help="comma list: durable,fanout,reversal,scale,evals,pg")
    parser.add_argument("--out", default="docs/benchmarks.md", help="markdown report path ('' = none)")
    args = parser.parse_args(argv)
    only = {x for x in args.only.split(",") if x}
    started = time.time()
    loop = asyncio.new_event_loop()
    sections: list[Section] = []
    try:
        plan = [
            ("durable", lambda: durable.run(loop, args.quick)),
            ("fanout", lambda: fanout.run(loop, args.quick)),
            ("reversal", lambda: reversal.run(loop, args.quick)),
            ("scale", lambda: scale.run(loop, args.quick)),
            ("evals", lambda: evals.run(loop, args.quick)),
        ]
        for name, fn in plan:
            if only and name not in only:
                continue
            t = time.perf_counter()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            sections.extend(fn())
            print(f"  {name}: {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
    finally:
        loop.close()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    print_sections(sections)
    if args.out:
        write_markdown(args.out, sections, quick=args.quick, argv=sys.argv[1:] if argv is None else argv,
                       started=started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
