"""Issue 26 item 7: every screen of the web page, in Debian's Chromium (Playwright), at 375x667,
375x800 and 1280x800, against layout assertions:

- nothing is clipped horizontally: the page is no wider than the screen
  (``scrollWidth <= clientWidth``) and no visible element reaches past its edges;
- each dialog's (or confirmation form's) heading, primary button and Cancel are inside the
  viewport together;
- the summary heading (before undo: what undo will do; after: the headline) is on screen
  without scrolling;
- the standalone HTML report: "Needs a person", then what remains, then the steps.

Screens: sign-in, the list, a saga before undo, the confirm dialog, the selective ("Undo only
this") confirmation, a saga after undo, the follow-up "Send…" form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from server_harness import Live, browser_sign_in
from test_browser_finish import _undo_and_wait

import amends

pytestmark = [pytest.mark.slow, pytest.mark.browser]

VIEWPORTS = [(375, 667), (375, 800), (1280, 800)]

# Visible elements reaching past the viewport's left or right edge (a scroll container's
# children may, inside it: they are not clipped by the page).
_CLIPPED = """() => {
  const w = document.documentElement.clientWidth;
  const out = [];
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height || getComputedStyle(e).visibility === "hidden") continue;
    let p = e.parentElement, scrolled = false;
    while (p && p !== document.body) {
      const o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") { scrolled = true; break; }
      p = p.parentElement;
    }
    if (scrolled) continue;
    if (r.left < -0.5 || r.right > w + 0.5) {
      out.push(e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
               (e.className && typeof e.className === "string" ? "." + e.className : "") +
               " " + Math.round(r.left) + ".." + Math.round(r.right));
    }
  }
  return out;
}"""


def not_clipped(page: Any, screen: str) -> None:
    width = page.evaluate("document.documentElement.clientWidth")
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{screen}: the page is {scroll} px wide on a {width} px screen"
    assert page.evaluate(_CLIPPED) == [], f"{screen}: elements past the screen's edge"


def on_screen(page: Any, selector: str, screen: str) -> None:
    """``selector``'s element lies wholly inside the viewport, as it is scrolled now."""
    box = page.locator(selector).bounding_box()
    view = page.viewport_size
    assert box is not None, f"{screen}: {selector} is not shown"
    inside = (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= view["width"]
        and box["y"] + box["height"] <= view["height"]
    )
    assert inside, f"{screen}: {selector} at {box} is not inside {view}"


@pytest.mark.parametrize(("width", "height"), VIEWPORTS)
def test_every_screen_fits_the_screen_and_keeps_its_actions_in_view(
    browser: Any, live: Live, tmp_path: Path, width: int, height: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(20_000)

    page.goto(f"{live.url}/login")
    not_clipped(page, "sign-in")
    on_screen(page, "button[type=submit]", "sign-in")
    browser_sign_in(page, live.url, live.acme)

    page.goto(f"{live.url}/")
    not_clipped(page, "list")
    assert page.locator("ul.sagas li .would").count() == 3

    page.goto(f"{live.url}/ui/sagas/{live.sagas['acme1']}")
    not_clipped(page, "saga before undo")
    on_screen(page, "#summary", "saga before undo")  # what undo will do, without scrolling

    for opener, dialog, screen in (
        ("#undo", "#confirm", "confirm dialog"),
        ("button.undo-only[data-step-id='s2']", "#confirm-only", "selective confirm"),
    ):
        page.locator(opener).click()
        page.locator(dialog).wait_for(state="visible")
        not_clipped(page, screen)
        for part in ("-h", "-yes", "-no"):  # its heading, primary button and Cancel
            on_screen(page, dialog + part, screen)
        page.locator(dialog + "-no").click()

    sid = live.sagas["acme3"]
    done = _undo_and_wait(live, sid)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    not_clipped(page, "after undo")
    on_screen(page, "#headline", "after undo")  # the outcome, without scrolling

    action = page.locator("li.manual-action[data-step-id='s3']")
    action.get_by_role("button", name="Send…").click()
    form = action.locator("form.send-form")
    form.wait_for(state="visible")
    not_clipped(page, "follow-up send")
    form.locator(".send-yes").scroll_into_view_if_needed()
    for part in (".send-yes", ".send-no"):
        on_screen(page, f"li.manual-action[data-step-id='s3'] {part}", "follow-up send")

    report = amends.UndoReport.from_dict(done["report"])
    out = tmp_path / "report.html"
    out.write_text(report.render("html"))
    page.goto(out.as_uri())
    not_clipped(page, "standalone report")
    assert page.locator("h2").all_inner_texts() == ["Needs a person", "What remains", "Steps"]
    on_screen(page, "h1", "standalone report")
    assert httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth()).status_code == 200
    context.close()
