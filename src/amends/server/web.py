"""The web page of ``amends serve``: sign-in (POST), sign-out (POST), saga list, saga page.

The token never travels in a URL (issue 13.4): the sign-in form posts it, guarded by a login-CSRF
token bound to a short-lived cookie. A successful sign-in starts a server-side session (issue
21.7): the HttpOnly, SameSite=Strict cookie (``__Host-`` prefixed and Secure over TLS) carries
only its id, and the page key that lets the browser change anything is handed to the page itself,
whose script keeps it in the origin's storage, out of reach of every other origin. Every page
says who is signed in. Pages carry no inline script (CSP).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from amends import AmendsError, Residue, StepOutcome, UndoReport
from amends._report import people_detail, state_label
from amends._visible import MAX_MARKS, PAGE_PATTERN, visible

from .api import (
    ID_PATTERN,
    current_summary,
    integrity,
    load_reversal,
    load_saga,
    marks,
    missing_tools,
    retry_steps,
    saga_detail,
)
from .follow_ups import send_forms
from .security import (
    Principal,
    authenticate,
    check_same_origin,
    client_address,
    cookie_name,
    csrf_token,
    digest,
    over_tls,
)
from .state import ApiError, _State

__all__ = ["router"]

_LOGIN_COOKIE = "amends_login_csrf"
_templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _shown(value: Any) -> Any:
    """Every value the page prints, with control characters and bidi overrides shown as
    escapes (:func:`amends._visible.visible`), as the text and HTML reports show them: a title
    or an argument an agent or a vendor chose never reverses the words a person reads
    ("Refund \u202egnp.exe"). Markup amends built itself passes unchanged."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value, keep="\t\n")  # HTML folds them; a draft's <pre> keeps its lines
    return value


_templates.env.finalize = _shown
router = APIRouter(include_in_schema=False)


def _state(request: Request) -> _State:
    st: _State = request.app.state.amends
    return st


def _page(
    request: Request, name: str, who: Principal | None, status: int = 200, **ctx: Any
) -> HTMLResponse:
    st = _state(request)
    ctx.setdefault("settings", st.settings)
    # issue 21.7: only a --no-auth page gets its CSRF token in the page; a session's key lives
    # in the storage of the page that signed in, so a planted session's page cannot act
    ctx["csrf"] = csrf_token(st.no_auth_secret) if who is not None and who.via == "none" else ""
    ctx["who"] = who
    ctx["hidden_chars"] = PAGE_PATTERN  # app.js shows JSON text by the same rule
    ctx["max_marks"] = MAX_MARKS
    ctx["me"] = who.who if who is not None else ""  # rule 12: who a resolution will name
    ctx["fmt"] = _when
    ctx["settles"] = _settles
    ctx["vendor_when"] = _vendor_when
    ctx["outcome_text"] = _outcome_text
    ctx["step_state"] = _step_state
    ctx["action_text"] = _action_text
    ctx["iso"] = _iso
    ctx["name_steps"] = _name_steps
    ctx["note_words"] = UndoReport.note_for_people
    ctx["state_words"] = _state_words
    ctx["asker"] = asker
    return _templates.TemplateResponse(request, name, ctx, status_code=status)


def _when(ts: float | None) -> Markup:
    """A time for people (issue 26 item 2): a ``<time>`` that static/time.js shows in the
    viewer's own time zone ("3 Dec 2026, 17:39 CET"); without script it reads in UTC, saying so.
    The exact UTC instant stays in its ``datetime`` and ``title`` for engineers."""
    if not ts:
        return Markup("—")
    utc = time.gmtime(ts)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", utc)
    shown = time.strftime("%Y-%m-%d %H:%M UTC", utc)
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(iso, shown)


def _settles(residue: Any) -> str:
    """A residue's settle date for people ("settles 10 Dec 2026"; issue 26 item 2)."""
    data = residue if isinstance(residue, dict) else residue.to_dict()
    return Residue.from_dict(data).settles_text


def _vendor_when(value: str | None) -> Markup:
    """A time a tool gave as ISO text (an undo window's deadline): an instant becomes a
    ``<time>`` shown in the viewer's zone like every other time on the page; a date alone reads
    "10 Dec 2026"; anything else is shown as given (issue 26: no raw ISO for people)."""
    if not value:
        return Markup("—")
    text = str(value)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return Markup("{0}").format(visible(text))
    if when.tzinfo is None:  # a day ("2026-12-10"), or a time with no zone to convert
        shown = f"{when.day} {when:%b %Y}" + ("" if len(text) == 10 else f" {when:%H:%M}")
        return Markup("{0}").format(shown)
    return _when(when.timestamp())


def _name_steps(ids: list[str], sentences: dict[str, str] | None) -> list[str]:
    """Steps named for people: each id's sentence ("a step" when the catalog has none)."""
    return [(sentences or {}).get(i) or "a step" for i in ids]


def _iso(ts: float | None) -> str:
    """The exact UTC instant, for the engineers' fold."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else "—"


_STATE_WORDS = {
    "running": "Still running",
    "completed": "Done by the agent",
    "failed": "Stopped by an error",
}


def _state_words(state: str) -> str:
    """A saga's forward state, as a person reads it."""
    return _STATE_WORDS.get(state, state.replace("_", " "))


def _outcome_text(step: dict[str, Any]) -> str:
    """A report step's outcome in a person's words (the report's own wording, issue 26)."""
    return StepOutcome.from_dict(step).outcome_text


# a manual action of a step cut off by the budget (amends._manual): its continue command
_CONTINUE = re.compile(r"(: continue with a larger budget: ).*(, or undo it by hand)$", re.S)


def _action_text(action: dict[str, Any], step: dict[str, Any] | None) -> str:
    """What a manual action asks, as the page says it (issue 26 item 2): a step cut off by the
    budget is continued with this page's "Continue undo", not with the CLI command (and its
    saga id) the report holds for a terminal; the JSON keeps the report's words."""
    what = str(action.get("what") or "")
    if step is None or step.get("state") != "over_budget":
        return what
    return _CONTINUE.sub(r"\1“Continue undo” on this page\2", what)


def _step_state(step: dict[str, Any]) -> str:
    """A report step's state in a person's words: "not checked" for a step its tool's broken
    contract left unchecked (nothing drifted, issue 26 item 2), as the standalone report says."""
    return state_label(StepOutcome.from_dict(step))


def asker(actor: str | None) -> str:
    """Who asked, as a person reads it: an ``agent:NAME`` actor is "the NAME agent" (issue 26
    item 2: an agent id is neither shown raw nor called a person)."""
    if not actor:
        return ""
    if actor.startswith("agent:"):
        return f"the {actor.removeprefix('agent:')} agent"
    return actor


def _signed_in(request: Request) -> Principal | None:
    try:
        return authenticate(request)
    except ApiError as exc:
        if exc.status in (401, 429):
            return None
        raise


def _login_form(request: Request, error: str | None, status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    who = _signed_in(request)
    resp = _page(request, "login.html", who, status, error=error, login_csrf=nonce)
    resp.set_cookie(
        _LOGIN_COOKIE,
        nonce,
        max_age=600,
        path="/login",
        httponly=True,
        samesite="strict",
        secure=over_tls(request),
    )
    return resp


@router.get("/login")
async def login_page(request: Request) -> Response:
    if _state(request).settings.no_auth:
        return RedirectResponse("/", status_code=303)
    if "token" in request.query_params:
        # issue 13.4: a token in a URL lands in access logs and browser history
        return _login_form(
            request,
            "Tokens are never accepted in a URL. Paste it in the form below (and consider "
            "revoking it: `amends token revoke`).",
            400,
        )
    return _login_form(request, None)


@router.post("/login")
async def login(request: Request) -> Response:
    st = _state(request)
    if st.settings.no_auth:
        return RedirectResponse("/", status_code=303)
    check_same_origin(request)
    form = await request.form()
    sent, kept = str(form.get("csrf", "")), request.cookies.get(_LOGIN_COOKIE, "")
    if not kept or not hmac.compare_digest(sent.encode(), kept.encode()):
        # login CSRF: only a form this server rendered for this browser may sign it in
        return _login_form(request, "The sign-in form expired. Please try again.", 403)
    assert st.settings.tokens is not None
    started = st.settings.tokens.start_session(
        str(form.get("token", "")).strip(), ttl=st.settings.session_ttl
    )
    if started is None:
        client = client_address(request)
        wait = st.limiter.retry_after(client)  # issue 21.8: a valid token is never refused
        if wait is not None:
            return _login_form(request, f"Too many invalid tokens. Try again in {wait} s.", 429)
        st.limiter.failed(client)
        return _login_form(request, "That token is not valid.", 401)
    cookie, key, session = started
    who = Principal(
        session.token.tenant,
        "cookie",
        session.token.token_id,
        session.key_sha256,
        session.session_id,
    )
    # issue 21.7: the page key goes to this page only (its script stores it and goes on to /)
    resp = _page(request, "signed_in.html", who, page_key=key)
    resp.set_cookie(
        cookie_name(request),
        cookie,
        httponly=True,
        samesite="strict",
        secure=over_tls(request),
        path="/",
    )
    resp.delete_cookie(_LOGIN_COOKIE, path="/login")
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign this browser out. With the page's key, the session ends everywhere; without it (a
    session this page did not start, e.g. one another site planted) only this browser's cookie
    is dropped — whoever started that session keeps it."""
    check_same_origin(request)
    who = _signed_in(request)
    form = await request.form()
    sent = digest(str(form.get("csrf", "")))
    if who is not None and who.via == "cookie" and hmac.compare_digest(sent, who.csrf_sha256):
        st = _state(request)
        assert st.settings.tokens is not None
        st.settings.tokens.end_session(request.cookies.get(cookie_name(request)))
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(
        cookie_name(request),
        path="/",
        httponly=True,
        samesite="strict",
        secure=over_tls(request),
    )
    return resp


@router.get("/")
async def home(request: Request) -> Response:
    who = _signed_in(request)
    if who is None:
        return RedirectResponse("/login", status_code=303)
    st = _state(request)
    sagas = await st.engine.log.list_sagas(tenant=who.tenant, limit=200)
    rows = [await current_summary(st, s, marks(st, s.saga_id)) for s in sagas]
    previewed = 0
    for row in rows:
        if previewed < _LIST_PREVIEWS and _undoable(row):
            row["would"] = await _would(st, row["saga_id"])
            previewed += 1
    return _page(request, "list.html", who, sagas=rows)


_LIST_PREVIEWS = 20
"""Requests the list previews (issue 26 item 7): each preview probes the world (rule 10), so
the newest ones only; an older one says what undo would do on its own page."""


def _undoable(row: dict[str, Any]) -> bool:
    return row["reversal"] is None and row["state"] != "running" and row["integrity"]["verified"]


async def _would(st: _State, saga_id: str) -> str | None:
    """What undo would do, in the preview's counts (``Preview.would``, as ``amends show``
    says it); ``None`` when the preview cannot be made now (the request's page says why)."""
    try:
        return (await st.engine.preview(saga_id)).would
    except AmendsError:
        return None


@router.get("/ui/sagas/{saga_id}")
async def saga_page(request: Request, saga_id: str) -> Response:

    if not re.match(ID_PATTERN, saga_id):
        raise ApiError(404, "saga_not_found", f"no saga {saga_id[:130]!r} for this token")
    if _signed_in(request) is None:
        return RedirectResponse("/login", status_code=303)
    saga, who = await load_saga(request, saga_id)
    st = _state(request)
    problems = await integrity(st, saga.saga_id)
    # rule 10: probes the world, once; rule 12: never for a saga whose history was altered
    preview = None if problems else await st.engine.preview(saga.saga_id)
    detail = await saga_detail(st, saga, problems, preview)
    the_plan = preview.to_dict() if preview is not None else {"saga_id": saga.saga_id, "steps": []}
    report = None if problems or saga.reversal is None else await _shown_report(st, saga.saga_id)
    sentences = _sentences(st, saga)
    return _page(
        request,
        "saga.html",
        who,
        saga=detail,
        plan=the_plan,
        screen=screen_of(the_plan),
        history=history_of(detail["history"], saga.actor, sentences),
        report=report,
        resolutions=detail["resolutions"],
        can_continue=await _can_continue(st, saga.saga_id, report),
        retry_steps=await retry_steps(st, saga, report),
        missing_tools=missing_tools(st, saga),
        sends=send_forms(saga),  # issue 27: "Send…" on a manual action with a draft
        sentences=sentences,
    )


def _sentences(st: _State, saga: Any) -> dict[str, str]:
    """Each step of ``saga`` in a sentence (the catalog's ``describe=``), for the page to name
    steps to people where the report holds only ids (what a selective undo kept, issue 26)."""
    return {s.step_id: st.engine.catalog.describe(s.tool, s.args) for s in saga.steps}


# issue 17: the preview grouped by what will happen, in the engine's verbs (rule 10); issue 23:
# by the state undo is predicted to report (the preview is the undo's own run, simulated)
_GROUPS = (
    ("revert", "Will be reverted", ("revert", "cancel")),
    ("compensate", "Will be compensated — leaves a trace", ("compensate",)),
    ("person", "Needs a person", ("person",)),
    ("budget", "Not in this budget — continuing the undo does it", ("budget",)),
    ("wait", "Still running — undo waits for its result", ("wait",)),
    ("none", "Nothing to undo", ("skip",)),
)
_BY_STATE = {
    "reverted": "revert",
    "cancelled": "cancel",
    "compensated": "compensate",
    "not_needed": "skip",
}
_BY_ACTION = {"revert": "revert", "cancel": "cancel", "compensate": "compensate", "skip": "skip"}


def _kind(p: dict[str, Any]) -> str:
    """What undo will do to a preview step: revert, cancel, compensate, skip (nothing), person
    (its effect will stand: a person must follow up), budget (not attempted for lack of budget:
    continuing the reversal runs its inverse, rule 6; not a person's work) or wait."""
    if p.get("action") == "wait":
        return "wait"
    predicted = p.get("predicted")
    if predicted == "over_budget" and p.get("action") in ("revert", "compensate"):
        return "budget"
    if predicted is not None:
        return _BY_STATE.get(predicted, "person")
    return _BY_ACTION.get(str(p.get("action")), "person")


def _why(p: dict[str, Any]) -> str:
    """Why a step will stand, in the words the report will use."""
    if p.get("needs_review"):
        return str(p.get("check") or p.get("reason") or "")
    if p.get("predicted") in ("blocked", "over_budget", "failed") and p.get("detail"):
        # in a person's words, as the report will say it (a blocked step names no id or tool)
        return people_detail(str(p["predicted"]), str(p["detail"]), "")
    return str(p.get("reason") or "")


def screen_of(plan: dict[str, Any]) -> dict[str, Any]:
    """The preview as the Undo screen shows it: groups, the verbs in one sentence, and the
    consequences the confirmation spells out (item 7: the label may say Undo; this says what
    will really happen)."""
    steps = [{**p, "kind": _kind(p), "why": _why(p)} for p in plan.get("steps", [])]
    groups = []
    for key, title, kinds in _GROUPS:
        members = [p for p in steps if p["kind"] in kinds]
        if members:
            groups.append({"key": key, "title": title, "steps": members})
    count = {k: sum(1 for p in steps if p["kind"] == k) for k, *_ in _VERB_ORDER}
    parts = []
    for kind, verb, suffix in _VERB_ORDER:
        n = count[kind]
        if n:
            leaves = kind == "compensate" and any(
                p.get("expected_residue") for p in steps if p["kind"] == kind
            )
            parts.append(f"{verb} {n}" + (suffix if leaves or kind != "compensate" else ""))
    later = [p for p in steps if p["kind"] == "budget"]
    if later:
        parts.append(f"Leave {len(later)} for a continued undo (budget)")
    cannot = [p for p in steps if p["kind"] == "person"]
    if cannot:
        parts.append(f"Acknowledge {len(cannot)}")
    summary = ", ".join(parts) or "Nothing to undo"
    if cannot:
        summary += " — a person must follow up"
    residue = [
        {**r, "step": p.get("description") or p.get("tool")}
        for p in steps
        if p["kind"] == "compensate"
        for r in p.get("expected_residue", [])
    ]
    windows = [p for p in steps if p.get("deadline") and p["kind"] != "person"]
    verbs = ", ".join(x.split(" with ")[0] for x in parts) or "Nothing to undo"
    return {
        "groups": groups,
        "summary": summary,
        "confirm": f"Yes: {verbs}",
        "residue": residue,
        "cannot": cannot,
        "later": later,
        "windows": windows,
        "actionable": any(p["kind"] in ("revert", "compensate", "cancel") for p in steps),
        "tool_calls": plan.get("tool_calls"),
        "budget": plan.get("budget") or {},
    }


_VERB_ORDER = (
    ("revert", "Revert", ""),
    ("cancel", "Cancel", ""),
    ("compensate", "Compensate", " with residue"),
)

_HISTORY_KINDS = {
    "saga.started": "The agent started",
    "undo.asked": "Undo asked",
    "reversal.requested": "Reversal started",
    "reversal.continued": "Reversal continued with a new budget",
    "reversal.taken_over": "Reversal taken over by another worker",
    "step.resolved": "Marked handled",
    "retry.asked": "Retry asked",
    "reversal.done": "Reversal finished",
}


_OUTCOME_WORDS = {
    "fully_reversed": "fully reversed",
    "partially_reversed": "partially reversed — residue remains",
    "cannot_undo": "cannot undo everything — a person must follow up",
}
"""A reversal's outcome in the history, in the words the report's status label uses."""


def history_of(
    events: list[dict[str, Any]], actor: str | None, sentences: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Who asked for what and when (issue 17): the saga, each undo request (who), the reversal,
    continuations, and each manual action marked handled (who). Steps are named by their
    ``sentences`` (issue 26: no step ids in what people read)."""
    out = []
    for e in events:
        what = _HISTORY_KINDS.get(e["kind"])
        if what is None:
            continue
        data = e.get("data") or {}
        by = data.get("by") or (actor if e["kind"] == "saga.started" else None)
        extra = ""
        if e["kind"] == "step.resolved":
            if data.get("withdrawn"):
                what = "Resolution withdrawn"
            note = UndoReport.note_for_people(data["note"]) if data.get("note") else ""
            extra = _name_steps([str(e.get("step_id"))], sentences)[0] + (
                f": {note}" if note else ""
            )
        elif e["kind"] == "retry.asked":
            extra = "; ".join(_name_steps([str(x) for x in data.get("steps") or []], sentences))
        elif e["kind"] == "reversal.done":
            status = str(data.get("status", ""))
            extra = _OUTCOME_WORDS.get(status, status.replace("_", " "))
        elif e["kind"] == "undo.asked" and data.get("continue"):
            what = "Continue asked"
        out.append({"at": e["at"], "what": what, "by": by, "extra": extra})
    return out


@router.get("/ui/reversals/{reversal_id}/outcome")
async def outcome_fragment(request: Request, reversal_id: str) -> Response:
    rev, saga = await load_reversal(request, reversal_id)
    who = authenticate(request)
    st = _state(request)
    problems = await integrity(st, saga.saga_id)
    report = None if problems or rev.report is None else await _shown_report(st, saga.saga_id)
    resolutions = {k: v.to_dict() for k, v in (getattr(saga, "resolutions", {}) or {}).items()}
    return _page(
        request,
        "_outcome.html",
        who,
        report=report,
        resolutions=resolutions,
        saga={"saga_id": saga.saga_id, "integrity": {"verified": not problems}},
        can_continue=await _can_continue(st, saga.saga_id, report),
        retry_steps=await retry_steps(st, saga, report),
        sends=send_forms(saga),  # issue 27: "Send…" on a manual action with a draft
        sentences=_sentences(st, saga),
    )


async def _shown_report(st: _State, saga_id: str) -> dict[str, Any] | None:
    """The saga's report as it stands now: its manual actions open or handled by the current
    resolutions, its headline counted with them (issue 23)."""
    report = await st.engine.report(saga_id)
    return None if report is None else report.to_dict()


async def _can_continue(st: _State, saga_id: str, report: dict[str, Any] | None) -> list[str]:
    """Rule 6: a reversal that stopped short (over budget, blocked by a step undone or resolved
    since, a step asked to be retried) may continue; the same question the engine answers.
    The steps a continuation would attempt, which the page's confirmation names before the
    click (rule 12: what a person confirms is what is sent); empty: nothing to continue."""
    return list(await st.engine.continuable(saga_id)) if report else []
