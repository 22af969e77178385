"""Rule 12: an argument an agent (or whoever steers its prompt) chooses never crashes a saga.

``saga.call`` walks its arguments to find the steps they refer to. An argument nested 100,000
levels deep, or a list that contains itself, made that walk raise Python's ``RecursionError``
out of ``saga.call``, through the agent's framework, instead of an amends error saying what was
wrong. Now it is a :class:`amends.ContractError` naming the tool, nothing is called or logged,
and the saga goes on.
"""

from __future__ import annotations

from typing import Any

import pytest

import amends


def _nested(depth: int) -> list[Any]:
    top: list[Any] = []
    here = top
    for _ in range(depth):
        inner: list[Any] = []
        here.append(inner)
        here = inner
    return top


def _cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize("value", [_nested(100_000), _cyclic()], ids=["deep", "cyclic"])
async def test_an_argument_too_deep_to_walk_is_a_contract_error_and_nothing_runs(
    value: Any,
) -> None:
    calls: list[str] = []
    catalog = amends.Catalog()

    @catalog.tool("notes.add", reversibility="read_only")
    async def add(call: amends.Call, body: Any = None) -> Any:
        calls.append("add")
        return {"ok": True}

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    try:
        async with engine.saga("hostile", saga_id="h") as saga:
            with pytest.raises(amends.ContractError) as info:
                saga.call("notes.add", body=value)
            assert "'notes.add'" in str(info.value)
            assert "nested too deeply to walk (or contains itself); nothing was called" in str(
                info.value
            )
            assert info.value.saga_id == "h" and info.value.step_id == "s1"
            saga.call("notes.add", body="a flat one")  # the saga goes on
        assert calls == ["add"]
        rec = await engine.log.get_saga("h")
        assert rec is not None
        assert [(s.step_id, s.args) for s in rec.steps] == [("s1", {"body": "a flat one"})]
    finally:
        await engine.close()
