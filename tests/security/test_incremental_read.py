"""Issue 29 (rule 12): an in-memory log reads only a saga's new records, yet still sees an edit.

A saga read before by the same log object, with the log's mark unchanged since (nothing but its
own SQL changed the database: ``_SqliteDatabase.untouched``), is read by fetching only its step
records after the last one folded (``SagaCache.steps``). The first test pins that; the others
edit the log between two reads, an OLD record in place among them, and show that the second
read fetches every row again and returns what the log now holds, not what the cache kept.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_history_skip import _private
from test_read_cache import _EDIT_FIRST_INTENT, _forged_intent
from test_tamper_evidence import Psp

import amends


async def _read(engine: amends.Engine, saga_id: str) -> tuple[list[int], list[str]]:
    """The saga's charged cents, read once, and the statements that read its step records."""
    seen: list[str] = []
    conn = _private(engine)
    conn.set_trace_callback(seen.append)
    try:
        got = await engine.log.get_saga(saga_id)
    finally:
        conn.set_trace_callback(None)
    assert got is not None
    steps = [s for s in seen if "FROM records" in s and "phase IN ('i','f','r')" in s]
    return [s.args["cents"] for s in got.steps], steps


async def _charged(engine: amends.Engine, saga_id: str, *cents: int) -> None:
    async with engine.saga(f"Charge {saga_id}", tenant="acme", saga_id=saga_id) as saga:
        for n in cents:
            saga.call("pay.charge", customer="c1", cents=n)


def _only_new(statements: list[str]) -> bool:
    return len(statements) == 1 and "rec_id>" in statements[0]


async def test_a_second_read_after_only_own_writes_fetches_only_the_new_records(
    mem: tuple[amends.Engine, Psp],
) -> None:
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    cents, statements = await _read(engine, "paid")  # the first read: every row
    assert cents == [500, 700] and len(statements) == 1 and "rec_id>" not in statements[0]
    await _charged(engine, "other", 1)  # the log's own writes, to another saga
    cents, statements = await _read(engine, "paid")
    assert cents == [500, 700] and _only_new(statements)
    await engine.log.resolve_step("paid", "s1", by="ops", note="seen", now=1.0)  # and to it
    got = await engine.log.get_saga("paid")
    assert got is not None and got.resolutions["s1"].by == "ops"  # its new record is folded


async def test_an_old_record_edited_in_place_between_two_reads_is_seen(
    mem: tuple[amends.Engine, Psp],
) -> None:
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    assert (await _read(engine, "paid"))[0] == [500, 700]
    _private(engine).execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    cents, statements = await _read(engine, "paid")
    assert cents == [5, 700] and len(statements) == 1 and "rec_id>" not in statements[0]


async def test_an_old_record_edited_then_own_writes_is_still_seen(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """Own writes after the edit do not hide it: the edit moved the mark before they ran."""
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    assert (await _read(engine, "paid"))[0] == [500, 700]
    _private(engine).execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    await _charged(engine, "other", 1)
    assert (await _read(engine, "paid"))[0] == [5, 700]


async def test_an_old_record_deleted_between_two_reads_is_seen(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """The first step's intent deleted: no record after the last one folded, yet the step is
    gone from what the read returns."""
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    assert (await _read(engine, "paid"))[0] == [500, 700]
    conn = _private(engine)
    conn.execute(
        "DELETE FROM records WHERE saga_id='paid' AND kind='step.intent' AND rec_id = "
        "(SELECT min(rec_id) FROM records WHERE saga_id='paid' AND kind='step.intent')"
    )
    assert (await _read(engine, "paid"))[0] == [700]


async def test_an_edit_inside_a_read_function_is_seen(mem: tuple[amends.Engine, Psp]) -> None:
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    assert (await _read(engine, "paid"))[0] == [500, 700]

    def edit(tx: Any) -> None:
        tx.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))

    await engine.log.db.read(edit)  # type: ignore[attr-defined]
    assert (await _read(engine, "paid"))[0] == [5, 700]


async def test_a_write_that_reads_then_rolls_back_leaves_no_row_behind(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """A read inside a write transaction takes no mark: the rows it saw may be rolled back."""
    engine, _psp = mem
    await _charged(engine, "paid", 500, 700)
    assert (await _read(engine, "paid"))[0] == [500, 700]
    from amends._log.sql import _read_saga

    reads = engine.log.reads  # type: ignore[attr-defined]

    def write_read_fail(tx: Any) -> None:
        tx.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
        saga = _read_saga(tx, "paid", reads)
        assert saga is not None and [s.args["cents"] for s in saga.steps] == [5, 700]
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        await engine.log.db.write(write_read_fail)  # type: ignore[attr-defined]
    assert (await _read(engine, "paid"))[0] == [500, 700]


async def test_a_file_log_reads_every_record_each_time(tmp_path: Any) -> None:
    """Another process may write a file: its log never reads only the new records."""
    log = amends.SqliteLog(str(tmp_path / "log.db"))
    try:
        assert log.reads.untouched is None  # type: ignore[attr-defined]
    finally:
        await log.close()
