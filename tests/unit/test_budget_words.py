"""A step undo did not attempt because the budget was spent is not "acknowledged": its effect
stands for now, and continuing the reversal with a new budget runs its inverse (rule 6). Every
surface (report, preview, CLI, web) says what continuing will do, never "Acknowledge" and never
"a person must follow up" for it."""

from __future__ import annotations

import amends
from amends import StepState
from amends.server.web import screen_of
from core_world import CoreWorld


async def three_writes(engine: amends.Engine, world: CoreWorld) -> str:
    async with engine.saga("three fields") as saga:
        for rid in ("r1", "r2", "r3"):
            world.crm.setdefault(rid, {"stage": "lead", "version": 1})
            saga.call("crm.update_field", record_id=rid, field="stage", value="won")
    return saga.id


async def test_an_over_budget_step_keeps_the_verb_continuing_will_run(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Preview and report: the cut step reads Revert / over_budget (it was Acknowledge), the
    Undo screen lists it as left for a continued undo, not as needing a person."""
    saga_id = await three_writes(engine, world)
    budget = amends.Budget(tool_calls=4)
    preview = await engine.preview(saga_id, budget=budget)
    assert (preview["s3"].verb, preview["s3"].predicted) == ("Revert", StepState.OVER_BUDGET)
    screen = screen_of(preview.to_dict())
    assert screen["cannot"] == []
    assert [g["key"] for g in screen["groups"]] == ["revert", "budget"]
    assert [p["step_id"] for p in screen["groups"][1]["steps"]] == ["s3"]
    assert screen["summary"] == "Revert 2, Leave 1 for a continued undo (budget)"
    assert "Acknowledge" not in screen["confirm"]
    report = await engine.undo(saga_id, budget=budget)
    s3 = report.step("s3")
    assert (s3.verb, s3.state) == ("Revert", StepState.OVER_BUDGET)
    assert report.to_dict()["steps"][2]["verb"] == "Revert"
    assert "Acknowledge" not in report.render("text")
    assert [world.crm[r]["stage"] for r in ("r1", "r2", "r3")] == ["lead", "lead", "won"]
    done = await engine.resume(saga_id, budget=amends.Budget(tool_calls=10))
    assert (done.step("s3").verb, done.step("s3").state) == ("Revert", StepState.REVERTED)
    assert world.crm["r3"]["stage"] == "lead"


async def test_the_cli_preview_and_counts_leave_an_over_budget_step_to_a_continued_undo(
    engine: amends.Engine, world: CoreWorld, capsys: object
) -> None:
    """`amends undo --dry-run` groups the cut step under the budget, not under "Needs a
    person"; Preview.would counts it as left for a continued undo."""
    from amends.cli._preview import print_preview

    saga_id = await three_writes(engine, world)
    preview = await engine.preview(saga_id, budget=amends.Budget(tool_calls=4))
    assert preview.would == "revert 2 · leave for a continued undo 1"
    print_preview(preview.to_dict(), "now")
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "Needs a person" not in out and "Acknowledge" not in out, out
    assert "Not in this budget (continuing the undo does it) (1)" in out, out
    flat = " ".join(out.split())
    assert "will be over budget: tool-call budget of 4 spent before crm.read_field could" in flat
