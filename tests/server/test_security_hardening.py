"""Issue 21 items 7, 8, 14, 16 in the fast tier: the mechanisms behind the attacks that
test_security_http.py and test_security_browser.py perform against real servers — sessions and
their cookies, the failed-auth limiter, trusted proxies, the access-log redaction, bounded
idempotency keys, error statuses, and the files the CLI creates."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_harness import _seed, log_snapshot, sign_in

import amends
from amends.server import ServerSettings, TokenStore, create_app
from amends.server.app import _status_of
from amends.server.auth import FailedAuthLimiter
from amends.server.security import (
    RedactCredentials,
    forwarded_client,
    parse_trusted_proxies,
    redact_url,
)
from core_world import fresh

BASE = "http://127.0.0.1:8000"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, TokenStore, dict[str, str], str]]:
    """(client, token store, sagas, db) of an app with tenants acme and globex."""
    db = str(tmp_path / "h.db")
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    tokens = TokenStore(str(tmp_path / "h.db.tokens"))
    app = create_app(
        lambda: amends.Engine(catalog, log=db),
        ServerSettings(tokens=tokens, max_idempotency_keys=5),
    )
    with TestClient(app, base_url=BASE) as client:
        yield client, tokens, sagas, db
    tokens.close()


# --- 7. sessions ----------------------------------------------------------------------------------
def test_a_session_never_stores_its_cookie_or_key_and_dies_with_its_token(tmp_path: Path) -> None:
    path = str(tmp_path / "s.tokens")
    store = TokenStore(path)
    token = store.create("acme")
    assert store.start_session("amd_wrong", ttl=60) is None
    started = store.start_session(token, ttl=60)
    assert started is not None
    cookie, key, session = started
    assert cookie.startswith("sid_") and session.session_id.startswith("ses_")
    raw = Path(path).read_bytes()
    assert cookie.encode() not in raw and key.encode() not in raw and token.encode() not in raw
    got = store.session(cookie)
    assert got is not None and got.token.tenant == "acme" and got.key_sha256 == session.key_sha256
    assert store.session(token) is None  # a token is not a session
    assert store.session(cookie, now=time.time() + 61) is None  # expired
    store.revoke(session.token.token_id)
    assert store.session(cookie) is None  # a revoked token ends its sessions at once
    store.close()


def test_sessions_per_token_are_bounded_and_expired_ones_deleted(tmp_path: Path) -> None:
    store = TokenStore(":memory:")
    token = store.create("acme")
    now = time.time()
    old = store.start_session(token, ttl=10, now=now - 100)
    assert old is not None
    cookies = [store.start_session(token, ttl=3600, now=now + i) for i in range(60)]
    rows = store._conn.execute("SELECT count(*) FROM amends_sessions").fetchone()[0]
    assert rows == 50  # the expired one and the ten oldest are gone
    assert store.session(cookies[-1][0]) is not None  # type: ignore[index]
    assert store.session(cookies[0][0]) is None  # type: ignore[index]
    store.close()


def test_two_different_session_cookies_are_refused_as_planted(served: tuple) -> None:  # type: ignore[type-arg]
    client, tokens, _, _ = served
    mine = tokens.start_session(tokens.create("acme"), ttl=60)
    theirs = tokens.start_session(tokens.create("globex"), ttl=60)
    assert mine is not None and theirs is not None
    r = client.get(
        "/sagas", headers={"Cookie": f"amends_session={theirs[0]}; amends_session={mine[0]}"}
    )
    assert (r.status_code, r.json()["error"]) == (401, "conflicting_sessions")
    assert "another site on this host has planted one" in r.json()["detail"]
    r = client.get("/sagas", headers={"Cookie": f"amends_session={mine[0]}"})
    assert r.status_code == 200


def test_a_cookie_session_writes_only_with_its_own_page_key(served: tuple) -> None:  # type: ignore[type-arg]
    """The key of another session (the attacker's own, which it knows) does not let a planted
    session's page act; the page key of the session does."""
    client, tokens, sagas, db = served
    attacker = tokens.start_session(tokens.create("acme"), ttl=60)
    assert attacker is not None
    key = sign_in(client, tokens.create("acme"), BASE)
    before = log_snapshot(db)
    same_origin = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
    r = client.post(
        f"/sagas/{sagas['acme1']}/undo", headers={**same_origin, "X-Amends-CSRF": attacker[1]}
    )
    assert (r.status_code, r.json()["error"]) == (403, "csrf_token_invalid")
    assert "another site on this host may have planted it" in r.json()["detail"]
    assert log_snapshot(db) == before
    r = client.post(f"/sagas/{sagas['acme1']}/undo", headers={**same_origin, "X-Amends-CSRF": key})
    assert r.status_code in (200, 202), r.text


def test_every_page_says_who_is_signed_in(served: tuple, tmp_path: Path) -> None:  # type: ignore[type-arg]
    client, tokens, sagas, _ = served
    assert '<p class="who" id="who">Not signed in</p>' in client.get("/login").text
    token = tokens.create("acme")
    sign_in(client, token, BASE)
    (info,) = [t for t in tokens.list("acme") if t.last_used_at is not None]
    for path in ("/", f"/ui/sagas/{sagas['acme1']}", "/login"):
        page = client.get(path).text
        assert (
            f'Signed in as <strong id="who-tenant">acme</strong> '
            f'<span class="token-id">(token {info.token_id})</span>' in page
        ), path
    _, catalog = fresh()
    open_app = create_app(
        lambda: amends.Engine(catalog, log=str(tmp_path / "h.db")), ServerSettings(no_auth=True)
    )
    with TestClient(open_app, base_url=BASE) as c:
        assert "No sign-in: every tenant's sagas" in c.get("/").text


# --- 8. the limiter and trusted proxies -----------------------------------------------------------
def test_the_limiter_counts_ipv6_per_64_and_stays_bounded() -> None:
    lim = FailedAuthLimiter(limit=2, window=60)
    lim.failed("2001:db8:1:2::1", now=0)
    lim.failed("2001:db8:1:2:ffff::9", now=1)  # the same /64: the same client
    assert lim.retry_after("2001:db8:1:2::77", now=2) == 58
    assert lim.retry_after("2001:db8:1:3::1", now=2) is None
    assert FailedAuthLimiter.key("::ffff:10.0.0.1") == "10.0.0.1"
    for _ in range(1000):  # a flood from one client keeps only `limit` timestamps
        lim.failed("10.0.0.1", now=3)
    assert len(lim._fails["10.0.0.1"]) == 2
    for i in range(FailedAuthLimiter.MAX_CLIENTS + 10):  # an address scan
        lim.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", now=4)
    assert len(lim._fails) == FailedAuthLimiter.MAX_CLIENTS


@pytest.mark.parametrize(
    ("peer", "header", "client"),
    [
        ("10.0.0.5", ["203.0.113.9"], "203.0.113.9"),  # one trusted proxy
        ("10.0.0.5", ["1.1.1.1, 203.0.113.9"], "203.0.113.9"),  # the client forged 1.1.1.1
        ("10.0.0.5", ["203.0.113.9, 10.0.0.7"], "203.0.113.9"),  # two proxies of ours
        ("10.0.0.5", ["10.0.0.8, 10.0.0.7"], "10.0.0.8"),  # all ours: the farthest one
        ("10.0.0.5", ["nonsense, 203.0.113.9"], "203.0.113.9"),
        ("10.0.0.5", ["203.0.113.9", "198.51.100.1"], "198.51.100.1"),  # two header lines
        ("10.0.0.5", ["garbage"], "10.0.0.5"),
        ("10.0.0.5", ["203.0.113.9:5555"], "203.0.113.9"),  # a proxy that adds the port
        ("10.0.0.5", ["[2001:db8::7]:443"], "2001:db8::7"),
        ("10.0.0.5", [], "10.0.0.5"),
        ("192.0.2.1", ["203.0.113.9"], "192.0.2.1"),  # not a proxy of ours: its own address
        ("::ffff:10.0.0.5", ["203.0.113.9"], "203.0.113.9"),
    ],
)
def test_forwarded_for_is_read_right_to_left_and_only_from_trusted_proxies(
    peer: str, header: list[str], client: str
) -> None:
    trusted = parse_trusted_proxies(["10.0.0.0/24"])
    assert forwarded_client(peer, header, trusted) == client
    assert forwarded_client(peer, header, ()) == peer  # no trusted proxy: never believed


def test_trusted_proxies_must_be_addresses(tmp_path: Path) -> None:
    with pytest.raises(amends.ConfigError, match="--trusted-proxy 'localhost' is not an IP"):
        parse_trusted_proxies(["127.0.0.1", "localhost"])
    with pytest.raises(amends.ConfigError, match="--trusted-proxy '10.0.0.0/33'"):
        create_app(
            lambda: amends.Engine(amends.Catalog(), log=":memory:"),
            ServerSettings(no_auth=True, trusted_proxies=("10.0.0.0/33",)),
        )


# --- 14. bounded idempotency keys -----------------------------------------------------------------
def test_idempotency_keys_are_capped_per_tenant_oldest_first(served: tuple) -> None:  # type: ignore[type-arg]
    client, tokens, sagas, db = served
    acme = {"Authorization": f"Bearer {tokens.create('acme')}"}
    for i in range(20):
        r = client.post(
            f"/sagas/{sagas['acme1']}/undo", headers={**acme, "Idempotency-Key": f"k{i}"}
        )
        assert r.status_code in (200, 202), r.text
    conn = sqlite3.connect(db)
    try:
        keys = [r[0] for r in conn.execute("SELECT key FROM idem_keys ORDER BY created_at")]
    finally:
        conn.close()
    assert keys == [f"k{i}" for i in range(15, 20)]  # before: all 20, and growing
    r = client.post(f"/sagas/{sagas['acme2']}/undo", headers={**acme, "Idempotency-Key": "k19"})
    assert (r.status_code, r.json()["error"]) == (409, "idempotency_key_reused")


async def test_the_log_caps_a_tenants_keys_and_leaves_others_alone(tmp_path: Path) -> None:
    log = amends.SqliteLog(str(tmp_path / "k.db"))
    try:
        for i in range(8):
            await log.idem_put("a", f"k{i}", "h", {}, 1e12, now=1000.0 + i, keep=3)
            await log.idem_put("b", f"k{i}", "h", {}, 1e12, now=1000.0 + i)
        assert [await log.idem_get("a", f"k{i}", 2000.0) is not None for i in range(8)] == [
            False
        ] * 5 + [True] * 3
        assert all([await log.idem_get("b", f"k{i}", 2000.0) for i in range(8)])
    finally:
        await log.close()


# --- 16. small ones ---------------------------------------------------------------------------
def test_a_locked_log_is_503_with_retry_after_and_other_errors_keep_their_status() -> None:
    assert _status_of(amends.LogLockedError("locked")) == (503, {"Retry-After": "2"})
    assert _status_of(amends.LogReadOnlyError("full")) == (503, {})
    assert _status_of(amends.LeaseLostError("taken")) == (409, {})
    assert _status_of(amends.SagaNotFoundError("gone")) == (404, {})
    assert _status_of(amends.ConfigError("bad")) == (409, {})


@pytest.mark.parametrize(
    ("line", "logged"),
    [
        ("/login?token=amd_abc", "/login?token=[redacted]"),
        ("/x?a=1&API_KEY=s3cret&b=2", "/x?a=1&API_KEY=[redacted]&b=2"),
        ("/x?password=hunter2&signature=ab", "/x?password=[redacted]&signature=[redacted]"),
        ("/x?limit=5&status=done", "/x?limit=5&status=done"),
        ("/sagas/amd_0123456789abcdefXYZ/view", "/sagas/[redacted]/view"),
        ("/x?q=sid_0123456789abcdefghij", "/x?q=[redacted]"),
    ],
)
def test_credentials_in_urls_are_redacted_for_the_access_log(line: str, logged: str) -> None:
    assert redact_url(line) == logged
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "h", 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", line, "1.1", 200), None,
    )  # fmt: skip
    assert RedactCredentials().filter(record)
    assert record.getMessage() == f'127.0.0.1:1 - "GET {logged} HTTP/1.1" 200'


def _cli(*argv: str) -> tuple[int, str]:
    from test_security import _cli as run

    code, _, err = run(*argv)
    return code, err


def test_token_create_refuses_a_missing_or_foreign_log_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    code, err = _cli("token", "create", "--tenant", "acme", "--db", str(missing))
    assert code == 2 and f"{missing}" in err
    foreign = tmp_path / "notes.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (t TEXT)")
    conn.close()
    code, err = _cli("token", "create", "--tenant", "acme", "--db", str(foreign))
    assert code == 2 and "not an amends log" in err, err
    text = tmp_path / "readme.db"
    text.write_text("hello")
    code, err = _cli("token", "create", "--tenant", "acme", "--db", str(text))
    assert code == 2, err
    code, err = _cli("token", "list", "--db", str(missing))
    assert code == 2 and f"no token file at '{missing}.tokens'" in err
    code, err = _cli("token", "revoke", "tok_x", "--db", str(missing))
    assert code == 2 and "no token file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db", "readme.db"]
    # an explicit --tokens file does not depend on the log
    code, err = _cli(
        "token", "create", "--tenant", "a", "--db", str(missing), "--tokens", str(tmp_path / "t")
    )
    assert code == 0, err


def test_the_demo_writes_its_report_and_world_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        html = tmp_path / "report.html"
        html.write_text("stale")  # a report left 0644 by an older run
        os.chmod(html, 0o644)
        code, err = _cli("demo", "--db", "demo.db", "--html", str(html))
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("report.html", "demo.db", "demo.db.world"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    assert "<html" in html.read_text()
