"""Rule 1: a step's intent or outcome the log refused to record (a database error while
recording) fails the saga, raised at the block's end, never swallowed; the saga is logged
failed, and a step whose outcome is missing is in doubt for undo."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import amends


def _catalog(world: dict[str, Any]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("kv.read", reversibility="read_only")
    async def read(call: amends.Call, key: str) -> Any:
        return world.get(key)

    @catalog.tool("kv.put", reversibility="reversible")
    async def put(call: amends.Call, key: str) -> Any:
        world[key] = 1
        call.inverse("kv.delete", key=key)
        call.expect("kv.read", {"key": key}, equals=1)
        return "ok"

    @catalog.tool("kv.delete", reversibility="reversible")
    async def delete(call: amends.Call, key: str) -> Any:
        world.pop(key, None)

    return catalog


async def _refusing(tmp_path: Path, phase: str) -> tuple[amends.Engine, dict[str, Any]]:
    """An engine whose log's database refuses every record of ``phase`` (i: intents,
    f: outcomes)."""
    db = str(tmp_path / "log.db")
    world: dict[str, Any] = {}
    engine = amends.Engine(_catalog(world), log=db)
    await engine.log.list_sagas()  # the schema exists
    conn = sqlite3.connect(db)
    conn.execute(
        f"CREATE TRIGGER refuse BEFORE INSERT ON records WHEN NEW.phase = '{phase}' "
        f"BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
    )
    conn.commit()
    conn.close()
    return engine, world


async def test_a_refused_outcome_fails_the_saga_at_the_blocks_end(tmp_path: Path) -> None:
    engine, world = await _refusing(tmp_path, "f")
    try:
        with pytest.raises(amends.StepFailedError) as err:
            async with engine.saga("Put") as saga:
                saga.call("kv.put", key="k")
        said = str(err.value)
        assert "step s1 (kv.put): the log did not record its outcome" in said
        assert "disk says no" in said and err.value.state == "in_doubt"
        assert isinstance(err.value.__cause__, amends.LogError)
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and rec.state == "failed"
        assert [s.state for s in rec.steps] == ["intent"] and world == {"k": 1}
    finally:
        await engine.close()


async def test_a_refused_intent_fails_the_saga_and_the_tool_is_never_called(
    tmp_path: Path,
) -> None:
    engine, world = await _refusing(tmp_path, "i")
    try:
        with pytest.raises(amends.StepFailedError, match="the log did not record the step"):
            async with engine.saga("Put") as saga:
                saga.call("kv.put", key="k")
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and rec.state == "failed" and list(rec.steps) == []
        assert world == {}
    finally:
        await engine.close()


async def test_an_awaited_step_whose_outcome_was_refused_raises_and_the_saga_is_failed(
    tmp_path: Path,
) -> None:
    engine, world = await _refusing(tmp_path, "f")
    try:
        with pytest.raises(amends.LogError, match="disk says no"):
            async with engine.saga("Put") as saga:
                await saga.call("kv.put", key="k")
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and rec.state == "failed" and world == {"k": 1}
    finally:
        await engine.close()


async def test_gather_of_a_step_whose_outcome_was_refused_raises(tmp_path: Path) -> None:
    engine, _world = await _refusing(tmp_path, "f")
    try:
        with pytest.raises(amends.LogError, match="disk says no"):
            async with engine.saga("Put") as saga:
                await saga.gather(saga.call("kv.put", key="k"))
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and rec.state == "failed"
    finally:
        await engine.close()


async def test_undo_of_a_step_whose_outcome_was_refused_says_in_doubt_never_reverted(
    tmp_path: Path,
) -> None:
    engine, world = await _refusing(tmp_path, "f")
    try:
        with pytest.raises(amends.StepFailedError):
            async with engine.saga("Put") as saga:
                saga.call("kv.put", key="k")
        report = await engine.undo(saga.id)
        assert report.status == "cannot_undo"
        assert [s.state for s in report.steps] == ["in_doubt"] and world == {"k": 1}
    finally:
        await engine.close()


async def test_a_saga_whose_records_were_all_written_still_completes(tmp_path: Path) -> None:
    engine, world = await _refusing(tmp_path, "z")  # refuses nothing amends writes
    try:
        async with engine.saga("Put") as saga:
            saga.call("kv.put", key="k")
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and rec.state == "completed" and world == {"k": 1}
    finally:
        await engine.close()
