"""Issue 27 part 2 from the command line: `amends follow-up send` shows the recipients and the
text, sends only when confirmed, resolves the manual action; `amends follow-up list` lists it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import amends
from amends.cli import main
from amends.sandbox import World, demo_catalog

CATALOG = ["--catalog", "amends.sandbox:demo_catalog"]


def undone(db: str) -> str:
    async def go() -> str:
        engine = amends.Engine(demo_catalog(db), log=db)
        async with engine.saga("Quote ACME") as saga:
            saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
        await engine.undo(saga.id)
        await engine.close()
        return saga.id

    return asyncio.run(go())


def mails(db: str) -> list[str]:
    return [m["body"] for _, m in World(db + ".world").items("mail.messages")]


def send(db: str, saga_id: str, *more: str) -> int:
    return main(["follow-up", "send", saga_id, "s1", "--db", db, *CATALOG, "--tool", "mail.send",
                 "--arg", "to=bob@example.com", "--arg", "subject=Correction", *more])  # fmt: skip


def test_follow_up_send_shows_the_recipients_and_text_then_sends_and_resolves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "a.db")
    saga_id = undone(db)
    code = send(db, saga_id, "--text-arg", "body", "--text", "Please ignore my quote.", "--yes")
    out = capsys.readouterr().out
    assert code == 0
    assert "recipients named by the manual action: bob@example.com" in out
    assert "body: Please ignore my quote." in out and "to: bob@example.com" in out
    assert "s1+f1 (mail.send, by " in out and ": sent — sent with mail.send (id msg_2)" in out
    assert mails(db) == ["Price: 100", "Please ignore my quote."]
    assert main(["follow-up", "list", saga_id, "--db", db, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["follow_up_id"], listed["state"], listed["args"]["body"]) == (
        "s1+f1", "sent", "Please ignore my quote.",
    )  # fmt: skip
    assert main(["show", saga_id, "--db", db, "--json"]) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert "follow-up s1+f1" in json.dumps(shown)  # the manual action is handled, with the ref


def test_the_draft_is_sent_as_it_is_when_not_edited(tmp_path: Path) -> None:
    db = str(tmp_path / "a.db")
    saga_id = undone(db)
    assert send(db, saga_id, "--text-arg", "body", "--yes") == 0
    assert mails(db)[1].startswith("Hello, please disregard my earlier email 'Quote'")


def test_nothing_is_sent_without_confirmation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "a.db")
    saga_id = undone(db)
    assert send(db, saga_id, "--text-arg", "body") == 2  # stdin is no terminal here
    assert "nothing was sent: confirm with --yes when not at a terminal" in capsys.readouterr().err
    assert mails(db) == ["Price: 100"]
    assert (
        main(["follow-up", "send", saga_id, "s7", "--db", db, *CATALOG, "--tool", "mail.send",
              "--yes"]) == 2
    )  # fmt: skip
    assert "step 's7' of saga" in capsys.readouterr().err
    assert mails(db) == ["Price: 100"]
