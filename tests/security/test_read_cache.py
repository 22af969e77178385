"""Issue 29 (rule 12): a log object that already read and verified a saga still sees an edit.

The log keeps what it decoded and verified of each saga it read (``amends._log.cache``), so a
second read skips that work. Each test here lets a live engine read and verify a saga first,
then edits the log through another connection, as another process or someone with the log file
would, and shows that the same live engine finds the edit and refuses to act, on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_tamper_evidence import Psp, psp_catalog

import amends
from amends._log import open_log


@pytest.fixture
async def engine_psp(log_url: str) -> AsyncIterator[tuple[amends.Engine, Psp]]:
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=log_url.removeprefix("sqlite:///"))
    yield engine, psp
    await engine.close()


async def _charged_and_read(engine: amends.Engine, saga_id: str) -> None:
    """The saga run forward, then read and verified by ``engine``'s log (what it caches)."""
    async with engine.saga(f"Charge {saga_id}", tenant="acme", saga_id=saga_id) as saga:
        saga.call("pay.charge", customer="c1", cents=500)
        saga.call("pay.charge", customer="c2", cents=700)
    for _ in range(2):  # the second read and check are the ones served from the cache
        assert await engine.log.verify(saga_id) == []
        got = await engine.log.get_saga(saga_id)
        assert got is not None and [s.args["cents"] for s in got.steps] == [500, 700]


async def _as_another_writer(log_url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run ``statements`` in one transaction of a second log object on the same log."""
    other = open_log(log_url.removeprefix("sqlite:///"), must_exist=True)

    def fn(tx: Any) -> None:
        for sql, params in statements:
            tx.execute(sql, params)

    try:
        await other.db.write(fn)  # type: ignore[attr-defined]
    finally:
        await other.close()


def _forged_intent(cents: int) -> str:
    return json.dumps(
        {"args": {"cents": cents, "customer": "c1"}, "declared": "compensable", "deps": [],
         "resources": [], "seq": 1, "tool": "pay.charge"},
        sort_keys=True, separators=(",", ":"),
    )  # fmt: skip


_EDIT_FIRST_INTENT = (
    "UPDATE records SET body=? WHERE saga_id=? AND kind='step.intent' AND rec_id = "
    "(SELECT min(rec_id) FROM records WHERE saga_id=? AND kind='step.intent')"
)


async def test_a_step_edited_after_the_log_verified_it_is_found_by_that_same_log(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    engine, psp = engine_psp
    await _charged_and_read(engine, "paid")
    await _as_another_writer(log_url, (_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid")))
    problems = await engine.log.verify("paid")
    assert [(p.what, "does not match its hash" in p.detail) for p in problems] == [("edited", True)]
    got = await engine.log.get_saga("paid")
    assert got is not None and [s.args["cents"] for s in got.steps] == [5, 700]  # not the cache's
    with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
        await engine.undo("paid")
    assert psp.refunds == []  # nothing was sent for a history that does not verify


async def test_an_edit_before_records_the_log_appended_since_is_still_found(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    """The verified records are compared column for column, not only the saga's head: an edit
    of an early record stays visible after the live log appended more (a new head)."""
    engine, _psp = engine_psp
    await _charged_and_read(engine, "paid")
    await _as_another_writer(log_url, (_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid")))
    await engine.log.append_event("paid", "note.added", data={"by": "ops"}, now=1.0)
    problems = await engine.log.verify("paid")
    assert [p.what for p in problems] == ["edited"], problems
    events = await engine.log.events("paid")
    assert problems[0].event_id == next(e.event_id for e in events if e.kind == "step.intent")


async def test_a_record_removed_from_the_end_after_the_log_verified_it_is_found(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    engine, psp = engine_psp
    await _charged_and_read(engine, "paid")
    await _as_another_writer(
        log_url,
        ("DELETE FROM records WHERE rec_id = (SELECT max(rec_id) FROM records WHERE saga_id=?)",
         ("paid",)),
    )  # fmt: skip
    problems = await engine.log.verify("paid")
    assert {p.what for p in problems} >= {"deleted"}, problems
    with pytest.raises(amends.HistoryAlteredError):
        await engine.undo("paid")
    assert psp.refunds == []


async def test_a_report_edited_after_the_log_verified_it_is_found(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    engine, psp = engine_psp
    await _charged_and_read(engine, "paid")
    first = await engine.undo("paid")
    assert first.status == "fully_reversed" and sorted(psp.refunds) == ["ch_1", "ch_2"]
    assert await engine.report("paid") is not None  # verified, and cached, once more
    forged = json.loads(json.dumps(first.to_dict()))
    forged["status"] = "nothing_to_do"
    await _as_another_writer(
        log_url, ("UPDATE reversals SET report=? WHERE saga_id=?", (json.dumps(forged), "paid"))
    )
    problems = await engine.log.verify("paid")
    assert [p.what for p in problems] == ["report mismatch"], problems
    with pytest.raises(amends.HistoryAlteredError):
        await engine.report("paid")


async def test_a_step_edited_after_this_process_wrote_it_is_found_by_the_first_check(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    """Issue 29: the first check of a saga does not hash again the records this process wrote
    (it compares each row with the fields it hashed); an edited row is hashed, and found."""
    engine, psp = engine_psp
    async with engine.saga("Charge fresh", tenant="acme", saga_id="fresh") as saga:
        saga.call("pay.charge", customer="c1", cents=500)
        saga.call("pay.charge", customer="c2", cents=700)
    await _as_another_writer(log_url, (_EDIT_FIRST_INTENT, (_forged_intent(5), "fresh", "fresh")))
    problems = await engine.log.verify("fresh")
    assert [(p.what, "does not match its hash" in p.detail) for p in problems] == [("edited", True)]
    with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
        await engine.undo("fresh")
    assert psp.refunds == []


async def test_a_saga_row_edited_after_a_check_found_everything_intact_is_found(
    engine_psp: tuple[amends.Engine, Psp], log_url: str
) -> None:
    """Issue 29: what a past check found intact (the records) is kept, not the verdict: the
    saga row is compared with its history at every check, so an edit of it is found."""
    engine, psp = engine_psp
    await _charged_and_read(engine, "paid")
    await _as_another_writer(log_url, ("UPDATE sagas SET title=? WHERE saga_id=?", ("x", "paid")))
    problems = await engine.log.verify("paid")
    assert [(p.what, "title is 'x'" in p.detail) for p in problems] == [("edited", True)]
    with pytest.raises(amends.HistoryAlteredError):
        await engine.undo("paid")
    assert psp.refunds == []
