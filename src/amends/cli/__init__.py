"""The ``amends`` command line: ``demo | eval | show | undo | audit | serve | recover | doctor``.

Each area registers its own subcommands (``register(subparsers)`` in the modules of
``_COMMAND_MODULES``), so the CLI grows without one module knowing every command. Optional areas
whose extra is not installed are left out of the help rather than failing the whole CLI.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Sequence
from typing import NoReturn

from amends import AmendsError

from .._telemetry import configure_logging, say
from ._common import Handler, safe
from ._hints import complete, invoked

__all__ = ["main"]

_COMMAND_MODULES = (
    "amends.cli.core",  # show, undo, audit
    "amends.cli.follow_up",  # follow-up send, follow-up list (issue 27)
    "amends.cli.demo",  # demo
    "amends.cli.eval",  # eval
    "amends.cli.serve",  # serve, token
    "amends.cli.ops",  # recover, doctor
    "amends.integrations.mcp.cli",  # mcp serve, mcp audit, sandbox mcp (SDK imported when run)
    "amends.cli.worker",  # worker (a Temporal worker; temporalio imported when run)
)


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake reported on one line (the value, what is wrong, the fix)
    instead of the whole usage block (issue 11)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {safe(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog="amends", description="Honest undo for AI-agent tool calls.")
    parser.add_argument("--version", action="version", version=f"amends {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # that area, or the optional extra it needs, is not installed
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    catalogs = getattr(args, "catalog", None)
    if isinstance(catalogs, str):
        catalogs = [catalogs]
    try:
        # issue 26 item 3: every command printed while this runs repeats its program and --db
        with invoked(getattr(args, "db", None), catalogs):
            return _run(handler, args)
    except BrokenPipeError:  # `amends show | head`: the reader left; not an error of ours
        return 0
    except KeyboardInterrupt:
        return 130


def _run(handler: Handler, args: argparse.Namespace) -> int:
    # issue 28: under --log-format json every line on stderr is JSON, the error that stops the
    # command included (configured before the command checks anything)
    undo_logging = configure_logging(getattr(args, "log_format", "text"))
    try:
        return handler(args)
    except AmendsError as exc:
        # a command the message quotes runs as printed (issue 26 item 3)
        say(f"amends: error: {complete(safe(exc, keep_newlines=True))}", level=logging.ERROR)
        return 2
    except BrokenPipeError:
        raise  # main() says nothing about it
    except OSError as exc:  # a file or port the user named: one line, never a traceback
        say(f"amends: error: {safe(exc, keep_newlines=True)}", level=logging.ERROR)
        return 2
    finally:
        undo_logging()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
