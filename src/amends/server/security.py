"""Who is asking, and may they change anything: authentication, CSRF, headers, body limit.

Issue 13 items 4-7. Every state-changing request from a browser is checked twice: its ``Origin`` /
``Sec-Fetch-Site`` must be this server's own origin (a page on another port of the same host is
another origin), and it must carry the page's key in the ``X-Amends-CSRF`` header, which a
cross-origin page can neither read nor send without a CORS preflight this server never grants.
Requests authenticated with ``Authorization: Bearer`` cannot be forged by a browser and need
neither check.

Issue 21.7, cookie tossing: cookies are shared by every port of a host, and a page on another
port can set ours (Chromium lets even ``http://127.0.0.1`` set ``__Host-`` cookies). So the
cookie is never trusted alone: it names a server-side session, and the key that lets a request
change anything was handed to the page that signed in and lives in its origin's storage, which
no other origin can read or write. A planted session therefore gets a page that names its tenant
(every page says who is signed in), whose script refuses to present it, and whose writes are
refused here. Over TLS the cookie is also ``__Host-`` prefixed, so plain-http pages and
subdomains cannot set it at all.

Issue 21.8: the client's address is the TCP peer's; ``X-Forwarded-For`` is read only when the
peer is one of the operator's trusted proxies (``--trusted-proxy``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote_plus

from fastapi import Request

from amends import ConfigError

from .auth import Network

if TYPE_CHECKING:
    from .state import _State

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "TLS_COOKIE",
    "BodyLimit",
    "Principal",
    "RedactCredentials",
    "SecurityHeaders",
    "authenticate",
    "check_same_origin",
    "client_address",
    "cookie_name",
    "csrf_token",
    "digest",
    "forwarded_client",
    "guard_write",
    "is_trusted",
    "over_tls",
    "parse_trusted_proxies",
    "redact_url",
]

COOKIE = "amends_session"
"""The session cookie over plain http: HttpOnly, SameSite=Strict (issue 13.4)."""
TLS_COOKIE = "__Host-amends_session"
"""The session cookie over TLS: also Secure, Path=/ and host-only, which the ``__Host-``
prefix makes the browser enforce (issue 21.7): no plain-http page and no subdomain can set it."""
CSRF_HEADER = "x-amends-csrf"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _api_error(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> Any:
    from .state import ApiError

    return ApiError(status, error, detail, headers=headers)


def digest(text: str) -> str:
    """sha256 of ``text``, hex (what the server keeps of a key it hands out)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    tenant: str | None
    """The tenant whose sagas it sees (``None``: every tenant, ``--no-auth``)."""
    via: Literal["bearer", "cookie", "none"]
    """How it authenticated: a bearer header, a session cookie, or not at all (no-auth)."""
    token_id: str | None
    """The token's public id, when a token was used (directly or to sign the browser in)."""
    csrf_sha256: str
    """sha256 of what a browser's state-changing request must carry in ``X-Amends-CSRF``: the
    session's page key, or the ``--no-auth`` page's token; empty for a bearer token."""
    session_id: str | None = None
    """The browser session's public id (``ses_…``), when a session cookie was used."""

    @property
    def who(self) -> str:
        """How this caller is named in a resolution it records."""
        return f"token {self.token_id}" if self.token_id else "the web page (no auth)"


def csrf_token(secret: str) -> str:
    """The CSRF token of a ``--no-auth`` page: a MAC of a fixed label under the process's secret."""
    return hmac.new(secret.encode(), b"amends-csrf-v1", hashlib.sha256).hexdigest()[:40]


# --- the client's address (issue 21.8) ----------------------------------------------------------
def parse_trusted_proxies(values: Iterable[str]) -> tuple[Network, ...]:
    """``--trusted-proxy`` values: IP addresses or networks (``10.0.0.0/8``).

    Raises:
        ConfigError: A value is not an address or network (the message names it).
    """
    found = []
    for value in values:
        try:
            found.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise ConfigError(
                f"--trusted-proxy {value!r} is not an IP address or network; give the proxy's "
                f"address as the server sees it, e.g. --trusted-proxy 10.0.0.5 or "
                f"--trusted-proxy 10.0.0.0/24"
            ) from None
    return tuple(found)


_WITH_PORT = re.compile(r"^\[([0-9A-Fa-f:.]+)\](?::\d+)?$|^(\d{1,3}(?:\.\d{1,3}){3}):\d+$")
"""``[2001:db8::1]:443`` or ``203.0.113.9:443``: an address some proxies write with its port."""


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    bare = _WITH_PORT.match(text)
    try:
        ip = ipaddress.ip_address(bare.group(1) or bare.group(2) if bare else text)
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_trusted(address: str, trusted: tuple[Network, ...]) -> bool:
    """Whether ``address`` is one of the operator's trusted proxies."""
    ip = _ip(address) if trusted else None
    return ip is not None and any(ip.version == n.version and ip in n for n in trusted)


def forwarded_client(peer: str, forwarded_for: list[str], trusted: tuple[Network, ...]) -> str:
    """The client's address: the TCP peer, unless the peer is a trusted proxy; then the nearest
    ``X-Forwarded-For`` hop (read right to left) that is not a trusted proxy itself.

    A client may write anything into ``X-Forwarded-For``; only hops appended by trusted proxies
    are believed, so a forged header can neither hide a guesser nor lock another address out.
    """
    if not is_trusted(peer, trusted):
        return peer
    hops = [h for line in forwarded_for for h in line.split(",") if h.strip()]
    client = peer
    for hop in reversed(hops):
        ip = _ip(hop)
        if ip is None:
            return client  # garbage a proxy passed along: stop at the last hop we can name
        client = str(ip)
        if not is_trusted(client, trusted):
            return client
    return client


def client_address(request: Request) -> str:
    """The address failed sign-ins are counted against (issue 21.8)."""
    st: _State = request.app.state.amends
    peer = request.client.host if request.client else "unknown"
    return forwarded_client(peer, request.headers.getlist("x-forwarded-for"), st.trusted)


# --- sessions and authentication ----------------------------------------------------------------
def over_tls(request: Request) -> bool:
    """Whether the browser talks TLS: directly, or to the proxy named by ``public_origin``."""
    st: _State = request.app.state.amends
    origin = st.settings.public_origin or ""
    return request.url.scheme == "https" or origin.startswith("https://")


def cookie_name(request: Request) -> str:
    """``__Host-amends_session`` over TLS, ``amends_session`` over plain http."""
    return TLS_COOKIE if over_tls(request) else COOKIE


def _cookie_values(request: Request, name: str) -> list[str]:
    """Every value of cookie ``name`` the browser sent (a planted one may come along ours)."""
    found = []
    for header in request.headers.getlist("cookie"):
        for part in header.split(";"):
            key, eq, value = part.strip().partition("=")
            if eq and key == name:
                found.append(value.strip().strip('"'))
    return found


def authenticate(request: Request) -> Principal:
    """The caller of ``request``: a bearer token, else a browser session cookie.

    A valid credential is always accepted; only invalid ones are counted and limited per client
    address (issue 21.8: others tripping the limit must not lock a valid token out).

    Raises:
        ApiError: 401 without a valid token or session; 429 after too many failed attempts
            from this client.
    """
    st: _State = request.app.state.amends
    if st.settings.no_auth:
        return Principal(None, "none", None, digest(csrf_token(st.no_auth_secret)))
    assert st.settings.tokens is not None
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else None
    if token:
        info = st.settings.tokens.check(token)
        if info is not None:
            return Principal(info.tenant, "bearer", info.token_id, "")
        raise _failed(
            request,
            "invalid_token",
            "the token is unknown, expired or revoked; create one with `amends token create`",
        )
    name = cookie_name(request)
    cookies = _cookie_values(request, name)
    if not cookies:
        raise _api_error(
            401,
            "missing_token",
            "send 'Authorization: Bearer <token>'; create one with "
            "`amends token create --tenant T`",
        )
    if len(set(cookies)) > 1:
        # issue 21.7: two sessions at once means another site on this host planted one
        raise _api_error(
            401,
            "conflicting_sessions",
            f"this browser sent {len(cookies)} different {name} cookies: another site on this "
            f"host has planted one. Clear this site's cookies in the browser, then sign in",
        )
    session = st.settings.tokens.session(cookies[0])
    if session is not None:
        token_info = session.token
        return Principal(
            token_info.tenant, "cookie", token_info.token_id, session.key_sha256, session.session_id
        )
    raise _failed(
        request,
        "invalid_session",
        "the session is unknown or expired, or its token was revoked; sign in again at /login",
    )


def _failed(request: Request, error: str, detail: str) -> Any:
    """The answer to an invalid credential: 401, or 429 once this client failed too often."""
    st: _State = request.app.state.amends
    client = client_address(request)
    wait = st.limiter.retry_after(client)
    if wait is not None:  # issue 13.7: failed-auth rate limit
        return _api_error(
            429,
            "too_many_failed_attempts",
            f"too many invalid tokens from this address; retry in {wait} s (a valid token is "
            f"accepted at any time)",
            headers={"Retry-After": str(wait)},
        )
    st.limiter.failed(client)
    return _api_error(401, error, detail)


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
    if not hmac.compare_digest(digest(sent), who.csrf_sha256):
        raise _api_error(
            403,
            "csrf_token_missing" if not sent else "csrf_token_invalid",
            f"state-changing requests from a browser need the key of the page that signed in, "
            f"in the {CSRF_HEADER} header (a session this page did not start — another site "
            f"on this host may have planted it — has no such key); sign in again, or use "
            f"'Authorization: Bearer <token>'",
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


# --- the access log (issue 21.16) ---------------------------------------------------------------
_CREDENTIAL_NAME = re.compile(r"token|key|secret|passw|auth|session|sig|credential|code", re.I)
_CREDENTIAL_SHAPE = re.compile(r"\b(?:amd|sid)_[A-Za-z0-9_-]{16,}")
"""An amends token or session id wherever it appears, even in a path."""


def redact_url(text: str) -> str:
    """``text`` with the values of credential-like query parameters (``token``, ``api_key``,
    ``password``, ``sig``, …) and anything shaped like an amends token replaced by
    ``[redacted]``."""
    path, sep, query = text.partition("?")
    if sep:
        pairs = []
        for pair in query.split("&"):
            name, eq, _ = pair.partition("=")
            credential = eq and _CREDENTIAL_NAME.search(unquote_plus(name))
            pairs.append(f"{name}=[redacted]" if credential else pair)
        query = "&".join(pairs)
    return _CREDENTIAL_SHAPE.sub("[redacted]", path + sep + query)


class RedactCredentials(logging.Filter):
    """Redacts credentials from the request lines of an access log (uvicorn's
    ``uvicorn.access``): a token pasted into a URL must not land in the log (issue 21.16)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_url(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_url(record.msg)
        return True
