"""What the page's script shows is what the bytes say (issue 21; rules 8 and 12), in Chromium.

The server renders every value through ``amends._visible``, but the page's script also shows
text it receives as JSON: an error's detail, a follow-up's outcome, who handled a step. It set
that text raw: a zero-width space inside an address, a right-to-left override and forty
combining marks reached the person as they were. The script now shows it by the same rule (the
page names the rule's characters in ``data-hidden``), so it reads as the server-rendered text
does.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from server_harness import Live, browser_sign_in

pytestmark = [pytest.mark.slow, pytest.mark.browser]

DETAIL = (
    "charge ch_1 was refunded to alice\u200b@example.com \u202efdp.exe\u202c \x1b[2J id-42\ufe0f"
    " z" + "\u0301" * 10
)
SHOWN = (
    "Error: charge ch_1 was refunded to alice\\u200b@example.com \\u202efdp.exe\\u202c "
    "\\x1b[2J id-42\\ufe0f z" + "\u0301" * 4 + "\\u0301" * 6
)


def test_an_error_detail_the_script_shows_is_shown_by_the_one_rule(
    browser: Any, live: Live
) -> None:
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    answer = json.dumps({"error": "conflict", "detail": DETAIL})
    page.route(
        re.compile(r"/preview\?steps="),
        lambda route: route.fulfill(status=409, content_type="application/json", body=answer),
    )
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme1']}")
    page.locator("button.undo-only").first.click()
    summary = page.locator("#summary")
    summary.filter(has_text="Error: ").wait_for()
    assert summary.inner_text() == SHOWN
    context.close()
