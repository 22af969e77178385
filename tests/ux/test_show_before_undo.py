"""``amends show SAGA`` before undo says what undo would do (issue 26 item 6), at 80 and 120
columns: each step's sentence with the preview's verb and predicted state, and the counts
("Undo would: revert 1 · compensate 1 · ask a person about 1"), from ``engine.preview`` with the
catalog the operator allows (rule 10: never a second opinion; rule 12: never one the log names).
Without an allowed catalog, the steps as before plus one line saying how to see it; after undo,
the report as before.

Before: the steps were listed with no verb, no predicted state and no counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

import amends
from amends.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import show_tools

from screen_lines import fits

SPEC = "show_tools:CATALOG"
SAGA = "saga_g3show"
WIDTHS = (80, 120)


EXPECTED = {
    80: [
        "Close the ACME deal",
        "saga saga_g3show · completed · tenant — · actor — · <time> ·",
        "catalog show_tools:CATALOG",
        "Steps — what undo would do now (checked <time>; probes only,",
        "nothing else dispatched)",
        "  s1 Revert      reverted     Move deal r1 to won",
        "                                undo: Move deal r1 to lead",
        "                                revert with crm.set_stage",
        "  s2 Compensate  compensated  Charge acme 12500 cents",
        # rule 12: which charge the refund is sent for, though its sentence leaves it out
        "                                undo: Refund 12500 cents; it also sends",
        "                                charge='ch_1'",
        "                                compensate with pay.refund",
        "                                leaves: A refund to acme",
        "  s3 Acknowledge acknowledged Email 'Won' to bob@acme.test",
        "                                irreversible: no call can take it back",
        "Undo would: revert 1 · compensate 1 · ask a person about 1",
        "In detail: amends undo saga_g3show --dry-run --catalog show_tools:CATALOG",
        "Undo it: amends undo saga_g3show --catalog show_tools:CATALOG",
    ],
    120: [
        "Close the ACME deal",
        "saga saga_g3show · completed · tenant — · actor — · <time> · catalog show_tools:CATALOG",
        "Steps — what undo would do now (checked <time>; probes only, nothing else dispatched)",
        "  s1 Revert      reverted     Move deal r1 to won",
        "                                undo: Move deal r1 to lead",
        "                                revert with crm.set_stage",
        "  s2 Compensate  compensated  Charge acme 12500 cents",
        "                                undo: Refund 12500 cents; it also sends charge='ch_1'",
        "                                compensate with pay.refund",
        "                                leaves: A refund to acme",
        "  s3 Acknowledge acknowledged Email 'Won' to bob@acme.test",
        "                                irreversible: no call can take it back",
        "Undo would: revert 1 · compensate 1 · ask a person about 1",
        "In detail: amends undo saga_g3show --dry-run --catalog show_tools:CATALOG",
        "Undo it: amends undo saga_g3show --catalog show_tools:CATALOG",
    ],
}
"""``show SAGA`` with the catalog allowed: the preview's verbs, states and counts."""

NO_CATALOG = {
    80: [
        "Close the ACME deal",
        "saga saga_g3show · completed · tenant — · actor — · <time> ·",
        "catalog show_tools:CATALOG",
        "Steps",
        "  s1 reversible   done crm.set_stage(deal='r1', stage='won')",
        "                         undo: crm.set_stage(deal='r1', stage='lead')",
        "  s2 compensable  done pay.charge(cents=12500, customer='acme')",
        "                         after: s1",
        "                         undo: pay.refund(cents=12500, charge='ch_1')",
        "  s3 irreversible done mail.send(subject='Won', to='bob@acme.test')",
        "                         after: s1",
        "Not undone. What undo would do needs the catalog that ran it: allow it with",
        "--catalog MODULE:ATTR or AMENDS_CATALOGS (this log names 'show_tools:CATALOG':",
        "check it is yours), then",
        "  amends show saga_g3show",
        "shows it, with the commands that preview and undo it.",
    ],
    120: [
        "Close the ACME deal",
        "saga saga_g3show · completed · tenant — · actor — · <time> · catalog show_tools:CATALOG",
        "Steps",
        "  s1 reversible   done crm.set_stage(deal='r1', stage='won')",
        "                         undo: crm.set_stage(deal='r1', stage='lead')",
        "  s2 compensable  done pay.charge(cents=12500, customer='acme')",
        "                         after: s1",
        "                         undo: pay.refund(cents=12500, charge='ch_1')",
        "  s3 irreversible done mail.send(subject='Won', to='bob@acme.test')",
        "                         after: s1",
        "Not undone. What undo would do needs the catalog that ran it: allow it with --catalog "
        "MODULE:ATTR or AMENDS_CATALOGS",
        "(this log names 'show_tools:CATALOG': check it is yours), then",
        "  amends show saga_g3show",
        "shows it, with the commands that preview and undo it.",
    ],
}
"""``show SAGA`` without one: the steps as before, and how to see what undo would do."""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A saga of hint_tools in ./amends.db (the default --db, so hints name none): a CRM
    update (reversible), a charge (compensable) and an email (not declared: a person)."""
    for name in [k for k in os.environ if k.startswith("AMENDS_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    show_tools.reset()

    async def run() -> None:
        engine = amends.Engine(show_tools.CATALOG, log="amends.db")
        try:
            async with engine.saga("Close the ACME deal", saga_id=SAGA) as saga:
                a = saga.call("crm.set_stage", deal="r1", stage="won")
                saga.call("pay.charge", customer="acme", cents=12500, after=[a])
                saga.call("mail.send", to="bob@acme.test", subject="Won", after=[a])
        finally:
            await engine.close()

    asyncio.run(run())
    return tmp_path


def _screen(
    argv: list[str], width: int, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
) -> list[str]:
    mp.setenv("COLUMNS", str(width))
    capsys.readouterr()
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    # a line holding a command to paste is one line whatever the width (the terminal folds it;
    # a copy of it pastes as one command, issue 26 item 3); every other line fits
    assert all(fits(line, width) for line in lines), "\n".join(lines)
    # what varies from run to run: the clock
    return [re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", "<time>", x).rstrip() for x in lines]


@pytest.mark.parametrize("width", WIDTHS)
def test_show_before_undo_says_what_undo_would_do(
    width: int, project: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    lines = _screen(["show", SAGA, "--catalog", SPEC], width, capsys, monkeypatch)
    assert lines == EXPECTED[width], "\n".join(lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_preview_comes_from_amends_catalogs_and_changes_nothing(
    width: int, project: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """AMENDS_CATALOGS allows the catalog as --catalog does; the probes change nothing: the
    undo then does exactly what show said (rule 10)."""
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)
    lines = _screen(["show", SAGA], width, capsys, monkeypatch)
    # the hints repeat only the operator's own --catalog flags (none here: the environment's)
    assert lines == [x.replace(f" --catalog {SPEC}", "") for x in EXPECTED[width]], lines
    assert show_tools.STAGE == {"r1": "won"} and show_tools.CHARGES["ch_1"]["refunded"] == 0
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["undo", SAGA, "--json"]) == 1  # the email still stands
    report = json.loads(capsys.readouterr().out)
    states = {s["step_id"]: s["state"] for s in report["steps"]}
    assert states == {"s1": "reverted", "s2": "compensated", "s3": "acknowledged"}
    assert show_tools.STAGE == {"r1": "lead"} and show_tools.CHARGES["ch_1"]["refunded"] == 12500


@pytest.mark.parametrize("width", WIDTHS)
def test_without_a_catalog_show_prints_the_steps_and_how_to_see_the_preview(
    width: int, project: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    lines = _screen(["show", SAGA], width, capsys, monkeypatch)
    assert lines == NO_CATALOG[width], "\n".join(lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_after_undo_show_keeps_the_report(
    width: int, project: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["undo", SAGA, "--catalog", SPEC]) == 1
    lines = _screen(["show", SAGA, "--catalog", SPEC], width, capsys, monkeypatch)
    assert not any(x.startswith(("Undo would:", "Steps — what undo")) for x in lines)
    assert any("acknowledged" in x for x in lines) and lines[-1].startswith("The event log: ")


def test_a_catalog_that_is_not_the_saga_s_is_refused_as_undo_refuses_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input: one clear line, exit 2, nothing printed as a prediction, the log unchanged."""
    before = (project / "amends.db").read_bytes()
    assert main(["show", SAGA, "--catalog", "hint_tools:CATALOG"]) == 2
    err = capsys.readouterr()
    assert "Undo would" not in err.out
    assert SAGA in err.err and "hint_tools:CATALOG" in err.err, err.err
    assert "Traceback" not in err.err
    assert (project / "amends.db").read_bytes() == before
