"""Issue 9.7: log records serialise on their own types, once; the CLI and the server build on it.

``to_dict()`` gives every field by name as JSON-ready data and ``from_dict()`` reads it back
exactly; ``amends show --json`` and the HTTP API show those dicts plus their computed extras.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

import amends
from amends._log import base
from amends._log.base import (
    ChainProblem,
    CompensationRecord,
    Event,
    Resolution,
    ReversalRecord,
    SagaRecord,
    StepRecord,
)
from amends.cli import main
from amends.server import ServerSettings, TokenStore, create_app
from core_world import fresh

RECORDS = (StepRecord, SagaRecord, ReversalRecord, CompensationRecord, Event, ChainProblem)

# --- generated records ---------------------------------------------------------------------------
_ids = st.text("abcdefgh0123456789_-:", min_size=1, max_size=10)
_text = st.text(max_size=12)
_maybe_text = st.none() | _text
_time = st.floats(min_value=0, max_value=4e9, allow_nan=False)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_obj = st.dictionaries(_text, _json, max_size=4)

steps = st.builds(
    StepRecord,
    saga_id=_ids,
    step_id=_ids,
    seq=st.integers(min_value=1, max_value=10_000),
    tool=_ids,
    args=_obj,
    deps=st.lists(_ids, max_size=3).map(tuple),
    resources=st.lists(_text, max_size=3).map(tuple),
    declared=st.sampled_from(["reversible", "compensable", "irreversible", "read_only"]),
    effective=st.none() | st.sampled_from(["reversible", "irreversible"]),
    state=st.sampled_from(["intent", "done", "failed", "in_doubt", "cancelled", "skipped"]),
    result=_json,
    inverse=st.none() | _obj,
    expectation=st.none() | _obj,
    residue=st.lists(_obj, max_size=3).map(tuple),
    acknowledgement=st.none() | _obj,
    violation=_maybe_text,
    error=_maybe_text,
    started_at=_time,
    finished_at=st.none() | _time,
)
reversals = st.builds(
    ReversalRecord,
    reversal_id=_ids,
    saga_id=_ids,
    state=st.sampled_from(["running", "done"]),
    budget=_obj,
    owner=_maybe_text,
    generation=st.integers(min_value=0, max_value=100),
    lease_until=st.none() | _time,
    requested_at=_time,
    finished_at=st.none() | _time,
    calls_spent=st.integers(min_value=0, max_value=1000),
    tokens_spent=st.integers(min_value=0, max_value=10**6),
    report=st.none() | _obj,
    continuations=st.integers(min_value=0, max_value=5),
)
resolutions = st.builds(Resolution, step_id=_ids, by=_text, note=_maybe_text, at=_time)
sagas = st.builds(
    SagaRecord,
    saga_id=_ids,
    title=_text,
    tenant=_maybe_text,
    actor=_maybe_text,
    state=st.sampled_from(["running", "completed", "failed"]),
    created_at=_time,
    finished_at=st.none() | _time,
    owner=_maybe_text,
    lease_until=st.none() | _time,
    steps=st.lists(steps, max_size=3).map(tuple),
    reversal=st.none() | reversals,
    meta=_obj,
    resolutions=st.dictionaries(_ids, resolutions, max_size=2),
)
compensations = st.builds(
    CompensationRecord,
    reversal_id=_ids,
    step_id=_ids,
    state=st.sampled_from(["dispatched", "reverted", "compensated", "failed", "drifted"]),
    attempts=st.integers(min_value=0, max_value=50),
    detail=_maybe_text,
    data=_obj,
    generation=st.integers(min_value=0, max_value=100),
    updated_at=_time,
)
events = st.builds(
    Event,
    event_id=st.integers(min_value=1, max_value=10**9),
    saga_id=_ids,
    step_id=st.none() | _ids,
    reversal_id=st.none() | _ids,
    kind=st.sampled_from(["saga.started", "step.done", "compensation.reverted", "undo.asked"]),
    at=_time,
    data=_obj,
)
problems = st.builds(
    ChainProblem,
    saga_id=_ids,
    event_id=st.none() | st.integers(min_value=1, max_value=10**9),
    what=st.sampled_from(["edited", "inserted", "deleted", "report mismatch"]),
    detail=_text,
)
any_record = st.one_of(steps, sagas, reversals, compensations, events, problems)


@given(any_record)
def test_every_record_round_trips_exactly_through_to_dict_and_json(record: Any) -> None:
    """from_dict(to_dict(x)) == x, also after the dict went through JSON text."""
    cls = type(record)
    data = record.to_dict()
    assert cls.from_dict(data) == record
    assert cls.from_dict(json.loads(json.dumps(data, allow_nan=False))) == record


@given(sagas)
def test_to_dict_names_every_field_and_nests_records_by_their_own_to_dict(saga: SagaRecord) -> None:
    data = saga.to_dict()
    assert list(data) == [f.name for f in dataclasses.fields(SagaRecord)]
    assert data["steps"] == [s.to_dict() for s in saga.steps]
    assert data["reversal"] == (None if saga.reversal is None else saga.reversal.to_dict())
    assert data["resolutions"] == {k: r.to_dict() for k, r in saga.resolutions.items()}
    for step in data["steps"]:
        assert list(step) == [f.name for f in dataclasses.fields(StepRecord)]
        assert type(step["deps"]) is list and type(step["residue"]) is list


def test_to_dict_is_a_copy_the_record_does_not_change_with_it() -> None:
    step = StepRecord(
        "s1", "a", 1, "crm.note", {"text": ["hi"]}, (), (), "reversible", None, "done"
    )
    data = step.to_dict()
    data["args"]["text"].append("changed")
    data["deps"].append("b")
    assert step.args == {"text": ["hi"]} and step.deps == ()


@pytest.mark.parametrize("cls", RECORDS)
def test_from_dict_of_no_mapping_names_the_value_and_the_fix(cls: Any) -> None:
    with pytest.raises(amends.ConfigError) as err:
        cls.from_dict(["not", "a", "dict"])
    assert str(err.value) == (
        f"{cls.__name__}.from_dict needs a mapping, got list ['not', 'a', 'dict']; "
        f"pass what {cls.__name__}.to_dict() returned"
    )


def test_from_dict_names_the_first_missing_field() -> None:
    with pytest.raises(amends.ConfigError) as err:
        SagaRecord.from_dict({"saga_id": "s1", "title": "t"})
    assert str(err.value) == (
        "SagaRecord.from_dict: {'saga_id': 's1', 'title': 't'} has no 'tenant'; "
        "pass what SagaRecord.to_dict() returned"
    )
    with pytest.raises(amends.ConfigError, match=r"StepRecord.from_dict: .* has no 'tool'"):
        SagaRecord.from_dict(
            {**_saga_fields(), "steps": [{"saga_id": "s1", "step_id": "a", "seq": 1}]}
        )


def _saga_fields() -> dict[str, Any]:
    return {
        "saga_id": "s1",
        "title": "t",
        "tenant": None,
        "actor": None,
        "state": "completed",
        "created_at": 1.0,
        "finished_at": 2.0,
        "owner": None,
        "lease_until": None,
    }


def test_from_dict_ignores_a_views_extras_and_fills_defaults() -> None:
    """A view adds keys (verb, history, catalog); from_dict reads the record back without them."""
    saga = SagaRecord.from_dict({**_saga_fields(), "history": [], "catalog": None, "x": 1})
    assert saga == SagaRecord("s1", "t", None, None, "completed", 1.0, 2.0, None, None)
    assert saga.steps == () and saga.reversal is None and saga.resolutions == {}


def _field_docstrings(cls: type) -> dict[str, str | None]:
    tree = ast.parse(inspect.getsource(base))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    out: dict[str, str | None] = {}
    for i, stmt in enumerate(node.body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            nxt = node.body[i + 1] if i + 1 < len(node.body) else None
            doc = (
                nxt.value.value
                if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                else None
            )
            out[stmt.target.id] = doc if isinstance(doc, str) else None
    return out


@pytest.mark.parametrize("cls", RECORDS)
def test_every_field_of_a_log_record_says_what_it_means(cls: type) -> None:
    docs = _field_docstrings(cls)
    assert list(docs) == [f.name for f in dataclasses.fields(cls)]
    assert [name for name, doc in docs.items() if not doc or len(doc) < 12] == []


# --- real records, the CLI and the server ---------------------------------------------------------
@pytest.fixture
async def undone(tmp_path: Path) -> tuple[str, str, str]:
    """A saga of three steps (revert, compensate, acknowledge), undone, in a SQLite log."""
    world, catalog = fresh()
    db = str(tmp_path / "records.db")
    engine = amends.Engine(catalog, log=db)
    async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="acme", cents=5000, after=[a])
        saga.call("mail.send", to="bob@acme.test", subject="Won", after=[b])
    report = await engine.undo(saga.id)
    await engine.close()
    assert world.crm["r1"]["stage"] == "lead"
    return db, saga.id, report.reversal_id


async def test_records_read_from_a_real_log_round_trip(undone: tuple[str, str, str]) -> None:
    db, saga_id, reversal_id = undone
    log = amends.open_log(db)
    try:
        saga = await log.get_saga(saga_id)
        history = await log.events(saga_id)
        comps = await log.get_compensations(reversal_id)
    finally:
        await log.close()
    assert saga is not None and saga.reversal is not None and len(saga.steps) == 3
    assert sorted(comps) == ["s1", "s2"] and len(history) > 10  # mail.send: acknowledged only
    records: list[Any] = [saga, *saga.steps, saga.reversal, *comps.values(), *history]
    for record in records:
        text = json.dumps(record.to_dict())
        assert type(record).from_dict(json.loads(text)) == record
    charge = next(s for s in saga.steps if s.tool == "pay.charge").to_dict()
    assert charge["residue"][0]["what"] == "Refund of 50.00 to acme"
    assert charge["inverse"]["tool"] == "pay.refund"


async def test_show_json_is_the_saga_record_plus_its_catalog_and_history(
    undone: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``amends show ID --json`` == SagaRecord.to_dict() + catalog + history (Event.to_dict)
    + integrity (rule 12: whether its hash chain verifies)."""
    db, saga_id, _ = undone
    log = amends.open_log(db)
    try:
        saga = await log.get_saga(saga_id)
        history = await log.events(saga_id)
    finally:
        await log.close()
    assert saga is not None
    assert await asyncio.to_thread(main, ["show", saga_id, "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        **saga.to_dict(),
        "catalog": saga.meta["catalog"],
        "history": [e.to_dict() for e in history],
        "integrity": {"verified": True, "problems": []},
    }
    assert SagaRecord.from_dict(out) == saga  # the output reads back as the record
    assert out["reversal"]["report"]["status"] == "cannot_undo"

    assert await asyncio.to_thread(main, ["show", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    expected = {k: v for k, v in saga.to_dict().items() if k not in ("steps", "resolutions")}
    assert listed == [{**expected, "integrity": {"verified": True}}]
    assert listed[0]["reversal"]["state"] == "done"


def test_api_shows_records_by_to_dict_with_extras_and_no_worker_id(
    undone: tuple[str, str, str],
) -> None:
    """GET /sagas, /sagas/{id} and /reversals/{id}: the records' to_dict (owner left out), plus
    reversibility / verb / undo_state per step, integrity, status and headline."""
    db, saga_id, reversal_id = undone
    _, catalog = fresh()

    async def read() -> tuple[SagaRecord, list[Event]]:
        log = amends.open_log(db)
        try:
            saga = await log.get_saga(saga_id)
            assert saga is not None
            return saga, await log.events(saga_id)
        finally:
            await log.close()

    saga, history = asyncio.run(read())
    assert saga.reversal is not None and saga.reversal.owner  # the log knows the worker
    tokens = TokenStore(":memory:")
    auth = {"Authorization": f"Bearer {tokens.create('acme')}"}
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(tokens=tokens))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        detail = client.get(f"/sagas/{saga_id}", headers=auth).json()
        listed = client.get("/sagas", headers=auth).json()["sagas"]
        rev = client.get(f"/reversals/{reversal_id}", headers=auth).json()
    tokens.close()

    record = saga.to_dict()
    for name in ("saga_id", "title", "tenant", "actor", "state", "created_at", "meta"):
        assert detail[name] == listed[0][name] == record[name]
    assert "owner" not in detail and "owner" not in detail["reversal"] and "owner" not in rev
    assert "steps" not in listed[0] and "report" not in listed[0]["reversal"]
    report = saga.reversal.report or {}
    reversal = {k: v for k, v in saga.reversal.to_dict().items() if k not in ("owner", "report")}
    assert detail["reversal"] == {
        **reversal,
        "status": report["status"],
        "headline": report["headline"],
    }
    assert [s["undo_state"] for s in detail["steps"]] == ["reverted", "compensated", "acknowledged"]
    for shown, step in zip(detail["steps"], saga.steps, strict=True):
        extras = {k: shown.pop(k) for k in ("reversibility", "verb", "undo_state")}
        assert shown == step.to_dict()
        assert extras["reversibility"] == step.effective
    assert detail["history"] == [e.to_dict() for e in history]
    assert detail["integrity"] == {"verified": True, "problems": []}
    assert rev == {
        **{k: v for k, v in saga.reversal.to_dict().items() if k != "owner"},
        "tool_calls": saga.reversal.calls_spent,
        "integrity": {"verified": True, "problems": []},
    }


def test_api_withholds_the_report_of_an_edited_history_and_lists_its_problems(
    undone: tuple[str, str, str],
) -> None:
    """Rule 11: a forged report makes integrity list ChainProblem.to_dict() and hides it."""
    db, saga_id, reversal_id = undone
    con = sqlite3.connect(db)
    with con:
        n = con.execute(
            "UPDATE reversals SET report = ? WHERE saga_id = ?",
            ('{"status":"fully_reversed","headline":"Undone 3 of 3","steps":[]}', saga_id),
        ).rowcount
    con.close()
    assert n == 1
    _, catalog = fresh()
    tokens = TokenStore(":memory:")
    auth = {"Authorization": f"Bearer {tokens.create('acme')}"}
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(tokens=tokens))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        detail = client.get(f"/sagas/{saga_id}", headers=auth).json()
        rev = client.get(f"/reversals/{reversal_id}", headers=auth).json()
    tokens.close()
    problems = detail["integrity"]["problems"]
    assert detail["integrity"]["verified"] is False and problems
    assert all(ChainProblem.from_dict(p).saga_id == saga_id for p in problems)
    assert {p["what"] for p in problems} == {"report mismatch"}
    assert detail["reversal"]["status"] == "unverified"
    assert rev["report"] is None and rev["integrity"] == detail["integrity"]


# --- golden: how a record looks as JSON is reviewed like the log schema ---------------------------
GOLDEN = Path(__file__).with_name("golden") / "records.json"


def _golden_records() -> dict[str, Any]:
    step = StepRecord(
        "saga_golden",
        "s1",
        1,
        "pay.charge",
        {"customer": "acme", "card_number": "[redacted:card_number]"},
        (),
        ("pay:acme",),
        "compensable",
        "compensable",
        "done",
        result={"id": "ch_1"},
        inverse={"tool": "pay.refund", "args": {"charge_id": "ch_1"}},
        residue=({"what": "Refund of 50.00 to acme", "parties": ["acme"]},),
        started_at=1796000000.0,
        finished_at=1796000000.5,
    )
    reversal = ReversalRecord(
        "rev_golden", "saga_golden", "done", {"tool_calls": 50}, "host:1:ab", 1, None,
        1796000001.0, 1796000002.0, 1, 0, {"status": "fully_reversed"}, 0,
    )  # fmt: skip
    saga = SagaRecord(
        "saga_golden", "Charge ACME", "acme", "agent:sales", "completed", 1796000000.0,
        1796000000.75, None, None, (step,), reversal, {"catalog": {"ref": "app:catalog"}},
        {"s1": Resolution("s1", "ann", "called them", 1796000003.0)},
    )  # fmt: skip
    return {
        "saga": saga.to_dict(),
        "compensation": CompensationRecord(
            "rev_golden", "s1", "compensated", 1, "refunded", {"key": "k1"}, 1, 1796000001.5
        ).to_dict(),
        "event": Event(
            7, "saga_golden", "s1", "rev_golden", "compensation.compensated", 1796000001.5, {}
        ).to_dict(),
        "problem": ChainProblem("saga_golden", 7, "edited", "hash differs").to_dict(),
    }


def test_records_as_json_match_the_golden_file() -> None:
    """A change to any record's JSON (a field added, renamed, reshaped) shows up in review."""
    text = json.dumps(_golden_records(), indent=2) + "\n"
    if os.environ.get("AMENDS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "records.json changed; if intended, AMENDS_UPDATE_GOLDEN=1"
