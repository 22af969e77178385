"""What a person reads is what the bytes say (issue 21, trust boundary; rules 8 and 12).

amends shows people text that agents, vendors and TOML files wrote. Five helpers escaped it,
each with its own idea of what to escape: a zero-width space inside an email address, a word
joiner inside an amount, a variation selector after an id, a Hangul filler (a letter that draws
nothing), U+2028 (a line break to many readers) and a run of forty combining marks (drawn over
the lines around it) reached the CLI screens, ``amends audit``, the reports, the web page, the
JSON log lines and span attributes as they were, so two different values looked the same to the
person asked to undo them. Now every surface passes such text through one rule
(``amends._visible``): every character a person cannot see or that moves other text is shown as
a visible escape, and the data itself (the log, ``--json``, the HTTP JSON API) stays byte-exact.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

import amends
from hidden_text import ADDRESS, AMOUNT, CATALOG, SPEC, TITLE, TITLE_SHOWN, WORLD, hidden


@pytest.fixture
async def hostile_db(tmp_path: Path) -> tuple[str, str]:
    WORLD.crm["r1"] = {"stage": "lead", "owner": "ann", "version": 1}
    db = str(tmp_path / "hostile.db")
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga(TITLE, tenant="acme", actor=ADDRESS) as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value=AMOUNT)
        saga.call("mail.send", to=ADDRESS, subject=TITLE, after=[a])
    await engine.close()
    return db, saga.id


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "{saga}"],
        ["show", "{saga}", "--history"],
        ["show"],
        ["undo", "{saga}", "--dry-run"],
        ["undo", "{saga}"],
    ],
    ids=["show", "history", "list", "preview", "undo"],
)
async def test_every_cli_screen_shows_hidden_characters_as_escapes(
    hostile_db: tuple[str, str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from amends.cli import main

    db, saga_id = hostile_db
    args = [a.replace("{saga}", saga_id) for a in argv] + ["--db", db, "--catalog", SPEC]
    code = await asyncio.to_thread(main, args)
    out = capsys.readouterr()
    text = out.out + out.err
    assert code in (0, 1), text
    assert hidden(text) == []
    assert "alice\\u200b@example.com" in text
    assert "alice@example.com" not in text


async def test_the_json_answers_and_the_log_keep_the_bytes_as_written(
    hostile_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Escaping is for display only: ``--json`` and the log hold the title and arguments
    exactly as the agent wrote them."""
    from amends.cli import main

    db, saga_id = hostile_db
    code = await asyncio.to_thread(main, ["undo", saga_id, "--json", "--db", db, "--catalog", SPEC])
    got = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert got["title"] == TITLE
    engine = amends.Engine(CATALOG, log=db)
    saga = await engine.log.get_saga(saga_id)
    await engine.close()
    assert saga is not None and saga.title == TITLE and saga.actor == ADDRESS
    assert [s.args for s in saga.steps][1] == {"to": ADDRESS, "subject": TITLE}


async def test_the_text_and_html_reports_show_hidden_characters_as_escapes(
    hostile_db: tuple[str, str],
) -> None:
    db, saga_id = hostile_db
    engine = amends.Engine(CATALOG, log=db)
    report = await engine.undo(saga_id)
    await engine.close()
    assert report.title == TITLE
    text = report.render("text")
    assert hidden(text) == [] and hidden(report.render("html")) == []
    flat = " ".join(line.strip() for line in text.splitlines()[:8])
    assert "Refund alice\\u200b@example.com 1\\u206000.00 USD id-42\\ufe0f\\U000e0100" in flat
    assert "\\u2028Status: fully_reversed\\u2029" in flat
    assert not [line for line in text.splitlines() if line.lstrip().startswith("Status: fully")]
    assert "alice\\u200b@example.com" in report.render("html")


def _toml_catalog(tmp_path: Path) -> str:
    path = tmp_path / "tools.toml"
    path.write_text(
        "[[tool]]\n"
        'name = "mail.send"\n'
        'reversibility = "irreversible"\n'
        'description = "Sends mail to alice\\u200b@example.com \\u2066safely\\u2069 '
        '\\ufe0f\\u3164"\n'
        'http = { url = "http://127.0.0.1:9/send" }\n'
    )
    return str(path)


async def test_amends_audit_shows_a_contract_files_hidden_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from amends.cli import main

    spec = _toml_catalog(tmp_path)
    code = await asyncio.to_thread(main, ["audit", "--catalog", spec, "--db", str(tmp_path / "x")])
    text = capsys.readouterr()
    assert code == 0, text.err
    assert hidden(text.out + text.err) == []
    assert "alice\\u200b@example.com" in text.out.replace("\n", "").replace(" ", "")


async def test_the_web_page_escapes_and_the_http_json_keeps_the_bytes(
    hostile_db: tuple[str, str],
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    db, saga_id = hostile_db
    app = create_app(lambda: amends.Engine(CATALOG, log=db), ServerSettings(no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        pages = [client.get("/").text, client.get(f"/ui/sagas/{saga_id}").text]
        got = client.get(f"/sagas/{saga_id}")
    assert got.status_code == 200, got.text
    data = got.json()
    for page in pages:
        assert hidden(page) == []
        assert "alice\\u200b@example.com" in page
    assert data["title"] == TITLE and data["actor"] == ADDRESS
    assert {"to": ADDRESS, "subject": TITLE} in [s["args"] for s in data["steps"]]


def test_a_json_log_line_and_a_span_attribute_show_hidden_characters_as_escapes() -> None:
    from amends._telemetry import JsonLines, _present

    record = logging.LogRecord("amends", logging.INFO, __file__, 1, TITLE, None, None)
    record.amends = {"event": "x", "title": TITLE, ADDRESS: [AMOUNT]}
    line = json.loads(JsonLines().format(record))
    assert line["message"] == TITLE_SHOWN
    assert line["title"] == TITLE_SHOWN
    assert line["alice\\u200b@example.com"] == ["1\\u206000.00 USD"]
    assert _present({"amends.saga.title": TITLE, "n": 1}) == {
        "amends.saga.title": TITLE_SHOWN,
        "n": 1,
    }


def test_an_upstream_description_shows_hidden_letters_as_escapes() -> None:
    """An upstream MCP server's description: escape sequences go whole, every other hidden
    character is shown (a Hangul filler and a variation selector passed before)."""
    from amends.integrations.mcp.listing import clean_text

    got = clean_text("Wipe\x1b[2J \u3164id-42\ufe0f alice\u200b@example.com\nok\t.")
    assert got == "Wipe \\u3164id-42\\ufe0f alice\\u200b@example.com\nok\t."


@pytest.mark.parametrize(
    "argv", [["show", "{saga}"], ["show"], ["undo", "{saga}"]], ids=["show", "list", "undo"]
)
async def test_an_emoji_code_in_agent_text_is_shown_as_written_not_as_a_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """rich replaced ``:white_check_mark:`` in a title with a check mark and ``:warning:`` in
    an address with a warning sign: the screen showed text the log does not hold."""
    from amends.cli import main

    db = str(tmp_path / "emoji.db")
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga("Refund :white_check_mark: done", tenant="acme") as saga:
        saga.call("mail.send", to=":warning:bob@example.com", subject="hi")
    await engine.close()
    args = [a.replace("{saga}", saga.id) for a in argv] + ["--db", db, "--catalog", SPEC]
    code = await asyncio.to_thread(main, args)
    text = capsys.readouterr().out
    assert code in (0, 1), text
    assert "Refund :white_check_mark: done" in text
    assert "\u2705" not in text and "\u26a0" not in text
    if argv[0] != "show" or len(argv) > 1:
        assert "to=':warning:bob@example.com'" in text


def test_a_tool_name_ending_in_a_line_break_is_refused() -> None:
    """A tool name is a dotted identifier; ``$`` in its check also matched before a final line
    break, so ``mail.send\\n`` was registered and printed a line break after its name on every
    screen that named it."""
    catalog = amends.Catalog()

    async def send(call: amends.Call, to: str) -> None:
        return None

    with pytest.raises(amends.ContractError, match=r"tool name 'mail\.send\\n' is not valid"):
        catalog.register("mail.send\n", send, reversibility="irreversible")
    assert "mail.send" not in catalog and "mail.send\n" not in catalog


async def test_a_lone_surrogate_in_an_argument_is_an_escape_in_the_json_never_a_500(
    tmp_path: Path,
) -> None:
    """An argument can hold a lone surrogate (JSON ``"\\ud800"`` decodes to one; the log keeps
    arguments as JSON). The saga's JSON answered 500: UTF-8 cannot encode it. It is written as
    its escape now, so a JSON reader gets the very string the agent sent; the page shows it as
    ``\\ud800`` like every hidden character."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    db = str(tmp_path / "surrogate.db")
    engine = amends.Engine(CATALOG, log=db)
    async with engine.saga("Mail", saga_id="A") as saga:
        saga.call("mail.send", to="bob\ud800@example.com", subject="hi")
    await engine.close()
    app = create_app(lambda: amends.Engine(CATALOG, log=db), ServerSettings(no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        got = client.get("/sagas/A")
        page = client.get("/ui/sagas/A")
    assert got.status_code == 200, got.text
    assert got.json()["steps"][0]["args"] == {"to": "bob\ud800@example.com", "subject": "hi"}
    assert page.status_code == 200 and "bob\\ud800@example.com" in page.text


def test_the_gateways_own_error_line_shows_hidden_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m amends.integrations.mcp`` (what MCP client configs run) printed its error as
    it came, while ``amends mcp`` showed it by the display rule."""
    pytest.importorskip("mcp")
    from amends.integrations.mcp.__main__ import main

    missing = tmp_path / "gw\u3164\ufe0f.toml"
    assert main(["serve", "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert hidden(err) == []
    assert "gw\\u3164\\ufe0f.toml' does not exist" in err


def test_two_tenants_that_differ_by_a_hidden_character_read_apart_in_the_token_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``amends token list`` and ``revoke`` printed a tenant as typed: ``acme`` and
    ``acme\\u200b`` (two tenants, each seeing only its own sagas) read the same."""
    pytest.importorskip("fastapi")
    from amends.cli import main

    db = str(tmp_path / "t.db")
    asyncio.run(amends.SqliteLog(db).close())
    for tenant in ("acme", "acme\u200b"):
        assert main(["token", "create", "--tenant", tenant, "--db", db]) == 0
    capsys.readouterr()
    assert main(["token", "list", "--db", db]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert sorted(r.split()[1] for r in rows) == ["acme", "acme\\u200b"]
    hidden_id = next(r.split()[0] for r in rows if "acme\\u200b" in r)
    assert main(["token", "revoke", hidden_id, "--db", db]) == 0
    assert capsys.readouterr().out == f"revoked {hidden_id} (tenant acme\\u200b)\n"
