"""Rule 12: one saga rolled back on its own cannot make amends undo it again (SQLite, PostgreSQL).

The attacker can write the log and keeps copies of it. They copy a saga's rows (its records and
its row, head included) after its forward pass or in the middle of its undo, let the undo send
the refund, then write the copy back: the reversal's records and row deleted, the old head
restored. Every record left is genuine and the saga's own chain and head verify, with the log's
key as without it; before the log-wide tally of reversal records (schema version 6) a second
undo sent the refund again (``Psp`` refunds a charge as often as it is asked, as the sandbox's
key-ignoring ``ledger.post`` posts). Now ``amends doctor --verify`` names the cut-off reversal,
every undo, resume and continuation is refused with "this saga's history was altered", the
HTTP API answers 409 and marks the sagas, and nothing is sent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_tamper_evidence import Psp, _charge, _tamper, psp_catalog

import amends
from amends._log.integrity import started_shard
from amends.cli.ops import diagnose

KEY = "k-rollback"
_SAGA_COLS = "title, tenant, actor, state, created_at, finished_at, meta, head"
_REV_COLS = (
    "reversal_id, saga_id, state, budget, owner, generation, lease_until, requested_at, "
    "finished_at, calls_spent, tokens_spent, report, continuations, report_hash"
)


@pytest.fixture
def url(log_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AMENDS_LOG_KEY", KEY)
    return log_url.removeprefix("sqlite:///")


@pytest.fixture
async def engine_psp(url: str) -> AsyncIterator[tuple[amends.Engine, Psp]]:
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    yield engine, psp
    await engine.close()


async def _copy(engine: amends.Engine, saga_id: str) -> dict[str, Any]:
    """What someone with read access keeps of one saga: its last record, row and reversal."""

    def fn(tx: Any) -> dict[str, Any]:
        last = tx.execute("SELECT max(rec_id) FROM records WHERE saga_id=?", (saga_id,))
        row = tx.execute(f"SELECT {_SAGA_COLS} FROM sagas WHERE saga_id=?", (saga_id,))
        rev = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
        return {"last": last[0][0], "row": row[0], "rev": rev[0] if rev else None}

    return await engine.log.db.read(fn)  # type: ignore[attr-defined,no-any-return]


async def _write_back(engine: amends.Engine, saga_id: str, copy: dict[str, Any]) -> None:
    """Roll the saga back to ``copy``: every record after it deleted, its row (head included)
    and its reversal row as they were (the lease made to look expired)."""
    sets = ", ".join(f"{c.strip()}=?" for c in _SAGA_COLS.split(","))
    statements: list[tuple[str, tuple[Any, ...]]] = [
        ("DELETE FROM records WHERE saga_id=? AND rec_id>?", (saga_id, copy["last"])),
        ("DELETE FROM reversals WHERE saga_id=?", (saga_id,)),
        (f"UPDATE sagas SET {sets} WHERE saga_id=?", (*copy["row"], saga_id)),
    ]
    if copy["rev"] is not None:
        rev = list(copy["rev"])
        rev[6] = 0.0  # lease_until: long expired, so a later undo takes the reversal over
        marks = ", ".join("?" * len(rev))
        statements.append((f"INSERT INTO reversals ({_REV_COLS}) VALUES ({marks})", tuple(rev)))
    await _tamper(engine, *statements)


async def _findings(url: str) -> list[str]:
    return [f"{f.what}: {f.fix}" for f in await diagnose(url, verify=True) if f.level == "action"]


@pytest.mark.parametrize("others", [0, 1], ids=["alone", "another-saga-undone-after"])
async def test_a_saga_rolled_back_to_before_its_undo_is_never_undone_again(
    engine_psp: tuple[amends.Engine, Psp], url: str, others: int
) -> None:
    engine, psp = engine_psp
    await _charge(engine, "paid")
    await _charge(engine, "other")
    copy = await _copy(engine, "paid")
    assert (await engine.undo("paid")).status == "fully_reversed"
    if others:
        assert (await engine.undo("other")).status == "fully_reversed"
    assert psp.refunds == ["ch_1", "ch_2"][: 1 + others]
    assert await _findings(url) == []
    await _write_back(engine, "paid", copy)
    # what the saga's own chain and head can see: nothing (every record is genuine)
    assert await engine.log.verify("paid") == []
    found = await _findings(url)
    assert len(found) == 1, found
    recorded = 4 * (1 + others)
    assert found[0].startswith(
        "the log: a saga's reversal was cut off or rolled back (the tally of reversal records "
        "does not verify: records deleted): the log's tally of reversal records does not "
        f"verify: it recorded {recorded} reversal record(s) and {recorded - 4} remain."
    ), found
    for act in (engine.undo, engine.resume):
        with pytest.raises(amends.HistoryAlteredError, match="this saga's history was altered"):
            await act("paid")
    with pytest.raises(amends.HistoryAlteredError) as info:
        await engine.undo("paid")
    assert info.value.saga_id == "paid"
    assert [(p.saga_id, p.what) for p in info.value.problems] == [("(log)", "deleted")]
    assert psp.refunds == ["ch_1", "ch_2"][: 1 + others]  # never sent again
    saga = await engine.log.get_saga("paid")
    assert saga is not None and saga.reversal is None  # nothing written by the refusals
    assert len(await _findings(url)) == 1


async def test_a_saga_rolled_back_to_the_middle_of_its_undo_is_not_taken_over(
    url: str,
) -> None:
    """The copy is taken while the refund is being sent (the reversal claimed, its
    compensation started): written back with its lease expired, the reversal would be taken
    over and the refund looked at again. The take-over is refused; nothing is sent."""
    psp = Psp()
    copies: list[dict[str, Any]] = []
    catalog = amends.Catalog()
    for spec in (psp_catalog(psp).get(n) for n in ("pay.status", "pay.charge")):
        catalog.register(spec.name, spec.fn, reversibility=spec.reversibility)

    @catalog.tool("pay.refund", reversibility="irreversible")
    async def refund(call: amends.Call, charge_id: str) -> Any:
        copies.append(await _copy(engine, "paid"))  # the copy, while the refund is sent
        psp.refunds.append(charge_id)
        return {"refunded": charge_id}

    engine = amends.Engine(catalog, log=url)
    try:
        await _charge(engine, "paid")
        assert (await engine.undo("paid")).status == "fully_reversed"
        assert psp.refunds == ["ch_1"] and copies and copies[0]["rev"] is not None
        await _write_back(engine, "paid", copies[0])
        assert await engine.log.verify("paid") == []
        assert any("tally of reversal records" in f for f in await _findings(url))
        for act in (engine.resume, engine.undo):
            with pytest.raises(amends.HistoryAlteredError, match="history was altered"):
                await act("paid")
        assert (await engine.recover()).resumed == ()
        assert psp.refunds == ["ch_1"]
    finally:
        await engine.close()


async def test_a_reversal_record_copied_into_the_log_again_is_found(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    """A duplicated record of a reversal (or one brought in from another log written with the
    same key) changes the tally: found by ``doctor --verify``, and no undo acts on the log."""
    engine, psp = engine_psp
    await _charge(engine, "paid")
    await _charge(engine, "other")
    await engine.undo("paid")
    cols = "saga_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash"
    await _tamper(
        engine,
        (f"INSERT INTO records ({cols}) SELECT {cols} FROM records WHERE saga_id='paid' AND "
         "kind='reversal.done'", ()),
    )  # fmt: skip
    found = await _findings(url)
    assert any("it holds 5 reversal record(s) and recorded 4" in f for f in found), found
    with pytest.raises(amends.HistoryAlteredError):
        await engine.undo("other")
    assert psp.refunds == ["ch_1"]


async def test_a_log_rewritten_as_version_5_without_its_tally_is_refused(url: str) -> None:
    """Dropping the tally and saying the log is of version 5 (whose upgrade starts a fresh
    tally) does not launder a rollback: the heads version 6 wrote give the rewrite away."""
    psp = Psp()
    engine = amends.Engine(psp_catalog(psp), log=url)
    await _charge(engine, "paid")
    copy = await _copy(engine, "paid")
    await engine.undo("paid")
    await _write_back(engine, "paid", copy)
    await _tamper(
        engine,
        ("DROP TABLE log_tally", ()),
        ("UPDATE amends_meta SET value='5' WHERE key='schema_version'", ()),
    )
    await engine.close()
    with pytest.raises(amends.SchemaVersionError, match="rewritten into an older format"):
        amends.Engine(psp_catalog(psp), log=url)
    assert psp.refunds == ["ch_1"]


@pytest.mark.parametrize("log_url", ["sqlite"], indirect=True)
async def test_every_surface_says_the_log_does_not_verify_and_none_sends_a_refund(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    """The real CLI (``doctor --verify``, ``undo``) and the HTTP API on a rolled-back saga."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    engine, psp = engine_psp
    await _charge(engine, "paid")
    await _charge(engine, "other")
    copy = await _copy(engine, "paid")
    await engine.undo("paid")
    await _write_back(engine, "paid", copy)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    doctor = subprocess.run(  # noqa: ASYNC221 (the real CLI, once)
        [sys.executable, "-m", "amends", "doctor", "--db", url, "--verify"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "a saga's reversal was cut off or rolled back" in doctor.stdout
    assert "Traceback" not in doctor.stdout + doctor.stderr
    show = subprocess.run(  # noqa: ASYNC221 (the real CLI, once)
        [sys.executable, "-m", "amends", "show", "paid", "--db", url, "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert show.returncode == 1, show.stdout + show.stderr
    shown = json.loads(show.stdout)
    assert shown["integrity"]["verified"] is False and shown["reversal"] is None
    assert "tally of reversal records" in shown["integrity"]["problems"][0]["detail"]
    app = create_app(lambda: amends.Engine(psp_catalog(psp), log=url), ServerSettings(no_auth=True))
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
        undo = client.post("/sagas/paid/undo")
        assert (undo.status_code, undo.json()["error"]) == (409, "history_does_not_verify")
        assert "tally of reversal records" in undo.json()["detail"]
        page = client.get("/sagas/paid")
        assert page.status_code == 200, page.text
        shown = page.json()
        assert shown["integrity"]["verified"] is False and shown["reversal"] is None
        assert "tally of reversal records" in shown["integrity"]["problems"][0]["detail"]
        html = client.get("/").text  # the web page marks the sagas
        assert "does not verify" in html
        listing = client.get("/sagas").json()["sagas"]
        assert {s["saga_id"]: s["integrity"]["verified"] for s in listing} == {
            "paid": False,
            "other": False,
        }
        assert client.get("/metrics").status_code == 200
        assert client.get("/").status_code == 200
    assert psp.refunds == ["ch_1"]


async def _doctor(url: str, *extra: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(  # noqa: ASYNC221 (the real CLI)
        [sys.executable, "-m", "amends", "doctor", "--db", url, "--verify", *extra],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    return out.returncode, out.stdout + out.stderr


def _anchor(out: str) -> str:
    return next(
        line.split("log anchor ", 1)[1] for line in out.splitlines() if "log anchor" in line
    )


async def test_a_log_restored_as_a_whole_is_found_by_the_anchor_kept_outside_it(
    engine_psp: tuple[amends.Engine, Psp], url: str
) -> None:
    """The one rollback no record inside the log can show: every row of the log back as it
    was before the undo (here every record after the forward pass deleted and each row written
    back, as restoring a backup does). The anchor ``doctor --verify`` printed after the undo,
    kept elsewhere, finds it; a log that merely grew since its anchor passes."""
    engine, psp = engine_psp
    await _charge(engine, "paid")
    copy = await _copy(engine, "paid")
    rc, before = await _doctor(url)
    assert rc == 0, before
    await engine.undo("paid")
    rc, out = await _doctor(url, "--anchor", _anchor(before))  # grew since: fine
    assert rc == 0 and "the log holds everything the anchor given covers" in out, out
    anchor = _anchor(out)
    await _write_back(engine, "paid", copy)
    await _tamper(engine, ("DELETE FROM log_tally WHERE shard >= 0", ()))  # as it was then
    rc, out = await _doctor(url)
    assert rc == 0, out  # a consistent older log: nothing inside it can tell
    rc, out = await _doctor(url, "--anchor", anchor)
    assert rc == 1, out
    assert "ACTION  the log: it was rolled back to before the anchor given (--anchor)" in out
    last = anchor.split(":")[2]  # the record the anchor was taken at
    assert re.search(rf"the log ends at record \d+, before record {last} it held", out), out
    await _charge(engine, "later")  # and once it has grown past the anchor again
    rc, out = await _doctor(url, "--anchor", anchor)
    assert rc == 1 and "are not those it held when the anchor was taken" in out, out
    assert psp.refunds == ["ch_1"]


@pytest.mark.parametrize("log_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--anchor", "garbage"), "anchor 'garbage' is not one amends printed"),
        (("--anchor", "amends-anchor:1:x:" + "0" * 32), "is not one amends printed"),
    ],
)
async def test_a_bad_anchor_is_a_clear_error(
    engine_psp: tuple[amends.Engine, Psp], url: str, extra: tuple[str, ...], says: str
) -> None:
    engine, _ = engine_psp
    await _charge(engine, "paid")
    rc, out = await _doctor(url, *extra)
    assert rc == 2 and says in out and "amends doctor: " in out, out


async def test_a_saga_copied_from_another_log_with_the_same_key_is_not_undone(
    url: str, tmp_path: Any
) -> None:
    """Two logs share a key (staging and production, two tenants' databases). A saga undone in
    one is copied, as it was before its undo, into the other: every record is genuine and its
    chain and head verify there too, and undoing it sent its refund a second time. Its start is
    in none of the log's shards: the claim is refused, nothing is sent."""
    psp = Psp()
    other = amends.Engine(psp_catalog(psp), log=amends.SqliteLog(tmp_path / "other.db"))
    await _charge(other, "x")
    cols = "saga_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash"
    rows = "saga_id, title, tenant, actor, state, created_at, finished_at, meta, head"
    copied = await other.log.db.read(  # type: ignore[attr-defined]
        lambda tx: (
            tx.execute(f"SELECT {cols} FROM records WHERE saga_id='x' ORDER BY rec_id"),
            tx.execute(f"SELECT {rows} FROM sagas WHERE saga_id='x'")[0],
        )
    )
    assert (await other.undo("x")).status == "fully_reversed"
    await other.close()
    engine = amends.Engine(psp_catalog(psp), log=url)
    try:
        await _charge(engine, "paid")
        await _tamper(
            engine,
            *[(f"INSERT INTO records ({cols}) VALUES ({', '.join('?' * 9)})", tuple(r))
              for r in copied[0]],
            (f"INSERT INTO sagas ({rows}) VALUES ({', '.join('?' * 9)})", tuple(copied[1])),
        )  # fmt: skip
        assert await engine.log.verify("x") == []  # its own history is genuine
        assert any("shard" in f for f in await _findings(url))
        with pytest.raises(amends.HistoryAlteredError, match="shard"):
            await engine.undo("x")
        assert psp.refunds == ["ch_1"]  # x's refund, sent once, by the log it ran in
        starts = await engine.log.db.read(  # type: ignore[attr-defined]
            lambda tx: tx.execute("SELECT saga_id, body FROM records WHERE kind='saga.started'")
        )
        shard = {sid: started_shard(sid, body) for sid, body in starts}
        if shard["paid"] != shard["x"]:  # a saga of another shard is undone as ever
            assert (await engine.undo("paid")).status == "fully_reversed"
            assert psp.refunds == ["ch_1", "ch_2"]
    finally:
        await engine.close()
