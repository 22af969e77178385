"""Issue 11 item 6: control characters and escape sequences in saga data never reach the tty."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from input_tools import CATALOG, SPEC, WORLD

import amends
from amends.cli import main
from amends.cli._common import safe

EVIL = "\x1b[2J\x1b[H\x1b[32mfully_reversed\x1b[0m\r\x07\u202eevil"


def test_safe_shows_every_control_character_as_a_visible_escape() -> None:
    assert safe(EVIL) == ("\\x1b[2J\\x1b[H\\x1b[32mfully_reversed\\x1b[0m\\r\\x07\\u202eevil")
    assert safe("plain: café, 日本") == "plain: café, 日本"


@pytest.fixture
async def evil_db(tmp_path: Path) -> tuple[str, str]:
    WORLD.crm["r1"] = {"stage": "lead", "owner": "ann", "version": 1}
    db = str(tmp_path / "evil.db")
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga(EVIL, tenant="acme", actor=EVIL) as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value=EVIL)
        saga.call("mail.send", to=EVIL, subject=EVIL, after=[a])
    await engine.close()
    return db, saga.id


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "{saga}"],
        ["show", "{saga}", "--history"],
        ["show"],
        ["undo", "{saga}", "--catalog", SPEC],
        ["undo", "{saga}", "--catalog", SPEC, "--json"],
    ],
)
async def test_cli_output_never_carries_raw_escape_sequences(
    evil_db: tuple[str, str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    db, saga_id = evil_db
    args = [a.replace("{saga}", saga_id) for a in argv] + ["--db", db]
    code = await asyncio.to_thread(main, args)
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    text = out.out + out.err
    for raw in ("\x1b", "\r", "\x07", "\u202e"):
        assert raw not in text
    if "--json" not in argv:
        assert "\\x1b[2J" in text  # shown, visibly, not executed


SEPARATED = "ok\u2028Status: fully_reversed\u2029Needs a person: none \ud800"
"""Line and paragraph separators (a line break to many readers) and a lone surrogate (no
terminal encoding takes one)."""


def test_safe_shows_line_separators_and_lone_surrogates_as_escapes() -> None:
    assert safe(SEPARATED) == "ok\\u2028Status: fully_reversed\\u2029Needs a person: none \\ud800"


@pytest.mark.parametrize(
    "argv",
    [["show", "{saga}"], ["undo", "{saga}", "--catalog", SPEC]],
)
async def test_cli_output_never_carries_separators_or_lone_surrogates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Before: ``amends undo`` printed a step's sentence with an argument's lone surrogate and
    the terminal's encoder raised UnicodeEncodeError (a traceback after the undo was done), and
    a title's U+2028 reached the screen raw; both are escapes now, as in the text report."""
    WORLD.crm["r1"] = {"stage": "lead", "owner": "ann", "version": 1}
    db = str(tmp_path / "sep.db")
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga(SEPARATED[:-2]) as saga:  # a title takes no lone surrogate
        saga.call("crm.update_field", record_id="r1", field="stage", value=SEPARATED)
    await engine.close()
    args = [a.replace("{saga}", saga.id) for a in argv] + ["--db", db]
    code = await asyncio.to_thread(main, args)
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    text = out.out + out.err
    text.encode("utf-8")  # a terminal can print every character of it
    assert not {"\u2028", "\u2029"} & set(text)
    assert "ok\\u2028Status: fully_reversed" in text
