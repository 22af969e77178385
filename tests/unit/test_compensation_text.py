"""A compensation record's blob, written field by field (issue 29), is byte for byte the text
the log wrote before: ``dumps`` of the body dict, sorted keys; so its chain hash is the same."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log.base import CompensationWrite
from amends._log.records import compensation_text, dumps, redacted_body
from amends._secrets import Redaction


class _Int(int):
    pass


class _Str(str):
    pass


def _before(w: CompensationWrite) -> str:
    """The body as ``record_compensation`` built and encoded it before issue 29's change."""
    body: dict[str, Any] = {
        "state": w.state,
        "attempts": w.attempts,
        "detail": w.detail,
        "data": dict(w.data),
        "generation": w.generation,
        "calls_spent": w.calls_spent,
        "tokens_spent": w.tokens_spent,
    }
    if w.redacted:
        body["redacted"] = redacted_body(w.redacted)
    return dumps(body)


def _write(**over: Any) -> CompensationWrite:
    fields: dict[str, Any] = {
        "reversal_id": "rev_1",
        "generation": 1,
        "step_id": "s1",
        "state": "dispatched",
        "attempts": 0,
        "detail": "dispatching bench.noop",
        "data": {"key": "amends:saga_1:s1:undo"},
        "calls_spent": 1,
        "tokens_spent": 0,
        "event": "compensation.dispatched",
        "now": 1.5,
    }
    fields.update(over)
    return CompensationWrite(**fields)


CASES: dict[str, dict[str, Any]] = {
    "dispatched": {},
    "reverted": {
        "state": "reverted",
        "attempts": 1,
        "detail": 'reverted with bench.noop; no drift check: "quoted" \\ and\nnewline',
        "data": {"residue": [], "manual_action": {"who": "ops", "parties": ["a", "b"]}},
    },
    "no detail": {"detail": None},
    "non-ASCII and control characters": {"detail": "Zoë paid €5 \u2028 \x00", "state": "in_doubt"},
    "empty data": {"data": {}},
    "data as another mapping": {"data": OrderedDict([("z", 1), ("a", [1.5, None, True])])},
    "unsorted, nested data": {"data": {"b": {"y": 2, "x": 1}, "a": "é"}},
    "redacted": {
        "data": {"key": "k", "note": "amends:secret:API_KEY"},
        "redacted": (Redaction(("note",), "API_KEY", 0),),
    },
    "large ints": {"attempts": 10**30, "calls_spent": -3, "tokens_spent": 2**63, "generation": 7},
    "a bool where an int goes": {"attempts": True, "tokens_spent": False},
    "an int subclass": {"calls_spent": _Int(4)},
    "a str subclass": {"state": _Str("failed"), "detail": _Str("why")},
    "a float where an int goes": {"tokens_spent": 2.5},
}


@pytest.mark.parametrize("over", CASES.values(), ids=list(CASES))
def test_compensation_text_is_the_body_encoded_as_before(over: Mapping[str, Any]) -> None:
    write = _write(**over)
    assert compensation_text(write) == _before(write)


def test_compensation_text_of_an_unencodable_value_fails_as_before() -> None:
    write = _write(data={"when": object()})
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        _before(write)
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        compensation_text(write)


def test_an_undo_stores_each_compensation_record_as_before(tmp_path: Path) -> None:
    """End to end (``Recorder.record`` passes every field by position, issue 29): each stored
    compensation record, its kind and its blob, is the text the log kept before the change."""
    catalog = amends.Catalog()

    @catalog.tool("t.flip", reversibility="reversible")
    async def flip(call: amends.Call, i: int) -> int:
        call.inverse("t.flip", i=i)
        call.no_drift_check(reason="nothing to drift")
        return i

    async def run() -> str:
        engine = amends.Engine(catalog, log=amends.SqliteLog(tmp_path / "log.db"))
        async with engine.saga("two flips") as saga:
            await saga.call("t.flip", i=1)
            await saga.call("t.flip", i=2)
        report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=10, seconds=60))
        assert report.status == "fully_reversed"
        await engine.close()
        return saga.id

    saga_id = asyncio.run(run())
    with closing(sqlite3.connect(tmp_path / "log.db")) as db:
        rows = db.execute(
            "SELECT step_id, kind, body FROM records WHERE phase='c' ORDER BY rec_id"
        ).fetchall()
    reverted = "reverted with t.flip; no drift check: nothing to drift"

    def stored(step: str, calls: int, dispatched: bool) -> str:
        data = f'{{"key":"amends:{saga_id}:{step}:undo"}}' if dispatched else '{"residue":[]}'
        detail, state = (
            ("dispatching t.flip", "dispatched") if dispatched else (reverted, "reverted")
        )
        return (
            f'{{"attempts":{0 if dispatched else 1},"calls_spent":{calls},"data":{data},'
            f'"detail":"{detail}","generation":1,"state":"{state}","tokens_spent":0}}'
        )

    # the two independent steps are undone together: both dispatched, then both reverted
    assert rows == [
        ("s1", "compensation.dispatched", stored("s1", 1, True)),
        ("s2", "compensation.dispatched", stored("s2", 2, True)),
        ("s1", "compensation.reverted", stored("s1", 2, False)),
        ("s2", "compensation.reverted", stored("s2", 2, False)),
    ]
