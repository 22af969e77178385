"""Issue 27 part 2 on both log backends: a manual action's draft sent as a follow-up of the
reversal, and two processes racing to send the same manual action — exactly one sends."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

import amends
from amends.sandbox import World, sandbox_catalog

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

EDITED = "Hello Bob, please ignore my earlier email: the price was wrong."

_SENDER = """
import asyncio, json, os, sys, time
import amends
from amends.sandbox import World, sandbox_catalog

async def main(log, world, saga_id, go, who):
    engine = amends.Engine(sandbox_catalog(World(world)), log=log)
    await engine.report(saga_id)  # connected and read: both processes are ready to race
    open(go + "." + who, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    try:
        sent = await engine.send_follow_up(
            saga_id, "s1", tool="mail.send", by=who,
            args={"to": "bob@example.com", "subject": "Correction", "body": "sorry"},
        )
        print(json.dumps({"state": sent.state, "id": sent.follow_up_id}))
    except amends.SagaStateError as exc:
        print(json.dumps({"refused": str(exc)}))
    await engine.close()

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.fixture(params=["sqlite", "postgres"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def mails(world: World) -> list[str]:
    return [m["body"] for _, m in world.items("mail.messages") if m["to"] == "bob@example.com"]


async def undone(engine: amends.Engine) -> str:
    async with engine.saga("Quote ACME") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
    report = await engine.undo(saga.id)
    assert [m.step_id for m in report.open_manual_actions] == ["s1"]
    return saga.id


async def test_a_sent_draft_resolves_the_manual_action_on_every_backend(
    log_url: str, tmp_path: Path
) -> None:
    world = World(str(tmp_path / "w.world"))
    one = amends.Engine(sandbox_catalog(world), log=log_url)
    saga_id = await undone(one)
    world.faults.add("mail.send", "permanent")
    args = {"to": "bob@example.com", "subject": "Correction", "body": EDITED}
    failed = await one.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert failed.state == "failed" and mails(world) == ["Price: 100"]
    two = amends.Engine(sandbox_catalog(world), log=log_url)  # another engine, the same log
    sent = await two.send_follow_up(saga_id, "s1", tool="mail.send", args=args, by="ann")
    assert (sent.state, sent.follow_up_id) == ("sent", "s1+f2")
    assert mails(world) == ["Price: 100", EDITED]
    report = await one.report(saga_id)
    assert report is not None and report.open_manual_actions == []
    assert report.handled("s1") is not None
    assert [(f.follow_up_id, f.state) for f in await one.follow_ups(saga_id)] == [
        ("s1+f1", "failed"),
        ("s1+f2", "sent"),
    ]
    assert await one.log.verify(saga_id) == []
    await one.close()
    await two.close()


async def test_two_processes_sending_the_same_manual_action_send_it_once(
    log_url: str, tmp_path: Path
) -> None:
    world_path = str(tmp_path / "w.world")
    engine = amends.Engine(sandbox_catalog(World(world_path)), log=log_url)
    saga_id = await undone(engine)
    go = str(tmp_path / "go")
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SENDER,
            log_url,
            world_path,
            saga_id,
            go,
            who,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for who in ("ann", "bea")
    ]
    for who in ("ann", "bea"):
        while not os.path.exists(f"{go}.{who}"):  # noqa: ASYNC240 (a test's barrier)
            await asyncio.sleep(0.01)
    open(go, "w").close()  # noqa: ASYNC230 (the start signal)
    outs = [await asyncio.wait_for(p.communicate(), 90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e.decode() for _, e in outs]
    answers = [json.loads(o.decode()) for o, _ in outs]
    sent = [a for a in answers if a.get("state") == "sent"]
    refused = [a for a in answers if "refused" in a]
    assert len(sent) == 1 and len(refused) == 1, answers
    assert mails(World(world_path)) == ["Price: 100", "sorry"]  # sent once
    assert [f.state for f in await engine.follow_ups(saga_id)] == ["sent"]
    assert await engine.log.verify(saga_id) == []
    await engine.close()


async def test_follow_ups_the_budget_stopped_continue_and_a_withdrawal_stands_on_every_backend(
    log_url: str, tmp_path: Path
) -> None:
    """Issue 27 re-checked on both backends: follow-ups spent the reversal's budget, the
    reversal is continued with a new budget (nothing undone twice) and the rest is sent; a
    person withdraws a sent follow-up's resolution and a new one is sent (``s2+f2``), the
    withdrawal never written over; the report counts every follow-up's call."""
    world = World(str(tmp_path / "w.world"))
    eng = amends.Engine(sandbox_catalog(world), log=log_url)
    async with eng.saga("Quote two") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
        saga.call("mail.send", to="cy@example.com", subject="Quote", body="Price: 100")
    await eng.undo(saga.id, budget=amends.Budget(tool_calls=1))
    agent = eng.follow_up_agent(saga.id, by="agent:apology", allow=["mail.send"])
    for step, to in (("s1", "bob@example.com"), ("s2", "cy@example.com")):
        await agent.propose(
            amends.FollowUpProposal(step, "mail.send", {"to": to, "subject": "Sorry", "body": "x"})
        )
    assert [o.state for o in agent.outcomes] == ["sent", "not_done"]
    assert await eng.continuable(saga.id) == ["s2"]
    other = amends.Engine(sandbox_catalog(world), log=log_url)  # another process's engine
    more = await other.resume(saga.id, budget=amends.Budget(tool_calls=5))
    assert more.continuations == 1
    mail = {"to": "cy@example.com", "subject": "Sorry", "body": "x"}
    first = await other.send_follow_up(saga.id, "s2", tool="mail.send", args=mail, by="ann")
    await eng.withdraw_resolution(saga.id, "s2", by="bea", note="wrong text, not handled")
    again = await eng.send_follow_up(saga.id, "s2", tool="mail.send", args=mail, by="bea")
    assert (first.follow_up_id, again.follow_up_id, again.state) == ("s2+f1", "s2+f2", "sent")
    report = await other.report(saga.id)
    assert report is not None and report.tool_calls == 3 and report.open_manual_actions == []
    handled = report.handled("s2")
    assert handled is not None and handled["by"] == "bea"
    assert [bool(e.get("withdrawn")) for e in handled["earlier"]] == [False, True]
    sorry = [m["to"] for _, m in world.items("mail.messages") if m["subject"] == "Sorry"]
    assert sorry == ["bob@example.com", "cy@example.com", "cy@example.com"]
    assert await eng.log.verify(saga.id) == []
    await eng.close()
    await other.close()
