"""Who is asking, and may they change anything: authentication, CSRF, headers, body limit.

Issue 13 items 4-7. Every state-changing request from a browser is checked twice: its ``Origin`` /
``Sec-Fetch-Site`` must be this server's own origin (a page on another port of the same host is
another origin), and it must carry the page's CSRF token in the ``X-Amends-CSRF`` header, which a
cross-origin page can neither read nor send without a CORS preflight this server never grants.
Requests authenticated with ``Authorization: Bearer`` cannot be forged by a browser and need
neither check.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from fastapi import Request

if TYPE_CHECKING:
    from .state import _State

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "BodyLimit",
    "Principal",
    "SecurityHeaders",
    "authenticate",
    "check_same_origin",
    "csrf_token",
    "guard_write",
]

COOKIE = "amends_session"
"""The session cookie: HttpOnly, SameSite=Strict, Secure over TLS (issue 13.4)."""
CSRF_HEADER = "x-amends-csrf"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _api_error(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> Any:
    from .state import ApiError

    return ApiError(status, error, detail, headers=headers)


@dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    tenant: str | None
    """The tenant whose sagas it sees (``None``: every tenant, ``--no-auth``)."""
    via: Literal["bearer", "cookie", "none"]
    """How it authenticated: a bearer header, the session cookie, or not at all (no-auth)."""
    token_id: str | None
    """The token's public id, when a token was used."""
    secret: str
    """What this caller's CSRF token is derived from (its token, or the app's no-auth secret)."""

    @property
    def who(self) -> str:
        """How this caller is named in a resolution it records."""
        return f"token {self.token_id}" if self.token_id else "the web page (no auth)"


def csrf_token(secret: str) -> str:
    """The CSRF token of a session: a MAC of a fixed label under the session's secret."""
    return hmac.new(secret.encode(), b"amends-csrf-v1", hashlib.sha256).hexdigest()[:40]


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def authenticate(request: Request) -> Principal:
    """The caller of ``request``.

    Raises:
        ApiError: 401 without a valid token; 429 after too many failed attempts from this client.
    """
    st: _State = request.app.state.amends
    if st.settings.no_auth:
        return Principal(None, "none", None, st.no_auth_secret)
    header = request.headers.get("authorization", "")
    via: Literal["bearer", "cookie"] = "bearer"
    token = header[7:].strip() if header[:7].lower() == "bearer " else None
    if not token:
        token, via = request.cookies.get(COOKIE), "cookie"
    if not token:
        raise _api_error(
            401,
            "missing_token",
            "send 'Authorization: Bearer <token>'; create one with "
            "`amends token create --tenant T`",
        )
    wait = st.limiter.retry_after(_client(request))
    if wait is not None:  # issue 13.7: failed-auth rate limit
        raise _api_error(
            429,
            "too_many_failed_attempts",
            f"too many invalid tokens from this address; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    assert st.settings.tokens is not None
    info = st.settings.tokens.check(token)
    if info is None:
        st.limiter.failed(_client(request))
        raise _api_error(
            401,
            "invalid_token",
            "the token is unknown, expired or revoked; create one with `amends token create`",
        )
    return Principal(info.tenant, via, info.token_id, token)


def _own_origin(request: Request) -> str:
    st: _State = request.app.state.amends
    if st.settings.public_origin:
        return st.settings.public_origin.rstrip("/")
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def check_same_origin(request: Request) -> None:
    """Refuse a request a browser sent on behalf of another origin (issue 13.5).

    Raises:
        ApiError: 403 when ``Sec-Fetch-Site`` or ``Origin`` says the request comes from elsewhere.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise _api_error(
            403,
            "cross_origin_request",
            f"refused: the request came from another site or origin (Sec-Fetch-Site: {site}); "
            f"use the amends page itself or an API token",
        )
    origin = request.headers.get("origin")
    if origin == "null" and site == "same-origin":
        return  # a same-origin form post under Referrer-Policy: no-referrer sends Origin: null
    if origin is not None and origin != _own_origin(request):
        raise _api_error(
            403,
            "cross_origin_request",
            f"refused: Origin {origin!r} is not this server ({_own_origin(request)!r}); "
            f"use the amends page itself or an API token",
        )


def guard_write(request: Request, who: Principal) -> None:
    """Check a state-changing request (undo, continue, resolve) against CSRF (issue 13.5).

    Raises:
        ApiError: 403 for a cross-origin browser request or a missing/wrong CSRF token.
    """
    if who.via == "bearer":
        return  # a browser cannot attach an Authorization header to a cross-origin request
    from_browser = who.via == "cookie" or any(
        h in request.headers for h in ("origin", "sec-fetch-site", "cookie")
    )
    if not from_browser:
        return  # --no-auth and a non-browser client (curl): nothing to forge
    check_same_origin(request)
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_token(who.secret).encode()):
        raise _api_error(
            403,
            "csrf_token_missing" if not sent else "csrf_token_invalid",
            f"state-changing requests from a browser need the page's CSRF token in the "
            f"{CSRF_HEADER} header; reload the page, or use 'Authorization: Bearer <token>'",
        )


# --- ASGI middleware ------------------------------------------------------------------------
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = (
    (b"content-security-policy", _CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


class SecurityHeaders:
    """Adds CSP (no inline script), nosniff, no-referrer, no framing; ``no-store`` except static."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                for k, v in _HEADERS:
                    if k not in have:
                        headers.append((k, v))
                if b"cache-control" not in have:
                    # issue 13.6: authenticated pages and API answers are never cached
                    headers.append((b"cache-control", b"no-cache" if static else b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """Refuses a body over ``limit`` bytes (issue 13.7) without reading it.

    A declared ``Content-Length`` over the limit is answered 413 before a byte of the body is
    read; a chunked body is counted as it arrives and refused when it passes the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _answer(send, 400, "invalid_content_length", "Content-Length must be digits")
                return
            if int(declared) > self.limit:
                await _answer(
                    send,
                    413,
                    "body_too_large",
                    f"the body is {int(declared)} bytes; this server accepts at most "
                    f"{self.limit} bytes",
                )
                return
        seen = 0
        limit = self.limit

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _api_error(
                        413,
                        "body_too_large",
                        f"the body passed {limit} bytes; this server accepts at most {limit} bytes",
                    )
            return message

        await self.app(scope, counted, send)


async def _answer(send: Send, status: int, error: str, detail: str) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
