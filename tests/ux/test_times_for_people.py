"""Issue 26 item 2: dates and times a tool or vendor gave as ISO text reach people in words.

A refund's settle date ("2026-12-10") and an undo window's deadline ("2026-12-10T16:00:00Z")
came straight from the tool into the web page, the standalone report and the CLI report.
"""

from __future__ import annotations

import amends
from amends.server.web import _vendor_when


def test_a_residue_settle_date_reads_as_a_day() -> None:
    assert amends.Residue("Refund", settles_at="2026-12-10").settles_text == "settles 10 Dec 2026"
    assert amends.Residue("Refund").settles_text == "does not settle"
    # a value that is not a date is shown as given, never dropped
    assert amends.Residue("Refund", settles_at="soon").settles_text == "settles soon"


def test_the_reports_say_settle_dates_in_words() -> None:
    refund = {"what": "Refund of 5.00", "parties": ["c1"], "settles_at": "2026-12-10"}
    step = {
        "step_id": "s1",
        "tool": "payments.charge",
        "verb": "Compensate",
        "state": "compensated",
        "detail": "refunded",
        "residue": [refund],
    }
    report = amends.UndoReport.from_dict(
        {"saga_id": "saga_t", "reversal_id": "rev_t", "status": "x", "steps": [step]}
    )
    assert report.residue, report.to_dict()
    for fmt in ("text", "html"):
        shown = report.render(fmt)
        assert "settles 10 Dec 2026" in shown and "2026-12-10" not in shown, fmt


def test_an_undo_windows_deadline_is_a_time_the_page_converts() -> None:
    instant = str(_vendor_when("2026-12-10T16:00:00Z"))
    assert instant.startswith('<time datetime="2026-12-10T16:00:00Z"'), instant
    assert str(_vendor_when("2026-12-10")) == "10 Dec 2026"
    assert str(_vendor_when("2026-12-10T16:00")) == "10 Dec 2026 16:00"  # no zone: none claimed
    assert str(_vendor_when("<b>next week</b>")) == "&lt;b&gt;next week&lt;/b&gt;"
    assert str(_vendor_when(None)) == "—"
