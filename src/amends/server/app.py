"""The HTTP API and web page of ``amends serve`` (FastAPI; needs the ``amends[server]`` extra).

Every request is scoped to one tenant (its token's, or everything in ``--no-auth`` mode); a saga of
another tenant is a 404, never a 403, so ids of other tenants are not even confirmed. A rejected
request never touches the saga log: all validation happens before ``engine.undo`` is called.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..budget import Budget
from ..engine import Engine
from ..errors import AmendsError, ConfigError
from ..log.base import Event, ReversalRecord, SagaRecord
from ..report import StepOutcome, UndoReport
from .auth import TokenStore

__all__ = ["ApiError", "ServerSettings", "create_app"]

_HERE = Path(__file__).parent
_COOKIE = "amends_token"
_UNDO_WAIT = 1.0
"""Seconds POST undo waits for the reversal before answering 202 (the brief's ~1 s)."""


class ApiError(Exception):
    """A 4xx answer: ``{"error": code, "detail": detail}``."""

    def __init__(self, status: int, error: str, detail: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail


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


@dataclass
class _State:
    engine: Engine
    settings: ServerSettings
    tasks: dict[str, asyncio.Task[UndoReport]] = field(default_factory=dict)
    idem: dict[str, str] = field(default_factory=dict)
    """Idempotency-Key -> saga id it was first used for."""
    wakers: set[asyncio.Event] = field(default_factory=set)
    live: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Step outcomes seen by the progress hook, per reversal id (for SSE)."""


# --- helpers --------------------------------------------------------------------------------
def _tenant(request: Request) -> str | None:
    """The caller's tenant (``None`` = every tenant, no-auth mode). Raises 401 without a token."""
    st: _State = request.app.state.amends
    if st.settings.no_auth:
        return None
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else None
    token = token or request.cookies.get(_COOKIE)
    if not token:
        raise ApiError(
            401,
            "missing_token",
            "send 'Authorization: Bearer <token>'; create one with "
            "`amends token create --tenant T`",
        )
    assert st.settings.tokens is not None
    info = st.settings.tokens.check(token)
    if info is None:
        raise ApiError(
            401, "invalid_token", "the token is unknown; create one with `amends token create`"
        )
    return info.tenant


def _visible(saga: SagaRecord | None, tenant: str | None) -> bool:
    return saga is not None and (tenant is None or saga.tenant == tenant)


async def _saga(request: Request, saga_id: str) -> tuple[SagaRecord, str | None]:
    tenant = _tenant(request)
    st: _State = request.app.state.amends
    saga = await st.engine.log.get_saga(saga_id)
    if saga is None or not _visible(saga, tenant):
        raise ApiError(404, "saga_not_found", f"no saga {saga_id!r} for this token")
    return saga, tenant


async def _reversal(request: Request, reversal_id: str) -> tuple[ReversalRecord, SagaRecord]:
    tenant = _tenant(request)
    st: _State = request.app.state.amends
    rev = await st.engine.log.get_reversal(reversal_id=reversal_id)
    saga = None if rev is None else await st.engine.log.get_saga(rev.saga_id)
    if rev is None or saga is None or not _visible(saga, tenant):
        raise ApiError(404, "reversal_not_found", f"no reversal {reversal_id!r} for this token")
    return rev, saga


def _saga_summary(s: SagaRecord) -> dict[str, Any]:
    rev = s.reversal
    return {
        "saga_id": s.saga_id,
        "title": s.title,
        "tenant": s.tenant,
        "actor": s.actor,
        "state": s.state,
        "created_at": s.created_at,
        "finished_at": s.finished_at,
        "reversal": None
        if rev is None
        else {
            "reversal_id": rev.reversal_id,
            "state": rev.state,
            "status": (rev.report or {}).get("status"),
            "headline": (rev.report or {}).get("headline"),
        },
    }


def _event(e: Event) -> dict[str, Any]:
    return {
        "event_id": e.event_id,
        "kind": e.kind,
        "step_id": e.step_id,
        "reversal_id": e.reversal_id,
        "at": e.at,
        "data": e.data,
    }


def _reversal_body(rev: ReversalRecord) -> dict[str, Any]:
    return {
        "reversal_id": rev.reversal_id,
        "saga_id": rev.saga_id,
        "state": rev.state,
        "budget": rev.budget,
        "requested_at": rev.requested_at,
        "finished_at": rev.finished_at,
        "tool_calls": rev.calls_spent,
        "report": rev.report,
    }


async def _saga_detail(st: _State, saga: SagaRecord) -> dict[str, Any]:
    the_plan = await st.engine.preview(saga.saga_id)
    planned = {p.step_id: p for p in the_plan.steps}
    report = saga.reversal.report if saga.reversal else None
    final = {s["step_id"]: s for s in (report or {}).get("steps", [])}
    steps = []
    for s in saga.steps:
        p = planned.get(s.step_id)
        steps.append(
            {
                "step_id": s.step_id,
                "seq": s.seq,
                "tool": s.tool,
                "args": s.args,
                "deps": list(s.deps),
                "state": s.state,
                "reversibility": s.effective or s.declared,
                "verb": p.verb if p else None,
                "undo_state": final.get(s.step_id, {}).get("state"),
                "started_at": s.started_at,
                "finished_at": s.finished_at,
                "violation": s.violation,
                "error": s.error,
            }
        )
    return {
        **_saga_summary(saga),
        "steps": steps,
        "history": [_event(e) for e in await st.engine.log.events(saga.saga_id)],
    }


async def _read_budget(request: Request) -> Budget:
    raw = await request.body()
    if not raw.strip():
        return Budget()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"the budget body must be application/json, got {ctype or 'no content type'!r}",
        )

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        data = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}") from None
    try:
        return Budget.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise ApiError(422, "invalid_budget", str(exc)) from None


# --- the app --------------------------------------------------------------------------------
_BUDGET_SCHEMA = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "Budget",
                    "additionalProperties": False,
                    "properties": {
                        "tool_calls": {"type": "integer", "minimum": 0},
                        "tokens": {"type": "integer", "minimum": 0},
                        "seconds": {"type": "number", "minimum": 0},
                    },
                }
            }
        },
    },
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string"},
            "description": "Retries with the same key get the same reversal.",
        }
    ],
}


def create_app(
    engine: Engine | Callable[[], Engine], settings: ServerSettings | None = None
) -> FastAPI:
    """The FastAPI app serving ``engine``'s saga log.

    Args:
        engine: The engine, or a factory called at startup (inside the server's event loop).
        settings: Auth, labels. Default: token auth with no token store (every call is a 401).

    Raises:
        ConfigError: Auth is on but no token store was given.
    """
    settings = settings or ServerSettings()
    if not settings.no_auth and settings.tokens is None:
        raise ConfigError("create_app needs settings.tokens (a TokenStore) unless no_auth=True")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if isinstance(engine, Engine) else engine()
        st = _State(eng, settings)
        app.state.amends = st

        def hook(reversal_id: str, outcome: StepOutcome) -> None:
            st.live.setdefault(reversal_id, []).append(outcome.to_dict())
            for w in list(st.wakers):
                w.set()

        eng.progress_hooks.append(hook)
        try:
            yield
        finally:
            eng.progress_hooks.remove(hook)
            for t in st.tasks.values():
                if not t.done():
                    await asyncio.wait({t}, timeout=5)
            if not isinstance(engine, Engine):
                await eng.close()

    app = FastAPI(
        title="amends",
        version="0.1.0",
        description="Honest undo for AI-agent tool calls: sagas, previews, one reversal per saga.",
        lifespan=lifespan,
    )
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    templates = Jinja2Templates(directory=_HERE / "templates")

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.error, "detail": exc.detail}, status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": name, "detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        return JSONResponse({"error": "invalid_request", "detail": detail}, status_code=422)

    @app.exception_handler(AmendsError)
    async def _amends_error(request: Request, exc: AmendsError) -> JSONResponse:
        status = 404 if type(exc).__name__ == "SagaNotFoundError" else 409
        return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=status)

    # --- API ----------------------------------------------------------------------------------
    @app.get("/sagas", summary="List sagas (newest first)")
    async def list_sagas(
        request: Request,
        tenant: str | None = Query(None, description="only this tenant (no-auth mode)"),
        status: str | None = Query(None, description="forward state: running|completed|failed"),
        since: float | None = Query(None, description="created at or after (unix seconds)"),
        until: float | None = Query(None, description="created before (unix seconds)"),
        limit: int = Query(100, ge=1, le=1000),
    ) -> dict[str, Any]:
        own = _tenant(request)
        if own is not None and tenant is not None and tenant != own:
            return {"sagas": []}
        st: _State = request.app.state.amends
        sagas = await st.engine.log.list_sagas(
            tenant=own if own is not None else tenant,
            state=status,
            since=since,
            until=until,
            limit=limit,
        )
        return {"sagas": [_saga_summary(s) for s in sagas]}

    @app.get("/sagas/{saga_id}", summary="A saga: steps, verbs, states, history")
    async def get_saga(request: Request, saga_id: str) -> dict[str, Any]:
        saga, _ = await _saga(request, saga_id)
        return await _saga_detail(request.app.state.amends, saga)

    @app.get("/sagas/{saga_id}/preview", summary="The planned reversal, without executing it")
    async def preview(request: Request, saga_id: str) -> dict[str, Any]:
        saga, _ = await _saga(request, saga_id)
        st: _State = request.app.state.amends
        return (await st.engine.preview(saga.saga_id)).to_dict()

    @app.post(
        "/sagas/{saga_id}/undo",
        summary="Undo a saga (joins its one reversal)",
        openapi_extra=_BUDGET_SCHEMA,
        responses={202: {"description": "the reversal is running"}},
    )
    async def undo(request: Request, saga_id: str) -> JSONResponse:
        saga, _ = await _saga(request, saga_id)
        budget = await _read_budget(request)
        st: _State = request.app.state.amends
        key = request.headers.get("idempotency-key")
        if key is not None:
            first = st.idem.setdefault(key, saga.saga_id)
            if first != saga.saga_id:
                raise ApiError(
                    409,
                    "idempotency_key_reused",
                    f"Idempotency-Key {key!r} was already used for another saga; use a new key",
                )
        rev = await st.engine.log.get_reversal(saga_id=saga.saga_id)
        if rev is not None and rev.state == "done" and rev.report is not None:
            return JSONResponse(_reversal_body(rev), status_code=200)
        task = st.tasks.get(saga.saga_id)
        if task is None or task.done():
            task = asyncio.create_task(st.engine.undo(saga.saga_id, budget=budget))
            st.tasks[saga.saga_id] = task
            task.add_done_callback(lambda t: _settled(st, saga.saga_id, t))
        done, _ = await asyncio.wait({task}, timeout=_UNDO_WAIT)
        if task in done:
            task.result()  # an engine error surfaces through the handlers above
        deadline = time.monotonic() + 10
        while True:
            rev = await st.engine.log.get_reversal(saga_id=saga.saga_id)
            if rev is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        if rev is None:
            raise ApiError(409, "reversal_not_started", "the reversal did not start; retry")
        body = _reversal_body(rev)
        body["events"] = f"/reversals/{rev.reversal_id}/events"
        return JSONResponse(body, status_code=200 if rev.state == "done" else 202)

    @app.get("/reversals/{reversal_id}", summary="A reversal and, when done, its report")
    async def get_reversal(request: Request, reversal_id: str) -> dict[str, Any]:
        rev, _ = await _reversal(request, reversal_id)
        return _reversal_body(rev)

    @app.get(
        "/reversals/{reversal_id}/events",
        summary="Server-Sent Events: each step's progress, then the report",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def reversal_events(request: Request, reversal_id: str) -> StreamingResponse:
        rev, saga = await _reversal(request, reversal_id)
        st: _State = request.app.state.amends
        return StreamingResponse(
            _stream(st, rev.reversal_id, saga.saga_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # --- web page -----------------------------------------------------------------------------
    def _page(request: Request, name: str, **ctx: Any) -> HTMLResponse:
        ctx.setdefault("settings", settings)
        return templates.TemplateResponse(request, name, ctx)

    @app.get("/login", include_in_schema=False)
    async def login(request: Request, token: str | None = None) -> Any:
        if settings.no_auth:
            return RedirectResponse("/", status_code=303)
        if token is None:
            return _page(request, "login.html", error=None)
        assert settings.tokens is not None
        if settings.tokens.check(token) is None:
            return _page(request, "login.html", error="That token is not valid.")
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(_COOKIE, token, httponly=True, samesite="strict")
        return resp

    @app.get("/logout", include_in_schema=False)
    async def logout() -> RedirectResponse:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(_COOKIE)
        return resp

    @app.get("/", include_in_schema=False)
    async def home(request: Request) -> Any:
        try:
            tenant = _tenant(request)
        except ApiError:
            return RedirectResponse("/login", status_code=303)
        st: _State = request.app.state.amends
        sagas = await st.engine.log.list_sagas(tenant=tenant, limit=200)
        return _page(request, "list.html", sagas=[_saga_summary(s) for s in sagas], fmt=_when)

    @app.get("/ui/sagas/{saga_id}", include_in_schema=False)
    async def saga_page(request: Request, saga_id: str) -> Any:
        try:
            saga, _ = await _saga(request, saga_id)
        except ApiError as exc:
            if exc.status == 401:
                return RedirectResponse("/login", status_code=303)
            raise
        st: _State = request.app.state.amends
        detail = await _saga_detail(st, saga)
        the_plan = (await st.engine.preview(saga.saga_id)).to_dict()
        report = saga.reversal.report if saga.reversal else None
        return _page(request, "saga.html", saga=detail, plan=the_plan, report=report, fmt=_when)

    @app.get("/ui/reversals/{reversal_id}/outcome", include_in_schema=False)
    async def outcome_fragment(request: Request, reversal_id: str) -> Any:
        rev, _ = await _reversal(request, reversal_id)
        return _page(request, "_outcome.html", report=rev.report)

    return app


def _settled(st: _State, saga_id: str, task: asyncio.Task[UndoReport]) -> None:
    """Forget a finished background undo (its report is in the log from now on)."""
    if st.tasks.get(saga_id) is task:
        del st.tasks[saga_id]
    if task.cancelled():
        return
    exc = task.exception()  # retrieved, so asyncio does not log it as lost
    if exc is None:
        st.live.pop(task.result().reversal_id, None)


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def _stream(st: _State, reversal_id: str, saga_id: str) -> AsyncIterator[str]:
    """History of the reversal from the log (replay), then live progress until it is done.

    Live steps come from ``engine.progress_hooks`` (this process) and from the log (another
    process running the reversal); a step is sent once, as a ``step`` event, whichever source
    sees it first. The stream ends with one ``done`` event carrying the report.
    """
    waker = asyncio.Event()
    st.wakers.add(waker)
    after = 0
    sent: set[str] = set()
    quiet = 0
    try:
        while True:
            for e in await st.engine.log.events(saga_id, after=after):
                after = e.event_id
                if e.reversal_id != reversal_id:
                    continue
                yield _sse("log", _event(e))
            for outcome in st.live.get(reversal_id, []):
                if outcome["step_id"] not in sent:
                    sent.add(outcome["step_id"])
                    yield _sse("step", outcome)
            rev = await st.engine.log.get_reversal(reversal_id=reversal_id)
            if rev is not None and rev.state == "done" and rev.report is not None:
                for s in rev.report.get("steps", []):
                    if s["step_id"] not in sent:
                        sent.add(s["step_id"])
                        yield _sse("step", s)
                yield _sse("done", rev.report)
                return
            waker.clear()
            try:
                await asyncio.wait_for(waker.wait(), 0.25)
            except TimeoutError:
                quiet += 1
                if quiet % 60 == 0:  # a comment line every ~15 s keeps proxies from closing
                    yield ": keep-alive\n\n"
    finally:
        st.wakers.discard(waker)
