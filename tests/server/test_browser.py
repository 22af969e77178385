"""The web page in Debian's Chromium (Playwright): preview, two quick Undo clicks, one reversal,
the residue, the draft message and its copy button. Saves docs/img/outcome.png."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_harness import Live, log_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "outcome.png"


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import Error, sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing; install it with `apt-get install -y chromium "
            f"chromium-driver` (scripts/test-deps.sh does)",
            pytrace=False,
        )
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        except Error as exc:
            pytest.fail(f"chromium at {CHROMIUM} could not start: {exc}", pytrace=False)
        try:
            yield b
        finally:
            b.close()


def _page(browser: Any, live: Live, width: int = 1000) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    sign_in(page, live.url, live.acme)
    return page


def sign_in(page: Any, url: str, token: str) -> None:
    """Sign in through the form (POST); the token never appears in a URL."""
    page.goto(f"{url}/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def test_undo_twice_quickly_one_reversal_residue_and_copy(browser: Any, live: Live) -> None:
    page = _page(browser, live)
    sagas = page.locator("ul.sagas a")
    assert sagas.count() == 3  # only acme's sagas, not globex's
    sid = live.sagas["acme1"]
    page.click(f"a[href='/ui/sagas/{sid}']")
    page.wait_for_url(f"**/ui/sagas/{sid}")
    assert page.locator("h1").inner_text() == "Close the deal acme1"
    verbs = page.locator("#preview li.planned .verb").all_inner_texts()
    assert verbs == ["Revert", "Compensate", "Acknowledge"]
    assert "Refund of 50.00 to cust-acme1" in page.locator("#preview").inner_text()
    assert page.locator("#preview .needs-person").count() == 1

    posts: list[str] = []
    page.on(
        "request",
        lambda req: posts.append(req.url) if req.method == "POST" else None,
    )
    button = page.get_by_role("button", name="Take it back")
    button.click()
    button.click()  # the first request is still waiting on the slow refund
    headline = page.locator("#headline")
    headline.wait_for()
    assert headline.inner_text() == "Undone 2 of 3 — 1 needs your attention"
    assert len(posts) == 2
    ids = page.evaluate("window.amendsReversalIds")
    assert len(ids) == 2 and len(set(ids)) == 1
    progress = page.locator("#progress").inner_text()
    assert "Compensate pay.charge: compensated" in progress

    residue = page.locator("ul.residue li").all_inner_texts()
    assert residue == ["Refund of 50.00 to cust-acme1 — affects cust-acme1; settles 2026-12-07"]
    draft = page.locator("textarea.draft")
    assert draft.input_value() == "Please disregard my earlier message 'Deal closed'."
    page.get_by_role("button", name="Copy draft").click()
    page.locator(".copied").filter(has_text="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == draft.input_value()
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    conn = sqlite3.connect(live.db)
    try:
        rows = conn.execute(
            "SELECT reversal_id FROM reversals WHERE saga_id = ?", (sid,)
        ).fetchall()
    finally:
        conn.close()
    assert rows == [(ids[0],)]
    assert [e for e in live.world.effects if e[0] == "pay.refund"] == [
        e for e in live.world.effects if e[0] == "pay.refund" and e[1] == "ch_1"
    ]
    assert live.world.charges["ch_1"]["refunded"] == 5000
    assert live.world.crm["r1"]["stage"] == "lead"

    page.reload()  # the finished outcome is rendered by the server, and no Undo button remains
    assert page.locator("#headline").inner_text() == "Undone 2 of 3 — 1 needs your attention"
    assert page.get_by_role("button", name="Take it back").count() == 0


def test_phone_width_has_no_horizontal_scroll(browser: Any, live: Live) -> None:
    page = _page(browser, live, width=375)
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme2']}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert page.get_by_role("heading", name="What undo will do").count() == 1


def test_login_rejects_a_bad_token_and_other_tenants_page_is_404(browser: Any, live: Live) -> None:
    page = _page(browser, live)
    resp = page.goto(f"{live.url}/ui/sagas/{live.sagas['globex1']}")
    assert resp is not None and resp.status == 404
    page.context.clear_cookies()
    page.goto(f"{live.url}/login")
    page.fill("#token", "amd_wrong")
    page.click("button[type=submit]")
    assert page.get_by_role("alert").inner_text() == "That token is not valid."


def test_a_page_on_another_port_of_the_same_host_cannot_undo(browser: Any, live: Live) -> None:
    """Issue 13.5: same site (the SameSite=Strict cookie is sent), another origin: an empty form
    POST and a no-cors fetch both reach the server with the cookie and are refused; nothing
    runs."""
    import http.server
    import threading

    target = f"{live.url}/sagas/{live.sagas['acme1']}/undo"
    other = f"{live.url}/sagas/{live.sagas['acme2']}/undo"
    attack = (
        f"<form id='f' method='post' action='{target}'></form><script>"
        f"fetch('{other}', {{method: 'POST', mode: 'no-cors', credentials: 'include'}})"
        f".finally(function () {{ document.getElementById('f').submit(); }});"
        f"</script>"
    ).encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(attack)

        def log_message(self, *args: Any) -> None:
            pass

    evil = http.server.HTTPServer(("127.0.0.1", 0), Attacker)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    before = log_snapshot(live.db)
    try:
        page = _page(browser, live)  # signed in: the session cookie exists
        page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        page.wait_for_url(target)
        body = page.locator("body").inner_text()
        # the cookie came along (else: 401 missing_token) and the request was refused
        assert "cross_origin_request" in body, body
    finally:
        evil.shutdown()
        evil.server_close()
    assert log_snapshot(live.db) == before
    assert live.world.crm["r1"]["stage"] == "won"
    assert live.world.crm["r2"]["stage"] == "won"


def test_continue_and_mark_handled_on_the_page(browser: Any, live: Live) -> None:
    """A reversal cut off by its budget shows "Continue undo"; clicking it finishes the same
    reversal; "Mark handled" records the resolution and the page shows who handled it."""
    import httpx

    sid = live.sagas["acme2"]
    r = httpx.post(
        f"{live.url}/sagas/{sid}/undo", json={"tool_calls": 1}, headers=live.auth(), timeout=30
    )
    assert r.status_code in (200, 202), r.text
    rev_id = r.json()["reversal_id"]
    deadline = time.monotonic() + 30
    while (
        httpx.get(f"{live.url}/reversals/{rev_id}", headers=live.auth()).json()["state"] != "done"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page = _page(browser, live)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    assert "over_budget" in page.locator("#outcome").inner_text()
    page.get_by_role("button", name="Continue undo").click()
    page.locator(".state-compensated").wait_for(timeout=30_000)
    assert page.get_by_role("button", name="Continue undo").count() == 0
    steps = page.locator("ul.steps-out li").all_inner_texts()
    assert not any("over_budget" in s for s in steps), steps
    assert live.world.crm["r2"]["stage"] == "lead"
    assert live.world.charges["ch_2"]["refunded"] == 5000

    page.locator("button.resolve").first.click()
    page.locator(".resolve-status").filter(has_text="Handled by token tok_").wait_for()
    page.reload()
    assert "Handled by token tok_" in page.locator(".handled").first.inner_text()
    body = httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth()).json()
    assert len(body["resolutions"]) == 1
    got = httpx.get(f"{live.url}/reversals/{rev_id}", headers=live.auth()).json()
    assert got["continuations"] == 1
