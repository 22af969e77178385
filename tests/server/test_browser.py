"""The Undo screen in Debian's Chromium (Playwright): the grouped preview, a drifted step needing
review before the click, the confirmation, two quick clicks and one reversal, the report headline
first (also at 375 px), Copy, Mark handled, Continue, and axe-core (no serious or critical
violations). Screenshots are made by `make screenshots`, not here."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from server_harness import Live, browser_sign_in, log_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _page(browser: Any, live: Live, width: int = 1000) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    return page


def serious_violations(page: Any) -> list[str]:
    """axe-core's violations of serious or critical impact on the page as it is now."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v.get("impact") in ("serious", "critical")
    ]


def test_preview_confirm_two_quick_clicks_one_reversal_report_and_copy(
    browser: Any, live: Live
) -> None:
    """Issue 17: the preview is grouped by what will happen, in sentences; the button (labelled
    "Take it back") opens a confirmation that spells out the verbs and the consequences; two
    quick confirmations post twice and join one reversal; the same screen turns into the report,
    headline first, states in colour and in words; Copy puts the draft on the clipboard; axe-core
    finds nothing serious or critical before, during or after."""
    page = _page(browser, live, width=1280)
    sagas = page.locator("ul.sagas a")
    assert sagas.count() == 3  # only acme's sagas, not globex's
    sid = live.sagas["acme1"]
    page.click(f"a[href='/ui/sagas/{sid}']")
    page.wait_for_url(f"**/ui/sagas/{sid}")
    assert page.locator("h1").inner_text() == "Close the deal acme1"
    assert page.locator("#summary").inner_text() == (
        "Revert 1, Compensate 1 with residue, Acknowledge 1 — a person must follow up"
    )
    groups = page.locator("h3.group").all_inner_texts()
    assert groups == [
        "Will be reverted (1)",
        "Will be compensated — leaves a trace (1)",
        "Needs a person (1)",
    ]
    assert page.locator(".plan-revert li").get_attribute("data-step-id") == "s1"
    assert page.locator(".plan-compensate li .leaves").inner_text() == (
        "Leaves: Refund of 50.00 to cust-acme1 — affects cust-acme1; settles 7 Dec 2026"
    )
    assert page.locator(".plan-person li .verb").inner_text() == "Acknowledge"
    assert serious_violations(page) == []

    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.url) if req.method == "POST" else None)
    # keyboard: the button opens the dialog, focus lands on the confirmation, Cancel closes it
    page.get_by_role("button", name="Take it back").focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    assert dialog.is_visible()
    assert page.evaluate("document.activeElement.id") == "confirm-yes"
    heading = dialog.get_by_role("heading", level=2).inner_text()
    assert heading == "Revert 1, Compensate 1 with residue, Acknowledge 1 — a person must follow up"
    text = dialog.inner_text()
    assert "Refund of 50.00 to cust-acme1 — affects cust-acme1; settles 7 Dec 2026" in text
    assert "What cannot be taken back — a person must follow up" in text
    assert serious_violations(page) == []
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # Cancel
    assert not dialog.is_visible() and posts == []

    page.get_by_role("button", name="Take it back").click()
    yes = page.get_by_role("button", name="Yes: Revert 1, Compensate 1, Acknowledge 1")
    yes.evaluate("b => { b.click(); b.click(); }")  # two quick clicks, the refund is slow
    page.locator("li.planned .state").first.wait_for()  # the preview turned into progress
    headline = page.locator("#headline")
    headline.wait_for()
    assert headline.inner_text() == (
        "2 of 3 taken back (1 compensated, leaving a trace) · 1 needs your attention"
    )
    assert page.evaluate("document.activeElement.id") == "headline"
    undo_posts = [u for u in posts if u.endswith("/undo")]
    assert len(undo_posts) == 2
    ids = page.evaluate("window.amendsReversalIds")
    assert len(ids) == 2 and len(set(ids)) == 1
    assert page.locator("#preview").count() == 0  # the steps are listed once, as the report
    states = page.locator("ul.steps-out .state").all_inner_texts()
    assert states == ["reverted", "compensated", "acknowledged"]
    assert page.locator("ul.steps-out .state-acknowledged").count() == 1
    residue = page.locator("ul.residue li").all_inner_texts()
    assert residue == ["Refund of 50.00 to cust-acme1 — affects cust-acme1; settles 7 Dec 2026"]
    draft = page.locator("textarea.draft")
    assert draft.input_value() == "Please disregard my earlier message 'Deal closed'."
    page.get_by_role("button", name="Copy draft").click()
    page.locator(".copied").filter(has_text="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == draft.input_value()
    assert serious_violations(page) == []
    page.locator(".history-list").filter(has_text="Reversal finished").wait_for()
    assert "Undo asked by token tok_" in page.locator(".history-list").inner_text()

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
    assert page.locator("#headline").inner_text() == (
        "2 of 3 taken back (1 compensated, leaving a trace) · 1 needs your attention"
    )
    assert page.get_by_role("button", name="Take it back").count() == 0
    history = page.locator(".history-list").inner_text()
    # issue 21.14: the second click joined the reversal the first started; it records nothing
    assert history.count("Undo asked by token tok_") == 1
    # issue 26: the outcome in words, as the report's status label says it
    assert "Reversal finished (cannot undo everything — a person must follow up)" in history


def test_preview_shows_a_drifted_step_as_needing_review_before_the_click(
    browser: Any, live: Live
) -> None:
    """Rule 10: someone changed the CRM record since the agent wrote it; before any click the
    preview lists that step under "Needs a person" as Review, with what the probe found, and the
    confirmation says it will not be taken back."""
    live.world.crm["r3"]["stage"] = "lost"
    page = _page(browser, live)
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme3']}")
    person = page.locator(".plan-person li[data-step-id='s1']")
    assert person.locator(".verb").inner_text() == "Review"
    assert (
        "Needs review: someone changed it since the agent acted: expected 'won', found "
        "'lost'" in person.inner_text()
    )
    assert page.locator(".plan-revert li").count() == 0
    assert page.locator("#summary").inner_text() == (
        "Compensate 1 with residue, Acknowledge 2 — a person must follow up"
    )
    page.get_by_role("button", name="Take it back").click()
    assert "expected 'won', found 'lost'" in page.get_by_role("dialog").inner_text()
    assert live.world.crm["r3"]["stage"] == "lost"  # only probes ran


def test_phone_width_preview_and_headline_without_scrolling(browser: Any, live: Live) -> None:
    """At 375 px: no horizontal scroll; the preview's summary and button are on the first
    screen; after undo the report's headline is visible without scrolling; axe-core is clean."""
    context = browser.new_context(viewport={"width": 375, "height": 667})
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme2']}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert page.get_by_role("heading", name="What undo will do").count() == 1
    button = page.get_by_role("button", name="Take it back").bounding_box()
    assert button is not None and button["y"] + button["height"] <= 667
    assert serious_violations(page) == []
    page.get_by_role("button", name="Take it back").click()
    page.locator("#confirm-yes").click()
    page.locator("#headline").wait_for(timeout=30_000)
    page.reload()
    assert page.evaluate("window.scrollY") == 0
    box = page.locator("#headline").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 667, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert serious_violations(page) == []
    context.close()


def test_login_rejects_a_bad_token_and_other_tenants_page_is_404(browser: Any, live: Live) -> None:
    page = _page(browser, live)
    resp = page.goto(f"{live.url}/ui/sagas/{live.sagas['globex1']}")
    assert resp is not None and resp.status == 404
    page.context.clear_cookies()
    page.goto(f"{live.url}/login")
    page.fill("#token", "amd_wrong")
    page.click("form[action='/login'] button[type=submit]")
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
    assert page.locator("#outcome .state-over_budget").count() >= 1
    assert "over budget" in page.locator("#outcome").inner_text()  # the state in words too
    assert serious_violations(page) == []
    # rule 12: the click asks first, naming each step the continuation attempts and what
    # its undo sends; Cancel sends nothing
    page.get_by_role("button", name="Continue undo…", exact=True).click()
    panel = page.locator("#continue-confirm")
    assert panel.is_visible()
    listed = panel.locator("li").all_inner_texts()
    assert listed == [
        "pay.charge(cents=5000, customer='cust-acme2') — undo: "
        "pay.refund(cents=5000, charge_id='ch_2')"
    ]
    page.get_by_role("button", name="Cancel").last.click()
    assert not panel.is_visible()
    assert live.world.charges["ch_2"]["refunded"] == 0
    page.get_by_role("button", name="Continue undo…", exact=True).click()
    page.get_by_role("button", name="Yes: continue undo").click()
    page.locator(".state-compensated").wait_for(timeout=30_000)
    assert page.get_by_role("button", name="Continue undo…", exact=True).count() == 0
    assert page.locator("ul.steps-out .state-over_budget").count() == 0
    assert live.world.crm["r2"]["stage"] == "lead"
    assert live.world.charges["ch_2"]["refunded"] == 5000

    page.locator("button.resolve").first.click()  # issue 23: it asks for a note first
    page.locator("textarea.note").first.fill("sent the draft")
    page.get_by_role("button", name="Confirm: mark handled as token tok_").first.click()
    page.locator(".handled").filter(has_text="Handled by token tok_").wait_for()
    page.reload()
    assert "Handled by token tok_" in page.locator(".handled").first.inner_text()
    body = httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth()).json()
    assert len(body["resolutions"]) == 1
    got = httpx.get(f"{live.url}/reversals/{rev_id}", headers=live.auth()).json()
    assert got["continuations"] == 1
