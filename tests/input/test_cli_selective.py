"""Issue 27 in the CLI: `amends undo SAGA --steps s2` / `--since s1`, with `--dry-run`; bad
selections are refused with the fix and leave the log's rows unchanged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from input_tools import CATALOG, SPEC, WORLD

import amends
from amends.cli import main

Rows = Callable[[str], list[str]]


@pytest.fixture(autouse=True)
def _allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
async def deal(tmp_path: Path) -> tuple[str, str]:
    """s1 wins r1; s2 charges c1; s3 writes the charge id into r2; s4 mails."""
    db = str(tmp_path / "sel.db")
    WORLD.crm["r1"] = {"stage": "lead", "owner": "ann", "version": 1}
    WORLD.crm["r2"] = {"stage": "lead", "charge": None, "version": 1}
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga("Close the ACME deal") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        ch = saga.call("pay.charge", customer="c1", cents=5000)
        saga.call("crm.update_field", record_id="r2", field="charge", value=ch["id"])
        saga.call("mail.send", to="bob@acme.test", subject="Won")
    await engine.close()
    return db, saga.id


async def test_undo_steps_takes_back_the_charge_and_keeps_the_rest(
    deal: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db, sid = deal
    charge = WORLD.crm["r2"]["charge"]
    before = rows(db)
    code = await asyncio.to_thread(
        main, ["undo", sid, "--db", db, "--steps", "s2", "--dry-run", "--json"]
    )
    preview = json.loads(capsys.readouterr().out)
    assert code == 0 and rows(db) == before
    assert [s["step_id"] for s in preview["steps"]] == ["s2", "s3"]
    assert preview["selection"]["added"][0]["reason"] == (
        f"undoing s2 (pay.charge) also undoes s3 (crm.update_field): it used s2's result "
        f"({charge!r})"
    )
    code = await asyncio.to_thread(main, ["undo", sid, "--db", db, "--steps", "s2"])
    out = capsys.readouterr().out
    assert code == 0  # every selected effect neutralised (partially: the refund settles later)
    assert "Selected: s2 and what depends on it" in out
    assert "+ s3: undoing s2 (pay.charge) also undoes s3" in out
    assert "kept as they are: s1, s4" in out
    assert "2 other steps kept as they are" in out
    assert WORLD.charges[charge]["refunded"] == 5000
    assert WORLD.crm["r2"]["charge"] is None and WORLD.crm["r1"]["stage"] == "won"
    code = await asyncio.to_thread(main, ["undo", sid, "--db", db, "--steps", "s2"])
    assert code == 0  # the same selection again: its report, announced as such
    assert "Already undone at " in capsys.readouterr().out
    code = await asyncio.to_thread(main, ["undo", sid, "--db", db, "--since", "s3"])
    assert "Already undone" not in capsys.readouterr().out  # it extends the reversal now
    code = await asyncio.to_thread(main, ["undo", sid, "--db", db, "--since", "s3", "--json"])
    later = json.loads(capsys.readouterr().out)
    assert code == 1  # the email stands: a person must follow up
    assert [s["step_id"] for s in later["steps"]] == ["s2", "s3", "s4"]
    assert later["selection"]["kept"] == ["s1"]
    assert WORLD.charges[charge]["refunded"] == 5000  # never refunded twice


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--steps", "s9"], "has no step 's9'; its steps are s1, s2, s3, s4"),
        (["--since", "s4"], "nothing to undo after 's4': it is the last step"),
        (["--steps", ","], "names no step; e.g. --steps s3,s5"),
        (["--steps", "s2", "--continue"], "--steps and --continue exclude each other"),
        (["--since", "s1", "--steps", "s2"], "give steps= or since=, not both"),
    ],
)
async def test_a_bad_selection_is_refused_and_leaves_the_log_unchanged(
    deal: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    words: str,
) -> None:
    db, sid = deal
    before = rows(db)
    code = await asyncio.to_thread(main, ["undo", sid, "--db", db, *argv])
    captured = capsys.readouterr()
    assert code == 2
    assert words in captured.err
    assert "Traceback" not in captured.err
    assert rows(db) == before
