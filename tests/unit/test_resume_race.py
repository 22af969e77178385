"""Rule 6 (issue 23): concurrent requests join one continuation. A resume that judged "there is
something to continue" while another process's continuation was running, and claimed only after
that one finished, ran a second, empty continuation (seen at load 13: continuations 1 and 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

import amends
from amends import StepState
from amends._log.base import SagaRecord
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio


async def test_a_resume_that_claims_after_another_finished_joins_it(
    tmp_path: Path, catalog: amends.Catalog, world: CoreWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "log.db")
    one, two = amends.Engine(catalog, log=db), amends.Engine(catalog, log=db)
    async with one.saga("Close the ACME deal", actor="ann") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        await saga.gather(a, b)
    world.faults["pay.refund"] = [amends.PermanentError("card closed")]
    first = await one.undo(saga.id)
    assert [s.state for s in first.steps] == [StepState.BLOCKED, StepState.FAILED]
    await one.resolve(saga.id, "s2", by="ann", note="refunded by hand")

    judged = two._check_continuable
    finished: list[amends.UndoReport] = []

    async def the_other_finishes_in_between(record: SagaRecord) -> None:
        await judged(record)  # two: something to continue (s1 waits on the resolved s2)
        finished.append(await one.resume(saga.id, budget=amends.Budget()))

    monkeypatch.setattr(two, "_check_continuable", the_other_finishes_in_between)
    late = await two.resume(saga.id, budget=amends.Budget())
    assert finished[0].continuations == late.continuations == 1
    assert late.reversal_id == first.reversal_id
    assert [s.state for s in late.steps] == [StepState.REVERTED, StepState.FAILED]
    assert sum(1 for e in world.effects if e[0] == "crm.update_field") == 2  # won, then back
    await one.close()
    await two.close()
