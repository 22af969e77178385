"""Issue 21.7, cookie tossing, in Debian's Chromium: a page on another port of the same host plants
the session cookie of another tenant (cookies are per host, not per port; Chromium lets even
``http://127.0.0.1`` set them, ``__Host-`` ones included). The victim is never signed in as that
tenant: every page names who is signed in, the page refuses to present a session this browser
did not start, and nothing the victim does acts for it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from server_harness import Live, browser_sign_in, log_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _attackers_session(live: Live) -> list[tuple[str, str]]:
    """What a tenant of the same server gets by signing in as itself (globex): every cookie the
    amends server set for the session, exactly as it set them (name, value)."""
    with httpx.Client(base_url=live.url) as c:
        page = c.get("/login")
        nonce = page.text.split('name="csrf" value="')[1].split('"')[0]
        r = c.post("/login", data={"token": live.globex, "csrf": nonce})
        assert r.status_code in (200, 303), r.text
        cookies = [(k.name, k.value) for k in c.cookies.jar if k.name != "amends_login_csrf"]
    assert cookies, "signing in set no session cookie"
    return cookies


class _Planter(http.server.BaseHTTPRequestHandler):
    """The page on another port: sets the cookies with its response header, or with a script."""

    cookies: list[tuple[str, str]] = []
    by_script = False

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if not self.by_script:
            for name, value in self.cookies:
                self.send_header("Set-Cookie", f"{name}={value}; Path=/; HttpOnly; SameSite=Strict")
        self.end_headers()
        script = "".join(
            f"document.cookie = {json.dumps(f'{n}={v}; path=/')};" for n, v in self.cookies
        )
        body = f"<title>planted</title><script>{script if self.by_script else ''}</script>"
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Planter:
    url: str
    """The attacker's page on another loopback port."""
    cookies: list[tuple[str, str]]
    """The cookies it plants: globex's session."""


@pytest.fixture
def planter(live: Live, request: pytest.FixtureRequest) -> Iterator[Planter]:
    """The attacker's page, planting by response header or by script (``request.param``)."""
    cookies = _attackers_session(live)
    handler = type(
        "Planter", (_Planter,), {"cookies": cookies, "by_script": request.param == "script"}
    )
    evil = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        yield Planter(f"http://127.0.0.1:{evil.server_address[1]}/", cookies)
    finally:
        evil.shutdown()
        evil.server_close()


_UNDO_FROM_THE_PAGE = """id => fetch('/sagas/' + id + '/undo', {
    method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-Amends-CSRF': window.amendsCsrf ||
      (document.querySelector("meta[name='amends-csrf']") || {content: ''}).content},
    body: '{}'}).then(r => r.status)"""
"""What a click on the page's undo button sends: the page's own CSRF value, whatever it is."""


def _not_globex(page: Any, live: Live) -> None:
    """Nothing the victim's page does acts for globex; the page names the planted tenant and
    shows nothing of it."""
    before = log_snapshot(live.db)
    page.goto(f"{live.url}/ui/sagas/{live.sagas['globex1']}")
    status = page.evaluate(_UNDO_FROM_THE_PAGE, live.sagas["globex1"])
    assert status == 403  # before the fix: 200/202, and globex's saga was undone by the victim
    assert log_snapshot(live.db) == before
    assert live.world.crm["g1"]["stage"] == "won"
    assert page.locator("#planted").is_visible()
    assert not page.locator("#undo").is_visible()
    page.goto(f"{live.url}/")
    assert page.locator("#who").inner_text().startswith("Signed in as globex (token tok_")
    planted = page.locator("#planted")
    assert planted.is_visible()
    assert "tenant globex" in planted.inner_text()
    assert "not started on this page" in planted.inner_text()
    assert not page.locator("#main").is_visible()
    assert not page.locator("ul.sagas").is_visible()


@pytest.mark.parametrize("planter", ["header", "script"], indirect=True)
def test_a_session_planted_from_another_port_does_not_sign_the_victim_in(
    browser: Any, live: Live, planter: Planter
) -> None:
    """A browser that never signed in visits the attacker's page, which plants globex's session
    cookie (by response header, or by script); back on amends it is not signed in as globex and
    can sign in as itself."""
    page = browser.new_context().new_page()
    page.set_default_timeout(20_000)
    page.goto(planter.url)
    assert page.title() == "planted"
    assert any(c["name"] for c in page.context.cookies(live.url))  # the cookie did land
    _not_globex(page, live)
    page.get_by_role("link", name="Sign in with your own token").click()
    page.wait_for_url(f"{live.url}/login")
    page.fill("#token", live.acme)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(f"{live.url}/")
    assert page.locator("#who").inner_text().startswith("Signed in as acme (token tok_")
    assert page.locator("#planted").count() == 0
    assert page.locator("ul.sagas a").count() == 3


@pytest.mark.parametrize("planter", ["header"], indirect=True)
def test_a_signed_in_victim_whose_cookie_is_overwritten_is_not_switched_to_the_other_tenant(
    browser: Any, live: Live, planter: Planter
) -> None:
    """Signed in as acme (every page says so), the victim visits the attacker's page, which
    overwrites the session cookie with globex's; amends shows the victim no globex page to act
    on, and "Forget this session" drops the planted cookie without ending globex's session."""
    page = browser.new_context().new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    assert page.locator("ul.sagas a").count() == 3
    page.goto(planter.url)
    _not_globex(page, live)
    page.get_by_role("button", name="Forget this session").click()
    page.wait_for_url(f"{live.url}/login")
    assert page.locator("#who").inner_text() == "Not signed in"
    planted = {value for _, value in planter.cookies}
    assert all(c["value"] not in planted for c in page.context.cookies(live.url))
    # the victim could not end globex's session (that needs globex's page key): only drop it
    with httpx.Client(base_url=live.url, cookies=dict(planter.cookies)) as attacker:
        assert attacker.get("/", follow_redirects=False).status_code == 200
    browser_sign_in(page, live.url, live.acme)
    assert page.locator("#who").inner_text().startswith("Signed in as acme (token tok_")
