"""The HTTP API and web page of ``amends serve`` (FastAPI; needs the ``amends[server]`` extra).

Every request is scoped to one tenant (its token's, or everything in ``--no-auth`` mode); a saga of
another tenant is a 404, never a 403, so ids of other tenants are not even confirmed. A rejected
request never touches the saga log: all validation happens before ``engine.undo`` is called.

This module assembles the app; the routes live in :mod:`.api` (JSON) and :mod:`.web` (pages), the
protections in :mod:`.security`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from amends import (
    AmendsError,
    ChainProblem,
    ConfigError,
    Engine,
    HistoryAlteredError,
    LeaseLostError,
    LogError,
    LogLockedError,
    SagaNotFoundError,
    StepOutcome,
)

from .auth import FailedAuthLimiter, Network
from .security import (
    BodyLimit,
    RedactCredentials,
    SecurityHeaders,
    parse_trusted_proxies,
)
from .state import ApiError, JsonAnswer, ServerSettings, _State

__all__ = ["ApiError", "ServerSettings", "create_app"]

_HERE = Path(__file__).parent
_log = logging.getLogger("amends.server")


def create_app(
    engine: Engine | Callable[[], Engine], settings: ServerSettings | None = None
) -> FastAPI:
    """The FastAPI app serving ``engine``'s saga log.

    Args:
        engine: The engine, or a factory called at startup (inside the server's event loop).
        settings: Auth, labels, limits. Default: token auth with no token store (a ConfigError).

    Raises:
        ConfigError: Auth is on but no token store was given, or a trusted proxy is not an IP
            address or network.
    """
    settings = settings or ServerSettings()
    if not settings.no_auth and settings.tokens is None:
        raise ConfigError("create_app needs settings.tokens (a TokenStore) unless no_auth=True")
    trusted = parse_trusted_proxies(settings.trusted_proxies)
    app = FastAPI(
        title="amends",
        version="0.1.0",
        description="Honest undo for AI-agent tool calls: sagas, previews, one reversal per saga.",
        lifespan=_lifespan(engine, settings, trusted),
        docs_url="/docs" if settings.api_docs else None,
        redoc_url=None,
        default_response_class=JsonAnswer,  # a lone surrogate in data is an escape, not a 500
    )
    app.add_middleware(BodyLimit, limit=settings.max_body)
    from .metrics import MetricsListener

    app.add_middleware(MetricsListener)  # issue 28: the metrics listener reaches /metrics only
    app.add_middleware(SecurityHeaders)  # outermost: a 413 gets the headers too
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    _install_error_handlers(app)
    from . import api, follow_ups, metrics, web

    app.include_router(api.router)
    app.include_router(follow_ups.router)  # issue 27: follow-ups a person sends
    app.include_router(web.router)
    app.include_router(metrics.router)
    return app


_REDACT = RedactCredentials()


def _lifespan(
    engine: Engine | Callable[[], Engine], settings: ServerSettings, trusted: tuple[Network, ...]
) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if isinstance(engine, Engine) else engine()
        st = _State(eng, settings, FailedAuthLimiter(settings.failed_auth_limit, 60.0))
        st.trusted = trusted
        app.state.amends = st
        # issue 21.16: a token someone pasted into a URL never reaches the access log
        logging.getLogger("uvicorn.access").addFilter(_REDACT)

        def hook(reversal_id: str, outcome: StepOutcome) -> None:
            st.live.setdefault(reversal_id, []).append(outcome.to_dict())
            for w in list(st.wakers):
                w.set()

        eng.progress_hooks.append(hook)
        checker = (
            asyncio.create_task(_verify_periodically(st)) if settings.verify_interval > 0 else None
        )
        try:
            yield
        finally:
            if checker is not None:
                checker.cancel()
                await asyncio.gather(checker, return_exceptions=True)
            eng.progress_hooks.remove(hook)
            for t in st.tasks.values():
                if not t.done():
                    await asyncio.wait({t}, timeout=5)
            if not isinstance(engine, Engine):
                await eng.close()

    return lifespan


async def verify_all(st: _State) -> dict[str, list[ChainProblem]]:
    """Check every saga's hash chain now (rule 11); remember and log the sagas that fail."""
    problems = await st.engine.log.verify()
    found: dict[str, list[ChainProblem]] = {}
    for p in problems:
        found.setdefault(p.saga_id, []).append(p)
    for saga_id, ps in found.items():
        if saga_id not in st.tampered:
            _log.error(
                "amends: the history of saga %s does not verify (%s); it is marked on the API "
                "and the web page — run `amends doctor --verify`",
                saga_id,
                "; ".join(f"event {p.event_id}: {p.what}" for p in ps),
            )
    st.tampered = found
    st.verified_at = time.time()
    return found


async def _verify_periodically(st: _State) -> None:
    while True:
        try:
            await verify_all(st)
        except Exception as exc:  # a failed check is logged; the next one retries
            _log.error("amends: checking the saga log's hash chains failed: %s", exc)
        await asyncio.sleep(st.settings.verify_interval)


def _http_detail(request: Request, exc: StarletteHTTPException) -> str:
    """A routing error as a sentence naming the value and the fix (issue 26 item 9: it was
    Starlette's bare "Not Found" / "Method Not Allowed"); any other detail as it is."""
    where = f"{request.method} {request.url.path[:200]!r}"
    if exc.status_code == 404 and exc.detail == "Not Found":
        return f"no such path: {where}; the API's paths are in /openapi.json and docs/http-api.md"
    if exc.status_code == 405 and exc.detail == "Method Not Allowed":
        allow = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        return f"{where} is not allowed" + (f"; this path takes {allow}" if allow else "")
    return str(exc.detail)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JsonAnswer(
            {"error": exc.error, "detail": exc.detail}, status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        # issue 13.7: a 405 keeps the Allow header Starlette computed
        return JsonAnswer(
            {"error": name, "detail": _http_detail(request, exc)},
            status_code=exc.status_code,
            headers=dict(exc.headers or {}),
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        return JsonAnswer({"error": "invalid_request", "detail": detail}, status_code=422)

    @app.exception_handler(AmendsError)
    async def _amends_error(request: Request, exc: AmendsError) -> JSONResponse:
        status, headers = _status_of(exc)
        # rule 12: an altered saga is the documented 409 history_does_not_verify, wherever the
        # read that found it (a record that cannot be read) happened
        name = _ERROR_NAMES.get(type(exc), type(exc).__name__)
        if isinstance(exc, HistoryAlteredError):
            from .api import remember_log_problems

            remember_log_problems(request.app.state.amends, exc.problems)
        return JsonAnswer({"error": name, "detail": str(exc)}, status_code=status, headers=headers)


LOCKED_RETRY_AFTER = 2
"""Seconds a client is asked to wait after the saga log stayed locked (503)."""
_STATUS: tuple[tuple[type[AmendsError], int], ...] = (
    (SagaNotFoundError, 404),
    (LeaseLostError, 409),  # another worker took the reversal over: the request conflicts
    (LogError, 503),  # the log cannot be used right now: the server's trouble, not the request's
    (AmendsError, 409),
)
"""Issue 21.16: the one table from an engine error to its HTTP status (first match wins)."""


_ERROR_NAMES: dict[type[AmendsError], str] = {HistoryAlteredError: "history_does_not_verify"}
"""The ``error`` of an engine error whose name the API documents otherwise."""


def _status_of(exc: AmendsError) -> tuple[int, dict[str, str]]:
    """The status of an engine error and its headers: a locked log is 503 with Retry-After (a
    retry will likely succeed), never a 409 that tells the client its request was wrong."""
    status = next(code for kind, code in _STATUS if isinstance(exc, kind))
    if isinstance(exc, LogLockedError):
        return status, {"Retry-After": str(LOCKED_RETRY_AFTER)}
    return status, {}
