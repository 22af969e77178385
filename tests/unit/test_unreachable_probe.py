"""Rule 8 (issue 24 item 3): a check that could not reach its server says so, even when the time
budget runs out on a later attempt (an upstream that died restarts slowly on a loaded machine:
the last words were "the time budget ran out while ... was running", with nothing about the
server it never reached)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import amends

pytestmark = pytest.mark.asyncio


def flaky_world() -> tuple[amends.Catalog, dict[str, Any]]:
    world: dict[str, Any] = {"note": "v1", "reads": 0}
    catalog = amends.Catalog()

    @catalog.tool("note_get", reversibility="read_only")
    async def note_get(call: amends.Call) -> str:
        world["reads"] += 1
        if world["reads"] == 1:
            raise amends.TransientError("could not reach upstream 'notes': it stopped")
        await asyncio.sleep(60)  # the restart hangs past the budget
        return str(world["note"])

    @catalog.tool("note_set", reversibility="reversible")
    async def note_set(call: amends.Call, text: str) -> None:
        old = world["note"]
        world["note"] = text
        call.inverse("note_set", text=old)
        call.expect("note_get", {}, equals=text)

    return catalog, world


async def test_a_check_that_never_got_through_names_the_server_when_the_budget_runs_out() -> None:
    catalog, world = flaky_world()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("Edit the note", actor="agent:notes") as saga:
        saga.call("note_set", text="v2")
    report = await engine.undo(saga.id, budget=amends.Budget(seconds=1.5))
    (step,) = report.steps
    assert step.state.value != "reverted"
    assert "could not reach upstream 'notes': it stopped" in step.detail, step.detail
    assert "someone changed" not in step.detail
    assert world["note"] == "v2"  # not touched
    await engine.close()
