"""A worker process for the fault tests (a real child: it can be SIGKILLed, SIGSTOPped).

usage: worker.py LOG_URL VENDOR MODE SAGA_ID [--kill-at N] [--pause-file PATH] [--lease S]
       [--steps s2,s3]
MODE: forward | undo | recover (recover, then undo SAGA_ID) | record-many N | undo-many N
--kill-at N: SIGKILL itself at the Nth vendor hook point (before/after each request).
--pause-file PATH: at the first probe, touch PATH and sleep (the parent SIGSTOPs it there).
Prints one JSON line with the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import vendor

import amends

p = argparse.ArgumentParser()
p.add_argument("log")
p.add_argument("vendor")
p.add_argument("mode")
p.add_argument("saga")
p.add_argument("--kill-at", type=int, default=0)
p.add_argument("--pause-file", default="")
p.add_argument("--lease", type=float, default=0.5)
p.add_argument("--count", type=int, default=1)
p.add_argument("--offset", type=int, default=0)
p.add_argument("--steps", default="")  # undo: only these steps (issue 27), comma-separated
args = p.parse_args()

points = [0]


def hook(point: str) -> None:
    points[0] += 1
    if args.kill_at and points[0] == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if args.pause_file and point.startswith("probe:") and not Path(args.pause_file).exists():
        # The event loop is blocked here, so no new log write starts; give the log's writer
        # thread time to finish the one in flight, so the pause never holds a SQLite lock.
        time.sleep(0.5)
        Path(args.pause_file).write_text(str(os.getpid()))
        time.sleep(5)  # the parent SIGSTOPs us in here, mid-reversal, before the dispatch record


async def main() -> None:
    vpath = args.vendor
    if args.mode.endswith("-many"):  # one vendor file per range: the log is what is under load
        vpath = f"{args.vendor}.{args.offset}"
    catalog = vendor.make_catalog(vpath, hook)
    engine = amends.Engine(
        catalog,
        log=args.log,
        lease_seconds=args.lease,
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.05),
    )
    try:
        out: dict[str, object] = {}
        if args.mode == "forward":
            await vendor.record_saga(engine, args.saga)
        elif args.mode == "undo":
            steps = args.steps.split(",") if args.steps else None
            out = (await engine.undo(args.saga, steps=steps)).to_dict()
        elif args.mode == "recover":
            rec = await engine.recover()
            report = await engine.undo(args.saga)
            out = {
                "in_doubt": [list(x) for x in rec.in_doubt],
                "resumed": len(rec.resumed),
                "report": report.to_dict(),
            }
        elif args.mode == "record-many":
            t0 = time.perf_counter()
            sem = asyncio.Semaphore(16)

            async def one(i: int) -> None:
                async with sem:
                    await vendor.record_saga(engine, f"{args.saga}-{i}", steps=12)

            ids = range(args.offset, args.offset + args.count)
            await asyncio.gather(*(one(i) for i in ids))
            out = {"seconds": time.perf_counter() - t0, "sagas": args.count}
        elif args.mode == "undo-many":
            t0 = time.perf_counter()
            sem = asyncio.Semaphore(16)
            statuses: dict[str, int] = {}

            async def undo_one(i: int) -> None:
                async with sem:
                    r = await engine.undo(f"{args.saga}-{i}")
                    statuses[r.status.value] = statuses.get(r.status.value, 0) + 1

            ids = range(args.offset, args.offset + args.count)
            await asyncio.gather(*(undo_one(i) for i in ids))
            out = {"seconds": time.perf_counter() - t0, "statuses": statuses}
        print(json.dumps(out), flush=True)
    finally:
        await engine.close()


asyncio.run(main())
