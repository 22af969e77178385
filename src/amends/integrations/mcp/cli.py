"""``amends mcp serve``: the gateway process, over stdio (default) or streamable HTTP.

The ``mcp`` SDK is imported only when the command runs, so ``amends --help`` works without the
``amends[mcp]`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from amends import AmendsError, ConfigError
from amends._telemetry import add_log_format, configure_logging, json_logs, say
from amends._visible import visible

__all__ = ["parse_address", "register", "run_audit", "serve"]


def register(sub: Any) -> None:
    """Add ``mcp serve`` to the ``amends`` CLI."""
    mcp = sub.add_parser("mcp", help="the MCP gateway (needs amends[mcp])")
    msub = mcp.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    serve_p = msub.add_parser(
        "serve",
        help="serve the gateway: stdio by default, streamable HTTP with --http HOST:PORT",
    )
    serve_p.add_argument("--config", required=True, help="gateway config file (TOML)")
    serve_p.add_argument(
        "--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp"
    )
    serve_p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --http on a non-loopback address (the gateway has no authentication of "
        "its own: put it behind an authenticating proxy)",
    )
    add_log_format(serve_p)
    serve_p.set_defaults(handler=_serve)
    register_audit(msub)

    sandbox = sub.add_parser("sandbox", help="the sandbox vendors as a service")
    ssub = sandbox.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    smcp = ssub.add_parser(
        "mcp", help="serve the sandbox vendors as an MCP server over stdio (needs amends[mcp])"
    )
    smcp.add_argument("--world", required=True, help="sandbox world file (created if missing)")
    smcp.add_argument("--seed", type=int, default=0, help="seed of a new world (default 0)")
    smcp.set_defaults(handler=_sandbox_mcp)


def _sandbox_mcp(args: argparse.Namespace) -> int:
    _need_sdk()
    from amends.sandbox.mcp_server import serve_stdio

    asyncio.run(serve_stdio(args.world, seed=args.seed))
    return 0


def _need_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"amends mcp needs the MCP SDK ({exc}); pip install 'amends[mcp]'"
        ) from exc


def parse_address(value: str) -> tuple[str, int]:
    """``"127.0.0.1:8765"`` -> ``("127.0.0.1", 8765)``.

    Raises:
        ConfigError: Not HOST:PORT with a port in 1-65535.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http {value!r} is not HOST:PORT; e.g. --http 127.0.0.1:8765")
    return host.strip("[]"), int(port)


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    from .config import load_config

    http = args.http or load_config(args.config).http  # the config is checked before the SDK
    address = parse_address(http) if http else None
    if address is not None and not args.allow_remote and not _loopback(address[0]):
        raise ConfigError(
            f"--http {http!r} is not a loopback address and the gateway has no "
            f"authentication of its own: anyone who reaches it can call your tools. Serve it on "
            f"127.0.0.1, or put it behind an authenticating proxy and pass --allow-remote"
        )
    _need_sdk()
    # issue 28: on stderr (stdout is the MCP channel on stdio)
    configure_logging(args.log_format)
    if args.log_format == "text":
        _sdk_lines_without_tracebacks()
    asyncio.run(serve(args.config, http=address))
    return 0


class _OneLine(logging.Formatter):
    """An SDK record as one line: its message and the exception's type and text, no traceback
    (an upstream that prints a banner on stdout made the SDK log one per line it could not
    parse; a user reads "never a traceback", issue 24)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"mcp: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            first = str(exc).strip().splitlines()[:1]
            text += f" ({type(exc).__name__}{': ' + first[0] if first else ''})"
        return text


def _sdk_lines_without_tracebacks() -> None:
    """Text logs: the SDK's warnings and errors reach stderr as one line each (``_OneLine``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    sdk = logging.getLogger("mcp")
    sdk.addHandler(handler)
    sdk.propagate = False


async def serve(config_path: str, *, http: tuple[str, int] | None = None) -> None:
    """Run the gateway until the agent disconnects (stdio) or the process is stopped (HTTP).

    Raises:
        ConfigError: The config is invalid or an upstream cannot be started.
    """
    from .config import load_config
    from .gateway import Gateway

    config = load_config(config_path)
    async with Gateway(config) as gw:
        # After a crash: steps left mid-call become in_doubt, dead reversals resume (rule 1).
        try:
            await gw.engine.recover()
        except AmendsError as exc:  # serving must not depend on an old saga's recovery
            say(
                f"amends mcp: recovery did not finish ({visible(str(exc))}); run `amends "
                f"recover` on the log",
                level=logging.WARNING,
            )
        server = gw.server()
        if http is None:
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        import uvicorn

        host, port = http
        app = server.streamable_http_app(host=host)
        # issue 28: under --log-format json, uvicorn's lines go through the JSON handler too
        logs: dict[str, Any] = {"log_config": None} if json_logs() else {}
        uv = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", **logs)
        )
        await uv.serve()


def register_audit(msub: Any) -> None:
    audit = msub.add_parser(
        "audit",
        help="list each upstream tool with its contract class and the server's hints; "
        "--suggest writes a draft contract file for the tools without one",
    )
    audit.add_argument("--config", required=True, help="gateway config file (TOML)")
    audit.add_argument(
        "--suggest",
        metavar="FILE",
        help="write a draft contract file for the tools without a contract (not used until a "
        "person reviews it)",
    )
    audit.add_argument("--json", action="store_true", help="print JSON")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    return run_audit(args.config, suggest_path=args.suggest, as_json=args.json)


def run_audit(
    config_path: str,
    *,
    suggest_path: str | None = None,
    as_json: bool = False,
    strict: bool = False,
) -> int:
    """Print each upstream tool of a gateway config with its contract class and the server's
    ``ToolAnnotations`` as hints only; with ``suggest_path``, write a draft contract file.

    Shared by ``amends mcp audit`` and ``amends audit --mcp-config``. A hint never upgrades a
    tool above irreversible; the draft starts ``reviewed = false`` and is refused by the gateway
    until a person has reviewed it (issue 14).

    Returns:
        The exit status: 1 when a contract names a tool the server does not list (the gateway
        would refuse to start), or when ``strict`` and a tool has no contract; else 0.

    Raises:
        ConfigError: The config is invalid, an upstream cannot be started, the SDK is missing,
            or ``suggest_path`` exists (a reviewed file is never overwritten) or cannot be
            written.
    """
    import json
    from pathlib import Path

    if suggest_path is not None and Path(suggest_path).exists():
        # checked before starting any upstream: never overwrite a file a person may have reviewed
        raise ConfigError(
            f"--suggest {suggest_path!r} already exists and may hold reviewed contracts; "
            f"choose a new file name, or move the old one away first"
        )
    _need_sdk()
    from .audit import audit_rows, suggest

    rows = asyncio.run(audit_rows(config_path))
    if suggest_path is not None:
        text = suggest(rows)
        try:
            with open(suggest_path, "x", encoding="utf-8") as f:  # never overwrite (see above)
                f.write(text)
        except OSError as exc:
            raise ConfigError(
                f"cannot write the draft contracts to {suggest_path!r}: {exc.strerror or exc}; "
                f"choose a writable path that does not exist yet"
            ) from exc
    missing = sum(1 for r in rows if not r["contract"])
    problems = [r for r in rows if r.get("problem")]
    status = 1 if problems or (strict and missing) else 0
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return status
    for r in rows:
        hint = ", ".join(f"{k}={v}" for k, v in r["hints"].items() if v is not None)
        # an upstream named its tools: shown by the one display rule (amends._visible)
        line = f"{r['agent_name']:32} {r['label']:28} {('hints: ' + hint) if hint else ''}"
        sys.stdout.write(visible(line) + "\n")
        if r["note"]:
            sys.stdout.write(f"{'':32} {visible(r['note'])}\n")
    if suggest_path is not None:
        sys.stdout.write(
            f"draft contracts for {missing} tool(s) written to {suggest_path}: review every "
            f"entry, then delete the line 'reviewed = false' before the gateway will read it\n"
        )
    return status
