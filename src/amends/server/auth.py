"""API tokens for ``amends serve``: one tenant per token, only the sha256 of the secret at rest.

Tokens live in a sidecar SQLite file of their own (never in the saga log's schema), created
readable by its owner only (0600, rule 11). A token is shown once, when it is created; the server
can check it but can never print it again. A token may expire; a revoked token is refused at once,
in every process sharing the file. Each successful check records the token's last-used time.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import sqlite3
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass

from .._errors import ConfigError

__all__ = [
    "FailedAuthLimiter",
    "TokenInfo",
    "TokenStore",
    "default_tokens_path",
    "format_tokens",
    "permission_problems",
    "token_file_problems",
    "tokens_path_for",
]

_PREFIX = "amd_"
_LAST_USED_EVERY = 60.0
"""Seconds between two writes of a token's last-used time (not one write per request)."""


def tokens_path_for(db: str) -> str:
    """The token file beside a saga log: ``<db>.tokens`` for SQLite, ``amends-tokens.db`` else."""
    if db.startswith(("postgresql://", "postgres://")):
        return "amends-tokens.db"
    path = db.removeprefix("sqlite:///").removeprefix("sqlite://")
    if path in ("", ":memory:"):
        return ":memory:"
    return path + ".tokens"


def default_tokens_path(db: str, override: str | None) -> str:
    """``--tokens``, else ``$AMENDS_TOKENS``, else the file beside the log."""
    return override or os.environ.get("AMENDS_TOKENS") or tokens_path_for(db)


def permission_problems(path: str) -> list[str]:
    """Sentences naming each of ``path`` (and its -journal/-wal/-shm) readable beyond its owner."""
    found = []
    for p in (path, path + "-journal", path + "-wal", path + "-shm"):
        try:
            mode = stat.S_IMODE(os.stat(p).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            found.append(f"{p} has mode {mode:04o}: other users can read it; run `chmod 600 {p}`")
    return found


def token_file_problems(db: str) -> list[str]:
    """``amends doctor``: the token file of log ``db`` (if any) readable beyond its owner."""
    path = default_tokens_path(db, None)
    if path == ":memory:" or not os.path.exists(path):
        return []
    return permission_problems(path)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _create_private(path: str) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite gives its journal the same)."""
    if path == ":memory:" or os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ConfigError(
            f"cannot create the token file {path!r}: {exc}; pass a writable --tokens path"
        ) from exc
    os.close(fd)


@dataclass(frozen=True)
class TokenInfo:
    """What a token grants, and its bookkeeping (never the token itself)."""

    token_id: str
    """The token's public id (``tok_…``), for ``amends token list / revoke``."""
    tenant: str
    """The tenant whose sagas the token may see and undo."""
    created_at: float = 0.0
    """When the token was created (epoch seconds)."""
    expires_at: float | None = None
    """When it stops working; ``None``: never."""
    last_used_at: float | None = None
    """When it last authenticated a request (to the minute); ``None``: never used."""
    revoked_at: float | None = None
    """When it was revoked; ``None``: it was not."""

    def state(self, now: float) -> str:
        """``active``, ``expired`` or ``revoked``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


_COLUMNS = "token_id, tenant, created_at, expires_at, last_used_at, revoked_at"


class TokenStore:
    """Hashed API tokens in a small SQLite file (created 0600).

    Args:
        path: The token file (``:memory:`` for tests).

    Raises:
        ConfigError: The file cannot be created or opened.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._touched: dict[str, float] = {}
        _create_private(path)
        try:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS amends_api_tokens ("
                " token_id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
                " sha256 TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)"
            )
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(amends_api_tokens)")}
            for column in ("expires_at", "last_used_at", "revoked_at"):
                if column not in have:  # token files of amends 0.1 gain the new columns
                    self._conn.execute(f"ALTER TABLE amends_api_tokens ADD COLUMN {column} REAL")
        except sqlite3.Error as exc:
            raise ConfigError(
                f"cannot open the token file {path!r}: {exc}; pass a writable --tokens path"
            ) from exc

    def create(self, tenant: str, *, expires_in: float | None = None) -> str:
        """Create a token for ``tenant`` and return it (the only time it is ever visible).

        Args:
            tenant: The tenant the token may see.
            expires_in: Seconds until the token stops working; ``None``: never.

        Raises:
            ConfigError: ``tenant`` is empty or ``expires_in`` is not a positive number.
        """
        if not isinstance(tenant, str) or not tenant.strip():
            raise ConfigError(f"--tenant must be a non-empty name, got {tenant!r}")
        if expires_in is not None and (
            isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
            or not math.isfinite(expires_in)
            or expires_in <= 0
        ):
            raise ConfigError(
                f"--expires-in must be a positive number of seconds, got {expires_in!r}"
            )
        token = _PREFIX + secrets.token_urlsafe(32)
        token_id = "tok_" + secrets.token_hex(6)
        now = time.time()
        expires = None if expires_in is None else now + float(expires_in)
        with self._lock:
            self._conn.execute(
                "INSERT INTO amends_api_tokens (token_id, tenant, sha256, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (token_id, tenant, _digest(token), now, expires),
            )
        return token

    def check(self, token: str | None, *, now: float | None = None) -> TokenInfo | None:
        """The grant of a valid token; ``None`` for a missing, unknown, expired or revoked one."""
        if not token or len(token) > 200:
            return None
        now = time.time() if now is None else now
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM amends_api_tokens WHERE sha256 = ?", (_digest(token),)
            ).fetchone()
            if row is None:
                return None
            info = TokenInfo(*row)
            if info.state(now) != "active":
                return None
            if now - self._touched.get(info.token_id, 0.0) >= _LAST_USED_EVERY:
                self._touched[info.token_id] = now
                self._conn.execute(
                    "UPDATE amends_api_tokens SET last_used_at = ? WHERE token_id = ?",
                    (now, info.token_id),
                )
        return info

    def list(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every token (of ``tenant``), oldest first; never the secrets."""
        sql = f"SELECT {_COLUMNS} FROM amends_api_tokens"
        params: tuple[str, ...] = ()
        if tenant is not None:
            sql += " WHERE tenant = ?"
            params = (tenant,)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY created_at, token_id", params).fetchall()
        return [TokenInfo(*r) for r in rows]

    def revoke(self, token_id: str) -> TokenInfo:
        """Revoke a token by its id; it is refused from the next request on, in every process.

        Raises:
            ConfigError: No token has that id (the message lists the known ids).
        """
        now = time.time()
        with self._lock:
            self._conn.execute(
                "UPDATE amends_api_tokens SET revoked_at = ? "
                "WHERE token_id = ? AND revoked_at IS NULL",
                (now, token_id),
            )
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM amends_api_tokens WHERE token_id = ?", (token_id,)
            ).fetchone()
        if row is None:
            known = ", ".join(t.token_id for t in self.list()) or "none"
            raise ConfigError(
                f"no token with id {token_id!r} in {self.path} (known: {known}); "
                f"see `amends token list`"
            )
        return TokenInfo(*row)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def format_tokens(tokens: list[TokenInfo], now: float | None = None) -> str:
    """``amends token list``: one line per token, never the secret."""
    now = time.time() if now is None else now
    if not tokens:
        return "no tokens; create one with `amends token create --tenant T`\n"

    def when(ts: float | None, never: str) -> str:
        return never if ts is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))

    rows = [("ID", "TENANT", "STATE", "CREATED", "EXPIRES", "LAST USED")]
    for t in tokens:
        rows.append(
            (
                t.token_id,
                t.tenant,
                t.state(now),
                when(t.created_at, "-"),
                when(t.expires_at, "never"),
                when(t.last_used_at, "never"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


class FailedAuthLimiter:
    """Refuses a client after ``limit`` failed sign-ins within ``window`` seconds (issue 13.7).

    Kept in memory per process: it slows guessing down; the 256-bit tokens make guessing hopeless
    anyway.
    """

    def __init__(self, limit: int = 10, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._fails: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Seconds ``client`` must wait, or ``None`` when it may try."""
        now = time.monotonic() if now is None else now
        with self._lock:
            fails = self._fails.get(client)
            if fails is None:
                return None
            while fails and fails[0] <= now - self.window:
                fails.popleft()
            if not fails:
                del self._fails[client]
                return None
            if len(fails) < self.limit:
                return None
            return max(1, math.ceil(fails[0] + self.window - now))

    def failed(self, client: str, now: float | None = None) -> None:
        """Count one failed attempt of ``client``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if len(self._fails) > 10_000:  # bound the memory an address scan can take
                self._fails.clear()
            self._fails.setdefault(client, deque()).append(now)
