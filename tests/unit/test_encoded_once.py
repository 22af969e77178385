"""Issue 29: each record of a step is encoded once. The text the log stores is the text it
hashes (no second JSON encoding inside the chain), and the result-size cap measures that same
text instead of encoding the result again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log import records, sql, texts


def _catalog() -> amends.Catalog:
    cat = amends.Catalog()

    @cat.tool("t.put", reversibility="reversible")
    async def put(call: amends.Call, i: int) -> dict[str, Any]:
        call.inverse("t.put", i=-i)
        call.no_drift_check(reason="a test value only this saga writes")
        return {"i": i, "text": "x" * 100}

    return cat


@pytest.mark.parametrize("where", ["file", "memory"])
async def test_a_step_encodes_each_of_its_two_records_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = str(tmp_path / "log.db") if where == "file" else ":memory:"
    engine = amends.Engine(_catalog(), log=amends.SqliteLog(path))
    encoded: Counter[str] = Counter()
    real_dumps = records.dumps

    def counting_dumps(value: Any) -> str:
        encoded["texts" if isinstance(value, dict) else "other"] += 1
        return real_dumps(value)

    def counting(module: Any, name: str) -> None:
        real = getattr(module, name)

        def counted(value: Any) -> str:
            encoded[name] += 1
            return real(value)  # type: ignore[no-any-return]

        monkeypatch.setattr(module, name, counted)
        if getattr(sql, name, None) is real:
            monkeypatch.setattr(sql, name, counted)

    counting(texts, "step_intent_text")
    counting(records, "_finish_text")
    monkeypatch.setattr(records, "dumps", counting_dumps)
    monkeypatch.setattr(sql, "dumps", counting_dumps)
    monkeypatch.setattr(texts, "dumps", counting_dumps)
    async with engine.saga("twenty at once") as saga:
        before = encoded.copy()  # the saga's own record (title, meta)
        await saga.gather(*(saga.call("t.put", i=i) for i in range(20)))
        during = encoded - before
    # an intent and a finish record per step, each written once; nothing else is encoded
    # (before: the chain encoded each text again inside a JSON list, and the cap the result).
    # Issue 29: a record's text is written from its parts (the fixed keys by hand), so the
    # encoder runs once for each object value it holds: the intent's arguments, the outcome's
    # inverse arguments and its result (3 per step), each once
    assert dict(during) == {"step_intent_text": 20, "_finish_text": 20, "texts": 60}
    record = await engine.log.get_saga(saga.id)
    assert record is not None
    assert [s.result for s in record.steps] == [{"i": i, "text": "x" * 100} for i in range(20)]
    assert await engine.log.verify(saga.id) == []  # what was hashed is what was stored
    await engine.close()


async def test_a_result_over_the_cap_is_still_measured_exactly(tmp_path: Path) -> None:
    """The cap checks the record's text first; a record over the cap whose result alone fits
    keeps the result, one whose result is over gets the summary (issue 21 item 13)."""
    cat = amends.Catalog()

    @cat.tool("t.big", reversibility="irreversible")
    async def big(call: amends.Call, n: int) -> str:
        return "y" * n

    engine = amends.Engine(
        cat, log=amends.SqliteLog(str(tmp_path / "cap.db")), max_result_bytes=300
    )
    async with engine.saga("results near the cap") as saga:
        fits = saga.call("t.big", n=290)  # the result (292 bytes as JSON) fits, its record not
        over = saga.call("t.big", n=400)
        await saga.gather(fits, over)
    record = await engine.log.get_saga(saga.id)
    assert record is not None
    assert record.steps[0].result == "y" * 290
    assert record.steps[1].result["bytes"] == 402
    assert record.steps[1].result["amends_summary"].startswith("result too large (402 bytes")
    await engine.close()
