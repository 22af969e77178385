"""Rules 5 and 8: an inverse whose answer was lost (it landed) and whose re-send is then refused
must not be reported ``failed``: the engine re-observes and reports what the world shows (found
by ``amends eval`` scenario 11:88; before the fix the report said failed, the world undone)."""

from __future__ import annotations

from typing import Any

import pytest

import amends

pytestmark = pytest.mark.asyncio


def _catalog(store: dict[str, Any], refusals: list[BaseException]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("kv.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> Any:
        return store.get(key)

    @catalog.tool("kv.put", reversibility="reversible", idempotent=True)
    async def put(call: amends.Call, key: str, value: Any) -> dict[str, Any]:
        if call.phase == "compensate" and call.attempt > 1 and refusals:
            raise refusals.pop(0)  # the re-send is refused (the first one had landed)
        before = store.get(key)
        store[key] = value
        if call.phase == "compensate" and call.attempt == 1:
            raise ConnectionResetError("the vendor applied it, then the connection dropped")
        call.inverse("kv.put", key=key, value=before)
        call.expect("kv.get", {"key": key}, equals=value)
        return {"key": key}

    return catalog


@pytest.mark.parametrize(
    "refusal",
    [amends.PermanentError("refused"), amends.PreconditionFailed("value changed")],
    ids=["permanent", "compare_and_set"],
)
async def test_a_refused_re_send_after_a_lost_answer_is_re_observed_never_failed(
    refusal: BaseException,
) -> None:
    store: dict[str, Any] = {"k": "old"}
    engine = amends.Engine(
        _catalog(store, [refusal]),
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    async with engine.saga("put") as saga:
        saga.call("kv.put", key="k", value="new")
    report = await engine.undo(saga.id)
    step = report.step("s1")
    assert store["k"] == "old"  # the first attempt landed
    assert step.state is amends.StepState.REVERTED, step.detail
    assert "whether the first took effect is unknown" in step.detail
    assert "kv.get no longer shows the agent's write" in step.detail
    await engine.close()
