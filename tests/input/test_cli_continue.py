"""Issue 10 in the CLI: `amends undo --dry-run` (the honest preview), `--continue` after the
budget ran out, and `amends resolve` recording who handled a manual action."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from input_tools import SPEC, WORLD

from amends.cli import main


@pytest.fixture(autouse=True)
def _allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21 item 2: the operator allows the saga's catalog (a log's name is never loaded)."""
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)


Rows = Callable[[str], list[str]]


async def test_dry_run_shows_a_drifted_step_as_needing_review_and_dispatches_nothing(
    saga_db: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "200")
    WORLD.human_edit("r1", "stage", "lost")
    before, calls = rows(db), len(WORLD.calls)
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--dry-run", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["needs_review"] == ["s1"]
    assert [c[1] for c in WORLD.calls[calls:]] == ["probe"]  # one read-only probe, nothing else
    assert WORLD.crm["r1"]["stage"] == "lost"
    assert rows(db) == before
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--dry-run"])
    out = capsys.readouterr().out
    assert "Needs a person (2)" in out  # issue 17: grouped as the web page groups it
    assert "s1 Review" in out and "needs review: someone changed it" in out
    assert "1 step(s) need a person's review before undo: s1" in out


async def test_undo_continue_finishes_a_reversal_stopped_by_its_budget(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    code = await asyncio.to_thread(
        main, ["undo", saga_id, "--db", db, "--budget-calls", "0", "--json"]
    )
    first = json.loads(capsys.readouterr().out)
    assert code == 1
    assert first["steps"][0]["state"] == "over_budget"
    assert WORLD.crm["r1"]["stage"] == "won"
    code = await asyncio.to_thread(
        main, ["undo", saga_id, "--db", db, "--continue", "--budget-calls", "20", "--json"]
    )
    second = json.loads(capsys.readouterr().out)
    assert second["reversal_id"] == first["reversal_id"]  # the same reversal, continued
    assert [(s["step_id"], s["state"]) for s in second["steps"]] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert WORLD.crm["r1"]["stage"] == "lead"
    assert code == 1  # the email still stands


async def test_resolve_records_who_handled_a_manual_action(
    saga_db: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "200")
    assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db]) == 1
    assert (
        f"open — when done: amends resolve {saga_id} s2 --note 'what you did'"
        in capsys.readouterr().out
    )
    argv = ["resolve", saga_id, "s2", "--db", db, "--by", "ann", "--note", "sent the draft"]
    assert await asyncio.to_thread(main, [*argv, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["step_id"], res["by"], res["note"]) == ("s2", "ann", "sent the draft")
    monkeypatch.setenv("COLUMNS", "200")
    assert await asyncio.to_thread(main, ["show", saga_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "handled by ann at " in out
    assert "sent the draft" in out
    before = rows(db)
    code = await asyncio.to_thread(
        main, ["resolve", saga_id, "s9", "--db", db, "--by", "ann", "--note", "n"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"saga {saga_id!r} has no step 's9'; its steps are s1, s2" in err
    code = await asyncio.to_thread(
        main, ["resolve", saga_id, "s2", "--db", db, "--by", " ", "--note", "n"]
    )
    assert code == 2
    assert "must name who handled the manual action" in capsys.readouterr().err
    assert rows(db) == before


async def test_continue_never_attempts_a_step_a_person_resolved_until_it_is_withdrawn(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23: `--continue` after `amends resolve` of an over-budget step sent its inverse
    anyway (the person may have done it by hand); now it leaves the step to the person until the
    resolution is withdrawn. (The continuation still runs: the spent budget stopped the email's
    follow-up, issue 27.)"""
    db, saga_id = saga_db
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--budget-calls", "0"])
    assert code == 1
    argv = ["resolve", saga_id, "s1", "--db", db, "--by", "ann", "--note", "set back by hand"]
    assert await asyncio.to_thread(main, argv) == 0
    capsys.readouterr()
    writes = len(WORLD.effects)
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--continue", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    s1 = report["steps"][0]
    assert (s1["step_id"], s1["state"], s1["attempts"]) == ("s1", "over_budget", 0)
    assert report["resolutions"]["s1"]["by"] == "ann"
    assert [m["step_id"] for m in report["manual_actions"] if not m.get("handled")] == ["s2"]
    assert len(WORLD.effects) == writes and WORLD.crm["r1"]["stage"] == "won"  # the person's
    argv = ["resolve", saga_id, "s1", "--db", db, "--withdraw", "--by", "ann", "--note", "no"]
    assert await asyncio.to_thread(main, argv) == 0
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--continue", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [(s["step_id"], s["state"]) for s in report["steps"]] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert WORLD.crm["r1"]["stage"] == "lead"


async def test_a_drift_check_the_crm_could_not_answer_is_retried_from_the_cli(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: a probe that could not reach the CRM left s1 `drifted` and `--retry s1` was
    refused ("not failed"); now the CLI offers the retry and it checks again."""
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "200")
    WORLD.faults["crm.read_field"] = [ConnectionError("connection refused")] * 10
    try:
        assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db]) == 1
    finally:
        WORLD.faults.clear()  # the CRM is back
    out = " ".join(capsys.readouterr().out.split())
    assert "could not check the world before undoing (" in out
    assert f"once its cause is fixed: amends undo {saga_id} --retry s1" in out
    assert WORLD.crm["r1"]["stage"] == "won"
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--retry", "s1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # the email stands
    assert [(s["step_id"], s["state"]) for s in report["steps"]] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert WORLD.crm["r1"]["stage"] == "lead"
