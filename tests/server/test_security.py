"""Issue 13 items 2-8 against the app in-process (fast tier): each test fails when its protection
is removed. Real-server checks (a 100 MiB body, two server processes) are in test_security_live.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_harness import _seed, log_snapshot, sign_in

import amends
import amends.server.api
from amends.server import ServerSettings, TokenStore, auth, create_app
from amends.server.auth import FailedAuthLimiter, permission_problems
from core_world import CoreWorld, fresh

BASE = "http://127.0.0.1:8000"


@dataclass
class App:
    client: TestClient
    db: str
    world: CoreWorld
    tokens: TokenStore
    sagas: dict[str, str]
    acme: str
    globex: str

    def auth(self, tenant: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, tenant)}"}

    def sign_in(self, token: str | None = None) -> str:
        """Sign in through the form; returns the page key (the page's CSRF token)."""
        return sign_in(self.client, token or self.acme, BASE)


def _make(tmp_path: Path, **settings: Any) -> Iterator[App]:
    db = str(tmp_path / "sec.db")
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    tokens = TokenStore(str(tmp_path / "sec.db.tokens"))
    acme, globex = tokens.create("acme"), tokens.create("globex")
    app = create_app(
        lambda: amends.Engine(catalog, log=db), ServerSettings(tokens=tokens, **settings)
    )
    with TestClient(app, base_url=BASE) as client:
        yield App(client, db, world, tokens, sagas, acme, globex)
    tokens.close()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    yield from _make(tmp_path)


@pytest.fixture
def noauth(tmp_path: Path) -> Iterator[App]:
    db = str(tmp_path / "open.db")
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(no_auth=True))
    tokens = TokenStore(":memory:")
    with TestClient(app, base_url=BASE) as client:
        yield App(client, db, world, tokens, sagas, "", "")
    tokens.close()


# --- 6. headers -------------------------------------------------------------------------------
def test_every_page_and_answer_carries_csp_nosniff_no_referrer_and_no_store(app: App) -> None:
    csrf = app.sign_in()
    assert csrf
    sid = app.sagas["acme1"]
    for path in ("/login", "/", f"/ui/sagas/{sid}", "/sagas", "/openapi.json", "/nope"):
        r = app.client.get(path, headers=app.auth() if path == "/sagas" else {})
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "frame-ancestors 'none'" in csp, path
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["referrer-policy"] == "no-referrer", path
        assert r.headers["cache-control"] == "no-store", path
    page = app.client.get(f"/ui/sagas/{sid}").text
    scripts = re.findall(r"<script[^>]*>", page)
    # no inline script: CSP can forbid it
    assert scripts == [
        '<script src="/static/session.js">',
        '<script src="/static/time.js">',  # issue 26: times in the viewer's zone
        '<script src="/static/app.js">',
    ]
    assert " style=" not in page and "<style" not in page
    assert "onclick" not in page.lower()


def test_api_docs_are_off_by_default_so_no_cdn_script_runs_on_the_cookies_origin(app: App) -> None:
    assert app.client.get("/docs").status_code == 404
    assert app.client.get("/redoc").status_code == 404
    assert app.client.get("/openapi.json").status_code == 200


# --- 4. sign-in -------------------------------------------------------------------------------
def test_a_token_in_the_url_is_refused_and_signs_nobody_in(app: App) -> None:
    r = app.client.get(f"/login?token={app.acme}", follow_redirects=False)
    assert r.status_code == 400
    assert "never accepted in a URL" in r.text
    assert "amends_session" not in r.headers.get("set-cookie", "")
    assert app.client.get("/", follow_redirects=False).headers["location"] == "/login"


def test_sign_in_is_a_post_and_the_cookie_is_httponly_samesite_strict(app: App) -> None:
    """Issue 21.7: the cookie carries a session id, never the token (every port of the host
    receives the host's cookies); the page key goes to the signed-in page only."""
    page = app.client.get("/login")
    assert '<form method="post" action="/login">' in page.text
    nonce = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert nonce is not None
    r = app.client.post(
        "/login",
        data={"token": app.acme, "csrf": nonce.group(1)},
        headers={"Origin": BASE},
        follow_redirects=False,
    )
    assert r.status_code == 200
    cookie = [c for c in r.headers.get_list("set-cookie") if c.startswith("amends_session=")]
    assert len(cookie) == 1
    flags = cookie[0].lower()
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
    assert "secure" not in flags  # plain http on loopback: a Secure cookie would not come back
    value = cookie[0].split(";")[0].split("=", 1)[1]
    assert value.startswith("sid_") and app.acme not in r.text and app.acme not in cookie[0]
    key = re.search(r'<meta name="amends-key" content="([^"]+)">', r.text)
    assert key is not None and key.group(1) not in cookie[0]
    assert "Signed in as <strong" in r.text and ">acme</strong>" in r.text
    home = app.client.get("/", follow_redirects=False)
    assert home.status_code == 200
    assert "amends-key" not in home.text  # later pages never carry the key again
    assert 'name="amends-csrf"' not in home.text


def test_the_session_cookie_is_secure_over_tls(tmp_path: Path) -> None:
    """Over TLS the cookie is __Host- prefixed: Secure, Path=/, no Domain (issue 21.7)."""
    for a in _make(tmp_path):
        with TestClient(a.client.app, base_url="https://127.0.0.1:8443") as tls:
            sign_in(tls, a.acme, "https://127.0.0.1:8443")
            (cookie,) = [c for c in tls.cookies.jar if "amends_session" in c.name]
            assert cookie.name == "__Host-amends_session"
            assert cookie.secure and cookie.path == "/" and not cookie.domain_specified
            assert tls.get("/", follow_redirects=False).status_code == 200
            # a plain-http sibling may set the unprefixed name; over TLS it is never read
            tls.cookies.clear()
            sid = a.tokens.start_session(a.acme, ttl=60)
            assert sid is not None
            tls.cookies.set("amends_session", sid[0])
            assert tls.get("/", follow_redirects=False).headers["location"] == "/login"


def test_login_csrf_a_form_without_this_browsers_nonce_signs_nobody_in(app: App) -> None:
    """An attacker's page posting its own token must not sign the victim into its account."""
    r = app.client.post(
        "/login", data={"token": app.globex, "csrf": "forged"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert "amends_session" not in r.headers.get("set-cookie", "")
    r = app.client.post(
        "/login",
        data={"token": app.globex, "csrf": "x"},
        headers={"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert r.json()["error"] == "cross_origin_request"


def test_sign_out_is_a_post_and_only_the_page_key_ends_the_session(app: App) -> None:
    """Sign-out is a POST from our own origin. With the page key the session ends everywhere;
    without it (a session this page did not start, e.g. a planted one) only this browser's cookie
    is dropped and the session stays valid for whoever holds it (issue 21.7)."""
    key = app.sign_in()
    cookie = app.client.cookies.get("amends_session")
    r = app.client.get("/logout")
    assert (r.status_code, r.headers["allow"]) == (405, "POST")
    r = app.client.post(
        "/logout",
        data={"csrf": key},
        headers={"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"},
        follow_redirects=False,
    )
    assert (r.status_code, r.json()["error"]) == (403, "cross_origin_request")
    assert app.client.get("/", follow_redirects=False).status_code == 200  # still signed in
    r = app.client.post("/logout", data={"csrf": "wrong"}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    assert 'amends_session=""' in r.headers["set-cookie"]
    app.client.cookies.set("amends_session", cookie)  # the session itself was not ended
    assert app.client.get("/", follow_redirects=False).status_code == 200
    r = app.client.post("/logout", data={"csrf": key}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    app.client.cookies.set("amends_session", cookie)  # replaying the cookie: it is dead
    assert app.client.get("/", follow_redirects=False).headers["location"] == "/login"


# --- 5. CSRF ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "error"),
    [
        # a form on another port of the same host: same site, another origin
        (
            {"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"},
            "cross_origin_request",
        ),
        ({"Origin": "http://127.0.0.1:9999"}, "cross_origin_request"),
        (
            {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
            "cross_origin_request",
        ),
        # a no-cors fetch or an empty form from our own origin without the page's token
        ({"Sec-Fetch-Site": "same-origin"}, "csrf_token_missing"),
        ({}, "csrf_token_missing"),
        ({"X-Amends-CSRF": "0" * 40}, "csrf_token_invalid"),
    ],
)
def test_a_cookie_undo_without_same_origin_and_csrf_token_is_refused_and_runs_nothing(
    app: App, headers: dict[str, str], error: str
) -> None:
    app.sign_in()
    sid = app.sagas["acme1"]
    before = log_snapshot(app.db)
    r = app.client.post(
        f"/sagas/{sid}/undo",
        content=b"",
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
    )
    assert (r.status_code, r.json()["error"]) == (403, error), r.text
    assert log_snapshot(app.db) == before
    assert app.world.crm["r1"]["stage"] == "won"


def test_the_page_undo_with_its_csrf_token_runs(app: App) -> None:
    csrf = app.sign_in()
    sid = app.sagas["acme1"]
    r = app.client.post(
        f"/sagas/{sid}/undo",
        json={},
        headers={"X-Amends-CSRF": csrf, "Origin": BASE, "Sec-Fetch-Site": "same-origin"},
    )
    assert r.status_code in (200, 202), r.text
    assert app.world.crm["r1"]["stage"] == "lead"


def test_no_auth_mode_refuses_a_cross_origin_form_but_serves_curl(noauth: App) -> None:
    sid = noauth.sagas["acme1"]
    before = log_snapshot(noauth.db)
    r = noauth.client.post(
        f"/sagas/{sid}/undo",
        content=b"",
        headers={"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"},
    )
    assert (r.status_code, r.json()["error"]) == (403, "cross_origin_request")
    r = noauth.client.post(f"/sagas/{sid}/undo", headers={"Sec-Fetch-Site": "same-origin"})
    assert (r.status_code, r.json()["error"]) == (403, "csrf_token_missing")
    assert log_snapshot(noauth.db) == before
    page = noauth.client.get(f"/ui/sagas/{sid}").text
    token = re.search(r'name="amends-csrf" content="([^"]+)"', page)
    assert token is not None
    r = noauth.client.post(
        f"/sagas/{sid}/undo", headers={"X-Amends-CSRF": token.group(1), "Origin": BASE}
    )
    assert r.status_code in (200, 202), r.text
    r = noauth.client.post(f"/sagas/{noauth.sagas['acme2']}/undo")  # curl: no browser headers
    assert r.status_code in (200, 202), r.text


# --- 7. limits ----------------------------------------------------------------------------------
def test_a_body_over_the_limit_is_413_declared_or_streamed(app: App) -> None:
    sid = app.sagas["acme1"]
    before = log_snapshot(app.db)
    big = b"{" + b" " * (70 * 1024) + b"}"
    r = app.client.post(
        f"/sagas/{sid}/undo",
        content=big,
        headers={**app.auth(), "Content-Type": "application/json"},
    )
    assert (r.status_code, r.json()["error"]) == (413, "body_too_large")

    def chunks() -> Iterator[bytes]:
        yield b"{"
        for _ in range(80):
            yield b" " * 1024
        yield b"}"

    r = app.client.post(
        f"/sagas/{sid}/undo",
        content=chunks(),
        headers={**app.auth(), "Content-Type": "application/json"},
    )
    assert (r.status_code, r.json()["error"]) == (413, "body_too_large")
    assert log_snapshot(app.db) == before


@pytest.mark.parametrize(
    ("key", "status"),
    [("", 400), ("k" * 201, 400), ("a b", 400), ("k" * 200, 202)],
)
def test_idempotency_key_must_be_1_to_200_visible_characters(
    app: App, key: str, status: int
) -> None:
    r = app.client.post(
        f"/sagas/{app.sagas['acme1']}/undo", headers={**app.auth(), "Idempotency-Key": key}
    )
    assert r.status_code in ((200, 202) if status == 202 else (status,)), r.text
    if status == 400:
        assert r.json()["error"] == "invalid_idempotency_key"


def test_idempotency_keys_are_per_tenant_and_kept_in_the_log_across_servers(
    app: App, tmp_path: Path
) -> None:
    key = {"Idempotency-Key": "shared-key"}
    r = app.client.post(f"/sagas/{app.sagas['acme1']}/undo", headers={**app.auth(), **key})
    assert r.status_code in (200, 202)
    # another tenant's identical key is its own key: no 409 that would reveal acme's use
    r = app.client.post(
        f"/sagas/{app.sagas['globex1']}/undo", headers={**app.auth("globex"), **key}
    )
    assert r.status_code in (200, 202), r.text
    # a second server on the same log refuses acme's reused key for another saga
    _, catalog = fresh()
    other = create_app(
        lambda: amends.Engine(catalog, log=app.db), ServerSettings(tokens=app.tokens)
    )
    before = log_snapshot(app.db)
    with TestClient(other, base_url=BASE) as second:
        r = second.post(f"/sagas/{app.sagas['acme2']}/undo", headers={**app.auth(), **key})
    assert (r.status_code, r.json()["error"]) == (409, "idempotency_key_reused")
    assert log_snapshot(app.db)[1] == before[1]  # no reversal for acme2
    assert app.world.crm["r2"]["stage"] == "won"


class _ShiftedClock:
    """``time`` as the server's API module sees it, with wall time moved on by ``offset``."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_an_expired_idempotency_key_may_be_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the key's clock is moved past its lifetime rather than slept past it: with a 0.2 s
    # lifetime a slow first undo on a loaded machine let the key expire before the 409 check
    clock = _ShiftedClock()
    monkeypatch.setattr(amends.server.api, "time", clock)
    for a in _make(tmp_path, idempotency_ttl=60.0):
        key = {**a.auth(), "Idempotency-Key": "k"}
        assert a.client.post(f"/sagas/{a.sagas['acme1']}/undo", headers=key).status_code in (
            200,
            202,
        )
        assert a.client.post(f"/sagas/{a.sagas['acme2']}/undo", headers=key).status_code == 409
        clock.offset = 61.0
        assert a.client.post(f"/sagas/{a.sagas['acme2']}/undo", headers=key).status_code in (
            200,
            202,
        )


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "-lead", "a/b", "ü"])
def test_ids_in_urls_follow_length_and_charset_rules(app: App, bad: str) -> None:
    r = app.client.get(f"/sagas/{bad}", headers=app.auth())
    assert r.status_code in (404, 422), r.text  # "a/b" is another path: 404
    if r.status_code == 422:
        assert r.json()["error"] == "invalid_request"
    r = app.client.post(f"/sagas/{app.sagas['acme1']}/steps/{bad}/resolve", headers=app.auth())
    assert r.status_code in (404, 422), r.text


def test_failed_auth_is_rate_limited_per_address_with_retry_after(app: App) -> None:
    """Ten invalid tokens from an address, then its invalid tokens get 429; a valid token from
    the same address is still served (issue 21.8 changed this: before, it waited too)."""
    for _ in range(10):
        r = app.client.get("/sagas", headers={"Authorization": "Bearer amd_guess"})
        assert r.status_code == 401
    r = app.client.get("/sagas", headers={"Authorization": "Bearer amd_guess"})
    assert (r.status_code, r.json()["error"]) == (429, "too_many_failed_attempts")
    assert 1 <= int(r.headers["retry-after"]) <= 60
    r = app.client.get("/sagas", headers=app.auth())
    assert r.status_code == 200, r.text


def test_failed_auth_limiter_forgets_after_its_window() -> None:
    lim = FailedAuthLimiter(limit=2, window=10)
    lim.failed("a", now=0)
    lim.failed("a", now=1)
    assert lim.retry_after("a", now=2) == 8
    assert lim.retry_after("b", now=2) is None
    assert lim.retry_after("a", now=11) is None


def test_405_answers_carry_allow(app: App) -> None:
    r = app.client.delete("/sagas", headers=app.auth())
    assert (r.status_code, r.headers["allow"]) == (405, "GET")
    r = app.client.get(f"/sagas/{app.sagas['acme1']}/undo", headers=app.auth())
    assert (r.status_code, r.headers["allow"]) == (405, "POST")
    assert r.json()["error"] == "method_not_allowed"


def test_openapi_documents_the_4xx_answers(app: App) -> None:
    doc = app.client.get("/openapi.json").json()
    undo = doc["paths"]["/sagas/{saga_id}/undo"]["post"]["responses"]
    assert {"400", "401", "403", "404", "409", "413", "415", "422", "429"} <= set(undo)
    assert undo["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert {"401", "422"} <= set(op["responses"]), path
            assert "HTTPValidationError" not in json.dumps(op["responses"]), path


async def test_an_event_stream_of_a_reversal_whose_worker_is_gone_reports_stuck_and_ends(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "stuck.db")
    world, catalog = fresh()
    sagas = await _seed(db, catalog, world)
    log = amends.SqliteLog(db)
    try:
        claim = await log.claim_reversal(
            sagas["acme1"],
            reversal_id="rev_dead",
            budget={"tool_calls": 5},
            owner="worker-gone",
            lease_until=time.time() - 30,
            now=time.time() - 60,
        )
    finally:
        await log.close()
    assert claim.reversal.state == "running"
    tokens = TokenStore(":memory:")
    token = tokens.create("acme")
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(tokens=tokens))

    def read() -> list[str]:
        with TestClient(app, base_url=BASE) as c:
            r = c.get("/reversals/rev_dead/events", headers={"Authorization": f"Bearer {token}"})
            return [line for line in r.text.splitlines() if line.startswith("event: ")]

    events = await asyncio.wait_for(asyncio.to_thread(read), 20)
    assert events[-1] == "event: stuck"
    tokens.close()


# --- 8. tokens, 2. file permissions -----------------------------------------------------------
def test_token_store_file_is_created_owner_only_and_doctor_helper_flags_wider(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.tokens"
    store = TokenStore(str(path))
    store.create("acme")
    store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert permission_problems(str(path)) == []
    os.chmod(path, 0o644)
    (problem,) = permission_problems(str(path))
    assert "mode 0644" in problem and f"chmod 600 {path}" in problem


def test_tokens_expire_are_revoked_at_once_and_record_last_use(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's clock is the test's: a 0.2 s token once expired before its first use on a
    # machine at load 13 (the check read the wall clock).
    clock = [time.time()]
    monkeypatch.setattr(
        auth, "time", SimpleNamespace(time=lambda: clock[0], monotonic=time.monotonic)
    )
    short = app.tokens.create("acme", expires_in=0.2)
    assert app.client.get("/sagas", headers={"Authorization": f"Bearer {short}"}).status_code == 200
    clock[0] += 0.3
    r = app.client.get("/sagas", headers={"Authorization": f"Bearer {short}"})
    assert r.status_code == 401
    assert app.client.get("/sagas", headers=app.auth()).status_code == 200
    (acme,) = [t for t in app.tokens.list("acme") if t.expires_at is None]
    assert acme.last_used_at is not None and acme.last_used_at <= clock[0]
    states = sorted(t.state(clock[0]) for t in app.tokens.list("acme"))
    assert states == ["active", "expired"]
    app.tokens.revoke(acme.token_id)
    r = app.client.get("/sagas", headers=app.auth())
    assert (r.status_code, r.json()["error"]) == (401, "invalid_token")
    with pytest.raises(amends.ConfigError, match="no token with id 'tok_nope'"):
        app.tokens.revoke("tok_nope")
    with pytest.raises(amends.ConfigError, match="--expires-in must be a positive number"):
        app.tokens.create("acme", expires_in=0)


def _cli(*argv: str) -> tuple[int, str, str]:
    from amends.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_token_list_and_revoke_commands_never_print_a_secret(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    asyncio.run(amends.SqliteLog(db).close())  # issue 21.16: tokens only beside an amends log
    code, token, _ = _cli("token", "create", "--tenant", "acme", "--db", db, "--expires-in", "600")
    assert code == 0
    token = token.strip()
    code, out, _ = _cli("token", "list", "--db", db)
    assert code == 0
    assert token not in out
    header, row = out.splitlines()
    assert header.split()[:3] == ["ID", "TENANT", "STATE"]
    token_id = row.split()[0]
    assert row.split()[1:3] == ["acme", "active"] and row.rstrip().endswith("never")
    code, out, _ = _cli("token", "revoke", token_id, "--db", db)
    assert (code, out) == (0, f"revoked {token_id} (tenant acme)\n")
    assert "revoked" in _cli("token", "list", "--db", db)[1]
    code, _, err = _cli("token", "revoke", "tok_nope", "--db", db)
    assert code == 2 and "no token with id 'tok_nope'" in err


def test_serve_no_auth_is_refused_on_a_non_loopback_address(tmp_path: Path) -> None:
    db = str(tmp_path / "n.db")
    code, _, err = _cli("serve", "--db", db, "--no-auth", "--host", "0.0.0.0", "--catalog", "x:y")
    assert code == 2
    assert "--no-auth serves every saga to anyone who can connect" in err
    assert "--host '0.0.0.0'" in err


# --- 3. tamper-evident history surfaced ---------------------------------------------------------
def _forge_report(db: str, saga_id: str) -> None:
    conn = sqlite3.connect(db)
    try:
        (raw,) = conn.execute(
            "SELECT report FROM reversals WHERE saga_id = ?", (saga_id,)
        ).fetchone()
        report = json.loads(raw)
        report["status"] = "fully_reversed"
        report["headline"] = "Undone 3 of 3"
        conn.execute(
            "UPDATE reversals SET report = ? WHERE saga_id = ?", (json.dumps(report), saga_id)
        )
        conn.commit()
    finally:
        conn.close()


def test_a_forged_report_is_marked_never_shown_and_the_saga_cannot_be_undone(app: App) -> None:
    sid = app.sagas["acme2"]
    r = app.client.post(f"/sagas/{sid}/undo", headers=app.auth())
    assert r.status_code in (200, 202)
    deadline = time.monotonic() + 20
    while app.client.get(f"/sagas/{sid}", headers=app.auth()).json()["reversal"]["state"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    body = app.client.get(f"/sagas/{sid}", headers=app.auth()).json()
    assert body["integrity"] == {"verified": True, "problems": []}
    assert body["reversal"]["status"] == "cannot_undo"
    _forge_report(app.db, sid)

    body = app.client.get(f"/sagas/{sid}", headers=app.auth()).json()
    assert body["integrity"]["verified"] is False
    assert body["integrity"]["problems"][0]["what"] == "report mismatch"
    assert body["reversal"]["status"] == "unverified"
    assert "fully_reversed" not in json.dumps(body)
    rev = body["reversal"]["reversal_id"]
    got = app.client.get(f"/reversals/{rev}", headers=app.auth()).json()
    assert got["report"] is None and got["integrity"]["verified"] is False
    listed = app.client.get("/sagas", headers=app.auth()).json()["sagas"]
    (mine,) = [s for s in listed if s["saga_id"] == sid]
    assert mine["reversal"]["status"] == "unverified"
    r = app.client.post(f"/sagas/{sid}/undo", headers=app.auth())
    assert (r.status_code, r.json()["error"]) == (409, "history_does_not_verify")

    app.sign_in()
    page = app.client.get(f"/ui/sagas/{sid}").text
    assert "History does not verify" in page
    assert "Undone 3 of 3" not in page and "fully_reversed" not in page
    assert app.client.get(f"/ui/reversals/{rev}/outcome").text.strip() == ""


def test_doctor_warns_about_a_token_file_others_can_read(app: App) -> None:
    tokens = app.db + ".tokens"
    code, out, _ = _cli("doctor", "--db", app.db)
    assert code == 0 and tokens not in out
    os.chmod(tokens, 0o644)
    code, out, _ = _cli("doctor", "--db", app.db)
    assert code == 1, out
    assert f"{tokens} has mode 0644: other users can read it" in out
    assert "chmod 600 the token file" in out


def test_the_periodic_check_marks_a_forged_saga_in_listings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """serve's periodic chain check (at start-up, then every verify_interval) marks a forged saga
    in the listing even when nobody opened the saga itself, and names it in the server's log."""
    db = str(tmp_path / "p.db")
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))

    async def undo() -> None:
        async with amends.Engine(catalog, log=db) as engine:
            await engine.undo(sagas["acme1"])

    asyncio.run(undo())
    _forge_report(db, sagas["acme1"])
    tokens = TokenStore(":memory:")
    token = tokens.create("acme")
    app = create_app(
        lambda: amends.Engine(catalog, log=db),
        ServerSettings(tokens=tokens, verify_interval=0.1),
    )
    with TestClient(app, base_url=BASE) as client:
        deadline = time.monotonic() + 10
        while True:
            listed = client.get("/sagas", headers={"Authorization": f"Bearer {token}"}).json()
            (forged,) = [s for s in listed["sagas"] if s["saga_id"] == sagas["acme1"]]
            if forged["integrity"]["verified"] is False:
                break
            assert time.monotonic() < deadline, forged
            time.sleep(0.05)
        assert forged["reversal"]["status"] == "unverified"
        assert "Undone 3 of 3" not in json.dumps(listed)
        others = [s for s in listed["sagas"] if s["saga_id"] != sagas["acme1"]]
        assert all(s["integrity"]["verified"] for s in others)
    tokens.close()
    named = [r.getMessage() for r in caplog.records if r.name == "amends.server"]
    assert any(f"the history of saga {sagas['acme1']} does not verify" in m for m in named), named


def test_behind_a_tls_proxy_the_cookie_is_secure_and_the_proxy_origin_is_ours(
    tmp_path: Path,
) -> None:
    public = "https://amends.example.com"
    for a in _make(tmp_path, public_origin=public):
        # the proxy speaks TLS to the browser and plain http to amends (here: the test client)
        proxy = TestClient(a.client.app, base_url="http://127.0.0.1:8000")
        proxy.cookies.set("amends_login_csrf", "n0nce", path="/login")
        form = {"token": a.acme, "csrf": "n0nce"}
        r = proxy.post("/login", data=form, headers={"Origin": BASE}, follow_redirects=False)
        assert (r.status_code, r.json()["error"]) == (403, "cross_origin_request")
        r = proxy.post("/login", data=form, headers={"Origin": public}, follow_redirects=False)
        assert r.status_code == 200, r.text
        (cookie,) = [
            c for c in r.headers.get_list("set-cookie") if c.startswith("__Host-amends_session=")
        ]
        assert "secure" in cookie.lower() and "path=/" in cookie.lower()


@pytest.mark.parametrize("bad", ["amends.example.com", "ftp://x", "https://x/path", "https://"])
def test_serve_public_origin_must_be_an_origin(tmp_path: Path, bad: str) -> None:
    db = str(tmp_path / "o.db")
    code, _, err = _cli("serve", "--db", db, "--catalog", "x:y", "--public-origin", bad)
    assert code == 2
    assert (
        f"--public-origin must be scheme://host[:port] as the browser sees it, got {bad!r}" in err
    )
