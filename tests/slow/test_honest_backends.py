"""Issue 10 on both log backends: resolve and continue (rule 6) and the undo-order declaration
(rule 3) persist the same way in SQLite and in a real PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import amends
from amends import StepState
from core_world import CoreWorld

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture(params=["sqlite", "postgres"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    url: str = request.getfixturevalue("pg_url")
    return url


async def test_resolve_and_concurrent_resume_persist_on_every_backend(
    log_url: str, catalog: amends.Catalog, world: CoreWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = amends.Engine(catalog, log=log_url), amends.Engine(catalog, log=log_url)
    async with one.saga("Close the ACME deal", actor="ann") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        c = saga.call("crm.note", record_id="r2", text="won", undo_after=[a])
        await saga.gather(a, b, c)
    world.faults["pay.refund"] = [amends.PermanentError("card closed")]
    first = await one.undo(saga.id)
    assert [s.state for s in first.steps] == [
        StepState.BLOCKED,
        StepState.FAILED,
        StepState.BLOCKED,  # waits for s1's inverse (undo_after), which was blocked
    ]
    await two.resolve(saga.id, "s2", by="ann", note="refunded by hand")
    # Concurrent for real: the continuation's inverse waits until both requests passed their
    # checks (at load 13 one finished before the other read the saga, which is then a later
    # request with nothing to continue, not a concurrent one).
    arrived: list[str] = []
    both_in = asyncio.Event()
    for name, engine in (("one", one), ("two", two)):

        async def arrive(*args: object, _real: object = engine._continue, _n: str = name) -> object:
            arrived.append(_n)
            if len(arrived) == 2:
                both_in.set()
            return await _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(engine, "_continue", arrive)
    world.hooks["crm.update_field"] = both_in.wait
    x, y = await asyncio.gather(
        one.resume(saga.id, budget=amends.Budget()), two.resume(saga.id, budget=amends.Budget())
    )
    assert x.reversal_id == y.reversal_id == first.reversal_id
    assert x.continuations == y.continuations == 1
    assert [s.state for s in x.steps] == [
        StepState.REVERTED,
        StepState.FAILED,
        StepState.REVERTED,
    ]
    assert x.handled("s2") is not None and x.handled("s2")["by"] == "ann"  # type: ignore[index]
    logged = await two.log.get_saga(saga.id)
    assert logged is not None and logged.steps[2].inverse is not None
    assert logged.steps[2].inverse["undo_after"] == ["s1"]
    assert world.crm["r1"]["stage"] == "lead" and world.crm["r2"]["notes"] == []
    assert sum(1 for e in world.effects if e[0] == "crm.update_field") == 2
    await one.close()
    await two.close()
