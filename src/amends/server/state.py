"""What the server's modules share: its settings, its per-process state and the 4xx error.

Kept apart from :mod:`.app` (which assembles the app from :mod:`.api`, :mod:`.web` and
:mod:`.security`) so those modules import it without importing the app back.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from amends import ChainProblem, Engine, UndoReport

from .auth import FailedAuthLimiter, Network, TokenStore

__all__ = ["ApiError", "JsonAnswer", "ServerSettings"]


class JsonAnswer(JSONResponse):
    """A JSON answer as Starlette writes it (UTF-8), except that text UTF-8 cannot encode -- a
    lone surrogate an agent's argument held (JSON ``"\\ud800"`` decodes to one) -- is written as
    its ``\\ud800`` escape: the same string to every JSON reader, the data unchanged, never a
    500 (the saga's page answered 500 for such an argument)."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
            return text.encode("ascii")


class ApiError(Exception):
    """A 4xx answer: ``{"error": code, "detail": detail}``."""

    def __init__(
        self, status: int, error: str, detail: Any, *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})


@dataclass
class ServerSettings:
    """How ``amends serve`` behaves."""

    no_auth: bool = False
    """Serve every saga to everyone (local use, ``amends demo --serve``). Default off."""
    undo_label: str = "Undo"
    """The label of the web page's undo button."""
    tokens: TokenStore | None = None
    """Where API tokens are checked (required unless ``no_auth``)."""
    title: str = "amends"
    max_body: int = 64 * 1024
    """Largest request body accepted, in bytes (a budget or a note is a few hundred)."""
    idempotency_ttl: float = 24 * 3600.0
    """Seconds an ``Idempotency-Key`` stays bound to its first request. Default one day."""
    verify_interval: float = 300.0
    """Seconds between two checks of every saga's hash chain (0 turns the periodic check off)."""
    failed_auth_limit: int = 10
    """Invalid tokens one address may send per minute before its invalid attempts get 429 (a
    valid token is never refused by this limit)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks of the reverse proxies in front of the server (``10.0.0.5``,
    ``10.0.0.0/24``): only a request from one of them has its ``X-Forwarded-For`` believed.
    Default none: the client's address is the TCP peer's, whatever headers say (issue 21.8)."""
    session_ttl: float = 12 * 3600.0
    """Seconds a browser stays signed in after it signs in with a token. Default 12 hours."""
    max_idempotency_keys: int = 10_000
    """``Idempotency-Key`` values kept per tenant (within ``idempotency_ttl``); past that, the
    oldest are forgotten first, so the table stays bounded (issue 21.14)."""
    public_origin: str | None = None
    """``https://amends.example.com`` when served behind a proxy (for the Origin check);
    default: the request's own scheme and Host."""
    metrics_port: int | None = None
    """The port of the listener serving ``GET /metrics`` without a token (``amends serve
    --metrics-bind``), for a Prometheus on a private network; on every other listener
    ``/metrics`` takes a token like any API route. Default none."""
    api_docs: bool = False
    """Serve the interactive API docs at ``/docs`` (they load Swagger UI from a CDN, so they
    are off by default; ``/openapi.json`` is always served)."""


@dataclass
class _Asking:
    """Requests of this process deciding about one saga's reversal (see :attr:`_State.asking`)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass
class _State:
    engine: Engine
    settings: ServerSettings
    limiter: FailedAuthLimiter
    no_auth_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    """What the CSRF token of a ``--no-auth`` page is derived from (per process)."""
    tasks: dict[str, asyncio.Task[UndoReport]] = field(default_factory=dict)
    wakers: set[asyncio.Event] = field(default_factory=set)
    live: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Step outcomes seen by the progress hook, per reversal id (for SSE)."""
    tampered: dict[str, list[ChainProblem]] = field(default_factory=dict)
    """Sagas whose history did not verify at the last check (rule 11)."""
    verified_at: float | None = None
    trusted: tuple[Network, ...] = ()
    """``settings.trusted_proxies``, parsed."""
    metrics: Any = None
    """The log's figures for ``/metrics`` (``amends.server.metrics.LogMetrics``), made on the
    first scrape."""
    asking: dict[str, _Asking] = field(default_factory=dict)
    """Per saga: held while an undo request decides whether it starts the reversal (and
    records who asked) or joins the one running (issue 21.14: joining records nothing)."""
