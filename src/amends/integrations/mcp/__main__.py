"""``python -m amends.integrations.mcp serve --config FILE [--http HOST:PORT]``: the same as
``amends mcp serve``, for MCP client configs that name a Python interpreter."""

from __future__ import annotations

import argparse
import logging
import sys

from amends import AmendsError
from amends._telemetry import configure_logging, say
from amends._visible import visible

from .cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amends.integrations.mcp")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    given = list(sys.argv[1:] if argv is None else argv)
    # "serve ..." is "mcp serve ..."; "sandbox mcp ..." stays as it is.
    args = parser.parse_args(given if given[:1] == ["sandbox"] else ["mcp", *given])
    configure_logging(getattr(args, "log_format", "text"))  # issue 28: the error a JSON line too
    try:
        return int(args.handler(args))
    except AmendsError as exc:
        # an upstream's words may be in it: shown by the one display rule, as `amends` shows it
        say(f"amends: error: {visible(str(exc), keep=chr(10))}", level=logging.ERROR)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
