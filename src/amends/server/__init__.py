"""``amends serve``: the HTTP API and web page (needs ``pip install 'amends[server]'``).

Import :func:`create_app` to mount the API in your own ASGI server.
"""

from __future__ import annotations

from .app import ApiError, ServerSettings, create_app
from .auth import TokenStore, tokens_path_for

__all__ = ["ApiError", "ServerSettings", "TokenStore", "create_app", "tokens_path_for"]
