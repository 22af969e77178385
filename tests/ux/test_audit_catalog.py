"""``amends audit`` audits the catalog the operator named or allowed, never the sandbox's by
default (issue 26 item 4). Before, in a user's project it printed "Catalog: 34 tools │
calendar.cancel_event …" — the demo's simulated vendors — and exited 0, never saying "sandbox"."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from amends.cli import main

sys.path.insert(0, str(Path(__file__).parent))
SPEC = "hint_tools:CATALOG"
SANDBOX_TOOLS = ("calendar.cancel_event", "calendar.create_event", "chat.announce")


@pytest.fixture(autouse=True)
def no_allowed_catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user's project directory; the operator allowed no catalog in the environment."""
    monkeypatch.delenv("AMENDS_CATALOGS", raising=False)
    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)


def test_audit_with_no_catalog_named_refuses_with_the_fix_and_audits_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["audit"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("amends: error: amends audit: no catalog")
    assert "--catalog myproj.tools:catalog" in err and "AMENDS_CATALOGS" in err
    assert "docs/your-project.md" in err
    assert "--catalog amends.sandbox:demo_catalog" in err  # the demo's, named as such
    assert main(["audit", "--strict", "--json"]) == 2  # --strict never passes on nothing
    assert capsys.readouterr().out == ""


def test_audit_uses_the_catalog_the_operator_allowed_and_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert f"Catalog {SPEC}: 9 tools" in out
    assert "crm.update_field" in out and "sandbox" not in out
    assert not any(t in out for t in SANDBOX_TOOLS)
    assert main(["audit", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["catalog"] for r in rows} == {SPEC} and len(rows) == 9


def test_the_sandbox_is_audited_only_when_named_and_then_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["audit", "--catalog", "amends.sandbox:demo_catalog"]) == 0
    out = capsys.readouterr().out
    assert "Catalog amends.sandbox:demo_catalog — the sandbox's simulated vendors, not" in out
    assert all(t in out for t in SANDBOX_TOOLS)


def test_audit_of_two_allowed_catalogs_shows_each_under_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["audit", "--catalog", SPEC, "--catalog", "amends.sandbox:demo_catalog", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {r["catalog"] for r in rows}
    assert by == {SPEC, "amends.sandbox:demo_catalog"}
    assert main([*argv[:-1], "--strict"]) == 1  # mail.send declares no class
    assert "1 tool(s) not declared — treated as irreversible" in capsys.readouterr().out


@pytest.mark.parametrize("width", [60, 80])
def test_audit_at_60_and_80_columns_keeps_every_word_whole(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 item 5 for audit: below, the table broke "reversibili/ty", "irreversibl/e"
    and "treated as irreversibl/e" at 60 columns; now the table only where its names and
    classes fit whole, else a line per tool."""
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["audit", "--catalog", SPEC, "--catalog", "amends.sandbox:demo_catalog"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    if width == 60:  # too narrow for the table: a line per tool
        assert "  mail.send · not declared — treated as irreversible" in lines, text
        assert "  crm.update_field · reversible" in lines, text
        assert "  calendar.create_event · compensable" in lines, text
    else:  # the table fits each catalog with its names and classes whole
        row = next(x for x in lines if x.startswith("│ mail.send "))  # hint_tools', first
        assert re.match(r"│ mail\.send +│ treated as irreversible │ not declared │", row), row
    words = set(text.split())
    assert not {"irreversibl", "reversibili", "ty", "e"} & words, text
