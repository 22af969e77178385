"""Rule 12: a record of the log that cannot be read is an altered record, never a traceback.

Someone with write access to the log replaces a record's text with something amends never
writes: not JSON, a list, a number, an object without the fields of its kind. Before, the
decoder's own error escaped: ``amends doctor --verify`` itself crashed (``AttributeError:
'str' object has no attribute 'get'``), ``preview`` crashed with ``KeyError: 'by'`` on a forged
resolution, ``show --history``, the HTTP saga page, its listing and ``/metrics`` answered with a
traceback or a 500. Now verification reports the saga as edited, every read of that saga
raises :class:`amends.HistoryAlteredError` (HTTP ``409 history_does_not_verify``), the listing
and the metrics still serve every other saga, and no refund is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_tamper_evidence import Psp, _charge, _tamper, psp_catalog

import amends
from amends.cli.ops import diagnose

BAD_TEXTS = ["not json", "[]", '"x"', "7", "null", "{}"]
"""Texts amends never writes as a record."""

KINDS = [
    "saga.started",
    "step.intent",
    "step.done",
    "reversal.requested",
    "compensation.compensated",
    "reversal.done",
]


@pytest.fixture
async def undone(log_url: str) -> AsyncIterator[tuple[amends.Engine, Psp, str]]:
    """A charged saga ``paid`` (undone: refunded once) and an intact one ``other``."""
    psp = Psp()
    url = log_url.removeprefix("sqlite:///")
    engine = amends.Engine(psp_catalog(psp), log=url)
    await _charge(engine, "paid")
    await _charge(engine, "other")
    assert (await engine.undo("paid")).status == "fully_reversed"
    yield engine, psp, url
    await engine.close()


async def _replace(engine: amends.Engine, kind: str, text: str) -> None:
    rows = await engine.log.db.read(  # type: ignore[attr-defined]
        lambda tx: tx.execute(
            "SELECT rec_id FROM records WHERE saga_id='paid' AND kind=? ORDER BY rec_id",
            (kind,),
        )
    )
    assert rows, kind
    await _tamper(engine, ("UPDATE records SET body=? WHERE rec_id=?", (text, rows[0][0])))


async def _refused(call: Any) -> str:
    """The name of the error ``call`` raised: an amends error, never the decoder's."""
    try:
        await call
    except amends.AmendsError as exc:
        return type(exc).__name__
    return "answered"


@pytest.mark.parametrize("text", BAD_TEXTS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_record_that_cannot_be_read_is_reported_as_altered_and_nothing_acts_on_it(
    undone: tuple[amends.Engine, Psp, str], kind: str, text: str
) -> None:
    engine, psp, url = undone
    await _replace(engine, kind, text)
    # the check reports the saga edited (it never raises), and only that saga
    problems = await engine.log.verify()
    assert problems and {p.saga_id for p in problems} <= {"paid", "(log)"}, problems
    assert "paid" in {p.saga_id for p in problems}
    assert await engine.log.verify("other") == []
    findings = [f.what for f in await diagnose(url, verify=True) if f.level == "action"]
    assert any("paid" in f for f in findings), findings
    # nothing reads it into an action or a report; each refusal is an amends error
    for call in (
        lambda: engine.undo("paid"),
        lambda: engine.preview("paid"),
        lambda: engine.report("paid"),
        lambda: engine.resolve("paid", "s1", by="alice", note="checked"),
        lambda: engine.resume("paid"),
    ):
        assert await _refused(call()) in {"HistoryAlteredError", "LogCorruptedError"}
    assert psp.refunds == ["ch_1"]  # never sent again
    # the other saga is still served, listed and undone
    listed = {s.saga_id for s in await engine.log.list_sagas()}
    assert listed == {"paid", "other"}
    assert (await engine.undo("other")).status == "fully_reversed"
    assert psp.refunds == ["ch_1", "ch_2"]


@pytest.mark.parametrize("text", ["[]", '{"by": 1}', "{}"])
async def test_a_forged_resolution_record_never_crashes_preview_or_history(
    undone: tuple[amends.Engine, Psp, str], text: str
) -> None:
    """A ``step.resolved`` record inserted by hand (without the key): preview once raised
    ``KeyError: 'by'`` before any check ran."""
    engine, psp, _ = undone
    last = await engine.log.db.read(  # type: ignore[attr-defined]
        lambda tx: tx.execute(
            "SELECT hash FROM records WHERE saga_id='paid' ORDER BY rec_id DESC LIMIT 1"
        )
    )
    await _tamper(
        engine,
        (
            "INSERT INTO records (saga_id, step_id, reversal_id, kind, phase, at, body, "
            "prev_hash, hash) VALUES ('paid', 's1', NULL, 'step.resolved', 'r', 1.0, ?, ?, 'f')",
            (text, last[0][0]),
        ),
    )
    for call in (lambda: engine.preview("paid"), lambda: engine.undo("paid")):
        with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
            await call()
    assert await _refused(engine.log.events("paid")) in {"answered", "HistoryAlteredError"}
    assert [p.saga_id for p in await engine.log.verify("paid")] == ["paid"]
    assert psp.refunds == ["ch_1"]


async def test_the_http_api_marks_an_unreadable_saga_and_keeps_serving_the_others(
    undone: tuple[amends.Engine, Psp, str], log_url: str
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    engine, psp, url = undone
    await _replace(engine, "compensation.compensated", "[]")
    app = create_app(lambda: amends.Engine(psp_catalog(psp), log=url), ServerSettings(no_auth=True))
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
        listing = client.get("/sagas")
        assert listing.status_code == 200, listing.text
        assert {s["saga_id"] for s in listing.json()["sagas"]} == {"paid", "other"}
        page = client.get("/sagas/paid")
        assert page.status_code == 409
        assert page.json()["error"] == "history_does_not_verify"
        assert "this saga's history was altered" in page.json()["detail"]
        undo = client.post("/sagas/paid/undo")
        assert (undo.status_code, undo.json()["error"]) == (409, "history_does_not_verify")
        metrics = client.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        assert client.get("/").status_code == 200
        assert client.get("/sagas/other").status_code == 200
    assert psp.refunds == ["ch_1"]


async def test_recover_reports_an_unreadable_running_reversal_and_sends_nothing(
    undone: tuple[amends.Engine, Psp, str],
) -> None:
    """A reversal made to look unfinished (running, lease expired) whose latest compensation
    record cannot be read: ``recover`` once crashed on it (stopping every other reversal's
    recovery); now it lists the saga as not resumed, because its history was altered."""
    engine, psp, _ = undone
    await _replace(engine, "compensation.compensated", "[]")
    await _tamper(
        engine, ("UPDATE reversals SET state='running', lease_until=0 WHERE saga_id='paid'", ())
    )
    got = await engine.recover()
    assert [saga_id for saga_id, _ in got.failed] == ["paid"]
    assert "this saga's history was altered" in got.failed[0][1]
    assert got.resumed == ()
    assert psp.refunds == ["ch_1"]


@pytest.mark.parametrize(
    ("table", "column"),
    [("sagas", "meta"), ("reversals", "budget"), ("reversals", "report")],
)
async def test_an_unreadable_saga_or_reversal_row_hides_no_other_saga_from_the_listing(
    undone: tuple[amends.Engine, Psp, str], table: str, column: str
) -> None:
    """A saga row's ``meta`` or a reversal row's ``budget``/``report`` edited into text that is
    not JSON: the listing (``amends show``, ``GET /sagas``, the page) failed for every saga;
    it now lists them all, and the altered saga is refused where it would be acted on."""
    engine, psp, _ = undone
    await _tamper(engine, (f"UPDATE {table} SET {column}=? WHERE saga_id='paid'", ("{nope",)))
    listed = {s.saga_id for s in await engine.log.list_sagas()}
    assert listed == {"paid", "other"}
    assert "paid" in {p.saga_id for p in await engine.log.verify()}
    assert await _refused(engine.undo("paid")) == "HistoryAlteredError"
    assert psp.refunds == ["ch_1"]


async def _forge_resolution(engine: amends.Engine) -> None:
    """Append a ``step.resolved`` record without its fields to ``paid`` (its head moves)."""
    last = await engine.log.db.read(  # type: ignore[attr-defined]
        lambda tx: tx.execute(
            "SELECT hash FROM records WHERE saga_id='paid' ORDER BY rec_id DESC LIMIT 1"
        )
    )
    await _tamper(
        engine,
        (
            "INSERT INTO records (saga_id, step_id, reversal_id, kind, phase, at, body, "
            "prev_hash, hash) VALUES ('paid', 's1', NULL, 'step.resolved', 'r', 1.0, '{}', ?, "
            "'f')",
            (last[0][0],),
        ),
    )


@pytest.mark.parametrize(
    "alter",
    [
        "step.done",
        "compensation.compensated",
        "reversal.done",
        "stored report",
        "resolution appended later",
    ],
)
async def test_metrics_altered_after_the_last_check_number_that_saga_and_count_the_others(
    undone: tuple[amends.Engine, Psp, str], alter: str
) -> None:
    """A record altered where the server's hash-chain check has not looked (here the periodic
    check is off; by default it runs every 5 minutes): before a server starts, or appended
    while it runs. ``/metrics`` once answered 409 for every saga, a dashboard blinded by one
    edit; now the altered saga is numbered unverified and the intact one still counted."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    engine, psp, url = undone
    assert (await engine.undo("other")).status == "fully_reversed"
    if alter == "stored report":
        await _tamper(engine, ("UPDATE reversals SET report='[]' WHERE saga_id='paid'", ()))
    elif alter != "resolution appended later":
        await _replace(engine, alter, "[]")
    app = create_app(
        lambda: amends.Engine(psp_catalog(psp), log=url),
        ServerSettings(no_auth=True, verify_interval=0),
    )
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
        if alter == "resolution appended later":
            first = client.get("/metrics")
            assert first.status_code == 200, first.text
            assert 'amends_reversals{outcome="fully_reversed"} 2' in first.text
            await _forge_resolution(engine)
        got = client.get("/metrics")
    assert got.status_code == 200, got.text
    assert [
        line
        for line in got.text.splitlines()
        if line.startswith(("amends_reversals{", "amends_reversal_steps", "amends_sagas_unv"))
    ] == [
        'amends_reversals{outcome="fully_reversed"} 1',
        'amends_reversals{outcome="partially_reversed"} 0',
        'amends_reversals{outcome="cannot_undo"} 0',
        'amends_reversal_steps{state="compensated",tool="pay.charge"} 1',
        "amends_sagas_unverified 1",
    ]
    assert psp.refunds == ["ch_1", "ch_2"]


async def test_a_stored_report_altered_to_name_an_unwritable_tool_never_fails_the_scrape(
    undone: tuple[amends.Engine, Psp, str],
) -> None:
    """A report whose tool name holds a lone surrogate (valid JSON, ``"\\ud800"``) decodes, so
    it is counted until the hash-chain check finds it; its label could not be encoded as UTF-8
    and ``/metrics`` answered 500 for everyone. The label shows it as a visible escape."""
    pytest.importorskip("fastapi")
    import json

    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    engine, psp, url = undone
    rows = await engine.log.db.read(  # type: ignore[attr-defined]
        lambda tx: tx.execute("SELECT report FROM reversals WHERE saga_id='paid'")
    )
    report = json.loads(rows[0][0])
    report["steps"][0]["tool"] = "pay.charge\ud800"
    await _tamper(
        engine, ("UPDATE reversals SET report=? WHERE saga_id='paid'", (json.dumps(report),))
    )
    app = create_app(
        lambda: amends.Engine(psp_catalog(psp), log=url),
        ServerSettings(no_auth=True, verify_interval=0),
    )
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
        got = client.get("/metrics")
    assert got.status_code == 200, got.text
    assert [line for line in got.text.splitlines() if line.startswith("amends_reversal_steps")] == [
        'amends_reversal_steps{state="compensated",tool="pay.charge\\\\ud800"} 1'
    ]
