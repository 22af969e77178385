"""Issue 29: a reversal's lease is renewed every third of its length while its run goes on
(rule 6: a live run is not taken over), and a run that ends before the first renewal makes no
heartbeat task at all (``amends._engine_api.Heartbeat``: one timer)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import amends
from amends import StepState


def _catalog(wait: float) -> amends.Catalog:
    catalog = amends.Catalog()
    notes: dict[str, str] = {}

    @catalog.tool("note.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> str | None:
        return notes.get(key)

    @catalog.tool("note.put", reversibility="reversible")
    async def put(call: amends.Call, key: str) -> None:
        notes[key] = "x"
        call.inverse("note.delete", key=key)
        call.expect("note.get", {"key": key}, equals="x")

    @catalog.tool("note.delete", reversibility="reversible")
    async def delete(call: amends.Call, key: str) -> None:
        if wait:
            await asyncio.sleep(wait)
        notes.pop(key, None)

    return catalog


async def _undo(wait: float, lease: float) -> tuple[amends.UndoReport, list[float], list[str]]:
    """Undo a one-step saga; the leases the reversal was renewed to, the tasks made."""
    engine = amends.Engine(_catalog(wait), log=amends.SqliteLog(":memory:"), lease_seconds=lease)
    async with engine.saga("notes") as saga:
        await saga.call("note.put", key="k")
    renewed: list[float] = []
    real = engine.log.renew_reversal_lease

    async def renew(reversal_id: str, generation: int, lease_until: float) -> None:
        renewed.append(lease_until)
        await real(reversal_id, generation, lease_until)

    engine.log.renew_reversal_lease = renew  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        report = await engine.undo(saga.id)
    finally:
        loop.set_task_factory(None)
    await engine.close()
    return report, renewed, made


async def test_a_reversal_that_ends_before_its_first_renewal_starts_no_heartbeat_task() -> None:
    report, renewed, made = await _undo(wait=0, lease=30)
    assert report.step("s1").state is StepState.REVERTED
    assert renewed == []
    assert "beat" not in made and "Event.wait" not in made


async def test_a_reversal_longer_than_a_third_of_its_lease_renews_it() -> None:
    """An inverse that takes 0.5 s under a 0.3 s lease: renewed every 0.1 s, each renewal
    pushing the lease further, and the run ends as its own (no take-over, no lost lease)."""
    report, renewed, made = await _undo(wait=0.5, lease=0.3)
    assert report.step("s1").state is StepState.REVERTED
    assert report.status == "fully_reversed"
    assert len(renewed) >= 2
    assert renewed == sorted(renewed)
    assert made.count("beat") == 1
