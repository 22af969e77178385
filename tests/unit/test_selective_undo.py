"""Selective undo (issue 27 part 1): ``engine.undo(saga_id, steps=[...])`` / ``since=``.

A selection undoes the chosen steps and every step that depends on them (used their output,
declared ``after=``, touched a resource later; what their inverses wait for), nothing else; the
rest stays and a later undo extends the same reversal without compensating a step twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import amends
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio


async def _saga(engine: amends.Engine, world: CoreWorld) -> str:
    """s1 wins deal r1; s2 charges c1; s3 writes the charge id into r2 (uses s2's output); s4
    mails (independent); s5 notes on r1 after s1 (after=)."""
    world.crm["r2"]["charge"] = None
    async with engine.saga("Close the ACME deal") as saga:
        s1 = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        s2 = saga.call("pay.charge", customer="c1", cents=5000)
        saga.call("crm.update_field", record_id="r2", field="charge", value=s2["id"])
        saga.call("mail.send", to="ann@x.test", subject="Welcome")
        saga.call("crm.note", record_id="r1", text="closed", after=[s1])
    return saga.id


def _refunds(world: CoreWorld) -> list[tuple[str, str, str]]:
    return [e for e in world.effects if e[0] == "pay.refund"]


async def test_steps_undo_the_selection_and_its_dependents_only(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Taking back the charge also reverts the CRM field that records its id, and nothing else."""
    sid = await _saga(engine, world)
    assert world.crm["r2"]["charge"] == "ch_1"
    report = await engine.undo(sid, steps=["s2"])
    assert [s.step_id for s in report.steps] == ["s2", "s3"]
    assert report.step("s2").state is amends.StepState.COMPENSATED
    assert report.step("s3").state is amends.StepState.REVERTED
    assert world.charges["ch_1"]["refunded"] == 5000
    assert world.crm["r2"]["charge"] is None
    # the rest stands: the deal is still won, the note still there, the mail not acknowledged
    assert world.crm["r1"]["stage"] == "won"
    assert world.crm["r1"]["notes"] == ["closed"]
    assert report.status == "partially_reversed"
    sel = report.selection
    assert sel is not None
    assert sel["asked"] == ["s2"]
    assert sel["steps"] == ["s2", "s3"]
    assert sel["kept"] == ["s1", "s4", "s5"]
    assert sel["added"] == [
        {
            "step_id": "s3",
            "because_of": "s2",
            "why": "output",
            "reason": "undoing s2 (pay.charge) also undoes s3 (crm.update_field): it used "
            "s2's result ('ch_1')",
        }
    ]
    assert report.headline.endswith("3 other steps kept as they are")
    text = report.render("text")
    assert "Selected: s2" in text and "Kept as they are: s1, s4, s5" in text
    assert amends.UndoReport.from_dict(report.to_dict()).selection == sel


async def test_after_and_shared_resource_are_in_the_closure(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Undoing s1 also undoes the note declared after= it; a later write to its record too."""
    async with engine.saga("two writes") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.note", record_id="r2", text="n", after=[a])
        saga.call("crm.update_field", record_id="r1", field="owner", value="cy")
        saga.call("pay.charge", customer="c9", cents=10)
    report = await engine.undo(saga.id, steps=["s1"])
    assert [s.step_id for s in report.steps] == ["s1", "s2", "s3"]
    added = {a["step_id"]: a["why"] for a in report.selection["added"]}  # type: ignore[index]
    assert added == {"s2": "after", "s3": "resource"}
    assert world.crm["r1"]["stage"] == "lead" and world.crm["r1"]["owner"] == "ann"
    assert world.crm["r2"].get("notes") == []
    assert world.charges["ch_1"]["refunded"] == 0


async def test_since_undoes_every_step_after_the_checkpoint(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    report = await engine.undo(sid, since="s3")
    assert [s.step_id for s in report.steps] == ["s4", "s5"]
    assert report.step("s4").state is amends.StepState.ACKNOWLEDGED
    assert report.step("s5").state is amends.StepState.REVERTED
    assert world.crm["r1"]["notes"] == [] and world.crm["r1"]["stage"] == "won"
    assert world.charges["ch_1"]["refunded"] == 0
    assert report.selection is not None and report.selection["asked"] == ["s4", "s5"]


async def test_a_later_whole_undo_skips_what_is_neutralised_and_reports_the_saga(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    first = await engine.undo(sid, steps=["s2"])
    whole = await engine.undo(sid)
    assert whole.reversal_id == first.reversal_id  # one reversal, extended (rule 6)
    assert whole.selection is None
    assert [s.step_id for s in whole.steps] == ["s1", "s2", "s3", "s4", "s5"]
    assert whole.step("s2").state is amends.StepState.COMPENSATED
    assert len(_refunds(world)) == 1, "the charge is refunded once"
    assert world.crm["r1"]["stage"] == "lead"
    compensations = [c for c in world.calls if c[1] == "compensate"]
    assert sorted(c[0] for c in compensations) == [
        "crm.delete_note", "crm.update_field", "crm.update_field", "pay.refund",
    ]  # fmt: skip
    again = await engine.undo(sid)  # asked again: the same report (rule 6)
    assert again.to_dict() == whole.to_dict()


async def test_the_same_selection_twice_and_at_once_joins_one_run(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    a, b = await asyncio.gather(engine.undo(sid, steps=["s2"]), engine.undo(sid, steps=["s2"]))
    assert a == b
    assert await engine.undo(sid, steps=["s3"]) == a  # covered by the first: joined
    assert len(_refunds(world)) == 1


async def test_overlapping_selections_at_once_compensate_each_step_once(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    a, b = await asyncio.gather(
        engine.undo(sid, steps=["s2"]), engine.undo(sid, steps=["s3", "s5"])
    )
    assert len(_refunds(world)) == 1
    writes = [c for c in world.calls if c[:2] == ("crm.update_field", "compensate")]
    assert len(writes) == 1, "s3 reverted once"
    assert a.reversal_id == b.reversal_id
    for r in (a, b):
        assert r.step("s3").state is amends.StepState.REVERTED
    assert world.crm["r1"]["stage"] == "won" and world.crm["r1"]["notes"] == []


async def test_preview_of_a_selection_names_the_closure_and_equals_the_undo(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    before = await engine.log.events(sid)
    preview = await engine.preview(sid, steps=["s2"])
    assert await engine.log.events(sid) == before, "a preview writes nothing"
    assert [p.step_id for p in preview.steps] == ["s2", "s3"]
    assert preview.selection is not None
    assert preview.selection["added"][0]["reason"].startswith(
        "undoing s2 (pay.charge) also undoes s3 (crm.update_field)"
    )
    assert preview.to_dict()["selection"] == preview.selection
    report = await engine.undo(sid, steps=["s2"])
    assert {p.step_id: p.predicted for p in preview.steps} == {
        s.step_id: s.state for s in report.steps
    }
    later = await engine.preview(sid)  # the rest, as the whole undo would take it up
    assert later.predicted("s2") is amends.StepState.COMPENSATED
    assert later.predicted("s1") is amends.StepState.REVERTED
    assert later.selection is None


async def test_resume_of_a_selection_stays_inside_it(
    engine: amends.Engine, world: CoreWorld
) -> None:
    sid = await _saga(engine, world)
    cut = await engine.undo(sid, steps=["s2"], budget=amends.Budget(tool_calls=2))
    assert amends.StepState.OVER_BUDGET in {s.state for s in cut.steps}
    done = await engine.resume(sid, budget=amends.Budget())
    assert [s.step_id for s in done.steps] == ["s2", "s3"]
    assert {s.state for s in done.steps} <= {
        amends.StepState.COMPENSATED, amends.StepState.REVERTED,
    }  # fmt: skip
    assert world.crm["r1"]["stage"] == "won" and world.crm["r1"]["notes"] == ["closed"]
    assert len(_refunds(world)) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"steps": ["s9"]}, amends.ContractError, "has no step 's9'; its steps are s1, s2"),
        ({"since": "s5"}, amends.ConfigError, "nothing to undo after 's5': it is the last step"),
        ({"steps": []}, amends.ConfigError, "steps= is empty"),
        ({"steps": "s2"}, amends.ConfigError, "steps= must be a list of step ids, got 's2'"),
        ({"steps": ["s2"], "since": "s1"}, amends.ConfigError, "give steps= or since=, not both"),
    ],
)
async def test_a_bad_selection_is_refused_and_leaves_the_log_unchanged(
    engine: amends.Engine, world: CoreWorld, kwargs: dict[str, Any], error: type, words: str
) -> None:
    sid = await _saga(engine, world)
    before = await engine.log.events(sid)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        await engine.undo(sid, **kwargs)
    with pytest.raises(error):
        await engine.preview(sid, **kwargs)
    assert await engine.log.events(sid) == before
    assert (await engine.log.get_reversal(saga_id=sid)) is None
    assert not [c for c in world.calls if c[1] in ("compensate", "probe")]
