"""Issue 12, the engine hot path: the shortcuts give exactly what the slow path gave."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

import amends
from amends import StepState
from amends.contracts import json_copy
from core_world import CoreWorld


def _round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


@pytest.mark.parametrize(
    "value",
    [
        1,
        -0.0,
        2.5,
        "x\ud800y",
        None,
        True,
        {"b": 1, "a": [1, (2, 3), {"z": None, "y": False}]},
        (1, "a"),
        [],
        {},
        10**40,
    ],
)
def test_json_copy_equals_the_json_round_trip_with_the_same_key_order(value: Any) -> None:
    """Plain JSON data is copied directly, to the same value, types and sorted key order."""
    got, want = json_copy(value), _round_trip(value)
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # key order and int/float kinds too


def test_json_copy_of_other_values_takes_the_round_trip() -> None:
    """Int keys become strings, NaN stays NaN, subclasses of int lose their class."""
    assert json_copy({2: "a", 1: "b"}) == {"1": "b", "2": "a"}
    assert math.isnan(json_copy({"n": float("nan")})["n"])

    class Count(int):
        pass

    got = json_copy([Count(3)])
    assert got == [3] and type(got[0]) is int


def test_json_copy_is_a_copy_the_caller_cannot_change_afterwards() -> None:
    """What is logged is not changed by a tool that mutates its data after returning it."""
    data = {"a": [1, {"b": 2}]}
    got = json_copy(data)
    data["a"][1]["b"] = 3  # type: ignore[index]
    data["a"].append(4)
    assert got == {"a": [1, {"b": 2}]}


def test_json_copy_refuses_what_json_refuses() -> None:
    """Non-JSON values and circular data raise what json raises (callers turn it into errors)."""
    with pytest.raises(TypeError):
        json_copy({"when": object()})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        json_copy({"a": loop})


async def test_cancelled_while_the_outcome_is_written_the_write_lands_and_undo_refunds(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Rule 1 without a shielded task per step: the agent's task cancelled while a finished
    step's outcome is written still logs it done with its inverse; the step's task ends
    cancelled (the agent sees CancelledError) and undo refunds the charge."""
    real = engine.log.finish_step
    writing = asyncio.Event()

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        writing.set()
        await asyncio.sleep(0.1)
        await real(*args, **kwargs)

    engine.log.finish_step = slow_finish  # type: ignore[method-assign]
    ids: list[str] = []
    steps: list[amends.Step] = []

    async def agent() -> None:
        async with engine.saga("cancelled late") as saga:
            ids.append(saga.id)
            steps.append(saga.call("pay.charge", customer="c1", cents=5))
            await steps[0]

    task = asyncio.create_task(agent())
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps[0].task is not None and steps[0].task.cancelled()
    logged = await engine.log.get_saga(ids[0])
    assert logged is not None
    assert (logged.steps[0].state, logged.steps[0].inverse is not None) == ("done", True)
    report = await engine.undo(ids[0])
    assert report.step("s1").state == StepState.COMPENSATED
    assert world.charges["ch_1"]["refunded"] == 5
