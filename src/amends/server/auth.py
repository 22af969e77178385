"""API tokens for ``amends serve``: one tenant per token, only the sha256 of the secret at rest.

Tokens live in a sidecar SQLite file of their own (never in the saga log's schema). A token is
shown once, when it is created; the server can check it but can never print it again.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["TokenStore", "tokens_path_for"]

_PREFIX = "amd_"


def tokens_path_for(db: str) -> str:
    """The token file beside a saga log: ``<db>.tokens`` for SQLite, ``amends-tokens.db`` else."""
    if db.startswith(("postgresql://", "postgres://")):
        return "amends-tokens.db"
    path = db.removeprefix("sqlite:///").removeprefix("sqlite://")
    if path in ("", ":memory:"):
        return ":memory:"
    return path + ".tokens"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    """What a valid token grants."""

    token_id: str
    tenant: str


class TokenStore:
    """Hashed API tokens in a small SQLite file.

    Args:
        path: The token file (``:memory:`` for tests).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS amends_api_tokens ("
                " token_id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
                " sha256 TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)"
            )
        except sqlite3.Error as exc:
            raise ConfigError(
                f"cannot open the token file {path!r}: {exc}; pass a writable --tokens path"
            ) from exc

    def create(self, tenant: str) -> str:
        """Create a token for ``tenant`` and return it (the only time it is ever visible).

        Raises:
            ConfigError: ``tenant`` is empty.
        """
        if not isinstance(tenant, str) or not tenant.strip():
            raise ConfigError(f"--tenant must be a non-empty name, got {tenant!r}")
        token = _PREFIX + secrets.token_urlsafe(32)
        token_id = "tok_" + secrets.token_hex(6)
        with self._lock:
            self._conn.execute(
                "INSERT INTO amends_api_tokens VALUES (?, ?, ?, ?)",
                (token_id, tenant, _digest(token), time.time()),
            )
        return token

    def check(self, token: str | None) -> TokenInfo | None:
        """The tenant a token grants, or ``None`` for a missing or unknown token."""
        if not token or len(token) > 200:
            return None
        with self._lock:
            row = self._conn.execute(
                "SELECT token_id, tenant FROM amends_api_tokens WHERE sha256 = ?",
                (_digest(token),),
            ).fetchone()
        return None if row is None else TokenInfo(row[0], row[1])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def default_tokens_path(db: str, override: str | None) -> str:
    return override or os.environ.get("AMENDS_TOKENS") or tokens_path_for(db)
