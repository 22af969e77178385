"""``amends serve`` and ``amends token create``; FastAPI and uvicorn are imported only when run."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from amends import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``serve`` and ``token`` to the ``amends`` CLI."""
    from .._telemetry import add_log_format
    from ._common import CATALOG_HELP, add_db_argument

    serve = sub.add_parser("serve", help="serve the HTTP API and web page (needs amends[server])")
    add_db_argument(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="port, 1-65535 (default 8000)")
    serve.add_argument("--catalog", action="append", metavar="REF", help=CATALOG_HELP)
    serve.add_argument("--undo-label", default="Undo", help="label of the undo button")
    serve.add_argument(
        "--public-origin",
        metavar="URL",
        help="the origin browsers use behind a proxy, e.g. https://amends.example.com "
        "(CSRF origin check; Secure cookies when https)",
    )
    serve.add_argument(
        "--no-auth", action="store_true", help="no tokens: every request sees every saga"
    )
    serve.add_argument("--tokens", help="token file (default <db>.tokens)")
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        metavar="ADDRESS",
        help="a reverse proxy whose X-Forwarded-For is believed: an IP address or network "
        "(repeat for several; default $AMENDS_TRUSTED_PROXIES, comma-separated, else none: "
        "the client's address is the connection's)",
    )
    serve.add_argument(
        "--request-timeout",
        type=_positive("--request-timeout"),
        default=10.0,
        metavar="SECONDS",
        help="seconds a client has to send a request's headers and body (default 10)",
    )
    serve.add_argument(
        "--max-connections",
        type=_count("--max-connections"),
        metavar="N",
        help="connections open at once (default 1000, fewer if `ulimit -n` is lower)",
    )
    serve.add_argument(
        "--max-connections-per-address",
        type=_count("--max-connections-per-address"),
        default=100,
        metavar="N",
        help="connections open at once from one address; trusted proxies are exempt (default 100)",
    )
    serve.add_argument(
        "--metrics-bind",
        metavar="HOST:PORT",
        help="also serve GET /metrics here, without a token, and nothing else (for a "
        "Prometheus on a private network); on --host:--port /metrics takes a token",
    )
    add_log_format(serve)
    serve.set_defaults(handler=_serve)

    token = sub.add_parser("token", help="manage API tokens for amends serve")
    tsub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = tsub.add_parser("create", help="create a token for a tenant; printed once")
    create.add_argument("--tenant", required=True, help="the tenant the token may see")
    add_db_argument(create)
    create.add_argument("--tokens", help="token file (default <db>.tokens)")
    create.add_argument(
        "--expires-in", type=float, metavar="SECONDS", help="stop working after SECONDS"
    )
    create.set_defaults(handler=_token_create)
    listing = tsub.add_parser("list", help="list tokens: id, tenant, state, last used (no secrets)")
    add_db_argument(listing)
    listing.add_argument("--tokens", help="token file (default <db>.tokens)")
    listing.add_argument("--tenant", help="only this tenant's tokens")
    listing.set_defaults(handler=_token_list)
    revoke = tsub.add_parser("revoke", help="revoke a token by its id (see token list)")
    revoke.add_argument("token_id", help="the token's id, tok_...")
    add_db_argument(revoke)
    revoke.add_argument("--tokens", help="token file (default <db>.tokens)")
    revoke.set_defaults(handler=_token_revoke)


def _token_store(args: argparse.Namespace, *, create: bool) -> Any:
    """The token file of ``--db`` (or ``--tokens``), checked before anything is written.

    Issue 21.16: a token file beside a log is made only beside an amends log that exists (a
    mistyped ``--db`` is an error, never a stray token file for a server that will not find it);
    ``token list`` and ``revoke`` never create one.

    Raises:
        LogError: The token file would sit beside a missing or non-amends log.
        ConfigError: ``list``/``revoke`` and no token file exists there.
    """
    from ..server.auth import TokenStore, default_tokens_path
    from ._common import open_existing_log, run_async

    path = default_tokens_path(args.db, args.tokens)
    explicit = bool(args.tokens or os.environ.get("AMENDS_TOKENS"))
    if create and not explicit and not os.path.exists(path):

        async def check() -> None:
            log = open_existing_log(args.db, read_only=True)
            await log.close()

        run_async(check())  # raises naming the log and the fix
    if not create and path != ":memory:" and not os.path.exists(path):
        raise ConfigError(
            f"no token file at {path!r}; create a token first with `amends token create "
            f"--tenant T --db {args.db}`, or pass --tokens with the file amends serve uses"
        )
    return TokenStore(path)


def _token_create(args: argparse.Namespace) -> int:
    from ..server.auth import check_token_request

    check_token_request(args.tenant, args.expires_in)  # bad flags first, before any file
    store = _token_store(args, create=True)
    try:
        sys.stdout.write(store.create(args.tenant, expires_in=args.expires_in) + "\n")
    finally:
        store.close()
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from ..server.auth import format_tokens

    store = _token_store(args, create=False)
    try:
        sys.stdout.write(format_tokens(store.list(args.tenant)))
    finally:
        store.close()
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    store = _token_store(args, create=False)
    try:
        info = store.revoke(args.token_id)
    finally:
        store.close()
    from ._common import safe

    sys.stdout.write(f"revoked {info.token_id} (tenant {safe(info.tenant)})\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server.app import ServerSettings, create_app
    except ImportError as exc:
        raise ConfigError(
            f"amends serve needs the web server ({exc}); pip install 'amends[server]'"
        ) from exc
    from amends import Engine

    from .._telemetry import configure_logging
    from ..server.auth import TokenStore, default_tokens_path
    from ..server.connections import ConnectionLimits, uvicorn_config
    from ..server.security import parse_trusted_proxies
    from ._common import load_catalog

    if args.no_auth and args.host not in ("127.0.0.1", "::1", "localhost"):
        # issue 13.8: without tokens, every saga is served to anyone who can reach the port
        raise ConfigError(
            f"--no-auth serves every saga to anyone who can connect, so it is refused on "
            f"--host {args.host!r}; use --host 127.0.0.1, or create a token with "
            f"`amends token create --tenant T` and drop --no-auth"
        )
    public_origin = _origin(args.public_origin)  # bad flags first, before the log is opened
    proxies = _trusted_proxies(args.trusted_proxy)
    limits = ConnectionLimits(
        request_timeout=args.request_timeout,
        max_connections=_max_connections(args.max_connections),
        max_per_address=args.max_connections_per_address,
        trusted=parse_trusted_proxies(proxies),
    )
    metrics_at = _metrics_address(args.metrics_bind, args.port)
    chosen = _serve_catalog(args.catalog, args.db)  # rule 12: only what the operator allowed
    if isinstance(chosen, list):  # several MCP gateways share the log (issue 24 item 6)
        from ..integrations.mcp.undo_catalog import gateways_catalog

        catalog = gateways_catalog(chosen)
    else:
        catalog = load_catalog(chosen, args.db)
    sock = _bind(args.host, args.port)  # issue 11: a bad or busy port is one line, before serving
    socks = [sock] if metrics_at is None else [sock, _bind(*metrics_at)]
    tokens = None if args.no_auth else TokenStore(default_tokens_path(args.db, args.tokens))
    settings = ServerSettings(
        no_auth=args.no_auth,
        undo_label=args.undo_label,
        tokens=tokens,
        public_origin=public_origin,
        trusted_proxies=proxies,
        metrics_port=None if metrics_at is None else metrics_at[1],
    )
    app = create_app(lambda: Engine(catalog, log=args.db), settings)
    # issue 26 item 8: say where it is served, once the socket listens (a browser can open it)
    host = f"[{args.host}]" if ":" in args.host else args.host
    sys.stdout.write(f"amends: serving http://{host}:{sock.getsockname()[1]}/ (Ctrl-C stops)\n")
    sys.stdout.flush()
    # issue 28: --log-format json: uvicorn's lines go through the root logger's JSON handler
    logs = {} if args.log_format == "text" else {"log_config": None}
    configure_logging(args.log_format)
    uvicorn.Server(uvicorn_config(app, limits, log_level="info", **logs)).run(sockets=socks)
    return 0


def _metrics_address(value: str | None, main_port: int) -> tuple[str, int] | None:
    """``--metrics-bind HOST:PORT`` (``[::1]:9464`` for IPv6), on a port of its own: the
    listener is told apart by its port, and it must never be the one that serves the API.

    Raises:
        ConfigError: Not HOST:PORT, or the port of --port.
    """
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--metrics-bind {value!r} is not HOST:PORT; e.g. --metrics-bind 10.0.0.5:9464"
        )
    if int(port) == main_port:
        raise ConfigError(
            f"--metrics-bind {value!r} uses port {port}, the port of the API (--port); "
            f"/metrics is served there already (with a token): give the listener its own port"
        )
    return host.strip("[]"), int(port)


def _trusted_proxies(flags: list[str] | None) -> tuple[str, ...]:
    """``--trusted-proxy`` (repeatable), else ``$AMENDS_TRUSTED_PROXIES`` (comma-separated)."""
    values = flags or os.environ.get("AMENDS_TRUSTED_PROXIES", "").split(",")
    return tuple(v.strip() for v in values if v.strip())


def _max_connections(asked: int | None) -> int:
    """``--max-connections``, within what this process may open (a refused ``accept`` would
    stop the server from answering anyone)."""
    try:
        import resource

        allowed = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        allowed = -1
    room = allowed - 100 if allowed > 0 else 1000  # the log, the token file, the catalog...
    if asked is None:
        return max(1, min(1000, room))
    if allowed > 0 and asked > room:
        raise ConfigError(
            f"--max-connections {asked} needs about {asked + 100} file descriptors, but this "
            f"process may open {allowed} (`ulimit -n`); lower --max-connections or raise "
            f"`ulimit -n`"
        )
    return asked


def _positive(flag: str) -> Any:
    """An argparse ``type=``: seconds, more than 0 and at most an hour."""
    within = "more than 0 and at most 3600 seconds"
    return _bounded(flag, float, "a number", lambda v: 0 < v <= 3600, within)


def _count(flag: str) -> Any:
    """An argparse ``type=``: a whole number, at least 1."""
    return _bounded(flag, int, "a whole number", lambda v: v >= 1, "at least 1")


def _bounded(
    flag: str, kind: Callable[[str], Any], what: str, ok: Callable[[Any], bool], bounds: str
) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r} is not {what}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{flag} must be {bounds}, got {text!r}")
        return value

    return parse


def _origin(url: str | None) -> str | None:
    """``--public-origin``: scheme://host[:port], nothing else (it is compared with Origin)."""
    if url is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(
            f"--public-origin must be scheme://host[:port] as the browser sees it, got {url!r}; "
            f"e.g. --public-origin https://amends.example.com"
        )
    return f"{parts.scheme}://{parts.netloc}"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"port {value} is out of range; give a port from 1 to 65535, e.g. --port 8000"
        )
    return value


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything says "serving on"."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"--host {host!r} is not an address this machine knows ({exc})") from exc
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        busy = exc.errno == errno.EADDRINUSE
        raise ConfigError(
            f"cannot serve on {host}:{port}: "
            + (
                "the port is already in use; stop the other server or pick another --port"
                if busy
                else f"{exc.strerror or exc}; pick another --host or --port"
            )
        ) from None
    sock.set_inheritable(True)
    return sock


def _serve_catalog(specs: list[str] | None, db: str) -> str | list[str]:
    """What ``amends serve`` serves: the one catalog the operator allowed (``--catalog``, else
    ``$AMENDS_CATALOGS``/``$AMENDS_CATALOG``), or, when several are allowed, the one the log's
    sagas recorded, or all of those when they are the configs of several MCP gateways sharing
    the log (issue 24 item 6). Rule 12: a recorded name only selects among the allowed ones;
    nothing the log names is loaded by itself. The log must exist.

    Raises:
        ConfigError: No catalog is allowed, or the log's sagas do not select exactly one.
        LogError: The log does not exist or is not an amends log.
    """
    from ..integrations.mcp.undo_catalog import is_gateway_config
    from ._common import allowed_specs, open_existing_log, recorded_catalog, run_async, safe

    async def refs() -> set[str]:
        log = open_existing_log(db, read_only=True)
        try:
            sagas = await log.list_sagas(limit=10_000)
        finally:
            await log.close()
        return {str(r) for r in (recorded_catalog(s).get("ref") for s in sagas) if r}

    found = run_async(refs())  # also: a mistyped --db is an error, never a new empty log
    by_name = allowed_specs(specs)
    if len(by_name) == 1:
        return next(iter(by_name.values()))
    if not by_name:
        hint = f" (its sagas recorded {', '.join(sorted(map(safe, found)))})" if found else ""
        raise ConfigError(
            f"amends serve loads only a catalog you name; none was given{hint}. Pass it, e.g. "
            f"--catalog myproj.tools:catalog or --catalog tools.toml (rule 12: amends never "
            f"loads a catalog named in the log; see docs/your-project.md)"
        )
    chosen = [name for name in by_name if name in found]
    if len(chosen) > 1 and all(is_gateway_config(by_name[n]) for n in chosen):
        return sorted(by_name[n] for n in chosen)  # several allowed MCP gateways share the log
    if len(chosen) != 1:
        raise ConfigError(
            f"amends serve serves one catalog; of those you allowed "
            f"({', '.join(sorted(by_name))}), the sagas in {db} select "
            f"{', '.join(sorted(chosen)) or 'none'}; pass the one to serve with --catalog"
        )
    return by_name[chosen[0]]
