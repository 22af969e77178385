"""``amends worker --temporal HOST:PORT --db URL --catalog REF``: a Temporal worker for reversals.

Always listed by ``amends --help``; running it needs the ``temporal`` extra. The worker serves the
reversal workflow and its activities on one task queue until SIGINT or SIGTERM, then drains: the
tool call it is running finishes (or, after a SIGKILL, moves to another worker).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
from typing import Any

from amends import AmendsError, ConfigError, open_log
from amends._telemetry import add_log_format, configure_logging, say

__all__ = ["register"]


DEFAULT_TASK_QUEUE = "amends-reversals"
"""The task queue a worker serves by default; the same value as
``amends.integrations.temporal.DEFAULT_TASK_QUEUE`` (kept here so ``amends --help`` does not import
temporalio; a test holds the two equal)."""


def register(sub: Any) -> None:
    """Add the ``worker`` subcommand."""
    p = sub.add_parser(
        "worker",
        help="run a Temporal worker that executes amends reversals (extra: amends[temporal])",
        description="Serve amends' reversal workflow and its activities (drift probes, "
        "compensations, follow-ups, log writes) on a Temporal task queue.",
    )
    p.add_argument("--temporal", required=True, metavar="HOST:PORT", help="Temporal frontend")
    p.add_argument(
        "--db",
        required=True,
        metavar="URL",
        help="the shared saga log every worker and client uses (postgresql://...)",
    )
    p.add_argument(
        "--catalog",
        metavar="REF",
        help="MODULE:ATTR of the catalog (a Catalog or callable(db) -> Catalog) or a .toml "
        "catalog; default $AMENDS_CATALOG (never the sandbox's unless named)",
    )
    p.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE, help="default %(default)s")
    p.add_argument("--namespace", default="default", help="default %(default)s")
    p.add_argument(
        "--heartbeat",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often a running tool call heartbeats (default %(default)s); keep it well "
        "under the clients' heartbeat timeout (default 5 s)",
    )
    add_log_format(p)
    p.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    from ..integrations.temporal import connect, make_worker
    from ._common import load_catalog

    # as make_worker checks them, but before connecting: nan and inf too (a worker that never
    # heartbeats has every tool call taken for lost), and a blank queue serves nothing
    if not (args.heartbeat > 0 and math.isfinite(args.heartbeat)):
        raise ConfigError(f"--heartbeat must be a positive number of seconds, got {args.heartbeat}")
    if not args.task_queue.strip():
        raise ConfigError(
            f"--task-queue must name a Temporal task queue, got {args.task_queue!r}; e.g. "
            f"{DEFAULT_TASK_QUEUE!r}"
        )
    catalog = load_catalog(args.catalog, args.db)
    configure_logging(args.log_format)  # issue 28: a JSON line per reversal event, on stderr

    async def main() -> None:
        client = await connect(args.temporal, namespace=args.namespace)
        log = open_log(args.db)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            async with make_worker(
                client, catalog, log, task_queue=args.task_queue, heartbeat_seconds=args.heartbeat
            ):
                say(
                    f"amends worker: serving task queue {args.task_queue!r} on {args.temporal} "
                    f"with {len(catalog)} tools, log {log.url}"
                )
                await stop.wait()
        except RuntimeError as exc:
            # the SDK's worker failed (the server went away for good, the namespace was deleted):
            # one line, not its tracebacks (issue 25 item 12)
            raise AmendsError(
                f"the worker of task queue {args.task_queue!r} on {args.temporal} stopped: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; check the "
                f"server and start the worker again"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                await log.close()

    try:
        asyncio.run(main())
    except AmendsError as exc:
        # The Temporal SDK's own threads may still call into Python while the interpreter
        # finalizes after a failed start, and abort it ("PyGILState_Release", exit -6, seen
        # under load): a worker that fails writes its one line and exits at once (issue 25).
        from ._common import safe

        say(f"amends: error: {safe(exc, keep_newlines=True)}", level=logging.ERROR)  # issue 28
        sys.stderr.flush()
        os._exit(2)
    return 0
