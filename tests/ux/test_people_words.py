"""What a person reads about a step amends could not check, and about a step that waited for
it (issue 26 item 2), in the report, the CLI and the web page.

The saga: a setting (s1), then a flag whose tool records no expectation (s2, a contract
violation) after it, so s1's inverse waits for s2's. Undo leaves s2 unchecked and s1 blocked.

Before: the web page showed s2 "drifted" (nothing drifted) with "Contract violation: ... call
call.expect(...) or call.no_drift_check(reason=...)" beside it, outside the engineers' fold; s1
read "not attempted: it must wait for s2 (settings.flag) to be undone first ..." (an id and a
tool name), and its manual action "... by hand: it was not attempted (not attempted: it must
wait for s2 (settings.flag) ...)"; the CLI's step list said "drifted" where the text and HTML
reports say "not checked".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import amends
from amends.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import paste_tools

SAGA = "saga_g3words"
WAITED = "not attempted: it must wait for another step's undo, and that step is drifted"


@pytest.fixture
async def report(tmp_path: Path) -> tuple[str, amends.UndoReport]:
    paste_tools.reset()
    db = str(tmp_path / "amends.db")
    engine = amends.Engine(paste_tools.CATALOG, log=db)
    try:
        async with engine.saga("Turn on the beta", saga_id=SAGA, actor="agent:ops") as saga:
            a = saga.call("settings.set", key="plan", value="gold")
            saga.call("settings.flag", key="beta", after=[a])
        return db, await engine.undo(SAGA)
    finally:
        await engine.close()


async def test_a_blocked_step_and_its_manual_action_name_no_other_step_s_id_or_tool(
    report: tuple[str, amends.UndoReport],
) -> None:
    _, r = report
    s1, s2 = r.step("s1"), r.step("s2")
    assert (s1.state, s2.state) == ("blocked", "drifted") and s2.violation
    # the engineers' detail keeps the id and the tool; a person reads the wait in words
    assert s1.detail == (
        "not attempted: it must wait for s2 (settings.flag) to be undone first, and that step "
        "is drifted"
    )
    assert s1.outcome_text == WAITED
    (action,) = [m for m in r.manual_actions if m.step_id == "s1"]
    assert action.what == (
        "Undo \"Set plan to 'gold'\" by hand: it was not attempted (it must wait for another "
        "step's undo, and that step is drifted)"
    )
    assert amends.StepOutcome.from_dict(s1.to_dict()).outcome_text == WAITED
    assert paste_tools.SETTINGS == {"plan": "gold", "flag:beta": True}  # nothing touched


def _outside_the_fold(html: str) -> str:
    html = re.sub(r"<details class=\"engineers\".*?</details>", "", html, flags=re.S)
    return re.sub(r"<script.*?</script>", "", html, flags=re.S)


async def test_the_web_page_says_not_checked_and_folds_the_contract_violation(
    report: tuple[str, amends.UndoReport],
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    db, _ = report
    app = create_app(
        lambda: amends.Engine(paste_tools.CATALOG, log=db), ServerSettings(no_auth=True)
    )
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get(f"/ui/sagas/{SAGA}")
    assert page.status_code == 200
    people = _outside_the_fold(page.text)
    for engineer in ("call.expect", "no_drift_check", "Contract violation", "settings.flag)"):
        assert engineer not in people, engineer
    steps = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r'<li data-step-id="(s\d)">.*?<span class="state state-\w+">([^<]*)</span>',
            people,
            re.S,
        )
    }
    assert steps == {"s1": "blocked", "s2": "not checked"}, steps
    assert WAITED.replace("'", "&#39;") in people and "Undo: Set plan to an empty value" in people
    fold = page.text[page.text.index('id="reversal-details"') :]
    assert "Contract violation: tool &#39;settings.flag&#39; is &#39;reversible&#39;" in fold
    assert "it must wait for s2 (settings.flag)" in fold


def test_the_cli_report_says_not_checked_for_an_unchecked_step(
    report: tuple[str, amends.UndoReport],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, _ = report
    monkeypatch.setenv("COLUMNS", "120")
    capsys.readouterr()
    assert main(["show", SAGA, "--db", db]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  s2 Acknowledge not checked +Flag beta *$", out, re.M), out
    assert re.search(r"^  s1 Acknowledge blocked +Set plan to 'gold' *$", out, re.M), out
    flat = " ".join(out.split())
    assert "it was not attempted (it must wait for another step's undo, and that" in flat, out
