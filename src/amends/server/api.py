"""The JSON API of ``amends serve``: sagas, previews, undo / continue, resolve, reversals, SSE.

Every route authenticates first, then validates, and only then touches the log; state-changing
routes pass the CSRF guard (:func:`.security.guard_write`). A saga whose history does not verify
(rule 11) is marked, its stored report withheld, and it cannot be undone from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from amends import (
    Budget,
    ChainProblem,
    ConfigError,
    ContractError,
    Event,
    ReversalRecord,
    SagaNotFoundError,
    SagaRecord,
    SagaStateError,
    StepState,
    UndoReport,
    current_report,
)

from .._catalog_ref import needed_tools
from .._resolution import retryable, unchecked
from .._selection import covers, select
from .security import Principal, authenticate, guard_write
from .state import ApiError, JsonAnswer, _Asking, _State

__all__ = ["missing_tools", "router"]

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
"""Saga, step and reversal ids in a URL: 1-128 characters, letters, digits and ``_.:-``."""
_KEY_RE = re.compile(r"^[\x21-\x7e]{1,200}$")
_UNDO_WAIT = 1.0
"""Seconds POST undo waits for the reversal before answering 202 (the brief's ~1 s)."""
_STUCK_GRACE = 2.0
"""Seconds past a running reversal's lease before its event stream reports it stuck."""


class ErrorBody(BaseModel):
    """Every 4xx answer: a stable code and a sentence naming the value and the fix."""

    error: str
    detail: Any


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: "malformed request (JSON, Idempotency-Key)",
        401: "missing, unknown, expired or revoked token",
        403: "cross-origin browser request or missing CSRF token",
        404: "no such saga, step or reversal for this token",
        409: "conflict: key reused, history does not verify, nothing to continue",
        413: "body too large",
        415: "body is not application/json",
        422: "invalid id, query parameter or body",
        429: "too many invalid tokens from this address",
        503: "the saga log is locked or unavailable; retry (after Retry-After seconds)",
    }
    return {c: {"model": ErrorBody, "description": text[c]} for c in codes}


_READ = _errors(401, 404, 422, 429, 503)
_WRITE = _errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)

SagaId = Path(pattern=ID_PATTERN, max_length=128, description="a saga id")
StepId = Path(pattern=ID_PATTERN, max_length=128, description="a step id")
ReversalId = Path(pattern=ID_PATTERN, max_length=128, description="a reversal id")

router = APIRouter()


# --- helpers --------------------------------------------------------------------------------
def _state(request: Request) -> _State:
    st: _State = request.app.state.amends
    return st


def _visible(saga: SagaRecord | None, tenant: str | None) -> bool:
    return saga is not None and (tenant is None or saga.tenant == tenant)


async def load_saga(request: Request, saga_id: str) -> tuple[SagaRecord, Principal]:
    """The caller's saga ``saga_id`` (404 for a missing one or another tenant's)."""
    who = authenticate(request)
    saga = await _state(request).engine.log.get_saga(saga_id)
    if saga is None or not _visible(saga, who.tenant):
        raise ApiError(404, "saga_not_found", f"no saga {saga_id!r} for this token")
    return saga, who


async def load_reversal(request: Request, reversal_id: str) -> tuple[ReversalRecord, SagaRecord]:
    """The caller's reversal ``reversal_id`` and its saga (404 otherwise)."""
    who = authenticate(request)
    log = _state(request).engine.log
    rev = await log.get_reversal(reversal_id=reversal_id)
    saga = None if rev is None else await log.get_saga(rev.saga_id)
    if rev is None or saga is None or not _visible(saga, who.tenant):
        raise ApiError(404, "reversal_not_found", f"no reversal {reversal_id!r} for this token")
    return rev, saga


async def integrity(st: _State, saga_id: str) -> list[ChainProblem]:
    """Rule 11: check one saga's hash chain now (and remember the answer for listings).

    Rule 12: while the log's tally of reversal records does not verify (found by the last check
    of the whole log, or by an undo it refused), a saga rolled back on its own cannot be told
    from the others: every saga carries that problem, none is shown as verified."""
    problems = await st.engine.log.verify(saga_id)
    if problems:
        st.tampered[saga_id] = problems
    else:
        st.tampered.pop(saga_id, None)
    return problems + log_wide(st)


_LOG = "(log)"
"""The ``saga_id`` of a problem of the log as a whole (``amends._log.integrity.LOG``)."""


def log_wide(st: _State) -> list[ChainProblem]:
    """The problems of the log as a whole that leave no saga verified: its tally of reversal
    records does not verify (rule 12; a saga deleted as a whole leaves the others sound)."""
    return [p for p in st.tampered.get(_LOG, []) if "tally of reversal records" in p.detail]


def marks(st: _State, saga_id: str) -> list[ChainProblem] | None:
    """What a listing shows for a saga: its own problems last found, and :func:`log_wide`."""
    found = st.tampered.get(saga_id, []) + log_wide(st)
    return found or None


def remember_log_problems(st: _State, problems: Sequence[Any]) -> None:
    """Keep the problems of the log as a whole an engine error carried (rule 12: an undo
    refused because the tally of reversal records does not verify marks every saga)."""
    found = [p for p in problems if isinstance(p, ChainProblem) and p.saga_id == _LOG]
    if found:
        st.tampered[_LOG] = found


def _integrity_body(problems: list[ChainProblem] | None) -> dict[str, Any]:
    return {"verified": not problems, "problems": [p.to_dict() for p in problems or ()]}


_WORKER = "owner"
"""Left out of every record the API shows: the worker's ``host:pid:id`` is the operator's business
(``amends doctor`` shows it), not an API client's."""


def _shown(record: SagaRecord | ReversalRecord, *without: str) -> dict[str, Any]:
    """A record as the API shows it: its own ``to_dict`` (issue 9.7), minus the worker's id and
    the fields a view fills in itself (``without``)."""
    body = record.to_dict()
    for name in (_WORKER, *without):
        body.pop(name, None)
    return body


_UNVERIFIED = (
    "This saga's history does not verify: its log was edited, so its stored report is not "
    "shown. Run `amends doctor --verify`."
)


def _unverified(problems: list[ChainProblem]) -> str:
    """The 409 ``history_does_not_verify`` detail: :data:`_UNVERIFIED` and what was found."""
    return f"{_UNVERIFIED} Found: {problems[0].detail}" + (
        f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    )


async def current_summary(
    st: _State, s: SagaRecord, problems: list[ChainProblem] | None
) -> dict[str, Any]:
    """:func:`saga_summary` with the headline as it stands now: a report with manual actions
    is read with the current resolutions (``current_report``, what the saga page shows), so a
    list never shows the headline stored before a person resolved or followed up (issue 26)."""
    rev = s.reversal
    if problems or rev is None or not rev.report:
        return saga_summary(s, problems)
    stored = UndoReport.from_dict(rev.report)
    if not stored.manual_actions:  # only a person's resolution changes a finished headline
        return saga_summary(s, problems)
    now = await current_report(st.engine.log, stored)
    return saga_summary(s, problems, {**rev.report, "headline": now.headline})


def saga_summary(
    s: SagaRecord, problems: list[ChainProblem] | None, report: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One saga as listed: ``SagaRecord.to_dict`` without steps and resolutions (a listing reads
    neither; :func:`saga_detail` adds them), its reversal without the report (``status`` and
    ``headline`` instead), and ``integrity``. A saga whose history does not verify never shows a
    stored outcome (rule 11). ``report``: the report as it stands now (:func:`current_summary`),
    else the stored one."""
    rev = s.reversal
    report = None if problems or rev is None else (report or rev.report)
    body = _shown(s, "steps", "resolutions")
    body["integrity"] = _integrity_body(problems)
    body["reversal"] = (
        None
        if rev is None
        else {
            **_shown(rev, "report"),
            "status": "unverified" if problems else (report or {}).get("status"),
            "headline": _UNVERIFIED if problems else (report or {}).get("headline"),
        }
    )
    return body


def _event(e: Event) -> dict[str, Any]:
    return e.to_dict()


def reversal_body(rev: ReversalRecord, problems: list[ChainProblem] | None) -> dict[str, Any]:
    """A reversal as the API shows it (``ReversalRecord.to_dict``, ``tool_calls`` for
    ``calls_spent``, ``integrity``); the report is withheld when the history does not verify."""
    return {
        **_shown(rev),
        "tool_calls": rev.calls_spent,  # the name the API had before records had to_dict
        "integrity": _integrity_body(problems),
        "report": None if problems else rev.report,
    }


async def saga_detail(
    st: _State, saga: SagaRecord, problems: list[ChainProblem], preview: Any = None
) -> dict[str, Any]:
    """Steps (redacted arguments, verbs, states), reversal, resolutions and history.

    ``preview``: the saga's ``engine.preview`` when the caller already has it (its probes run
    once per page, not twice).
    """
    if preview is None and not problems:  # rule 12: an altered saga is never previewed
        preview = await st.engine.preview(saga.saga_id)
    planned = {p.step_id: p for p in preview.steps} if preview is not None else {}
    report = None if problems or saga.reversal is None else saga.reversal.report
    final = {s["step_id"]: s for s in (report or {}).get("steps", [])}
    steps = [
        {
            **s.to_dict(),  # issue 9.7: the logged step (arguments redacted, rule 11), then extras
            "reversibility": s.effective or s.declared,
            "verb": getattr(planned.get(s.step_id), "verb", None),
            "undo_state": final.get(s.step_id, {}).get("state"),
        }
        for s in saga.steps
    ]
    return {
        **await current_summary(st, saga, problems),
        "steps": steps,
        "resolutions": {k: v.to_dict() for k, v in saga.resolutions.items()},
        "history": [e.to_dict() for e in await st.engine.log.events(saga.saga_id)],
    }


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


async def read_json(request: Request, what: str) -> Any:
    """The JSON body (``None`` when empty); 415 / 400 for anything else.

    JSON on the wire is UTF-8 (RFC 8259 §8.1): a UTF-16 or UTF-32 body, a ``charset`` other than
    UTF-8, or bytes that are not UTF-8 are 415 (issue 21.16), never guessed at.
    """
    raw = await request.body()
    if not raw.strip():
        return None
    ctype, *params = (p.strip().lower() for p in request.headers.get("content-type", "").split(";"))
    charset = next((p[8:].strip('"') for p in params if p.startswith("charset=")), "utf-8")
    if ctype != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"the {what} body must be application/json, got {ctype or 'no content type'!r}",
        )
    encoding = json.detect_encoding(raw)
    if charset not in ("utf-8", "utf8") or encoding not in ("utf-8", "utf-8-sig"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"the {what} body must be JSON in UTF-8, got "
            f"{charset if charset not in ('utf-8', 'utf8') else encoding!r}; send UTF-8",
        )
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"the {what} body must be JSON in UTF-8; byte {exc.start} is not UTF-8",
        ) from None
    try:
        return json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}") from None


async def read_budget(request: Request) -> Budget:
    data = await read_json(request, "budget")
    if data is None:
        return Budget()
    try:
        return Budget.parse(data)  # issue 11: finite, non-negative, bounded (from_dict clamps)
    except (ConfigError, TypeError) as exc:
        raise ApiError(422, "invalid_budget", str(exc)) from None


async def check_idempotency_key(
    request: Request, who: Principal, saga_id: str, operation: str
) -> None:
    """Issue 13.7: bind an ``Idempotency-Key`` to its first request, per tenant, in the log.

    A retry of the same request joins the same reversal anyway (rule 6); the same key on a
    different request is a 409, in every server process sharing the log. Keys expire after
    ``settings.idempotency_ttl``; a tenant keeps at most ``settings.max_idempotency_keys`` of
    them, the oldest forgotten first (issue 21.14).
    """
    key = request.headers.get("idempotency-key")
    if key is None:
        return
    if not _KEY_RE.match(key):
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-200 visible ASCII characters, got {len(key)} "
            f"character(s){' (empty)' if not key.strip() else ''}; send a UUID",
        )
    st = _state(request)
    tenant = who.tenant if who.tenant is not None else "*"
    digest = hashlib.sha256(f"{operation}\n{saga_id}".encode()).hexdigest()
    now = time.time()
    rec = await st.engine.log.idem_get(tenant, key, now)
    if rec is None:
        rec = await st.engine.log.idem_put(
            tenant,
            key,
            digest,
            {"operation": operation, "saga_id": saga_id},
            now + st.settings.idempotency_ttl,
            now=now,
            keep=st.settings.max_idempotency_keys,
        )
    if rec.request_hash != digest:
        raise ApiError(
            409,
            "idempotency_key_reused",
            f"Idempotency-Key {key!r} was already used for a different request "
            f"(another saga or operation); use a new key for each request",
        )


# --- routes ---------------------------------------------------------------------------------
@router.get("/sagas", summary="List sagas (newest first)", responses=_READ)
async def list_sagas(
    request: Request,
    tenant: str | None = Query(None, max_length=128, description="only this tenant (no-auth)"),
    status: str | None = Query(
        None, max_length=32, description="forward state: running|completed|failed"
    ),
    since: float | None = Query(
        None, allow_inf_nan=False, description="created at or after (unix seconds)"
    ),
    until: float | None = Query(
        None, allow_inf_nan=False, description="created before (unix seconds)"
    ),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    own = authenticate(request).tenant
    if own is not None and tenant is not None and tenant != own:
        return {"sagas": []}
    st = _state(request)
    sagas = await st.engine.log.list_sagas(
        tenant=own if own is not None else tenant,
        state=status,
        since=since,
        until=until,
        limit=limit,
    )
    return {"sagas": [await current_summary(st, s, marks(st, s.saga_id)) for s in sagas]}


@router.get("/sagas/{saga_id}", summary="A saga: steps, verbs, states, history", responses=_READ)
async def get_saga(request: Request, saga_id: str = SagaId) -> dict[str, Any]:
    saga, _ = await load_saga(request, saga_id)
    st = _state(request)
    return await saga_detail(st, saga, await integrity(st, saga.saga_id))


@router.get(
    "/sagas/{saga_id}/preview",
    summary="What undo will do (engine.preview: probes only, nothing else dispatched)",
    responses=_READ,
)
async def preview(
    request: Request,
    saga_id: str = SagaId,
    steps: str | None = Query(None, description="preview undoing only these (comma list)"),
    since: str | None = Query(None, description="preview undoing every step after this one"),
) -> dict[str, Any]:
    saga, _ = await load_saga(request, saga_id)
    asked = _asked(saga, steps, since, False)
    got = await _state(request).engine.preview(saga.saga_id, steps=asked)
    body: dict[str, Any] = got.to_dict()
    return body


_BUDGET_BODY = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "Budget",
                    "additionalProperties": False,
                    "properties": {
                        "tool_calls": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": Budget.MAX_TOOL_CALLS,
                        },
                        "tokens": {"type": "integer", "minimum": 0, "maximum": Budget.MAX_TOKENS},
                        "seconds": {"type": "number", "minimum": 0, "maximum": Budget.MAX_SECONDS},
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
            "schema": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": "Retries with the same key join the same reversal; the same key on "
            "another request is a 409.",
        }
    ],
}


@router.post(
    "/sagas/{saga_id}/undo",
    summary="Undo a saga (joins its one reversal), or continue it with ?continue=true",
    openapi_extra=_BUDGET_BODY,
    responses={202: {"description": "the reversal is running"}, **_WRITE},
)
async def undo(
    request: Request,
    saga_id: str = SagaId,
    cont: bool = Query(
        False,
        alias="continue",
        description="continue a reversal that stopped short, with this new budget (rule 6)",
    ),
    allow_missing_tools: bool = Query(
        False,
        description="undo with a catalog lacking some of the saga's tools (renamed in an "
        "upgrade): the rest is undone, those tools' steps are left to a person",
    ),
    steps: str | None = Query(
        None,
        description="undo only these steps (comma list, e.g. s3,s5) and every step that "
        "depends on them; the rest is kept (issue 27)",
    ),
    since: str | None = Query(None, description="undo every step after this one (issue 27)"),
) -> JSONResponse:
    saga, who = await load_saga(request, saga_id)
    guard_write(request, who)
    budget = await read_budget(request)
    asked = _asked(saga, steps, since, cont)  # refused before anything is written
    st = _state(request)
    _check_tools(st, saga, allow_missing_tools)
    await check_idempotency_key(request, who, saga.saga_id, "continue" if cont else "undo")
    problems = await integrity(st, saga.saga_id)
    if problems:
        raise ApiError(409, "history_does_not_verify", _unverified(problems))
    async with _deciding(st, saga.saga_id):
        # one request at a time decides whether it starts the reversal (and records who asked)
        # or joins the one that is running: joining records nothing (issue 21.14)
        rev = await st.engine.log.get_reversal(saga_id=saga.saga_id)
        finished = rev is not None and rev.state == "done" and rev.report is not None
        joins = cont and _joins_continuation(saga.reversal, rev)  # rule 6
        if (joins or not cont) and rev is not None and finished and _covers(saga, rev, asked):
            return JsonAnswer(reversal_body(rev, None), status_code=200)
        if cont and not joins:
            await _check_continuable(st, saga.saga_id, rev)
        # issue 27: a finished reversal not covering this request is continued to cover it
        prior = rev.continuations - (1 if joins else 0) if (cont or finished) and rev else None
        if (cont and not joins) or rev is None or finished:
            # issue 17: the page's history says who asked for undo and when (rule 11)
            data: dict[str, Any] = {"by": who.who, "continue": cont}
            if asked is not None:
                data["steps"] = list(asked)
            await st.engine.log.append_event(saga.saga_id, "undo.asked", data=data, now=time.time())

        def start() -> Awaitable[UndoReport]:
            allow = allow_missing_tools
            if cont:
                return st.engine.resume(saga.saga_id, budget=budget, allow_missing_tools=allow)
            return st.engine.undo(
                saga.saga_id, budget=budget, allow_missing_tools=allow, steps=asked
            )

        key = saga.saga_id if asked is None else f"{saga.saga_id}|{','.join(asked)}"
        task = _background(st, saga.saga_id, start, key)
        await _await_reversal(st, saga.saga_id, prior, task)
    return await _answer(st, saga.saga_id, prior, task)


def _joins_continuation(arrived: ReversalRecord | None, rev: ReversalRecord | None) -> bool:
    """Whether a ``?continue=true`` request joins a continuation rather than asks for one (rule
    6: concurrent continuation requests join one): one is running now, was running when the
    request arrived (``arrived``: the reversal as the request first read it), or began since."""
    if rev is None or arrived is None:
        return False
    return (
        (rev.state != "done" and rev.continuations > 0)
        or (arrived.state != "done" and arrived.continuations > 0)
        or rev.continuations > arrived.continuations
    )


async def _answer(
    st: _State, saga_id: str, prior: int | None, task: asyncio.Future[UndoReport]
) -> JSONResponse:
    """Wait up to ~1 s for the reversal (or continuation) ``task`` runs: 200 with its report
    when it finished, else 202 with its event stream."""
    done, _ = await asyncio.wait({task}, timeout=_UNDO_WAIT)
    if task in done:
        task.result()  # an engine error surfaces through the app's handlers
    rev = await _await_reversal(st, saga_id, prior, task)
    body = reversal_body(rev, None)
    body["events"] = f"/reversals/{rev.reversal_id}/events"
    return JsonAnswer(body, status_code=200 if rev.state == "done" else 202)


def missing_tools(st: _State, saga: SagaRecord) -> list[str]:
    """The tools the saga's undo needs that this server's catalog lacks (none once its reversal
    finished: reading a report needs no tool)."""
    if saga.reversal is not None and saga.reversal.state == "done":
        return []
    return [t for t in needed_tools(saga.steps) if t not in st.engine.catalog]


def _asked(
    saga: SagaRecord, steps: str | None, since: str | None, cont: bool
) -> tuple[str, ...] | None:
    """Issue 27: the steps ``?steps=``/``?since=`` ask for (``None``: the whole saga), or 422
    naming what is wrong and the fix, before anything is written."""
    if cont and (steps is not None or since is not None):
        raise ApiError(
            422,
            "invalid_selection",
            "?continue=true keeps the reversal's selection; leave out ?steps= and ?since=",
        )
    listed = [s.strip() for s in steps.split(",") if s.strip()] if steps is not None else None
    try:
        return select(saga, listed, since, running_here=False)  # the agent runs elsewhere
    except SagaStateError as exc:  # still running: a selection waits for it (issue 27)
        raise ApiError(409, "saga_running", str(exc)) from exc
    except (ConfigError, ContractError) as exc:
        raise ApiError(422, "invalid_selection", str(exc)) from exc


def _covers(saga: SagaRecord, rev: ReversalRecord, asked: tuple[str, ...] | None) -> bool:
    """Whether the saga's reversal covers the steps asked for (``None``: the whole saga)."""
    return covers(saga, rev.selection, asked)


def _check_tools(st: _State, saga: SagaRecord, allow_missing: bool) -> None:
    """Issue 11: never undo with tools other than the saga's own (rule 6 would keep that report
    forever) unless the caller chose to (issue 23); refuse before anything is written."""
    missing = missing_tools(st, saga)
    if missing and not allow_missing:
        raise ApiError(
            409,
            "catalog_mismatch",
            f"saga {saga.saga_id!r} needs tool(s) {', '.join(missing)}, missing from the "
            f"catalog this server runs; restart amends serve with --catalog set to the "
            f"catalog that ran the saga, or undo the rest with ?allow_missing_tools=true "
            f"(those tools' steps are left to a person)",
        )


async def _check_continuable(st: _State, saga_id: str, rev: ReversalRecord | None) -> None:
    """Refuse ``?continue=true`` with nothing to continue, before anything is written (a
    continuation with nothing to attempt would only grow the history; issues 21.14, 23): the
    same question the engine answers (``engine.continuable``)."""
    if rev is None or rev.state != "done":
        raise ApiError(
            409,
            "nothing_to_continue",
            f"saga {saga_id!r} has no finished reversal to continue; "
            f"POST /sagas/{saga_id}/undo without ?continue first",
        )
    if not await st.engine.continuable(saga_id):
        raise ApiError(
            409,
            "nothing_to_continue",
            f"the reversal of saga {saga_id!r} left nothing to continue: no step is over budget, "
            f"none is blocked by a step undone or resolved since, none was asked to be retried; "
            f"retry a failed step with POST /sagas/{saga_id}/retry",
        )


@contextlib.asynccontextmanager
async def _deciding(st: _State, saga_id: str) -> AsyncIterator[None]:
    """This process's lock for deciding about ``saga_id``'s reversal; forgotten when unused."""
    entry = st.asking.setdefault(saga_id, _Asking())
    entry.users += 1
    try:
        async with entry.lock:
            yield
    finally:
        entry.users -= 1
        if entry.users == 0:
            st.asking.pop(saga_id, None)


def _background(
    st: _State, saga_id: str, start: Callable[[], Awaitable[UndoReport]], key: str | None = None
) -> asyncio.Future[UndoReport]:
    """Start the saga's reversal task, or join the one this process runs for the same request
    (``key``: the saga, or the saga and a selection, issue 27)."""
    key = key or saga_id
    task = st.tasks.get(key)
    if task is None or task.done():
        task = asyncio.ensure_future(start())
        st.tasks[key] = task
        task.add_done_callback(lambda t: _settled(st, key, t))
    return task


async def _await_reversal(
    st: _State, saga_id: str, prior: int | None, task: asyncio.Future[UndoReport]
) -> ReversalRecord:
    """The saga's reversal once its row exists (a continuation: once it began)."""
    deadline = time.monotonic() + 10
    while True:
        rev = await st.engine.log.get_reversal(saga_id=saga_id)
        started = rev is not None and (
            prior is None or rev.continuations > prior or rev.state != "done"
        )
        if rev is not None and started:
            return rev
        if task.done():
            task.result()  # the engine refused (e.g. the log is locked): say why
        if time.monotonic() > deadline:
            raise ApiError(409, "reversal_not_started", "the reversal did not start; retry")
        await asyncio.sleep(0.02)


def _settled(st: _State, saga_id: str, task: asyncio.Future[UndoReport]) -> None:
    """Forget a finished background undo (its report is in the log from now on)."""
    if st.tasks.get(saga_id) is task:
        del st.tasks[saga_id]
    if task.cancelled():
        return
    exc = task.exception()  # retrieved, so asyncio does not log it as lost
    if exc is None:
        st.live.pop(task.result().reversal_id, None)


class RetryBody(BaseModel):
    """The failed steps to try again, and the continuation's budget."""

    steps: list[str]
    """Ids of failed steps whose cause a person fixed."""
    budget: dict[str, Any] | None = None
    """Caps on the continuation (``tool_calls``, ``tokens``, ``seconds``)."""


@router.post(
    "/sagas/{saga_id}/retry",
    summary="Try failed compensations again after a person fixed their cause (engine.retry)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": RetryBody.model_json_schema()}},
        }
    },
    responses={202: {"description": "the continuation is running"}, **_WRITE},
)
async def retry(request: Request, saga_id: str = SagaId) -> JSONResponse:
    saga, who = await load_saga(request, saga_id)
    guard_write(request, who)
    steps, budget = _retry_body(await read_json(request, "retry"))
    st = _state(request)
    _check_tools(st, saga, False)
    await check_idempotency_key(request, who, saga.saga_id, "retry")
    if problems := await integrity(st, saga.saga_id):
        raise ApiError(409, "history_does_not_verify", _unverified(problems))
    async with _deciding(st, saga.saga_id):
        rev = await st.engine.log.get_reversal(saga_id=saga.saga_id)
        fresh = await st.engine.log.get_saga(saga.saga_id)
        comps = await st.engine.log.get_compensations(rev.reversal_id) if rev else {}
        try:
            steps = retryable(fresh or saga, comps, steps)
        except SagaStateError as exc:
            raise ApiError(409, "not_retryable", str(exc)) from None
        except ContractError as exc:
            raise ApiError(404, "step_not_found", str(exc)) from None
        joins = rev is not None and rev.state != "done"  # rule 6: a run retrying them already
        if not joins:  # joining records nothing (issue 21.14)
            await st.engine.log.append_event(
                saga.saga_id, "retry.asked", data={"by": who.who, "steps": steps}, now=time.time()
            )
        prior = rev.continuations - (1 if joins else 0) if rev is not None else None
        task = _background(
            st,
            saga.saga_id,
            lambda: st.engine.retry(saga.saga_id, steps, budget=budget, by=who.who),
        )
        await _await_reversal(st, saga.saga_id, prior, task)
    return await _answer(st, saga.saga_id, prior, task)


async def retry_steps(st: _State, saga: SagaRecord, report: dict[str, Any] | None) -> list[str]:
    """The steps the web page offers **Retry…** for (issue 23): failed, or drifted only because
    the drift check could not run; the judge ``engine.retry`` applies (:func:`retryable`)."""
    rev = saga.reversal
    if not report or rev is None:
        return []
    comps = await st.engine.log.get_compensations(rev.reversal_id)
    return [
        s["step_id"]
        for s in report["steps"]
        if s["state"] == "failed" or unchecked(comps.get(s["step_id"]), StepState(s["state"]))
    ]


def _retry_body(data: Any) -> tuple[list[str], Budget]:
    """``{"steps": [...], "budget": {...}}``, checked (422 otherwise)."""
    ids = data.get("steps") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or set(data) - {"steps", "budget"}
        or not isinstance(ids, list)
        or not 0 < len(ids) <= 1000
        or not all(isinstance(v, str) and re.match(ID_PATTERN, v) for v in ids)
    ):
        raise ApiError(
            422,
            "invalid_retry",
            f'the body must be {{"steps": ["s2", ...], "budget": {{...}}}}, got {data!r:.200}',
        )
    try:
        return list(ids), Budget.parse(data.get("budget"))
    except (ConfigError, TypeError) as exc:
        raise ApiError(422, "invalid_budget", str(exc)) from None


_NOTE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "Note",
                    "additionalProperties": False,
                    "required": ["note"],
                    "properties": {"note": {"type": "string", "minLength": 1, "maxLength": 2000}},
                }
            }
        },
    }
}


async def _read_note(request: Request) -> str:
    data = await read_json(request, "resolution")
    if isinstance(data, dict) and "by" in data:
        raise ApiError(
            422,
            "invalid_resolution",
            "'by' is not taken from the body: a resolution records the identity of the token "
            "that made it (rule 12); send only 'note'",
        )
    note = data.get("note") if isinstance(data, dict) and set(data) <= {"note"} else None
    if not isinstance(note, str) or not note.strip() or len(note) > 2000:
        raise ApiError(
            422,
            "invalid_resolution",
            f'the body must be {{"note": "what the person did or checked"}} (1-2000 '
            f"characters), got {data!r:.200}",
        )
    return note


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/resolve",
    summary="Record that a person handled a step's manual action (engine.resolve)",
    openapi_extra=_NOTE_BODY,
    responses=_WRITE,
)
async def resolve(request: Request, saga_id: str = SagaId, step_id: str = StepId) -> dict[str, Any]:
    return await _resolution(request, saga_id, step_id, withdraw=False)


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/withdraw",
    summary="Withdraw a step's resolution: its manual action is open again",
    openapi_extra=_NOTE_BODY,
    responses=_WRITE,
)
async def withdraw(
    request: Request, saga_id: str = SagaId, step_id: str = StepId
) -> dict[str, Any]:
    return await _resolution(request, saga_id, step_id, withdraw=True)


async def _resolution(
    request: Request, saga_id: str, step_id: str, *, withdraw: bool
) -> dict[str, Any]:
    saga, who = await load_saga(request, saga_id)
    guard_write(request, who)
    note = await _read_note(request)
    if step_id not in {s.step_id for s in saga.steps}:
        raise ApiError(404, "step_not_found", f"saga {saga.saga_id!r} has no step {step_id!r}")
    engine = _state(request).engine
    try:
        if withdraw:
            res = await engine.withdraw_resolution(saga.saga_id, step_id, by=who.who, note=note)
        else:
            res = await engine.resolve(saga.saga_id, step_id, by=who.who, note=note)
    except SagaStateError as exc:
        raise ApiError(409, "no_resolution" if withdraw else "not_resolvable", str(exc)) from None
    except (SagaNotFoundError, ContractError) as exc:
        raise ApiError(404, "step_not_found", str(exc)) from None
    body: dict[str, Any] = res.to_dict()
    return body


@router.get(
    "/reversals/{reversal_id}",
    summary="A reversal and, when done, its report",
    responses=_READ,
)
async def get_reversal(request: Request, reversal_id: str = ReversalId) -> dict[str, Any]:
    rev, saga = await load_reversal(request, reversal_id)
    return reversal_body(rev, await integrity(_state(request), saga.saga_id))


@router.get(
    "/reversals/{reversal_id}/events",
    summary="Server-Sent Events: each step's progress, then the report (or 'stuck')",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **_READ},
)
async def reversal_events(request: Request, reversal_id: str = ReversalId) -> StreamingResponse:
    rev, saga = await load_reversal(request, reversal_id)
    return StreamingResponse(
        _stream(_state(request), rev.reversal_id, saga.saga_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def _stream(st: _State, reversal_id: str, saga_id: str) -> AsyncIterator[str]:
    """History of the reversal from the log (replay), then live progress until it is done.

    Live steps come from ``engine.progress_hooks`` (this process) and from the log (another
    process running the reversal); a step is sent once, as a ``step`` event, whichever source
    sees it first. The stream ends with one ``done`` event carrying the report, or one ``stuck``
    event when the worker running the reversal is gone (its lease expired; issue 13.7).
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
                if e.reversal_id == reversal_id:
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
            stuck = _stuck(rev, st, saga_id)
            if stuck is not None:
                yield _sse("stuck", {"reversal_id": reversal_id, "detail": stuck})
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


def _stuck(rev: ReversalRecord | None, st: _State, saga_id: str) -> str | None:
    """Why the reversal will not progress on its own, or ``None`` while it may."""
    if rev is None:
        return "the reversal is no longer in the log"
    task = st.tasks.get(saga_id)
    if task is not None and not task.done():
        return None  # this process is running it
    lease = rev.lease_until
    if rev.state != "done" and lease is not None and lease < time.time() - _STUCK_GRACE:
        return (
            f"the worker running this reversal stopped: its lease expired at "
            f"{time.strftime('%H:%M:%S UTC', time.gmtime(lease))}; POST "
            f"/sagas/{saga_id}/undo to take it over"
        )
    return None
