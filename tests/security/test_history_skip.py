"""Issue 29 (rule 12): an in-memory log skips the check of a saga when it can prove that nothing
but its own SQL changed the database since that saga's last check found it intact.

The proof is the private connection's ``total_changes`` against the rows the log's own
statements counted, and the schema's version (``_SqliteDatabase.untouched``). Each test below
edits the log in another way after a check found the saga intact, and shows that the next check
still runs in full and finds the edit (each fails when the skip is made unconditional); the
first pins the skip itself.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest
from test_read_cache import _EDIT_FIRST_INTENT, _forged_intent
from test_tamper_evidence import Psp, psp_catalog

import amends


def _private(engine: amends.Engine) -> sqlite3.Connection:
    """The log's connection, not handed out (``db._conn`` would end the skip: see below)."""
    conn: sqlite3.Connection = engine.log.db._connection  # type: ignore[attr-defined]
    return conn


async def _charged(engine: amends.Engine, saga_id: str) -> None:
    async with engine.saga(f"Charge {saga_id}", tenant="acme", saga_id=saga_id) as saga:
        saga.call("pay.charge", customer="c1", cents=500)
        saga.call("pay.charge", customer="c2", cents=700)


async def _checked(engine: amends.Engine, saga_id: str) -> None:
    """The saga run forward and found intact by a check (what the skip starts from)."""
    await _charged(engine, saga_id)
    assert await engine.log.verify(saga_id) == []


async def _selects_of_a_check(engine: amends.Engine, saga_id: str) -> tuple[list[str], list[Any]]:
    """The statements of one check of ``saga_id`` that read its rows, and what it found."""
    seen: list[str] = []
    conn = _private(engine)
    conn.set_trace_callback(seen.append)
    try:
        problems = await engine.log.verify(saga_id)
    finally:
        conn.set_trace_callback(None)
    return [s for s in seen if s.startswith("SELECT") and "saga_id" in s], problems


async def _refused(engine: amends.Engine, psp: Psp, saga_id: str, what: str) -> None:
    problems = await engine.log.verify(saga_id)
    assert what in {p.what for p in problems}, problems
    with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
        await engine.undo(saga_id)
    assert psp.refunds == []


async def test_a_check_after_only_the_logs_own_writes_reads_none_of_the_sagas_rows(
    mem: tuple[amends.Engine, Psp],
) -> None:
    engine, psp = mem
    await _checked(engine, "paid")
    await _charged(engine, "other")  # the log's own writes, to another saga
    await engine.log.append_event("paid", "note.added", data={"by": "ops"}, now=1.0)  # and to it
    selects, problems = await _selects_of_a_check(engine, "paid")
    assert (selects, problems) == ([], [])
    report = await engine.undo("paid")  # its own check skipped too; the undo as ever
    assert report.status == "fully_reversed" and sorted(psp.refunds) == ["ch_1", "ch_2"]
    selects, problems = await _selects_of_a_check(engine, "other")  # never checked: in full
    assert problems == [] and any("FROM records" in s for s in selects)


async def test_a_step_edited_through_the_private_connection_is_found(
    mem: tuple[amends.Engine, Psp],
) -> None:
    engine, psp = mem
    await _checked(engine, "paid")
    _private(engine).execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    await _refused(engine, psp, "paid", "edited")


async def test_a_record_deleted_through_the_private_connection_after_own_writes_is_found(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """Own writes after the edit do not hide it: the change was counted before they ran."""
    engine, psp = mem
    await _checked(engine, "paid")
    _private(engine).execute(
        "DELETE FROM records WHERE rec_id = (SELECT max(rec_id) FROM records WHERE saga_id=?)",
        ("paid",),
    )
    await _charged(engine, "other")
    await _refused(engine, psp, "paid", "deleted")


async def test_an_edit_rolled_back_is_still_checked_in_full_and_finds_nothing(
    mem: tuple[amends.Engine, Psp],
) -> None:
    engine, _psp = mem
    await _checked(engine, "paid")
    conn = _private(engine)
    conn.execute("BEGIN")
    conn.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    conn.execute("ROLLBACK")
    selects, problems = await _selects_of_a_check(engine, "paid")
    assert problems == [] and any("FROM records" in s for s in selects)
    selects, problems = await _selects_of_a_check(engine, "paid")  # found intact: skipped again
    assert (selects, problems) == ([], [])


async def test_an_edit_written_through_the_logs_own_write_seam_is_found(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """Only the log's own SQL counts as its own: a function of anyone else's run as a write
    (or a read) is someone else's change."""
    engine, psp = mem
    await _checked(engine, "paid")

    def edit(tx: Any) -> None:
        tx.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))

    await engine.log.db.write(edit)  # type: ignore[attr-defined]
    await _refused(engine, psp, "paid", "edited")


async def test_an_edit_made_inside_a_read_is_found(mem: tuple[amends.Engine, Psp]) -> None:
    engine, psp = mem
    await _checked(engine, "paid")
    await engine.log.db.read(  # type: ignore[attr-defined]
        lambda tx: tx.execute("UPDATE sagas SET title=? WHERE saga_id=?", ("x", "paid"))
    )
    await _refused(engine, psp, "paid", "edited")


async def test_a_trigger_that_edits_during_the_logs_own_write_is_found(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """A trigger is created without changing a row, and its rows are changed by the log's own
    statement: neither is counted as the log's own."""
    engine, psp = mem
    await _checked(engine, "paid")
    _private(engine).execute(
        "CREATE TRIGGER forge AFTER INSERT ON records WHEN NEW.saga_id = 'other' BEGIN "
        "UPDATE sagas SET title='x' WHERE saga_id='paid'; END"
    )
    assert await engine.log.verify("paid") == []  # the schema changed: checked in full
    await _charged(engine, "other")  # fires the trigger
    await _refused(engine, psp, "paid", "edited")


async def test_an_edit_from_another_thread_is_found(mem: tuple[amends.Engine, Psp]) -> None:
    engine, psp = mem
    await _checked(engine, "paid")
    conn = _private(engine)
    edit = threading.Thread(
        target=conn.execute, args=(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    )
    edit.start()
    edit.join()
    await _refused(engine, psp, "paid", "edited")


async def test_two_engines_on_one_log_object_both_find_an_edit(
    mem: tuple[amends.Engine, Psp],
) -> None:
    first, psp = mem
    second = amends.Engine(psp_catalog(psp), log=first.log)
    await _checked(first, "paid")
    assert await second.log.verify("paid") == []
    _private(first).execute("UPDATE sagas SET title=? WHERE saga_id=?", ("x", "paid"))
    with pytest.raises(amends.HistoryAlteredError):
        await second.preview("paid")
    await _refused(first, psp, "paid", "edited")


async def test_a_log_restored_over_by_a_backup_is_checked_in_full(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """``backup`` into the connection rewrites pages without counting a row; it bumps the
    schema's version."""
    engine, psp = mem
    await _checked(engine, "paid")
    forged = sqlite3.connect(":memory:")
    _private(engine).backup(forged)
    forged.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
    forged.commit()
    forged.backup(_private(engine))
    forged.close()
    await _refused(engine, psp, "paid", "edited")


async def test_a_step_edited_through_a_blob_of_the_private_connection_is_found(
    mem: tuple[amends.Engine, Psp],
) -> None:
    """A blob written in place changes no counted row: a blob opened on the connection ends the
    skip for good (the handle may write at any time)."""
    engine, psp = mem
    await _checked(engine, "paid")
    conn = _private(engine)
    (rec_id,) = conn.execute(
        "SELECT min(rec_id) FROM records WHERE saga_id='paid' AND kind='step.intent'"
    ).fetchone()
    with conn.blobopen("records", "body", rec_id) as blob:
        text = blob.read()
        blob.seek(0)
        blob.write(text.replace(b'"cents":500', b'"cents":900'))
    await _refused(engine, psp, "paid", "edited")


async def test_a_connection_handed_out_ends_the_skip(mem: tuple[amends.Engine, Psp]) -> None:
    """Once ``db._conn`` handed the connection out it is not private: every check runs in
    full."""
    engine, psp = mem
    await _checked(engine, "paid")
    conn: sqlite3.Connection = engine.log.db._conn  # type: ignore[attr-defined]
    (rec_id,) = conn.execute(
        "SELECT min(rec_id) FROM records WHERE saga_id='paid' AND kind='step.intent'"
    ).fetchone()
    with conn.blobopen("records", "body", rec_id) as blob:
        text = blob.read()
        blob.seek(0)
        blob.write(text.replace(b'"cents":500', b'"cents":900'))
    await _refused(engine, psp, "paid", "edited")


async def test_a_file_edited_through_a_second_sqlite3_connection_is_found(tmp_path: Any) -> None:
    """Another process may write a file: its log never skips a check (more: test_read_cache)."""
    psp = Psp()
    path = str(tmp_path / "a.db")
    engine = amends.Engine(psp_catalog(psp), log=amends.SqliteLog(path))
    try:
        await _checked(engine, "paid")
        assert await engine.log.verify("paid") == []
        other = sqlite3.connect(path)
        with other:
            other.execute(_EDIT_FIRST_INTENT, (_forged_intent(5), "paid", "paid"))
        other.close()
        await _charged(engine, "other")
        await _refused(engine, psp, "paid", "edited")
    finally:
        await engine.close()
