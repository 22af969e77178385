"""``amends serve`` and ``amends token create``; FastAPI and uvicorn are imported only when run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``serve`` and ``token`` to the ``amends`` CLI."""
    from ._common import add_db_argument

    serve = sub.add_parser("serve", help="serve the HTTP API and web page (needs amends[server])")
    add_db_argument(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--catalog",
        help="MODULE:ATTR of the catalog (default $AMENDS_CATALOG or amends.sandbox:demo_catalog)",
    )
    serve.add_argument("--undo-label", default="Undo", help="label of the undo button")
    serve.add_argument(
        "--no-auth", action="store_true", help="no tokens: every request sees every saga"
    )
    serve.add_argument("--tokens", help="token file (default <db>.tokens)")
    serve.set_defaults(handler=_serve)

    token = sub.add_parser("token", help="manage API tokens for amends serve")
    tsub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = tsub.add_parser("create", help="create a token for a tenant; printed once")
    create.add_argument("--tenant", required=True, help="the tenant the token may see")
    add_db_argument(create)
    create.add_argument("--tokens", help="token file (default <db>.tokens)")
    create.set_defaults(handler=_token_create)


def _token_create(args: argparse.Namespace) -> int:
    from ..server.auth import TokenStore, default_tokens_path

    store = TokenStore(default_tokens_path(args.db, args.tokens))
    try:
        sys.stdout.write(store.create(args.tenant) + "\n")
    finally:
        store.close()
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server.app import ServerSettings, create_app
    except ImportError as exc:
        raise ConfigError(
            f"amends serve needs the web server ({exc}); pip install 'amends[server]'"
        ) from exc
    from ..engine import Engine
    from ..server.auth import TokenStore, default_tokens_path
    from ._common import load_catalog

    catalog = load_catalog(args.catalog, args.db)
    tokens = None if args.no_auth else TokenStore(default_tokens_path(args.db, args.tokens))
    settings = ServerSettings(no_auth=args.no_auth, undo_label=args.undo_label, tokens=tokens)
    app = create_app(lambda: Engine(catalog, log=args.db), settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
