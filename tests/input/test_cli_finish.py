"""Issue 23 in the CLI: `amends undo --retry`, `--continue` with nothing to continue,
`--allow-missing-tools`, and `amends resolve` (a note, the OS user, never erased, --withdraw)."""

from __future__ import annotations

import asyncio
import getpass
import json
from collections.abc import Callable

import pytest
from input_tools import WORLD

import amends
from amends.cli import main

Rows = Callable[[str], list[str]]


@pytest.fixture(autouse=True)
def allowed_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 12: the CLI loads only a catalog the operator allows, never one a log names."""
    monkeypatch.setenv("AMENDS_CATALOGS", "input_tools:CATALOG")


def cli(*argv: str) -> int:
    return main(list(argv))


async def run(*argv: str) -> int:
    return await asyncio.to_thread(cli, *argv)


async def test_continue_with_nothing_to_continue_says_so_exits_2_and_writes_nothing(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: it ran silently (and without a reversal it undid the saga)."""
    db, saga_id = saga_db
    before = rows(db)
    assert await run("undo", saga_id, "--db", db, "--continue") == 2
    err = capsys.readouterr().err
    assert f"nothing to continue: saga {saga_id} has no reversal yet; undo it first" in err
    assert rows(db) == before and WORLD.crm["r1"]["stage"] == "won"
    assert await run("undo", saga_id, "--db", db) == 1  # the email stands
    capsys.readouterr()
    before = rows(db)
    assert await run("undo", saga_id, "--db", db, "--continue") == 2
    assert "nothing to continue: saga" in capsys.readouterr().err
    assert rows(db) == before


async def test_retry_after_the_cause_is_fixed_undoes_the_failed_step_with_cumulative_costs(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "1000")
    WORLD.faults["crm.update_field"] = [amends.PermanentError("vendor API key expired")]
    assert await run("undo", saga_id, "--db", db) == 1
    out = capsys.readouterr().out
    # issue 26 item 3: the hint carries this log, so it runs as printed
    assert f"once its cause is fixed: amends undo {saga_id} --retry s1 --db {db}\n" in out
    assert await run("undo", saga_id, "--db", db, "--retry", "s2") == 2  # acknowledged, not failed
    assert "is acknowledged, not failed" in capsys.readouterr().err
    assert await run("undo", saga_id, "--db", db, "--retry", "s1", "--json") == 1  # mail stands
    report = json.loads(capsys.readouterr().out)
    states = {s["step_id"]: s["state"] for s in report["steps"]}
    assert states == {"s1": "reverted", "s2": "acknowledged"}
    assert WORLD.crm["r1"]["stage"] == "lead"
    assert [r["tool_calls"] for r in report["runs"]] == [2, 2]
    assert report["tool_calls"] == 4 and report["continuations"] == 1


async def test_resolve_needs_a_note_records_the_os_user_keeps_the_first_and_can_be_withdrawn(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    assert await run("undo", saga_id, "--db", db) == 1
    capsys.readouterr()
    before = rows(db)
    assert await run("resolve", saga_id, "s1", "--db", db, "--note", "x") == 2
    assert "is reverted: its effect no longer stands" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --note is required
        cli("resolve", saga_id, "s2", "--db", db)
    capsys.readouterr()
    assert rows(db) == before
    assert (
        await run("resolve", saga_id, "s2", "--db", db, "--note", "sent the draft", "--json") == 0
    )
    first = json.loads(capsys.readouterr().out)
    assert (first["by"], first["note"]) == (getpass.getuser(), "sent the draft")
    argv = ("resolve", saga_id, "s2", "--db", db, "--by", "bob", "--note", "bob called them")
    assert await run(*argv) == 0
    capsys.readouterr()
    assert await run("show", saga_id, "--db", db, "--history") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "handled by bob at " in out and f"handled by {getpass.getuser()} at " in out
    assert out.count("step.resolved") == 2
    argv = ("resolve", saga_id, "s2", "--db", db, "--withdraw", "--note", "not sent after all")
    assert await run(*argv) == 0
    assert "resolution withdrawn by" in capsys.readouterr().out
    assert await run("show", saga_id, "--db", db) == 0
    assert f"open — when done: amends resolve {saga_id} s2" in capsys.readouterr().out


async def test_allow_missing_tools_undoes_the_rest_and_leaves_the_missing_tools_steps_to_a_person(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    before = rows(db)
    argv = ("undo", saga_id, "--db", db, "--catalog", "input_tools:UPGRADED")
    assert await run(*argv) == 2
    assert "--allow-missing-tools" in capsys.readouterr().err
    assert rows(db) == before
    assert await run(*argv, "--allow-missing-tools", "--json") == 1
    captured = capsys.readouterr()
    assert "lacks crm.update_field" in captured.err
    report = json.loads(captured.out)
    s1 = next(s for s in report["steps"] if s["step_id"] == "s1")
    assert s1["state"] == "failed" and s1["detail"].startswith("not attempted: its inverse tool")
    assert WORLD.crm["r1"]["stage"] == "won"  # nothing sent with a tool this catalog lacks
