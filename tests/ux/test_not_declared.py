"""Issue 26 item 1: a tool that declares no reversibility is "not declared — treated as
irreversible", never shown as a tool declared irreversible: in the report (JSON and text), the
HTML report, the preview, the web page and ``amends audit``; its manual action asks the tool's
owner to declare it. The safe default stays (rule 2): undo calls nothing for it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import amends
from amends.cli import main
from amends.server import ServerSettings, TokenStore, create_app

NOT_DECLARED = (
    "not declared — treated as irreversible: its tool's owner never said whether a call can "
    "take it back"
)
WHAT = (
    "lookup_weather(city='Paris') is not declared — treated as irreversible: check whether it "
    "changed anything, and ask the owner of lookup_weather to declare it (read-only if it only "
    "reads)"
)
DRAFT = (
    "Hello: an assistant acting for us used lookup_weather ('Plan the Paris trip'): "
    "lookup_weather(city='Paris'). Its reversibility is not declared, so amends could not take "
    "it back and treated it as irreversible. Please declare it in the catalog: read-only if it "
    "only reads; otherwise reversible, compensable or irreversible, with how to undo it."
)


def trip_catalog(calls: list[str]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("lookup_weather")  # no reversibility=: not declared
    async def lookup_weather(call: amends.Call, city: str) -> str:
        calls.append(f"lookup_weather {city}")
        return "sunny"

    @catalog.tool("mail.send", reversibility="irreversible")  # declared irreversible
    async def send(call: amends.Call, to: str) -> str:
        calls.append(f"mail.send {to}")
        return "sent"

    return catalog


CALLS: list[str] = []
catalog = trip_catalog(CALLS)  # what the CLI test loads by name (module:catalog)


async def run_trip(db: str, calls: list[str]) -> str:
    engine = amends.Engine(trip_catalog(calls), log=db)
    async with engine.saga("Plan the Paris trip", tenant="acme", actor="agent:planner") as saga:
        saga.call("lookup_weather", city="Paris")
        saga.call("mail.send", to="ann@acme.test")

        async def framework_tool(call: amends.Call, city: str) -> str:
            calls.append(f"framework {city}")  # a framework's tool, not in the catalog
            return "rain"

        saga.call_with(framework_tool, "lookup_rain", city="Lyon")
    await engine.close()
    return saga.id


@pytest.fixture
def trip(tmp_path: Path) -> tuple[str, str, list[str]]:
    db = str(tmp_path / "trip.db")
    calls: list[str] = []
    saga_id = asyncio.run(run_trip(db, calls))
    return db, saga_id, calls


def undo(db: str, saga_id: str, calls: list[str]) -> tuple[dict[str, Any], amends.UndoReport]:
    async def go() -> tuple[dict[str, Any], amends.UndoReport]:
        engine = amends.Engine(trip_catalog(calls), log=db)  # another process's engine
        try:
            preview = (await engine.preview(saga_id)).to_dict()
            return preview, await engine.undo(saga_id)
        finally:
            await engine.close()

    return asyncio.run(go())


def test_the_report_and_preview_tell_not_declared_from_declared_irreversible(
    trip: tuple[str, str, list[str]],
) -> None:
    db, saga_id, calls = trip
    preview, report = undo(db, saga_id, calls)
    # rule 2: the safe default stays; undo called nothing
    assert calls == ["lookup_weather Paris", "mail.send ann@acme.test", "framework Lyon"]
    assert report.status == "cannot_undo"
    steps = {s["step_id"]: s for s in report.to_dict()["steps"]}
    assert [
        (s["tool"], s["state"], s["reversibility"], s["declared"], s["detail"])
        for s in steps.values()
    ] == [
        ("lookup_weather", "acknowledged", "irreversible", False, NOT_DECLARED),
        (
            "mail.send",
            "acknowledged",
            "irreversible",
            True,
            "irreversible: no call can take it back",
        ),
        ("lookup_rain", "acknowledged", "irreversible", False, NOT_DECLARED),
    ]
    assert steps["s1"]["manual_action"] == {
        "step_id": "s1",
        "what": WHAT,
        "who": "the owner of the tool lookup_weather",
        "parties": [],
        "draft": DRAFT,
    }
    assert (
        steps["s2"]["manual_action"]["what"] == "mail.send(to='ann@acme.test') cannot be taken back"
    )
    # the preview is the undo's own evaluation (rule 10): the same words, the same flag
    assert [(p["step_id"], p["declared"], p["reason"]) for p in preview["steps"]] == [
        ("s1", False, NOT_DECLARED),
        ("s2", True, "irreversible: no call can take it back"),
        ("s3", False, NOT_DECLARED),
    ]
    text = report.render("text")
    assert (
        "  s1   Acknowledge acknowledged lookup_weather(city='Paris')\n"
        "       not declared — treated as irreversible: its tool's owner never said\n"
        "       whether a call can take it back\n"
        "  s2   Acknowledge acknowledged mail.send(to='ann@acme.test')\n"
        "       irreversible: no call can take it back\n"
    ) in text
    assert "    who: the owner of the tool lookup_weather\n" in text
    page = report.render("html")
    assert page.count("not declared — treated as irreversible") == 6  # details, actions, fold
    # the stored report reads back with the flag
    again = amends.UndoReport.from_dict(json.loads(report.to_json()))
    assert [s.declared for s in again.steps] == [False, True, False]


def test_the_web_page_says_not_declared(trip: tuple[str, str, list[str]]) -> None:
    db, saga_id, calls = trip
    tokens = TokenStore(":memory:")
    token = tokens.create("acme")
    app = create_app(
        lambda: amends.Engine(trip_catalog(calls), log=db), ServerSettings(tokens=tokens)
    )
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get(f"/ui/sagas/{saga_id}", headers=auth)
        assert page.status_code == 200
        preview = client.get(f"/sagas/{saga_id}/preview", headers=auth).json()
    tokens.close()
    assert page.text.count(NOT_DECLARED.replace("'", "&#39;")) == 4  # in the list and dialog
    assert "irreversible: no call can take it back" in page.text
    assert [s["declared"] for s in preview["steps"]] == [False, True, False]


def test_amends_audit_says_not_declared_at_80_and_120_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"{__name__}:catalog"
    for width in ("80", "120"):
        monkeypatch.setenv("COLUMNS", width)
        assert main(["audit", "--catalog", spec]) == 0
        out = capsys.readouterr().out
        rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
        assert "treated as irreversible" in rows["lookup_weather"]
        assert "not declared" in rows["lookup_weather"]
        assert "irreversible" in rows["mail.send"] and "yes" in rows["mail.send"]
        assert "treated" not in rows["mail.send"]
        flat = " ".join(out.split())
        assert (
            "1 tool(s) not declared — treated as irreversible: lookup_weather. Undo can only "
            "ask a person to look at what they did; declare reversibility=... on each "
            "(read_only for a tool that only reads)."
        ) in flat
