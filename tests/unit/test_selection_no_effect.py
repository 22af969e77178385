"""Issue 27: a chosen step with nothing to take back needs nothing undone on its account.

"Undo only this" on a probe (a read the agent made before charging) used to pull every step
built on the read into the closure: the charge after it was refunded and the CRM field holding
its id emptied, though undoing a read takes nothing back and no inverse waits for anything
(rule 3). The same for a call the vendor refused (it had no effect, rule 9). Reached from a
chosen step with an effect, such a step still passes that dependency on.
"""

from __future__ import annotations

import pytest

import amends
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio


async def _read_then_charge(engine: amends.Engine, world: CoreWorld) -> str:
    """s1 reads r1's stage (a probe); s2 charges after it; s3 records s2's charge id on r2."""
    world.crm["r2"]["charge"] = None
    async with engine.saga("Check, then charge") as saga:
        s1 = saga.call("crm.read_field", record_id="r1", field="stage")
        s2 = saga.call("pay.charge", customer="c1", cents=5000, after=[s1])
        saga.call("crm.update_field", record_id="r2", field="charge", value=s2["id"])
    return saga.id


async def test_undoing_only_a_read_takes_back_nothing_built_on_it(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _read_then_charge(engine, world)
    preview = await engine.preview(sid, steps=["s1"])
    assert preview.selection == {
        "asked": ["s1"],
        "steps": ["s1"],
        "added": [],
        "kept": ["s2", "s3"],
    }
    report = await engine.undo(sid, steps=["s1"])
    assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "not_needed")]
    assert report.selection == preview.selection
    assert report.status == "fully_reversed"
    assert report.headline == "Nothing to take back · 2 other steps kept as they are"
    assert world.charges["ch_1"]["refunded"] == 0 and world.crm["r2"]["charge"] == "ch_1"
    assert [e[0] for e in world.effects] == ["pay.charge", "crm.update_field"]
    # the charge can still be taken back later, with what stands on it
    later = await engine.undo(sid, steps=["s2"])
    assert later.reversal_id == report.reversal_id
    assert [(s.step_id, s.state.value) for s in later.steps] == [
        ("s1", "not_needed"),
        ("s2", "compensated"),
        ("s3", "reverted"),
    ]
    assert world.charges["ch_1"]["refunded"] == 5000 and world.crm["r2"]["charge"] is None


async def test_a_read_reached_from_a_chosen_write_passes_its_dependency_on(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """s1 wins r1; s2 reads r1 after it; s3 charges after the read: undoing s1 (or s1 and the
    read) also undoes the charge, which stands on what the read saw of s1's effect."""
    async with engine.saga("Win, check, charge") as saga:
        s1 = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        s2 = saga.call("crm.read_field", record_id="r1", field="stage", after=[s1])
        saga.call("pay.charge", customer="c1", cents=700, after=[s2])
    for asked in (["s1", "s2"], ["s1"]):
        preview = await engine.preview(saga.id, steps=asked)
        assert preview.selection is not None
        assert preview.selection["steps"] == ["s1", "s2", "s3"], asked
        assert [a["step_id"] for a in preview.selection["added"]] == (
            ["s3"] if asked == ["s1", "s2"] else ["s2", "s3"]
        )
    report = await engine.undo(saga.id, steps=["s2", "s1"])
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "not_needed"),
        ("s3", "compensated"),
    ]
    assert world.crm["r1"]["stage"] == "lead" and world.charges["ch_1"]["refunded"] == 700


async def test_undoing_only_a_call_the_vendor_refused_takes_back_nothing(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """s1's write to r1 is refused by the vendor (no effect); s2 writes r1 later (the same
    resource, so it ran). Undoing only s1 leaves s2's write."""
    world.faults["crm.update_field"] = [amends.PermanentError("record r1 is locked")]
    async with engine.saga("Two writes") as saga:
        s1 = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.StepFailedError):
            await s1
        saga.call("crm.update_field", record_id="r1", field="owner", value="cy")
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None and [s.state for s in rec.steps] == ["failed", "done"]
    assert rec.steps[1].deps == ("s1",)  # it waited for s1: the same resource
    report = await engine.undo(saga.id, steps=["s1"])
    assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "not_needed")]
    assert report.selection is not None and report.selection["kept"] == ["s2"]
    assert world.crm["r1"]["owner"] == "cy" and world.crm["r1"]["stage"] == "lead"
