"""Rule 12: what a tool says when it fails is bounded before the log or a report keeps it.

Issue 21 item 13 capped a step's stored *result*; a tool (or a vendor it relays) that raises
with a 20 MB message still had all of it written to the log, into the step's record, the
compensation's record, the stored report and every rendering of it. Now an error, a contract
violation and a compensation's detail keep their first :data:`amends._jsondata.MAX_DETAIL`
characters and say how long they were; secrets are scrubbed before the cut, so a cut never
leaves part of one behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import amends

MAX_DETAIL = 4000
"""amends._jsondata.MAX_DETAIL: the characters kept of what a tool said."""

HUGE = 5_000_000
CARD = "4242424242424242"


@pytest.fixture
async def engine(tmp_path: Any) -> AsyncIterator[tuple[amends.Engine, str, list[str]]]:
    refunds: list[str] = []
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("pay.charge", reversibility="compensable", sensitive=["card"])
    async def charge(call: amends.Call, card: str, fail: bool = False) -> Any:
        call.inverse("pay.refund", charge_id="ch_1", card=card)
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @catalog.tool("pay.refund", sensitive=["card"], resolve_secret=lambda req: CARD)
    async def refund(call: amends.Call, charge_id: str, card: str) -> Any:
        refunds.append(charge_id)
        # a vendor that echoes the whole request, the card included, in a huge error
        raise amends.PermanentError(f"card {card} refused: " + "E" * HUGE)

    @catalog.tool("mail.send")
    async def send(call: amends.Call, to: str) -> Any:
        raise amends.PermanentError("X" * HUGE)

    @catalog.tool("crm.write")
    async def write(call: amends.Call) -> Any:
        raise RuntimeError("Y" * HUGE)

    path = str(tmp_path / "log.db")
    eng = amends.Engine(catalog, log=path)
    yield eng, path, refunds
    await eng.close()


def _biggest_row(path: str) -> int:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        sizes = [
            conn.execute("SELECT max(length(body)) FROM records").fetchone()[0],
            conn.execute("SELECT coalesce(max(length(report)), 0) FROM reversals").fetchone()[0],
        ]
    finally:
        conn.close()
    return max(sizes)


async def test_a_forward_error_of_megabytes_is_kept_as_its_first_characters(
    engine: tuple[amends.Engine, str, list[str]],
) -> None:
    eng, path, _ = engine
    for tool, sid in (("mail.send", "mail"), ("crm.write", "crm")):
        with pytest.raises(amends.AmendsError):
            async with eng.saga(f"Saga {sid}", saga_id=sid) as saga:
                saga.call(tool, **({"to": "a@b.c"} if tool == "mail.send" else {}))
    mail = (await eng.log.get_saga("mail")).steps[0]  # type: ignore[union-attr]
    assert mail.error is not None
    assert mail.error.startswith("X" * 100)
    assert mail.error.endswith(f"… ({HUGE:,} characters; the rest was not kept)")
    assert len(mail.error) < MAX_DETAIL + 100
    for sid in ("mail", "crm"):
        report = await eng.undo(sid)
        assert len(report.to_json()) < 4 * MAX_DETAIL + 20_000
        assert len(report.render("text")) < 4 * MAX_DETAIL + 20_000
    assert _biggest_row(path) < 4 * MAX_DETAIL + 20_000


async def test_a_compensation_error_of_megabytes_is_cut_after_its_secret_is_scrubbed(
    engine: tuple[amends.Engine, str, list[str]],
) -> None:
    eng, path, refunds = engine
    async with eng.saga("Charge", saga_id="paid") as saga:
        saga.call("pay.charge", card=CARD)
    report = await eng.undo("paid")
    assert refunds == ["ch_1"]
    (step,) = report.steps
    assert step.state == "failed"
    assert "[redacted:card]" in step.detail and CARD not in step.detail
    assert "characters; the rest was not kept" in step.detail
    assert len(step.detail) < MAX_DETAIL + 500
    text = report.to_json()
    assert CARD not in text and len(text) < 4 * MAX_DETAIL + 20_000
    assert _biggest_row(path) < 4 * MAX_DETAIL + 20_000
    comps = await eng.log.get_compensations(report.reversal_id)
    assert all(len(c.detail or "") < MAX_DETAIL + 500 for c in comps.values())


async def test_residue_and_an_acknowledgement_filled_from_a_vendors_answer_are_bounded(
    tmp_path: Any,
) -> None:
    """Rule 12: a contract fills residue and an acknowledgement from the vendor's answer (who
    was notified, when it was delivered); a vendor answering megabytes had all of it written to
    the log, the stored report and every rendering (12 MB of text for one saga). Each sentence
    now keeps its first characters and says how long it was; at most 100 parties are kept."""
    notified = [f"member{i}@example.com" for i in range(1000)]
    stamp = "09:00 " + "Z" * HUGE  # what the vendor answered as its delivery time
    catalog = amends.Catalog()

    @catalog.tool("chat.get", reversibility="read_only")
    async def get(call: amends.Call, message_id: str) -> str:
        return "posted"

    @catalog.tool("chat.post", reversibility="compensable")
    async def post(call: amends.Call, text: str) -> Any:
        call.inverse("chat.delete", message_id="m1")
        call.expect("chat.get", {"message_id": "m1"}, equals="posted")
        call.residue(f"Notified at {stamp}", parties=notified)
        return {"id": "m1"}

    @catalog.tool("chat.delete")
    async def delete(call: amends.Call, message_id: str) -> Any:
        call.residue(f"Deleted at {stamp}", parties=["the channel"])
        return {}

    @catalog.tool("mail.send", reversibility="irreversible")
    async def send(call: amends.Call, to: str) -> Any:
        call.acknowledge(
            who="the sender", parties=notified, what=f"Delivered {stamp}", draft=f"Sorry {stamp}"
        )
        return {}

    path = str(tmp_path / "log.db")
    eng = amends.Engine(catalog, log=path)
    try:
        async with eng.saga("Post and mail", saga_id="chat") as saga:
            saga.call("chat.post", text="hi")
            saga.call("mail.send", to="a@b.c")
        report = await eng.undo("chat")
    finally:
        await eng.close()
    cut = f"… ({len('Deleted at ' + stamp):,} characters; the rest was not kept)"
    post_step, mail_step = report.steps
    assert post_step.state == "compensated"
    assert [r.what for r in post_step.residue] == [f"Deleted at {stamp}"[:MAX_DETAIL] + cut]
    action = mail_step.manual_action
    assert action is not None
    assert action.draft == f"Sorry {stamp}"[:MAX_DETAIL] + (
        f"… ({len('Sorry ' + stamp):,} characters; the rest was not kept)"
    )
    assert list(action.parties) == [*notified[:100], "… and 900 more (not kept)"]
    assert len(report.to_json()) < 20 * MAX_DETAIL + 20_000
    assert len(report.render("text")) < 20 * MAX_DETAIL + 20_000
    assert _biggest_row(path) < 20 * MAX_DETAIL + 20_000
    eng = amends.Engine(catalog, log=path)
    try:  # the bounded records are the history: it verifies, and the stored report reads back
        stored = await eng.report("chat")
        assert stored is not None and stored.to_dict() == report.to_dict()
    finally:
        await eng.close()


def test_bounding_words_bounded_already_keeps_their_first_counts() -> None:
    """Lane temporal2 item 3: a Temporal worker bounds a residue before it crosses the history
    and the workflow bounds it again when it records it; the second cut said "4,045
    characters" and "… and 1 more" (the lengths of the first cut, not the vendor's words).
    Text that only looks cut (a note of megabytes) is cut all the same."""
    from amends._jsondata import bounded_words, wordy

    said = {
        "what": "fee " + "F" * HUGE,
        "parties": [f"p{i}" for i in range(300)],
        "settles_at": "S" * HUGE,
    }
    once = bounded_words(said)
    assert once["what"] == "fee " + "F" * (MAX_DETAIL - 4) + (
        f"… ({HUGE + 4:,} characters; the rest was not kept)"
    )
    assert once["parties"] == [f"p{i}" for i in range(100)] + ["… and 200 more (not kept)"]
    assert once["settles_at"] == "S" * MAX_DETAIL + (
        f"… ({HUGE:,} characters; the rest was not kept)"
    )
    assert not wordy(once)
    assert bounded_words(once) == once
    forged = {"what": "W" * MAX_DETAIL + "… (" + "1" * HUGE + " characters; the rest was not kept)"}
    assert wordy(forged)
    assert len(bounded_words(forged)["what"]) < MAX_DETAIL + 100
    assert wordy({"parties": ["p"] * 100 + ["not a count"]})
