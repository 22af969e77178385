"""Issue 23 item 1 on the demo scene: the confirm dialog promises what the report then says.

Before, the dialog said the refund "settles 2026-12-08" (the charge's expected residue, counted
from the machine's date) and the report "settles 2026-12-10" (the processor's, counted from the
sandbox date). The preview is the undo's own run, simulated: same states, same dates."""

from __future__ import annotations

import amends
from amends.sandbox import World, sandbox_catalog
from amends.sandbox.demo import HUMAN_STAGE, _scene
from amends.server.web import screen_of


async def test_the_demo_confirm_dialog_promises_the_states_and_settle_dates_the_report_gives() -> (
    None
):
    world = World(seed=0)
    engine = amends.Engine(sandbox_catalog(world), log=amends.SqliteLog(":memory:"))
    try:
        saga_id = await _scene(engine)
        world.crm.human_edit("acme", "stage", HUMAN_STAGE)  # as the demo: drift, then undo
        world.advance(5.0)
        preview = await engine.preview(saga_id)
        promised = screen_of(preview.to_dict())["residue"]
        charge = next(r for r in promised if r["step"].startswith("Charge"))
        report = await engine.undo(saga_id)
        (refund,) = report.step("charge").residue
        assert charge["settles_at"] == refund.settles_at == "2026-12-10"
        assert {p.step_id: p.predicted for p in preview.steps} == {
            s.step_id: s.state for s in report.steps
        }
    finally:
        await engine.close()
        world.close()
