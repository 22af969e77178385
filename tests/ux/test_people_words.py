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

import html
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


async def test_the_web_page_continues_a_budget_cut_with_its_button_not_a_cli_command(
    tmp_path: Path,
) -> None:
    """A reversal the budget cut off (run by the agent's own engine, or by the web page): the
    manual action said "continue with a larger budget: amends undo saga_… --continue
    --budget-calls N --budget-seconds S" on the page, a saga id and a terminal command for a
    person who has a "Continue undo" button; before undo, the preview named the other step's id
    and tool for a step predicted blocked. The JSON keeps the report's words."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    paste_tools.reset()
    db = str(tmp_path / "amends.db")
    engine = amends.Engine(paste_tools.CATALOG, log=db)
    try:
        async with engine.saga("Turn on the beta", saga_id=SAGA) as saga:
            a = saga.call("settings.set", key="plan", value="gold")
            saga.call("settings.set", key="plan", value="platinum", after=[a])
        async with engine.saga("Flag it", saga_id="saga_g3other") as other:
            b = other.call("settings.set", key="tier", value="1")
            other.call("settings.flag", key="tier", after=[b])
        report = await engine.undo(SAGA, budget=amends.Budget(tool_calls=0))
    finally:
        await engine.close()
    assert [s.state for s in report.steps] == ["blocked", "over_budget"]
    (action,) = [m for m in report.manual_actions if m.step_id == "s2"]
    assert f"amends undo {SAGA} --continue" in action.what  # the report's words, for a terminal
    app = create_app(
        lambda: amends.Engine(paste_tools.CATALOG, log=db), ServerSettings(no_auth=True)
    )
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get(f"/ui/sagas/{SAGA}")
        before = client.get("/ui/sagas/saga_g3other")
        body = client.get(f"/reversals/{report.reversal_id}").json()["report"]
    people = _outside_the_fold(page.text)
    text = html.unescape(re.sub(r"<[^>]+>", " ", people))  # what the page shows
    assert "amends undo" not in text and SAGA not in text, text
    assert (
        "Undo \"Set plan to 'platinum'\", which was not attempted (tool-call budget of 0 spent "
        "before settings.read could run): continue with a larger budget: “Continue undo” on "
        "this page, or undo it by hand"
    ) in text, text
    assert 'id="continue"' in people
    assert body["manual_actions"][1]["what"] == action.what  # the JSON: as the report holds it
    shown = html.unescape(re.sub(r"<[^>]+>", " ", _outside_the_fold(before.text)))
    assert "settings.flag)" not in shown and "it must wait for s2" not in shown
    assert "not attempted: it must wait for another step's undo, and that step is drifted" in (
        shown
    ), shown
