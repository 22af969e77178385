"""What a person copies from the terminal runs, and what they read is in words (issue 26 items
1-3), at 80 columns, for a saga of a new user's own project (``paste_tools``): a setting, a
lookup nobody declared, a reversible tool that records no expectation; the log in a directory
whose name has a space.

Before: at 80 columns rich broke a printed command over two lines (``... s2 --note`` / ``'what
you did' --db ...``), and a copy of it ran without its note or its log; ``show`` without an
allowed catalog printed ``amends undo ...`` commands that every paste refused (exit 2) and
listed the undeclared lookup as ``irreversible``; the preview said "needs review: not needed" for
the contract violation; a drift to an empty value read "found None".
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

import amends
from amends.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import paste_tools

SPEC = "paste_tools:CATALOG"
SAGA = "saga_g3paste"
VIOLATION = (
    "amends cannot check this step safely: its tool does not say how to see whether someone "
    "changed it since, so it is not undone blindly; a person must check it"
)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The saga, logged in ``my logs/amends.db``; the commands run from another directory."""
    for name in [k for k in os.environ if k.startswith("AMENDS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "80")
    (tmp_path / "my logs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    path = str(tmp_path / "my logs" / "amends.db")
    paste_tools.reset()

    async def run() -> None:
        engine = amends.Engine(paste_tools.CATALOG, log=path)
        try:
            async with engine.saga("Turn on the beta", saga_id=SAGA, actor="agent:ops") as saga:
                saga.call("settings.set", key="plan", value="gold")
                saga.call("lookup.weather", city="Paris")
                saga.call("settings.flag", key="beta")
        finally:
            await engine.close()

    asyncio.run(run())
    return path


def _out(argv: list[str], capsys: pytest.CaptureFixture[str], rc: int) -> str:
    capsys.readouterr()
    assert main(argv) == rc, capsys.readouterr()
    return capsys.readouterr().out


def _commands(out: str) -> list[str]:
    """Each ``amends ...`` command in ``out``, as a person copies it: to the end of its line."""
    return [m.group(1) for m in _COMMAND.finditer(out)]


_COMMAND = re.compile(
    r"(?:^|: |^\s+)(amends (?:show|undo|resolve|doctor|recover) [^\n`]*?)\s*$", re.M
)


def test_a_hint_under_a_report_is_one_line_at_80_columns_and_runs_as_pasted(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _out(["undo", SAGA, "--db", db, "--catalog", SPEC], capsys, 1)
    where = shlex.quote(db)
    for step in ("s2", "s3"):
        hint = f"amends resolve {SAGA} {step} --note 'what you did' --db {where} --catalog {SPEC}"
        assert f"    open — when done: {hint}" in out.splitlines(), out
    resolve = next(c for c in _commands(out) if " s2 " in c)
    assert resolve.endswith(f"--db {where} --catalog {SPEC}"), resolve
    # pasted: the shell's words, run here; nothing waited for s2, so no continue command (it
    # was printed, and its paste answered "nothing to continue", exit 2)
    printed = _out(shlex.split(resolve)[1:], capsys, 0)
    assert " ".join(printed.split()) == (
        f"step s2 of saga {SAGA}: handled by {_me()}. No step waited for it: the reversal has "
        f"nothing to continue."
    ), printed
    shown = _out(["show", SAGA, "--db", db], capsys, 0)
    assert f"The event log: amends show {SAGA} --history --db {where}" in shown.splitlines()
    assert "handled by " in shown and ": what you did" in shown, shown


def _me() -> str:
    import getpass

    return getpass.getuser()


def test_a_resolution_that_unblocks_a_step_prints_a_continue_command_that_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """s1's inverse waits for s2's, which amends cannot check: s1 is blocked until a person
    resolves s2. The resolve command printed under the report carries --catalog, and so does
    the continue command it prints; pasted, it takes s1 back."""
    for name in [k for k in os.environ if k.startswith("AMENDS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    paste_tools.reset()
    db = "blocked log.db"

    async def run() -> None:
        engine = amends.Engine(paste_tools.CATALOG, log=db)
        try:
            async with engine.saga("Turn on the beta", saga_id=SAGA) as saga:
                a = saga.call("settings.set", key="plan", value="gold")
                saga.call("settings.flag", key="beta", after=[a])
        finally:
            await engine.close()

    asyncio.run(run())
    out = _out(["undo", SAGA, "--db", db, "--catalog", SPEC], capsys, 1)
    assert re.search(r"^  s1 Acknowledge blocked ", out, re.M), out
    (resolve,) = [c for c in _commands(out) if " s2 " in c]
    assert resolve == (
        f"amends resolve {SAGA} s2 --note 'what you did' --db 'blocked log.db' --catalog {SPEC}"
    )
    printed = _out(shlex.split(resolve)[1:], capsys, 0)
    (again,) = _commands(printed)
    assert again == f"amends undo {SAGA} --continue --db 'blocked log.db' --catalog {SPEC}"
    assert "(it would attempt s1)" in printed, printed
    assert paste_tools.SETTINGS["plan"] == "gold"
    continued = _out(shlex.split(again)[1:], capsys, 1)  # s2 stands, handled by a person
    assert continued.startswith("1 of 2 taken back · 1 handled by a person — cannot_undo")
    assert re.search(r"^  s1 Revert +reverted ", continued, re.M), continued
    assert paste_tools.SETTINGS["plan"] is None  # taken back
    _out(shlex.split(again)[1:], capsys, 2)  # and now nothing is left to continue


def test_show_without_a_catalog_prints_no_command_that_would_fail_and_says_not_declared(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _out(["show", SAGA, "--db", db], capsys, 0)
    assert re.search(r"^  s2 not declared +done lookup\.weather\(city='Paris'\)", out, re.M), out
    assert "irreversible" not in out, out
    assert "amends undo" not in out, out  # refused without a catalog: exit 2 when pasted
    assert "(this log names 'paste_tools:CATALOG': check it is yours)" in " ".join(out.split())
    assert _commands(out) == [f"amends show {SAGA} --db {shlex.quote(db)}"], out
    assert paste_tools.SETTINGS == {"plan": "gold", "flag:beta": True}
    # the one command printed runs as printed, and with the catalog allowed it says what undo
    # would do, with commands that run
    os.environ["AMENDS_CATALOGS"] = SPEC
    try:
        shown = _out(shlex.split(_commands(out)[0])[1:], capsys, 0)
        assert "Undo would: revert 1 · ask a person about 2" in shown, shown
        for command in _commands(shown):
            assert command.startswith(f"amends undo {SAGA} "), shown
        dry = _out(shlex.split(_commands(shown)[0])[1:], capsys, 0)
        assert "What undo would do now" in dry, dry
    finally:
        del os.environ["AMENDS_CATALOGS"]


def test_the_preview_of_a_contract_violation_says_why_it_needs_review(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def preview() -> amends.Preview:
        engine = amends.Engine(paste_tools.CATALOG, log=db)
        try:
            return await engine.preview(SAGA)
        finally:
            await engine.close()

    steps = {p.step_id: p for p in asyncio.run(preview()).steps}
    assert steps["s3"].needs_review and steps["s3"].predicted == "drifted"
    assert steps["s3"].check == VIOLATION, steps["s3"]
    out = _out(["undo", SAGA, "--db", db, "--catalog", SPEC, "--dry-run"], capsys, 0)
    assert "not needed" not in out, out
    flat = " ".join(out.split())
    assert f"s3 Review Flag beta undo: settings.unflag(key='beta') needs review: {VIOLATION}" in (
        flat
    ), out
    assert paste_tools.SETTINGS == {"plan": "gold", "flag:beta": True}  # probes only


@pytest.mark.parametrize(
    ("now", "detail"),
    [
        (None, "expected 'gold', found an empty value"),
        ("", "expected 'gold', found ''"),
        ("silver", "expected 'gold', found 'silver'"),
    ],
)
def test_a_drift_is_said_in_words_never_as_python_none(
    db: str, now: str | None, detail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paste_tools.SETTINGS["plan"] = now  # a person edits the world between forward and undo
    out = _out(["undo", SAGA, "--db", db, "--catalog", SPEC, "--json"], capsys, 1)
    report = amends.UndoReport.from_dict(json.loads(out))
    step = report.step("s1")
    assert step.state == "drifted"
    assert step.detail == f"someone changed it since the agent acted: {detail}; left as it is"
    (action,) = [m for m in report.manual_actions if m.step_id == "s1"]
    assert detail in (action.draft or "") and "None" not in (action.draft or ""), action
    assert paste_tools.SETTINGS["plan"] == now  # rule 4: never overwritten
