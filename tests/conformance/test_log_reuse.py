"""Issue 29: a log object does not redo work it already did -- counted, not timed.

A saga read again decodes and verifies only what changed since the log object last read it; a
write on an in-memory log (a private connection: its only writer) reads no chain head, since the
log wrote the last record itself. Where the log cannot know (a file another process may write,
a failed transaction, rows changed outside its transactions) it reads again.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log import SqliteLog, records, sql
from amends._log.base import CompensationWrite, StepFinish, StepIntent

NOW = 1_800_000_000.0


class _Counted:
    """Calls of one function of :mod:`amends._log.records` (the decoder or the chain hash),
    from that module and from :mod:`amends._log.sql`, which appends with its own import of
    the chain hash."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.n = 0
        real = getattr(records, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(records, name, counted)
        if getattr(sql, name, None) is real:
            monkeypatch.setattr(sql, name, counted)

    def take(self) -> int:
        n, self.n = self.n, 0
        return n


class _Statements:
    def __init__(self, log: SqliteLog) -> None:
        self.seen: list[str] = []
        log.db._conn.set_trace_callback(self.seen.append)  # type: ignore[attr-defined]

    def take(self) -> list[str]:
        # statements as traced, values filled in: compare their leading words
        out = [re.split(r"=| \(|,", s, maxsplit=1)[0] for s in self.seen]
        self.seen.clear()
        return out


@pytest.fixture
async def mem() -> AsyncIterator[SqliteLog]:
    log = SqliteLog(":memory:")
    yield log
    await log.close()


async def _saga(log: SqliteLog, saga_id: str, steps: int) -> None:
    await log.create_saga(saga_id, "t", tenant=None, actor=None, owner="w", lease_until=NOW,
                          now=NOW)  # fmt: skip
    for i in range(1, steps + 1):
        await _begin(log, saga_id, f"s{i}", i)
        await log.finish_step(saga_id, f"s{i}", StepFinish("done", effective="reversible"),
                              now=NOW)  # fmt: skip


async def _begin(log: SqliteLog, saga_id: str, step_id: str, seq: int) -> bool:
    return await log.begin_step(
        StepIntent(saga_id, step_id, seq=seq, tool="crm.update_field", args={"v": seq}, deps=[],
                   resources=[f"crm:{seq}"], declared="reversible", now=NOW)
    )  # fmt: skip


def _written_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget what this process hashed when it appended records (``records.chain_hash``, keep),
    as a process that did not write them would."""
    monkeypatch.setattr(records, "_HASHED", [{}, {}])


async def test_a_saga_verified_again_hashes_only_the_records_added_since(
    mem: SqliteLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _saga(mem, "s", 3)
    _written_elsewhere(monkeypatch)
    hashes = _Counted(monkeypatch, "chain_hash")
    assert await mem.verify("s") == []
    assert hashes.take() == 7  # saga.started + 3 intents + 3 finishes
    assert await mem.verify("s") == []
    assert hashes.take() == 0
    await mem.append_event("s", "note.added", data={"by": "ops"}, now=NOW)
    assert hashes.take() == 1  # the append's own hash
    assert await mem.verify("s") == []
    assert hashes.take() == 0  # this process hashed the new record when it appended it
    assert await mem.verify() == []  # the whole log: every record but that one
    assert hashes.take() == 7


async def test_records_this_process_appended_are_compared_not_hashed_again(
    mem: SqliteLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: a check compares each row with the fields this process hashed when it wrote
    it; a row that differs in any of them (here: its body) is hashed, and found edited."""
    await _saga(mem, "s", 3)
    hashes = _Counted(monkeypatch, "chain_hash")
    assert await mem.verify("s") == []
    assert hashes.take() == 0
    conn = mem.db._conn  # type: ignore[attr-defined]
    conn.execute(
        "UPDATE records SET body=replace(body, '\"v\":2', '\"v\":9') WHERE saga_id='s' "
        "AND step_id='s2' AND phase='i'"
    )
    problems = await mem.verify("s")
    assert hashes.take() == 1  # the edited intent only
    assert [(p.what, p.detail.split(" (")[0]) for p in problems] == [("edited", "event 4")]


async def test_a_saga_read_again_decodes_its_steps_only_when_a_step_record_changed(
    mem: SqliteLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _saga(mem, "s", 3)
    decoded = _Counted(monkeypatch, "_step")

    async def steps() -> Any:
        saga = await mem.get_saga("s")
        assert saga is not None
        return saga.steps, saga.resolutions

    first, none = await steps()
    assert decoded.take() == 3 and [s.args for s in first] == [{"v": 1}, {"v": 2}, {"v": 3}]
    assert await steps() == (first, none) and decoded.take() == 0
    await mem.append_event("s", "note.added", data={}, now=NOW)  # no step record: same steps
    assert await steps() == (first, none) and decoded.take() == 0
    await mem.resolve_step("s", "s2", by="ops", note="done by hand", now=NOW + 1)
    after, resolutions = await steps()
    assert decoded.take() == 3
    assert after == first and resolutions["s2"].by == "ops" and not none


async def test_a_memory_logs_writes_read_no_chain_head_and_the_chain_verifies(
    mem: SqliteLog,
) -> None:
    await _saga(mem, "s", 1)
    sql = _Statements(mem)
    await _begin(mem, "s", "s2", 2)
    await mem.finish_step("s", "s2", StepFinish("done", effective="reversible"), now=NOW)
    write = ["BEGIN IMMEDIATE", "INSERT INTO records", "UPDATE sagas SET head", "COMMIT"]
    assert sql.take() == write * 2
    await mem.claim_reversal("s", reversal_id="r", budget={}, owner="w", lease_until=NOW + 60,
                             now=NOW)  # fmt: skip
    sql.take()
    # the claim dropped the "no reversal" mark: the next step reads and is cancelled (issue 2)
    assert await _begin(mem, "s", "s3", 3) is False
    assert sql.take() == ["BEGIN IMMEDIATE", "SELECT", *write[1:]]  # reversal? chain head?
    await mem.record_compensation(
        CompensationWrite("r", 1, "s2", state="reverted", attempts=1, detail="ok", data={},
                          calls_spent=1, tokens_spent=0, event="compensation.reverted", now=NOW)
    )  # fmt: skip
    tally = ["INSERT INTO log_tally"]  # rule 12: counted log-wide, its sum carried as the head
    assert sql.take() == ["BEGIN IMMEDIATE", "SELECT r.generation", write[1], *tally, *write[2:]]
    assert await mem.verify() == []


async def test_a_failed_write_makes_the_next_one_read_the_stored_head(mem: SqliteLog) -> None:
    await _saga(mem, "s", 1)
    await mem.claim_reversal("s", reversal_id="r", budget={}, owner="w", lease_until=NOW + 60,
                             now=NOW)  # fmt: skip
    sql = _Statements(mem)
    stale = CompensationWrite("r", 7, "s1", state="reverted", attempts=1, detail="ok", data={},
                              calls_spent=1, tokens_spent=0, event="compensation.reverted",
                              now=NOW)  # fmt: skip
    with pytest.raises(amends.LeaseLostError):
        await mem.record_compensation(stale)
    sql.take()
    await mem.finish_step("s", "s1", StepFinish("done", effective="reversible"), now=NOW)
    assert "SELECT hash FROM records WHERE saga_id" in sql.take()
    assert await mem.verify() == []


async def test_rows_changed_on_the_connection_outside_a_write_make_the_next_write_read_the_head(
    mem: SqliteLog,
) -> None:
    """The log cannot see what a statement run on its connection by hand changed, only that
    rows changed: the next write reads the stored head, and the removal stays visible."""
    await _saga(mem, "s", 2)
    conn: sqlite3.Connection = mem.db._conn  # type: ignore[attr-defined]
    conn.execute("DELETE FROM records WHERE rec_id = (SELECT max(rec_id) FROM records)")
    conn.commit()
    stored = conn.execute("SELECT hash FROM records ORDER BY rec_id DESC LIMIT 1").fetchone()[0]
    await mem.append_event("s", "note.added", data={}, now=NOW)
    (prev,) = conn.execute("SELECT prev_hash FROM records ORDER BY rec_id DESC LIMIT 1").fetchone()
    assert prev == stored  # linked to what is stored, not to the removed record's hash
    # the saga's head was rewritten by that append, so only the steps show the removal
    assert (await mem.get_saga("s")).steps[1].state == "intent"  # type: ignore[union-attr]


async def test_two_log_objects_writing_one_file_each_read_the_others_head(tmp_path: Path) -> None:
    """A file may have another writer: each write reads the stored head (rule 11)."""
    a, b = SqliteLog(tmp_path / "log.db"), SqliteLog(tmp_path / "log.db")
    try:
        await _saga(a, "s", 1)
        for i in range(4):
            await (a if i % 2 else b).append_event("s", "note.added", data={"i": i}, now=NOW)
        assert await a.verify() == [] and await b.verify() == []
        assert await a.verify("s") == [] and await b.verify("s") == []
        assert [e.data.get("i") for e in await b.events("s")][-4:] == [0, 1, 2, 3]
    finally:
        await a.close()
        await b.close()


async def test_a_step_previewed_then_undone_is_described_once_with_the_same_sentences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preview and the undo read the saga through one log: the same step objects, so the
    step's sentences are made once (issue 29) and both show them."""
    kv: dict[str, str] = {}
    catalog = amends.Catalog()

    @catalog.tool("kv.set", reversibility="compensable", describe="Set {key} to '{value}'")
    async def kv_set(call: amends.Call, key: str, value: str) -> None:
        call.inverse("kv.set", key=key, value=kv.get(key, ""))
        kv[key] = value

    made: list[str] = []
    real = amends.Catalog.describe

    def describe(self: amends.Catalog, tool: str, args: Any) -> str:
        made.append(sys._getframe(1).f_code.co_name)  # the steps' describer, or another caller
        return real(self, tool, args)

    monkeypatch.setattr(amends.Catalog, "describe", describe)
    async with amends.Engine(catalog, log=":memory:") as engine:
        async with engine.saga("Set two keys", saga_id="s") as saga:
            saga.call("kv.set", key="a", value="1")
            saga.call("kv.set", key="b", value="2")
        preview = await engine.preview("s")
        report = await engine.undo("s")
    shown = sorted((s.description, s.inverse_description) for s in report.steps)
    assert sorted((s.description, s.inverse_description) for s in preview.steps) == shown
    assert shown == [
        ("Set a to '1'", "Set a to an empty value"),
        ("Set b to '2'", "Set b to an empty value"),
    ]
    assert made.count("sentences") == 4  # two steps, each with its inverse, once (the describer)
