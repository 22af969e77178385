"""Issue 26 item 6: after undo, undoing again says it was already done and that nothing was done
now, and ``--dry-run`` never lists "not needed: undo already ran" under "Needs a person"."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable

import pytest
from input_tools import SPEC, WORLD

from amends.cli import main


@pytest.fixture(autouse=True)
def _allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)


@pytest.mark.parametrize("width", ["80", "120"])
async def test_undoing_again_says_already_undone_and_nothing_was_done_now(
    saga_db: tuple[str, str],
    rows: Callable[[str], list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: str,
) -> None:
    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", width)
    WORLD.human_edit("r1", "stage", "lost")  # s1 drifts: its undo leaves it for a person
    assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db]) == 1  # mail stands
    first = capsys.readouterr().out
    assert "Already undone" not in first
    assert WORLD.crm["r1"]["stage"] == "lost"
    assert await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"]) == 0
    finished = json.loads(capsys.readouterr().out)["reversal"]["finished_at"]
    before, calls = rows(db), len(WORLD.calls)

    assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db]) == 1
    again = capsys.readouterr().out
    when = re.escape(
        __import__("datetime")
        .datetime.fromtimestamp(finished, __import__("datetime").UTC)
        .strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        + "Z"
    )
    flat = " ".join(again.split())
    assert re.match(
        rf"Already undone at {when}; nothing was done now\. The report of that undo:", flat
    )
    assert WORLD.calls[calls:] == [] and rows(db) == before  # nothing was sent or written

    assert await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--dry-run"]) == 0
    preview = " ".join(capsys.readouterr().out.split())
    assert "not needed: undo already ran" not in preview
    assert "Needs a person (2)" in preview  # the drifted update and the email
    assert (
        "undo already ran and left it drifted; nothing will be sent again: a person must "
        "follow up as its manual action says"
    ) in preview
