"""Adversarial shapes: a 500-step dependency chain and a 1,000-step fan-out undo completely,
in order, without recursion limits or a stuck reversal (rules 3 and 7)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import amends
from amends import StepState

pytestmark = pytest.mark.slow


def kv_catalog(data: dict[str, Any], order: list[str]) -> amends.Catalog:
    cat = amends.Catalog()

    @cat.tool("kv.read", reversibility="read_only")
    async def read(call: amends.Call, key: str) -> Any:
        return data.get(key)

    @cat.tool("kv.set", reversibility="reversible")
    async def set_(call: amends.Call, key: str, value: Any) -> dict[str, Any]:
        if call.phase == "compensate":
            order.append(key)
        before = data.get(key)
        data[key] = value
        call.inverse("kv.set", key=key, value=before)
        call.expect("kv.read", {"key": key}, equals=value)
        return {"key": key}

    return cat


async def test_a_500_step_chain_is_undone_last_first_within_its_budget() -> None:
    data: dict[str, Any] = {}
    order: list[str] = []
    engine = amends.Engine(kv_catalog(data, order), log=amends.SqliteLog(":memory:"))
    async with engine.saga("deep chain") as saga:
        prev: amends.Step | None = None
        for i in range(500):
            prev = saga.call("kv.set", key=f"k{i}", value=i, after=[prev] if prev else [])
    started = time.monotonic()
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=1000, seconds=120))
    assert time.monotonic() - started < 60
    assert report.status == "fully_reversed"
    assert report.tool_calls == 1000  # one probe and one inverse per step
    assert order == [f"k{i}" for i in reversed(range(500))]  # rule 3: dependents first
    assert all(v is None for v in data.values())
    await engine.close()


async def test_a_1000_step_fan_out_is_undone_and_a_short_budget_stops_honestly() -> None:
    data: dict[str, Any] = {}
    order: list[str] = []
    engine = amends.Engine(kv_catalog(data, order), log=amends.SqliteLog(":memory:"))
    async with engine.saga("wide fan-out") as saga:
        for i in range(1000):
            saga.call("kv.set", key=f"w{i}", value=i)
    short = await engine.undo(saga.id, budget=amends.Budget(tool_calls=100, seconds=120))
    states = [s.state for s in short.steps]
    reverted = states.count(StepState.REVERTED)
    assert set(states) <= {StepState.REVERTED, StepState.OVER_BUDGET, StepState.FAILED}
    # every reverted step is restored in the world; nothing else was touched
    for s in short.steps:
        touched = data[f"w{int(s.step_id[1:]) - 1}"] is None  # step s1 wrote w0
        assert touched == (s.state is StepState.REVERTED), s
    assert short.tool_calls <= 100
    assert reverted == len(order)
    started = time.monotonic()
    rest = await engine.resume(saga.id, budget=amends.Budget(tool_calls=3000, seconds=120))
    assert time.monotonic() - started < 60
    assert rest.status == "fully_reversed"
    assert all(v is None for v in data.values())
    assert sorted(order) == sorted(f"w{i}" for i in range(1000))  # each inverse sent once
    await engine.close()
