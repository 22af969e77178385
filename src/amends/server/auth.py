"""API tokens and browser sessions for ``amends serve``: only sha256 digests of secrets at rest.

Tokens live in a sidecar SQLite file of their own (never in the saga log's schema), created
readable by its owner only (0600, rule 11). A token is shown once, when it is created; the server
can check it but can never print it again. A token may expire; a revoked token is refused at once,
in every process sharing the file. Each successful check records the token's last-used time.

A browser that signs in with a token gets a *session* instead (issue 21.7): its cookie carries a
random session id, never the token (every port of the host receives the host's cookies), and the
page that signed in holds a second random *page key* in its origin's storage, which no other
origin can read or plant. Requests that change anything must carry the page key.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import secrets
import sqlite3
import stat
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from amends import ConfigError
from amends._visible import visible

__all__ = [
    "FailedAuthLimiter",
    "Network",
    "Session",
    "TokenInfo",
    "TokenStore",
    "check_token_request",
    "default_tokens_path",
    "format_tokens",
    "permission_problems",
    "token_file_problems",
    "tokens_path_for",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
"""An address range of trusted proxies (``--trusted-proxy``)."""

_PREFIX = "amd_"
_SESSION_PREFIX = "sid_"
_SESSIONS_PER_TOKEN = 50
"""Browser sessions kept per token; signing in once more ends the oldest (bounds the file)."""
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


def check_token_request(tenant: str, expires_in: float | None) -> None:
    """What ``amends token create`` is asked for, checked before any file is touched.

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
        raise ConfigError(f"--expires-in must be a positive number of seconds, got {expires_in!r}")


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


@dataclass(frozen=True)
class Session:
    """A browser signed in with a token (issue 21.7): what its cookie grants."""

    session_id: str
    """Public id of the session (``ses_…``): the page's script compares it with the one it
    stored when it signed in; it grants nothing."""
    token: TokenInfo
    """The token the browser signed in with (its tenant is the session's)."""
    key_sha256: str
    """sha256 of the page key: a request that changes anything must carry the key itself."""
    expires_at: float
    """When the session ends by itself (epoch seconds)."""


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
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS amends_sessions ("
                " sid_sha256 TEXT PRIMARY KEY, session_id TEXT NOT NULL, token_id TEXT NOT NULL,"
                " key_sha256 TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL)"
            )
        except sqlite3.Error as exc:
            if hasattr(self, "_conn"):
                self._conn.close()  # never leak the file of a token store we refuse to open
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
        check_token_request(tenant, expires_in)
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
            return self._used(row, now)

    def _used(self, row: tuple[Any, ...] | None, now: float) -> TokenInfo | None:
        """The active token of ``row`` (its last use recorded), else ``None``. Holds the lock."""
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

    def start_session(
        self, token: str | None, *, ttl: float, now: float | None = None
    ) -> tuple[str, str, Session] | None:
        """Sign a browser in with ``token``: ``(cookie value, page key, session)``, or ``None``
        when the token is missing, unknown, expired or revoked.

        The cookie value and the page key are shown here only; the file keeps their sha256.
        Expired sessions are deleted, and a token keeps at most its 50 newest sessions.
        """
        now = time.time() if now is None else now
        info = self.check(token, now=now)
        if info is None:
            return None
        sid, key = _SESSION_PREFIX + secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        session = Session("ses_" + secrets.token_hex(8), info, _digest(key), now + ttl)
        row = (_digest(sid), session.session_id, info.token_id, session.key_sha256, now, now + ttl)
        with self._lock:
            self._conn.execute("DELETE FROM amends_sessions WHERE expires_at <= ?", (now,))
            self._conn.execute(
                "INSERT INTO amends_sessions (sid_sha256, session_id, token_id, key_sha256,"
                " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
            self._conn.execute(
                "DELETE FROM amends_sessions WHERE token_id = ? AND sid_sha256 NOT IN ("
                " SELECT sid_sha256 FROM amends_sessions WHERE token_id = ?"
                " ORDER BY created_at DESC LIMIT ?)",
                (info.token_id, info.token_id, _SESSIONS_PER_TOKEN),
            )
        return sid, key, session

    def session(self, cookie: str | None, *, now: float | None = None) -> Session | None:
        """The live session of a session cookie; ``None`` for an unknown or expired one, or
        when its token was revoked or expired since."""
        if not cookie or not cookie.startswith(_SESSION_PREFIX) or len(cookie) > 200:
            return None
        now = time.time() if now is None else now
        cols = ", ".join(f"t.{c.strip()}" for c in _COLUMNS.split(","))
        with self._lock:
            row = self._conn.execute(
                f"SELECT s.session_id, s.key_sha256, s.expires_at, {cols} FROM amends_sessions s"
                " JOIN amends_api_tokens t ON t.token_id = s.token_id WHERE s.sid_sha256 = ?",
                (_digest(cookie),),
            ).fetchone()
            if row is None or row[2] <= now:
                return None
            info = self._used(tuple(row[3:]), now)
        return None if info is None else Session(row[0], info, row[1], row[2])

    def end_session(self, cookie: str | None) -> None:
        """Sign a browser out: its session cookie is refused from now on, in every process."""
        if cookie:
            with self._lock:
                self._conn.execute(
                    "DELETE FROM amends_sessions WHERE sid_sha256 = ?", (_digest(cookie),)
                )

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
                visible(t.tenant),  # "acme\u200b" never reads as "acme" (issue 21)
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
    """Counts failed sign-ins per client address; over ``limit`` within ``window`` seconds, that
    address's *invalid* attempts get 429 (issue 13.7).

    Issue 21.8: the limit never refuses a valid token or session, whoever else tripped it from
    the same address (a shared NAT, a proxy): callers check the credential first and consult
    the limiter only when it failed. IPv6 clients are counted per /64 (one host has a whole
    /64 to pick addresses from); the table keeps the 10,000 most recently failing clients, so an
    address scan cannot grow it, nor wipe the counts of everyone else at once.

    Kept in memory per process: it slows guessing down; the 256-bit tokens make guessing hopeless
    anyway.
    """

    MAX_CLIENTS = 10_000

    def __init__(self, limit: int = 10, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._fails: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(client: str) -> str:
        """The bucket of a client address: itself, or its /64 for IPv6."""
        try:
            ip = ipaddress.ip_address(client)
        except ValueError:
            return client
        if ip.version == 6 and ip.ipv4_mapped is None:
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return str(ip.ipv4_mapped or ip) if ip.version == 6 else str(ip)

    def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Seconds ``client`` must wait, or ``None`` when it may try."""
        now = time.monotonic() if now is None else now
        key = self.key(client)
        with self._lock:
            fails = self._fails.get(key)
            if fails is None:
                return None
            while fails and fails[0] <= now - self.window:
                fails.popleft()
            if not fails:
                del self._fails[key]
                return None
            if len(fails) < self.limit:
                return None
            return max(1, math.ceil(fails[0] + self.window - now))

    def failed(self, client: str, now: float | None = None) -> None:
        """Count one failed attempt of ``client``."""
        now = time.monotonic() if now is None else now
        key = self.key(client)
        with self._lock:
            # only the newest `limit` failures matter: the deque cannot grow with a flood
            fails = self._fails.setdefault(key, deque(maxlen=max(1, self.limit)))
            fails.append(now)
            self._fails.move_to_end(key)
            while len(self._fails) > self.MAX_CLIENTS:  # forget the longest-quiet client
                self._fails.popitem(last=False)
