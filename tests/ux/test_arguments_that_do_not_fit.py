"""A call whose arguments do not fit its tool's signature never ran: Python refused it before
any line of the tool (rule 9 is about calls that began). The forward side said so already
("pay.charge was not called: its arguments do not fit its signature"); the undo side took the
TypeError for a lost answer: an idempotent tool's inverse was "sent" 5 more times and reported
``in_doubt`` ("its answer was lost 5 time(s); whether it took effect is unknown"), and a person
who typed a wrong argument name into a follow-up (``--arg body=...`` for a tool whose text is
``text``) got a follow-up in doubt that may never be sent again. Now the inverse is ``failed``
(it did not take effect: retry it once its contract is fixed) after one attempt, and the
follow-up is refused before anything is written (CLI exit 2, HTTP 422).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import amends
from amends.cli import main

CALLS: list[str] = []
WORLD: dict[str, str] = {}
CATALOG = amends.Catalog()


@CATALOG.tool("crm.read", reversibility="read_only")
async def read(call: amends.Call, record: str) -> str | None:
    return WORLD.get(record)


@CATALOG.tool("crm.set", reversibility="reversible", idempotent=True)
async def set_stage(call: amends.Call, record: str, stage: str) -> None:
    CALLS.append(f"set {record}={stage}")
    before = WORLD.get(record, "lead")
    WORLD[record] = stage
    # a contract bug: the inverse names an argument the tool does not take
    call.inverse("crm.set", record=record, stag=before)
    call.expect("crm.read", {"record": record}, equals=stage)


@CATALOG.tool("chat.post", reversibility="irreversible", idempotent=True)
async def post(call: amends.Call, channel: str, text: str) -> None:
    CALLS.append(f"post {channel}: {text}")
    call.acknowledge(who="the sender", parties=[channel], draft="Please ignore my last post.")


@pytest.fixture
async def undone(tmp_path: object) -> tuple[str, amends.UndoReport]:
    CALLS.clear()
    WORLD.clear()
    db = f"{tmp_path}/amends.db"
    engine = amends.Engine(CATALOG, log=db)
    try:
        async with engine.saga("Close the deal", saga_id="saga_g3fit") as saga:
            a = saga.call("crm.set", record="r1", stage="won")
            saga.call("chat.post", channel="#sales", text="won!", after=[a])
        report = await engine.undo("saga_g3fit")
    finally:
        await engine.close()
    return db, report


async def test_an_inverse_whose_arguments_do_not_fit_failed_once_and_is_not_in_doubt(
    undone: tuple[str, amends.UndoReport],
) -> None:
    _, report = undone
    step = report.step("s1")
    assert step.state == "failed", step
    # the interpreter's own words for the mismatch (3.13 adds "Did you mean 'stage'?")
    with pytest.raises(TypeError) as mismatch:
        set_stage(None, record="r1", stag="lead")
    assert step.detail == (
        f"crm.set was not called: its arguments do not fit its signature ({mismatch.value}); "
        "nothing happened"
    )
    assert report.tool_calls == 2  # the probe and one attempt, never 5 "lost answers"
    assert WORLD == {"r1": "won"} and CALLS == ["set r1=won", "post #sales: won!"]


def test_a_follow_up_with_an_argument_the_tool_does_not_take_is_refused_and_nothing_written(
    undone: tuple[str, amends.UndoReport],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, _ = undone
    monkeypatch.setenv("AMENDS_CATALOGS", f"{__name__}:CATALOG")
    before = Path(db).read_bytes()
    argv = ["follow-up", "send", "saga_g3fit", "s2", "--tool", "chat.post", "--db", db]
    assert main([*argv, "--arg", "channel=#sales", "--text-arg", "body", "--yes"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "amends: error: tool 'chat.post' does not take 'body' and needs 'text'; it takes "
        "channel, text: the follow-up was not sent\n"
    ), err
    assert Path(db).read_bytes() == before and CALLS == ["set r1=won", "post #sales: won!"]
    # the same with the right name is sent, and handles the manual action
    assert main([*argv, "--arg", "channel=#sales", "--text-arg", "text", "--yes"]) == 0
    assert CALLS[-1] == "post #sales: Please ignore my last post."


def test_the_http_api_refuses_such_a_follow_up_with_422_and_writes_nothing(
    undone: tuple[str, amends.UndoReport],
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    db, _ = undone
    before = Path(db).read_bytes()
    app = create_app(lambda: amends.Engine(CATALOG, log=db), ServerSettings(no_auth=True))
    body = {"tool": "chat.post", "args": {"channel": "#sales", "text": "sorry", "bcc": "x"}}
    with TestClient(app) as client:
        got = client.post("/sagas/saga_g3fit/steps/s2/follow-up", json=body)
    assert got.status_code == 422
    assert got.json() == {
        "error": "invalid_follow_up",
        "detail": "tool 'chat.post' does not take 'bcc'; it takes channel, text: the follow-up "
        "was not sent",
    }
    assert Path(db).read_bytes() == before and len(CALLS) == 2
