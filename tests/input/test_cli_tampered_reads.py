"""Rule 12 in the CLI's read commands: a saga whose log was edited (its hash chain no longer
verifies) is never shown as the record. ``amends show`` says "history does not verify", names
the problem and exits 1 (``--json``: ``integrity`` and ``report: null``); ``amends follow-up
list`` refuses it by name. Nothing is written either way."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable

import pytest
from input_tools import SPEC

import amends
from amends.cli import main


@pytest.fixture(autouse=True)
def _allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)


async def _undone_then_forged(db: str, saga_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Undo the saga (the email stays: cannot_undo), then edit its stored report to say
    everything was taken back."""
    assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "cannot_undo"
    conn = sqlite3.connect(db)
    try:
        (raw,) = conn.execute(
            "SELECT report FROM reversals WHERE saga_id = ?", (saga_id,)
        ).fetchone()
        forged = {**json.loads(raw), "status": "fully_reversed", "headline": "Undone 2 of 2"}
        conn.execute(
            "UPDATE reversals SET report = ? WHERE saga_id = ?", (json.dumps(forged), saga_id)
        )
        conn.commit()
    finally:
        conn.close()


async def test_show_of_an_edited_saga_says_its_history_does_not_verify_and_exits_1(
    saga_db: tuple[str, str],
    rows: Callable[[str], list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "200")
    await _undone_then_forged(db, saga_id, capsys)
    before = rows(db)
    code = await asyncio.to_thread(main, ["show", saga_id, "--db", db])
    out = capsys.readouterr().out
    assert code == 1
    assert f"saga {saga_id}: history does not verify" in out
    assert "report mismatch" in out  # the problem is named
    assert "fully_reversed" not in out and "Undone 2 of 2" not in out
    code = await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["integrity"]["verified"] is False
    assert [p["what"] for p in data["integrity"]["problems"]] == ["report mismatch"]
    assert data["reversal"]["report"] is None
    assert "fully_reversed" not in json.dumps(data)
    assert rows(db) == before


async def test_show_of_an_intact_saga_says_it_verifies(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    code = await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["integrity"] == {"verified": True, "problems": []}
    assert amends.SagaRecord.from_dict(data).saga_id == saga_id


async def test_follow_up_list_of_an_edited_saga_is_refused_by_name(
    saga_db: tuple[str, str],
    rows: Callable[[str], list[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, saga_id = saga_db
    await _undone_then_forged(db, saga_id, capsys)
    before = rows(db)
    code = await asyncio.to_thread(main, ["follow-up", "list", saga_id, "--db", db, "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert f"this saga's history was altered: saga {saga_id!r}" in captured.err
    assert "amends will not act on it" in captured.err and "Traceback" not in captured.err
    assert rows(db) == before


async def test_the_saga_list_marks_an_edited_saga_and_never_shows_its_stored_outcome(
    saga_db: tuple[str, str],
    rows: Callable[[str], list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "200")
    await _undone_then_forged(db, saga_id, capsys)
    before = rows(db)
    assert await asyncio.to_thread(main, ["show", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "history does not verify" in out and "fully_reversed" not in out
    assert await asyncio.to_thread(main, ["show", "--db", db, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["integrity"] == {"verified": False}
    assert listed["reversal"]["report"] is None
    assert rows(db) == before
