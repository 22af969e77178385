"""Issue 26 item 7: the Undo screen in Chromium at 375x800, 375x667 and 1280x800: the confirm
dialog's heading (the summary) and both its buttons are inside the viewport, nothing is wider
than the screen, and the list is titled for people."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from server_harness import Live, browser, browser_sign_in, live

__all__ = ["browser", "live"]

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def inside(box: dict[str, float] | None, width: int, height: int) -> bool:
    return (
        box is not None
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width
        and box["y"] + box["height"] <= height
    )


@pytest.mark.parametrize(("width", "height"), [(375, 800), (375, 667), (1280, 800)])
def test_the_confirm_dialog_keeps_its_summary_and_buttons_on_screen(
    browser: Any, live: Live, width: int, height: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    page.goto(f"{live.url}/")
    assert page.locator("h1").inner_text() == "Requests the agent ran"
    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme1']}")
    page.get_by_role("button", name="Take it back").click()
    dialog = page.locator("#confirm")
    dialog.wait_for(state="visible")
    for part in ("#confirm-h", "#confirm-yes", "#confirm-no"):
        assert inside(page.locator(part).bounding_box(), width, height), (part, width, height)
    # the dialog's list scrolls inside it; its heading and buttons stay
    page.locator("#confirm-what").evaluate("e => e.scrollTo(0, e.scrollHeight)")
    for part in ("#confirm-h", "#confirm-yes", "#confirm-no"):
        assert inside(page.locator(part).bounding_box(), width, height), (part, width, height)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.locator("#confirm-no").click()
    assert not dialog.is_visible()
    context.close()
