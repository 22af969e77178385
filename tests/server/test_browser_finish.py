"""Issue 23 on the Undo screen, in Debian's Chromium (Playwright), at 375 and 1280 px: "Mark
handled…" asks for the note and confirms as the signed-in identity, and offers "Withdraw…";
"Retry…" tries a failed refund again once its cause is fixed; a saga needing a tool this server
lacks is undone only after the confirmation says so."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_harness import Live, _seed, browser_sign_in, serving
from test_browser import serious_violations

import amends
from amends.server import ServerSettings, TokenStore, create_app
from core_world import fresh, without

pytestmark = [pytest.mark.slow, pytest.mark.browser]

WIDTHS = [375, 1280]


def _undo_and_wait(live: Live, sid: str) -> dict[str, Any]:
    r = httpx.post(f"{live.url}/sagas/{sid}/undo", headers=live.auth(), timeout=30)
    assert r.status_code in (200, 202), r.text
    rev_id = r.json()["reversal_id"]
    deadline = time.monotonic() + 30
    while True:
        got = httpx.get(f"{live.url}/reversals/{rev_id}", headers=live.auth()).json()
        if got["state"] == "done":
            return dict(got)
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def _page(browser: Any, live: Live, width: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    return page


@pytest.mark.parametrize("width", WIDTHS)
def test_mark_handled_asks_for_a_note_confirms_as_the_signed_in_person_and_can_be_withdrawn(
    browser: Any,
    live: Live,
    width: int,
) -> None:
    """Before: one click, no note, no name shown, no way back."""
    sid = live.sagas["acme3"]
    _undo_and_wait(live, sid)
    page = _page(browser, live, width)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.url) if req.method == "POST" else None)
    action = page.locator("li.manual-action[data-step-id='s3']")
    action.get_by_role("button", name="Mark handled…").click()
    note = action.get_by_label("What did you do or check?")
    assert note.is_visible()
    confirm = action.get_by_role("button", name="Confirm: mark handled as token tok_")
    assert confirm.is_visible()
    confirm.click()  # no note yet: the browser refuses the empty form, nothing is posted
    assert posts == []
    note.fill("sent the draft to acme3@example.com")
    assert serious_violations(page) == []
    confirm.click()
    handled = page.locator("li.manual-action[data-step-id='s3'] .handled")
    handled.wait_for()
    assert handled.inner_text().startswith("Handled by token tok_")
    assert handled.inner_text().endswith(": sent the draft to acme3@example.com")
    assert page.locator("#headline").inner_text() == (
        "2 of 3 taken back (1 compensated, leaving a trace) · 1 handled by a person"
    )
    if width == 375:
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    action = page.locator("li.manual-action[data-step-id='s3']")
    action.get_by_role("button", name="Withdraw…").click()
    action.get_by_label("Why withdraw it (it was not handled after all)?").fill("wrong address")
    action.get_by_role("button", name="Confirm: withdraw as token tok_").click()
    page.locator("li.manual-action[data-step-id='s3'] button.resolve").wait_for()
    assert page.locator("#headline").inner_text().endswith("· 1 needs your attention")
    page.reload()
    history = page.locator(".history-list").inner_text()
    assert "Marked handled by token tok_" in history and "Resolution withdrawn by token" in history
    assert serious_violations(page) == []
    body = httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth()).json()
    assert body["resolutions"] == {}
    assert [e["data"].get("withdrawn", False) for e in body["history"]
            if e["kind"] == "step.resolved"] == [False, True]  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
def test_retry_tries_a_failed_refund_again_once_its_cause_is_fixed(
    browser: Any,
    live: Live,
    width: int,
) -> None:
    sid = live.sagas["acme2"]
    live.world.faults["pay.refund"] = [amends.PermanentError("vendor API key expired")]
    first = _undo_and_wait(live, sid)
    states = {s["step_id"]: s["state"] for s in first["report"]["steps"]}
    assert states == {"s1": "blocked", "s2": "failed", "s3": "acknowledged"}
    page = _page(browser, live, width)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    action = page.locator("li.manual-action[data-step-id='s2']")
    action.get_by_role("button", name="Retry…").click()  # the key was renewed meanwhile
    panel = action.locator(".retry-confirm")
    assert "is checked again first" in panel.inner_text()
    assert serious_violations(page) == []
    panel.get_by_role("button", name="Yes: retry").click()
    page.locator("ul.steps-out li[data-step-id='s2'] .state-compensated").wait_for(timeout=30_000)
    assert page.locator("ul.steps-out li[data-step-id='s1'] .state").inner_text() == "reverted"
    assert page.get_by_role("button", name="Retry…").count() == 0
    assert live.world.charges["ch_2"]["refunded"] == 5000
    assert live.world.crm["r2"]["stage"] == "lead"
    if width == 375:
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert serious_violations(page) == []


@pytest.fixture
def upgraded(tmp_path: Path) -> Iterator[Live]:
    """A server whose catalog lost ``pay.refund`` since the sagas ran (an upgrade renamed it)."""
    db = str(tmp_path / "server.db")
    world, catalog = fresh()
    sagas: dict[str, str] = {}
    seeder = threading.Thread(target=lambda: sagas.update(asyncio.run(_seed(db, catalog, world))))
    seeder.start()
    seeder.join(60)
    tokens = TokenStore(str(tmp_path / "server.db.tokens"))
    acme, globex = tokens.create("acme"), tokens.create("globex")
    lean = without(catalog, "pay.refund")
    app = create_app(lambda: amends.Engine(lean, log=db), ServerSettings(tokens=tokens))
    try:
        with serving(app) as url:
            yield Live(url, db, world, tokens, acme, globex, sagas)
    finally:
        tokens.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_tool_the_server_lacks_is_named_in_the_confirmation_before_the_rest_is_undone(
    browser: Any,
    upgraded: Live,
    width: int,
) -> None:
    live = upgraded
    page = _page(browser, live, width)
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme1']}")
    page.get_by_role("button", name="Undo", exact=True).click()  # not "Undo only this"
    dialog = page.get_by_role("dialog")
    assert "This server's catalog lacks pay.refund" in dialog.inner_text()
    assert serious_violations(page) == []
    dialog.get_by_role("button", name="undo the rest").click()
    page.locator("#headline").wait_for(timeout=30_000)
    states = page.locator("ul.steps-out .state").all_inner_texts()
    assert states == ["blocked", "failed", "acknowledged"]
    assert "not attempted: its inverse tool 'pay.refund'" in page.locator("#outcome").inner_text()
    assert live.world.charges["ch_1"]["refunded"] == 0
    if width == 375:
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
