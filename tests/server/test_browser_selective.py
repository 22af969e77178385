"""Issue 27 on the Undo screen, in Debian's Chromium (Playwright), at 375 and 1280 px: "Undo
only this" on a step shows the selection's closure (what is added and why, what is kept) in the
confirmation, undoes exactly that, and "Undo the rest…" extends the same reversal."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest
from server_harness import Live, browser_sign_in
from test_browser import serious_violations

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.mark.parametrize("width", [375, 1280])
def test_undo_only_this_shows_the_closure_and_keeps_the_rest(
    browser: Any, live: Live, width: int
) -> None:
    """Saga: s1 wins r1, s2 charges after s1, s3 mails after s2; "Undo only this" on s2."""
    sid = live.sagas["acme1"]
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    browser_sign_in(page, live.url, live.acme)
    page.goto(f"{live.url}/ui/sagas/{sid}")
    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.url) if req.method == "POST" else None)
    charge = "pay.charge(cents=5000, customer='cust-acme1')"  # the step in plain language
    said = {  # each step's sentence, as the page names it (issue 26: no step ids)
        li.get_attribute("data-step-id"): li.get_attribute("data-sentence")
        for li in page.locator("li.planned").all()
    }
    assert said["s2"] == charge
    page.get_by_role("button", name=f"Undo only this: {charge}", exact=True).click()
    dialog = page.locator("#confirm-only")
    dialog.wait_for(state="visible")
    assert posts == [], "the confirmation comes first; nothing is undone yet"
    text = dialog.inner_text()
    assert f"Undo only {charge} and what depends on it: 2 steps, nothing else." in text
    added = dialog.locator(".only-added li").all_inner_texts()
    assert added == [f"{said['s3']} — it was set to run after {charge}"]
    kept = dialog.locator(".only-kept li").all_inner_texts()
    assert kept == [said["s1"]]
    assert re.search(r"\(s\d\)|\bs\d \(", text) is None, text  # ids: engineers' fold only
    steps = dialog.locator(".only-steps li").all_inner_texts()
    assert [s.split(": ")[0] for s in steps] == ["Compensate", "Acknowledge"]
    assert steps[0].endswith("— will be compensated")
    assert serious_violations(page) == []
    if width == 375:
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.get_by_role("button", name="Yes: undo these 2 steps").click()
    headline = page.locator("#headline")
    headline.wait_for()
    assert headline.inner_text() == (
        "1 of 2 taken back (1 compensated, leaving a trace) · 1 needs your attention · "
        "1 other step kept as it is"
    )
    assert [p.split("?")[-1] for p in posts if "/undo" in p] == ["steps=s2"]
    assert page.locator(".steps-out li").evaluate_all("els => els.map(e => e.dataset.stepId)") == [
        "s2", "s3",
    ]  # fmt: skip
    assert live.world.crm["r1"]["stage"] == "won", "the kept step stands"
    assert live.world.charges["ch_1"]["refunded"] == 5000
    assert f"Kept as it is: {said['s1']}." in page.locator(".kept").inner_text()
    assert serious_violations(page) == []
    page.get_by_role("button", name="Undo the rest…").click()
    page.get_by_role("button", name="Yes: undo the rest").click()
    deadline = time.monotonic() + 30
    while (
        "kept as" in headline.inner_text()
        or not page.locator(".steps-out li[data-step-id='s1']").count()
    ):
        assert time.monotonic() < deadline, headline.inner_text()
        time.sleep(0.1)
    assert live.world.crm["r1"]["stage"] == "lead"
    refunds = [c for c in live.world.calls if c[:2] == ("pay.refund", "compensate")]
    assert len(refunds) == 1, "the charge is refunded once"
    rev = httpx.get(f"{live.url}/sagas/{sid}", headers=live.auth()).json()["reversal"]
    body = httpx.get(f"{live.url}/reversals/{rev['reversal_id']}", headers=live.auth()).json()
    assert body["report"]["selection"] is None
    assert [s["step_id"] for s in body["report"]["steps"]] == ["s1", "s2", "s3"]
    context.close()
