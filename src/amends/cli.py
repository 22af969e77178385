"""The ``amends`` command line: ``demo | eval | show | undo | audit | serve | recover | doctor``.

Each area registers its own subcommands (``register(subparsers)`` in the modules of
``_COMMAND_MODULES``), so the CLI grows without one module knowing every command. Optional areas
whose extra is not installed are left out of the help rather than failing the whole CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import AmendsError

__all__ = ["main"]

_COMMAND_MODULES = (
    "amends._cli_core",  # show, undo, audit
    "amends.sandbox.cli",  # demo
    "amends.evals.cli",  # eval
    "amends.server.cli",  # serve, token
    "amends.log.cli",  # recover, doctor
)

Handler = Callable[[argparse.Namespace], int]


def add_db_argument(parser: argparse.ArgumentParser, default: str = "amends.db") -> None:
    parser.add_argument(
        "--db",
        default=default,
        help=f"saga log: a path or URL (sqlite:///f.db, postgresql://...); default {default}",
    )


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amends", description="Honest undo for AI-agent tool calls."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # that area is not built into this install
            continue  # an optional extra is missing (e.g. amends[server])
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except AmendsError as exc:
        sys.stderr.write(f"amends: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
