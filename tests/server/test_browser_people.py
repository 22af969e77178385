"""Issue 26 items 2 and 7 on the web page, in Debian's Chromium (Playwright), over the demo's own
scene (the sandbox world, an agent actor, money, a delivered email):

- words for people: no ``saga_…``/``rev_…`` ids, step ids or tool names in the visible text
  (they sit in a closed "Details for engineers" fold), times in the viewer's time zone (never
  raw ISO), money formatted, "compensated with <tool>" said as what undo did;
- one clock: a sandbox vendor's timestamp is labelled as the vendor's, never mixed unlabelled
  with the engine's times;
- the list: each request not yet undone says what undo would do (``Preview.would``), and a
  request undone shows the headline as it stands now — the same as its page — after a person
  resolves a manual action (the stored headline went stale);
- the standalone HTML report: no ids outside its fold, what a person must do first.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from server_harness import serving

import amends
from amends.server import ServerSettings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ZONE = "America/New_York"  # not the server's (UTC): the page must convert


@dataclass
class Demo:
    url: str
    db: str
    done: str
    """The demo's saga, undone (a manual action with a draft, residue)."""
    ready: str
    """A second saga, not undone yet."""


def _start(db: str) -> tuple[str, str]:
    from amends.sandbox.demo import run_demo
    from amends.server.demo import seed_ready_saga

    result = run_demo(db)
    return result.saga_id, asyncio.run(seed_ready_saga(db))


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    from amends.sandbox import demo_catalog

    db = str(tmp_path / "demo.db")
    ids: list[str] = []
    # its own thread: Playwright's sync API may already own this thread's event loop
    worker = threading.Thread(target=lambda: ids.extend(_start(db)))
    worker.start()
    worker.join(120)
    assert len(ids) == 2, "the demo scene did not run"
    catalog = demo_catalog(db)
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(no_auth=True))
    with serving(app) as url:
        yield Demo(url, db, ids[0], ids[1])


def _page(browser: Any, width: int = 1280, height: int = 900) -> Any:
    context = browser.new_context(
        viewport={"width": width, "height": height}, timezone_id=ZONE, locale="en-US"
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    return page


def _visible(page: Any) -> str:
    """What a person reads: the page's rendered text (a closed <details> fold is not rendered)."""
    return str(page.evaluate("document.body.innerText"))


def _local(ts: float) -> str:
    """``ts`` as Chromium's Intl writes it for en-US in :data:`ZONE` (the page's format)."""
    when = datetime.fromtimestamp(ts, ZoneInfo(ZONE))
    return f"{when:%b} {when.day}, {when:%Y}, {when:%I:%M %p} {when:%Z}"


ENGINEER_TEXT = [
    re.compile(r"\bsaga_[0-9a-f]+"),
    re.compile(r"\brev_[0-9a-f]+"),
    re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d"),  # raw ISO timestamps
    re.compile(r"\b\d{4}-\d\d-\d\d\b"),  # raw ISO dates ("settles 2026-12-10": 10 Dec 2026)
    # a time not in the viewer's zone (a sandbox vendor's, labelled as such, is the vendor's)
    # an event's own time in a sentence ("10 Dec 2026 16:00 UTC") names its zone
    re.compile(
        r"(?<!\d [A-Z][a-z]{2} \d{4} )\d\d:\d\d(:\d\d)? UTC(?! by the sandbox vendor's clock)"
    ),
    re.compile(r"\bcents\b"),
    re.compile(r"\b(reverted|compensated|cancelled) with [a-z_]+\.[a-z_]+"),
    re.compile(r"\bagent:[a-z]"),
]


def _engineer_text(text: str, patterns: list[re.Pattern[str]] = ENGINEER_TEXT) -> list[str]:
    return [m.group(0) for p in patterns for m in p.finditer(text)]


def _saga(demo: Demo, sid: str) -> dict[str, Any]:
    return dict(httpx.get(f"{demo.url}/sagas/{sid}", timeout=30).json())


def _current_report(demo: Demo) -> amends.UndoReport:
    """The demo saga's report as it stands now (the person's follow-up handled one action)."""
    from amends.sandbox import demo_catalog

    async def read() -> amends.UndoReport | None:
        engine = amends.Engine(demo_catalog(demo.db), log=demo.db)
        try:
            return await engine.report(demo.done)
        finally:
            await engine.close()

    got: list[amends.UndoReport | None] = []
    worker = threading.Thread(target=lambda: got.append(asyncio.run(read())))
    worker.start()
    worker.join(60)
    assert got and got[0] is not None
    return got[0]


def _report(demo: Demo, sid: str) -> dict[str, Any]:
    rid = _saga(demo, sid)["reversal"]["reversal_id"]
    return dict(httpx.get(f"{demo.url}/reversals/{rid}", timeout=30).json()["report"])


def test_the_saga_page_speaks_to_people_before_and_after_undo(browser: Any, demo: Demo) -> None:
    """Before the fix: "Saga saga_… · completed · 2026-12-03 16:39:29 UTC · asked by
    agent:sales", step ids beside each sentence, "Reversal rev_…", "compensated with
    payments.refund", and an email "delivered at 2026-12-07T09:00:05+00:00" under a saga
    started on another day, unlabelled."""
    page = _page(browser)
    ready = _saga(demo, demo.ready)
    page.goto(f"{demo.url}/ui/sagas/{demo.ready}")
    meta = page.locator("#saga-meta").inner_text()
    assert (
        meta
        == f"Done by the agent · started {_local(ready['created_at'])} · asked by the sales agent"
    )
    text = _visible(page)
    assert _engineer_text(text) == []
    assert "Charge 2,400.00 USD to cus_acme" in text
    assert "crm_plan" not in text and "upgrade_charge" not in text  # step ids
    fold = page.locator("#saga-details")
    assert not fold.evaluate("d => d.open")
    assert demo.ready in fold.text_content() and "upgrade_charge" in fold.text_content()

    done = _saga(demo, demo.done)
    page.goto(f"{demo.url}/ui/sagas/{demo.done}")
    text = _visible(page)
    assert _engineer_text(text) == []
    report = _report(demo, demo.done)
    assert f"Undone {_local(report['finished_at'])}" in text
    steps = page.locator("ul.steps-out li .detail").all_inner_texts()
    assert "Compensated: Refund 12,000.00 USD of charge ch_1" in steps
    # one clock: the vendor's time is said to be the vendor's
    mail = page.locator("li.manual-action", has_text="was delivered").first.inner_text()
    assert "was delivered (7 Dec 2026 09:00 UTC by the sandbox vendor's clock)" in mail
    history = page.locator(".history-list li").first.inner_text()
    assert history == f"{_local(done['created_at'])} — The agent started by the sales agent"
    rev_fold = page.locator("#reversal-details")
    assert report["reversal_id"] in rev_fold.text_content()
    assert "compensated with payments.refund" in rev_fold.text_content()
    page.context.close()


def test_the_list_says_what_undo_would_do_and_the_headline_as_it_stands_now(
    browser: Any, demo: Demo
) -> None:
    """Before the fix: a request not yet undone showed only "completed", and after a person
    resolved a manual action the list (and GET /sagas) kept the stored headline "… · 1 needs
    your attention" while the request's page said "… · 1 handled by a person"."""
    page = _page(browser)
    page.goto(f"{demo.url}/")
    assert page.locator("h1").inner_text() == "Requests the agent ran"
    ready = page.locator(f"li[data-saga-id='{demo.ready}'] .would")
    assert ready.inner_text() == "Undo would: revert 2 · compensate 2 · ask a person about 1"
    preview = httpx.get(f"{demo.url}/sagas/{demo.ready}/preview", timeout=30).json()
    assert ready.inner_text() == f"Undo would: {preview['would']}"  # the one count
    assert _engineer_text(_visible(page)) == []

    # the demo's person already sent one draft; the other manual action is resolved here
    page.goto(f"{demo.url}/ui/sagas/{demo.done}")
    before = page.locator("#headline").inner_text()
    assert before.endswith("· 3 need your attention"), before
    action = page.locator("li.manual-action:has(button.resolve)").first
    action.get_by_role("button", name="Mark handled…").click()
    action.get_by_label("What did you do or check?").fill("called the buyer")
    action.get_by_role("button", name=re.compile("^Confirm: mark handled as")).click()
    page.locator("#headline", has_text="2 need your attention").wait_for()
    page.reload()
    shown = page.locator("#headline").inner_text()
    assert shown.endswith("· 2 handled by a person · 2 need your attention"), shown
    page.goto(f"{demo.url}/")
    listed = page.locator(f"li[data-saga-id='{demo.done}'] .headline-now").inner_text()
    assert listed == shown
    api = httpx.get(f"{demo.url}/sagas", timeout=30).json()["sagas"]
    assert [s["reversal"]["headline"] for s in api if s["saga_id"] == demo.done] == [shown]
    assert _saga(demo, demo.done)["reversal"]["headline"] == shown
    page.context.close()


def test_the_standalone_report_puts_the_person_first_and_ids_in_the_fold(
    browser: Any, demo: Demo, tmp_path: Path
) -> None:
    report = _current_report(demo)
    out = tmp_path / "report.html"
    out.write_text(report.render("html"))
    page = _page(browser, 375, 667)
    page.goto(out.as_uri())
    heads = page.locator("h2").all_inner_texts()
    assert heads == ["Needs a person", "What remains", "Steps"]
    text = _visible(page)
    # a file has no viewer's zone: its times say UTC (rule: the report states the zone)
    assert _engineer_text(text, [p for p in ENGINEER_TEXT if "UTC" not in p.pattern]) == []
    assert re.search(
        r"handled by dana@example.com at \d{1,2} [A-Z][a-z]{2} \d{4} \d\d:\d\d UTC: "
        r"sent the follow-up message\n",
        text,
    )
    assert "follow-up email_buyer+f1 of reversal" in page.locator("details").text_content()
    assert "Compensated: Refund 12,000.00 USD of charge ch_1" in text
    assert report.reversal_id in page.locator("details").text_content()
    page.context.close()
