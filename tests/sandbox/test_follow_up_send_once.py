"""One manual action, one follow-up: a request that read the saga before another request's
send was resolved never sends it a second time (CI at a8a385f: two processes on PostgreSQL
both sent, ``s1+f1`` and ``s1+f2``; rule 5, never a second message the engine cannot rule out)."""

from __future__ import annotations

from pathlib import Path

import pytest

import amends
from amends._reversal.follow_ups import FollowUpSender
from amends.sandbox import World, sandbox_catalog

ARGS = {"to": "bob@example.com", "subject": "Correction", "body": "sorry"}


def mails(world: World) -> list[str]:
    return [m["body"] for _, m in world.items("mail.messages") if m["to"] == "bob@example.com"]


async def test_a_send_that_read_the_saga_before_anothers_resolution_is_refused(
    tmp_path: Path,
) -> None:
    """The interleaving the race hit, made deterministic: request B read the saga (no
    resolution yet), then request A sent the follow-up and wrote its resolution, then B read
    the follow-up records (A's ``sent``) and the events (A's resolution, written after the
    send). B took that resolution for one a person had withdrawn since (its copy of the saga
    showed none current) and sent the mail again."""
    world = World(str(tmp_path / "w.world"))
    engine = amends.Engine(sandbox_catalog(world), log=str(tmp_path / "log.db"))
    async with engine.saga("Quote") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
    report = await engine.undo(saga.id)
    assert [m.step_id for m in report.open_manual_actions] == ["s1"]
    read_by_b = await engine.log.get_saga(saga.id)  # B's copy: before A's send
    assert read_by_b is not None
    sent = await engine.send_follow_up(saga.id, "s1", tool="mail.send", args=ARGS, by="ann")
    assert (sent.state, sent.follow_up_id) == ("sent", "s1+f1")
    sender = FollowUpSender(engine.log, engine.catalog, engine.retry_policy)
    with pytest.raises(amends.SagaStateError) as refused:
        await sender.send(read_by_b, "s1", "mail.send", ARGS, "bea")
    assert str(refused.value).startswith(
        "follow-up s1+f1 of step 's1' was sent already by ann (sent with mail.send"
    )
    assert str(refused.value).endswith("the manual action is handled")
    assert mails(world) == ["Price: 100", "sorry"]  # sent once
    assert [(f.follow_up_id, f.state) for f in await engine.follow_ups(saga.id)] == [
        ("s1+f1", "sent")
    ]
    after = await engine.report(saga.id)
    assert after is not None and after.open_manual_actions == []
    handled = after.handled("s1")
    assert handled is not None and handled["by"] == "ann"
    assert await engine.log.verify(saga.id) == []
    await engine.close()


async def test_a_withdrawn_resolution_still_opens_the_manual_action_again(tmp_path: Path) -> None:
    """The other side of the same check: a person who withdrew the resolution a send wrote
    reopens the manual action, and a new send goes out (it is not refused as 'sent already')."""
    world = World(str(tmp_path / "w.world"))
    engine = amends.Engine(sandbox_catalog(world), log=str(tmp_path / "log.db"))
    async with engine.saga("Quote") as saga:
        saga.call("mail.send", to="bob@example.com", subject="Quote", body="Price: 100")
    await engine.undo(saga.id)
    await engine.send_follow_up(saga.id, "s1", tool="mail.send", args=ARGS, by="ann")
    await engine.withdraw_resolution(saga.id, "s1", by="ann", note="it went to the wrong list")
    again = {**ARGS, "body": "sorry, again"}
    sent = await engine.send_follow_up(saga.id, "s1", tool="mail.send", args=again, by="ann")
    assert (sent.state, sent.follow_up_id) == ("sent", "s1+f2")
    assert mails(world) == ["Price: 100", "sorry", "sorry, again"]
    await engine.close()
