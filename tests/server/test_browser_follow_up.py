"""Issue 27 part 2 on the Undo screen, in Debian's Chromium (Playwright), at 375 and 1280 px:
"Send…" on a manual action with a draft shows the recipients, lets the person edit the text and
sends it as a follow-up of the reversal once confirmed as the signed-in identity."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_harness import Live
from test_browser import serious_violations
from test_browser_finish import WIDTHS, _page, _undo_and_wait

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.mark.parametrize("width", WIDTHS)
def test_send_shows_the_recipients_sends_the_edited_draft_and_marks_the_action_handled(
    browser: Any, live: Live, width: int
) -> None:
    sid = live.sagas["acme3"]
    _undo_and_wait(live, sid)
    page = _page(browser, live, width)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.url) if req.method == "POST" else None)
    action = page.locator("li.manual-action[data-step-id='s3']")
    action.get_by_role("button", name="Send…").click()
    form = action.locator("form.send-form")
    assert form.locator(".recipients").inner_text() == "acme3@example.com"
    assert action.get_by_label("Send with tool").input_value() == "mail.send"
    text = action.get_by_label("Message (edit it before sending)")
    assert text.input_value() == "Please disregard my earlier message 'Deal closed'."
    action.get_by_label("The message goes in argument").fill("subject")
    text.fill("Sorry: the deal is not closed yet")
    assert serious_violations(page) == []
    if width == 375:
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    outbox = len(live.world.outbox)
    assert posts == []  # nothing is sent before the confirmation
    action.get_by_role("button", name="Confirm: send as token tok_").click()
    handled = page.locator("li.manual-action[data-step-id='s3'] .handled")
    handled.wait_for()
    assert handled.inner_text().startswith("Handled by token tok_")
    # issue 26: the follow-up's note in words; its ids only in the engineers' fold
    assert handled.inner_text().endswith(": sent the follow-up message")
    assert ": follow-up s3+f1 of reversal " in page.locator("#reversal-details").text_content()
    assert live.world.outbox[outbox:] == [
        {"to": "acme3@example.com", "subject": "Sorry: the deal is not closed yet"}
    ]
    assert page.get_by_role("button", name="Send…").count() == 0
    listed = httpx.get(f"{live.url}/sagas/{sid}/follow-ups", headers=live.auth()).json()
    assert [(f["follow_up_id"], f["state"]) for f in listed] == [("s3+f1", "sent")]
    assert serious_violations(page) == []
