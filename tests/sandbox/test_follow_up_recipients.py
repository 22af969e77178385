"""Issue 27, rule 8: a follow-up sent to other recipients than the manual action names says
who it really reached.

A person edits the draft and its recipients ("send it to Carol, Ann's assistant"). The
follow-up's residue used to name the manual action's parties (Ann) and the resolution read
"sent with mail.send": the report said Ann was written to, and Carol, who got the message,
appeared nowhere but in the call's arguments. The tool's own declaration in the send (its
acknowledgement's parties) now names them, scrubbed of secrets like everything it logs.
"""

from __future__ import annotations

import amends
from amends.sandbox import World, sandbox_catalog


async def _undone(eng: amends.Engine) -> tuple[str, str]:
    async with eng.saga("Invite") as saga:
        saga.call("mail.send", to="ann@example.com", subject="Party", body="Come at 8")
    report = await eng.undo(saga.id)
    return saga.id, report.reversal_id


async def test_a_follow_up_sent_to_someone_else_names_who_it_reached(sw: World) -> None:
    """Sent to carol instead of ann: its residue's parties are carol, its resolution says
    "to carol@example.com", and the manual action's own parties (what the person was shown
    before confirming) are still ann."""
    eng = amends.Engine(sandbox_catalog(sw, timeout=2.0), log=amends.SqliteLog(":memory:"))
    saga_id, rev_id = await _undone(eng)
    sent = await eng.send_follow_up(
        saga_id, "s1", tool="mail.send", by="ann",
        args={"to": "carol@example.com", "subject": "Sorry", "body": "please ignore it"},
    )  # fmt: skip
    msg = [m for _, m in sw.items("mail.messages") if m["to"] == "carol@example.com"]
    assert len(msg) == 1
    assert sent.parties == ("ann@example.com",)
    assert [r.parties for r in sent.residue] == [("carol@example.com",)]
    assert sent.detail == f"sent with mail.send to carol@example.com (id {msg[0]['id']})"
    report = await eng.report(saga_id)
    assert report is not None
    handled = report.handled("s1")
    assert handled is not None and handled["note"] == (
        f"follow-up s1+f1 of reversal {rev_id}: sent with mail.send to carol@example.com "
        f"(id {msg[0]['id']})"
    )
    listed = await eng.follow_ups(saga_id)
    assert [r.parties for r in listed[0].residue] == [("carol@example.com",)]
    await eng.close()


async def test_a_follow_up_to_the_named_recipient_reads_as_before(sw: World) -> None:
    """Sent to the manual action's own party: nothing more is said ("sent with mail.send")."""
    eng = amends.Engine(sandbox_catalog(sw, timeout=2.0), log=amends.SqliteLog(":memory:"))
    saga_id, _ = await _undone(eng)
    sent = await eng.send_follow_up(
        saga_id, "s1", tool="mail.send", by="ann",
        args={"to": "ann@example.com", "subject": "Sorry", "body": "please ignore it"},
    )  # fmt: skip
    assert sent.detail.startswith("sent with mail.send (id ")
    assert [r.parties for r in sent.residue] == [("ann@example.com",)]
    await eng.close()


async def test_a_recipient_the_tool_declares_sensitive_is_not_logged(sw: World) -> None:
    """A pager tool whose number is sensitive, acknowledging it as the party: the residue and
    the resolution carry its marker, never the number (rule 11)."""
    cat = sandbox_catalog(sw, timeout=2.0)

    @cat.tool("pager.send", sensitive=["number"])
    async def pager_send(call: amends.Call, number: str, text: str) -> dict[str, str]:
        call.acknowledge(who="the sender", parties=[number])
        return {"id": "p-1"}

    eng = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    saga_id, _ = await _undone(eng)
    sent = await eng.send_follow_up(
        saga_id, "s1", tool="pager.send", by="ann", args={"number": "+15551234567", "text": "x"}
    )
    assert sent.state == "sent"
    assert "+15551234567" not in repr(sent.to_dict())
    report = await eng.report(saga_id)
    assert report is not None and "+15551234567" not in report.to_json()
    assert all("+15551234567" not in repr(e.data) for e in await eng.log.events(saga_id))
    await eng.close()


async def test_a_huge_follow_up_and_a_crowd_of_recipients_are_bounded_in_what_it_lists(
    sw: World,
) -> None:
    """A 5 MB edited body sent to a list tool whose acknowledgement names 5,000 recipients:
    the message goes out as typed, and the follow-up's residue and resolution keep their
    words bounded as an inverse's are (rule 12), the first 100 recipients and the count of
    the rest. Its residue used to hold the 5 MB call and every recipient, in the log and in
    every listing (`amends follow-up list`)."""
    cat = sandbox_catalog(sw, timeout=5.0)
    got: list[int] = []

    @cat.tool("list.send")
    async def list_send(call: amends.Call, body: str) -> dict[str, str]:
        got.append(len(body))
        call.acknowledge(who="the sender", parties=[f"p{i}@example.com" for i in range(5000)])
        return {"id": "l-1"}

    eng = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    saga_id, _ = await _undone(eng)
    sent = await eng.send_follow_up(
        saga_id, "s1", tool="list.send", by="ann", args={"body": "x" * 5_000_000}
    )
    assert sent.state == "sent" and got == [5_000_000]
    (residue,) = sent.residue
    assert len(residue.what) < 5_000
    assert residue.what.endswith("… (5,000,050 characters; the rest was not kept)")
    assert len(residue.parties) == 101 and residue.parties[-1] == "… and 4,900 more (not kept)"
    assert len(sent.detail) < 5_000
    assert sent.detail.startswith("sent with list.send to p0@example.com, p1@example.com, ")
    listed = await eng.follow_ups(saga_id)
    assert listed[0].residue == sent.residue
    await eng.close()
