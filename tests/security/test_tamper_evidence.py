"""Issue 21 item 3 (rule 12): tamper evidence without gaps, on SQLite and PostgreSQL.

Each test performs an edit someone with write access to the log could make — deleting an undone
saga's reversal records, deleting a whole saga, editing the saga row — and shows that
``amends doctor --verify`` finds it and that the engine refuses to act on the saga ("this saga's
history was altered") instead of sending a refund again or reporting a forged title.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import amends
from amends.cli.ops import diagnose


@dataclass
class Psp:
    """A payment processor: every refund it was sent."""

    charges: dict[str, str] = field(default_factory=dict)
    refunds: list[str] = field(default_factory=list)


def psp_catalog(psp: Psp) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return psp.charges[charge_id]

    @catalog.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, customer: str, cents: int) -> Any:
        cid = f"ch_{len(psp.charges) + 1}"
        psp.charges[cid] = "captured"
        call.inverse("pay.refund", charge_id=cid)
        call.expect("pay.status", {"charge_id": cid}, equals="captured")
        return {"id": cid}

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> Any:
        psp.refunds.append(charge_id)
        psp.charges[charge_id] = "captured"  # a processor that lets a charge be refunded twice
        return {"refunded": charge_id}

    return catalog


@pytest.fixture
def url(log_url: str) -> str:
    return log_url.removeprefix("sqlite:///")


@pytest.fixture
async def engine_psp(url: str) -> AsyncIterator[tuple[amends.Engine, Psp]]:
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    yield engine, psp
    await engine.close()


async def _charge(engine: amends.Engine, saga_id: str, tenant: str = "acme") -> None:
    async with engine.saga(f"Charge {saga_id}", tenant=tenant, saga_id=saga_id) as saga:
        saga.call("pay.charge", customer="c1", cents=500)


async def _tamper(engine: amends.Engine, *statements: tuple[str, tuple[Any, ...]]) -> None:
    def fn(tx: Any) -> None:
        for sql, params in statements:
            tx.execute(sql, params)

    await engine.log.db.write(fn)  # type: ignore[attr-defined]


async def _findings(url: str) -> list[str]:
    return [f"{f.what}: {f.fix}" for f in await diagnose(url, verify=True) if f.level == "action"]


async def test_deleting_an_undone_sagas_reversal_records_is_found_and_no_refund_is_sent_again(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    engine, psp = engine_psp
    await _charge(engine, "paid")
    first = await engine.undo("paid")
    assert first.status == "fully_reversed" and psp.refunds == ["ch_1"]
    assert await _findings(url) == []
    # someone deletes the reversal: its row and every record it wrote (the saga's tail)
    await _tamper(
        engine,
        ("DELETE FROM records WHERE saga_id=? AND (phase='c' OR kind LIKE 'reversal.%')",
         ("paid",)),
        ("DELETE FROM reversals WHERE saga_id=?", ("paid",)),
    )  # fmt: skip
    found = await _findings(url)
    assert any("saga paid" in f and "deleted" in f for f in found), found
    with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
        await engine.undo("paid")
    assert psp.refunds == ["ch_1"]  # never sent again


async def test_deleting_only_the_reversal_row_is_found_and_undo_is_refused(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    engine, psp = engine_psp
    await _charge(engine, "paid")
    await engine.undo("paid")
    await _tamper(engine, ("DELETE FROM reversals WHERE saga_id=?", ("paid",)))
    found = await _findings(url)
    assert any("whose row is gone" in f or "deleted" in f for f in found), found
    with pytest.raises(amends.HistoryAlteredError):
        await engine.undo("paid")
    assert psp.refunds == ["ch_1"]


async def test_deleting_a_whole_saga_is_found(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    engine, _ = engine_psp
    for sid in ("one", "two", "three"):
        await _charge(engine, sid)
    assert await _findings(url) == []
    await _tamper(
        engine,
        ("DELETE FROM records WHERE saga_id=?", ("three",)),
        ("DELETE FROM sagas WHERE saga_id=?", ("three",)),
    )
    found = await _findings(url)
    assert any("a saga was deleted" in f for f in found), found
    problems = await engine.log.verify()
    assert [(p.saga_id, p.what) for p in problems] == [("(log)", "deleted")]


@pytest.mark.parametrize(
    ("column", "value"),
    [("tenant", "globex"), ("title", "Nothing to see"), ("actor", "alice"),
     ("state", "failed"), ("meta", '{"catalog": {"ref": "os:remove"}}')],
)  # fmt: skip
async def test_editing_the_saga_row_is_found_and_nothing_acts_on_it(
    engine_psp: tuple[amends.Engine, Psp], url: str, column: str, value: str
) -> None:
    engine, psp = engine_psp
    await _charge(engine, "paid")
    await _tamper(engine, (f"UPDATE sagas SET {column}=? WHERE saga_id=?", (value, "paid")))
    found = await _findings(url)
    assert any(f"{column} is " in f for f in found), found
    altered = "this saga's history was altered"
    with pytest.raises(amends.HistoryAlteredError, match=altered):
        await engine.preview("paid")
    with pytest.raises(amends.HistoryAlteredError, match=altered):
        await engine.resolve("paid", "s1", by="alice", note="x")
    with pytest.raises(amends.HistoryAlteredError, match=altered):
        await engine.report("paid")
    with pytest.raises(amends.HistoryAlteredError, match=altered):
        await engine.resume("paid")
    with pytest.raises(amends.HistoryAlteredError, match=altered) as info:
        await engine.undo("paid")
    assert info.value.saga_id == "paid" and info.value.problems
    assert psp.refunds == []
    assert (await engine.log.get_saga("paid")).reversal is None  # type: ignore[union-attr]


async def test_a_forged_head_without_the_key_does_not_hide_a_truncation(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``AMENDS_LOG_KEY`` the head is an HMAC: setting it to what a truncated history
    would have (computed without the key) is caught as well."""
    from amends._log.integrity import head_of

    monkeypatch.setenv("AMENDS_LOG_KEY", "k-secret")
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    try:
        await _charge(engine, "paid")
        await engine.undo("paid")
        events = await engine.log.events("paid")
        cut = next(e.event_id for e in events if e.kind == "reversal.requested")
        rows = await engine.log.db.read(  # type: ignore[attr-defined]
            lambda tx: tx.execute(
                "SELECT hash FROM records WHERE saga_id='paid' AND rec_id<? ORDER BY rec_id",
                (cut,),
            )
        )
        forged = head_of(None, "paid", rows[-1][0])  # the keyless formula
        await _tamper(
            engine,
            ("DELETE FROM records WHERE saga_id='paid' AND rec_id>=?", (cut,)),
            ("DELETE FROM reversals WHERE saga_id='paid'", ()),
            ("UPDATE sagas SET head=? WHERE saga_id='paid'", (forged,)),
        )
        assert [(p.saga_id, p.what) for p in await engine.log.verify("paid")] == [
            ("paid", "deleted")
        ]
        with pytest.raises(amends.HistoryAlteredError):
            await engine.undo("paid")
        assert psp.refunds == ["ch_1"]
    finally:
        await engine.close()


async def _tampered_after_deferred_heads(
    log: amends.SqliteLog, *, handed_out_first: bool, cut_off: bool
) -> tuple[list[tuple[str, str]], list[str]]:
    """Charge, undo and note on ``log``, then forge the saga's head (after cutting its
    reversal off if ``cut_off``) -- on an in-memory log while its heads are still deferred
    (issue 29): through a write that is not the log's own SQL, or through the connection
    handed out before the writes. Returns what ``verify`` finds and the refunds sent by an
    undo asked afterwards."""
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=log)
    try:
        conn = log.db._conn if handed_out_first else None  # type: ignore[attr-defined]
        await _charge(engine, "paid")
        await engine.undo("paid")
        events = await engine.log.events("paid")
        cut = next(e.event_id for e in events if e.kind == "reversal.requested")
        await engine.log.append_event("paid", "note.added", data={}, now=1.0)  # a head waits
        cut_statements = (
            ("DELETE FROM records WHERE saga_id='paid' AND rec_id>=?", (cut,)),
            ("DELETE FROM reversals WHERE saga_id='paid'", ()),
        )
        statements = (
            *(cut_statements if cut_off else ()),
            ("UPDATE sagas SET head='forged' WHERE saga_id='paid'", ()),
        )
        if conn is None:
            await _tamper(engine, *statements)
        else:
            for sql, params in statements:
                conn.execute(sql, params)
        found = [(p.saga_id, p.what) for p in await engine.log.verify("paid")]
        with pytest.raises(amends.HistoryAlteredError):
            await engine.undo("paid")
        return found, psp.refunds
    finally:
        await engine.close()


@pytest.mark.parametrize("cut_off", [False, True], ids=["head-forged", "reversal-cut-off"])
@pytest.mark.parametrize("handed_out_first", [False, True], ids=["foreign-write", "connection"])
async def test_a_tamper_while_an_in_memory_logs_heads_are_deferred_is_found_as_on_a_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, handed_out_first: bool, cut_off: bool
) -> None:
    monkeypatch.setenv("AMENDS_LOG_KEY", "k-secret")
    on_file = await _tampered_after_deferred_heads(
        amends.SqliteLog(tmp_path / "log.db"), handed_out_first=handed_out_first, cut_off=cut_off
    )
    in_memory = await _tampered_after_deferred_heads(
        amends.SqliteLog(":memory:"), handed_out_first=handed_out_first, cut_off=cut_off
    )
    assert on_file == in_memory
    assert on_file == ([("paid", "deleted")], ["ch_1"])
