"""``amends serve``: the HTTP API and web page (needs ``pip install 'amends[server]'``).

Import :func:`create_app` to mount the API in your own ASGI server. The app is imported lazily,
so the CLI and ``amends doctor`` can use :mod:`amends.server.auth` (tokens) without FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .auth import TokenStore, tokens_path_for

if TYPE_CHECKING:
    from .app import ApiError, ServerSettings, create_app

__all__ = ["ApiError", "ServerSettings", "TokenStore", "create_app", "tokens_path_for"]


def __getattr__(name: str) -> Any:
    if name in ("ApiError", "ServerSettings", "create_app"):
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'amends.server' has no attribute {name!r}")
