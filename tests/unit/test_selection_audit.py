"""Issue 27, re-checked: a selective undo asked from outside a saga the agent is still running
(a person's CLI, the HTTP server: another engine on the same log). Its closure needs the saga's
every step (a step the agent has not run yet may depend on a chosen one), and a reversal claimed
now would stop the agent's later steps — the kept ones too. So it is refused, nothing written,
the agent runs on; once the saga finished, the same selection undoes exactly its closure. The
run itself (its own engine: an agent's undo tool) may still take back part of what it did."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import amends
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio
FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


async def test_a_selection_asked_from_outside_a_running_saga_is_refused_and_it_runs_on(
    world: CoreWorld, catalog: amends.Catalog, tmp_path: Path
) -> None:
    db = str(tmp_path / "log.db")
    agent_engine = amends.Engine(catalog, log=db, retry=FAST)
    person = amends.Engine(catalog, log=db, retry=FAST)  # the person's CLI or server
    world.crm["r2"]["charge"] = None
    started, asked = asyncio.Event(), asyncio.Event()
    ids: list[str] = []

    async def agent() -> None:
        async with agent_engine.saga("Charge and record") as saga:
            ids.append(saga.id)
            charge = saga.call("pay.charge", customer="c1", cents=5000)
            await charge
            started.set()
            await asyncio.wait_for(asked.wait(), 5)  # "Undo only this" on the charge, now
            saga.call("crm.update_field", record_id="r2", field="charge", value=charge["id"])
            saga.call("crm.update_field", record_id="r1", field="stage", value="won")

    running = asyncio.ensure_future(agent())
    await started.wait()
    sid = ids[0]
    before = await person.log.events(sid)
    for ask in ({"steps": ["s1"]}, {"since": "s1"}):
        with pytest.raises(amends.SagaStateError) as err:
            await person.undo(sid, **ask)  # type: ignore[arg-type]
        assert str(err.value) == (
            f"saga {sid!r} is still running: undoing only some steps takes back what depends "
            f"on them, and a step the agent has not run yet may; wait until it finishes (if "
            f"its process stopped, `amends recover` ends it), or undo the whole saga now (what "
            f"it has not run yet is then cancelled)"
        )
        with pytest.raises(amends.SagaStateError):
            await person.preview(sid, **ask)  # type: ignore[arg-type]
    assert await person.log.events(sid) == before, "nothing written"
    asked.set()
    await running
    saga = await person.log.get_saga(sid)
    assert saga is not None and [s.state for s in saga.steps] == ["done", "done", "done"]
    assert world.crm["r1"]["stage"] == "won" and world.crm["r2"]["charge"] == "ch_1"
    report = await person.undo(sid, steps=["s1"])  # finished: the closure is known
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "compensated"),
        ("s2", "reverted"),
    ]
    assert report.selection is not None and report.selection["kept"] == ["s3"]
    assert world.crm["r2"]["charge"] is None and world.crm["r1"]["stage"] == "won"
    assert world.charges["ch_1"]["refunded"] == 5000
    await agent_engine.close()
    await person.close()


async def test_the_run_itself_may_take_back_part_of_what_it_did(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Inside the run (its own engine, as an agent's undo tool): the selection is undone."""
    async with engine.saga("Charge and win") as saga:
        await saga.call("pay.charge", customer="c1", cents=5000)
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        report = await engine.undo(saga.id, steps=["s1"])
    assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "compensated")]
    assert world.charges["ch_1"]["refunded"] == 5000 and world.crm["r1"]["stage"] == "won"


async def test_a_selection_with_nothing_to_take_back_still_says_what_it_kept(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Undoing only a read (nothing to take back) never reads as the whole saga having nothing
    to take back: the CRM write it kept still stands, and the headline says so."""
    async with engine.saga("Read then write") as saga:
        saga.call("crm.read_field", record_id="r1", field="stage")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    report = await engine.undo(saga.id, steps=["s1"])
    assert [(s.step_id, s.state.value) for s in report.steps] == [("s1", "not_needed")]
    assert report.headline == "Nothing to take back · 1 other step kept as it is"
    assert world.crm["r2"]["stage"] == "won"


async def test_a_step_a_selection_kept_has_no_manual_action_and_the_refusal_says_why(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Resolving (or sending a follow-up for) a step the selective undo kept is refused, and
    the words are true: it was kept, not "its reversal is still running"; nothing written."""
    async with engine.saga("Mail and charge") as saga:
        saga.call("mail.send", to="ann@x.test", subject="Hi")
        saga.call("pay.charge", customer="c1", cents=5)
    await engine.undo(saga.id, steps=["s2"])
    before = await engine.log.events(saga.id)
    with pytest.raises(amends.SagaStateError) as err:
        await engine.resolve(saga.id, "s1", by="ann", note="told Ann by phone")
    assert str(err.value) == (
        f"step 's1' of saga {saga.id!r} has no outcome to resolve yet: a selective undo kept "
        f"it as it is; undo it first (`amends undo {saga.id} --steps s1`); a manual action "
        f"exists only for an effect undo left standing"
    )
    with pytest.raises(amends.SagaStateError, match="a selective undo kept it as it is"):
        await engine.send_follow_up(
            saga.id, "s1", tool="mail.send", args={"to": "ann@x.test", "subject": "x"}, by="ann"
        )
    assert await engine.log.events(saga.id) == before
    assert len(world.outbox) == 1


@pytest.mark.parametrize("steps", [b"s1", bytearray(b"s1")])
async def test_bytes_are_no_list_of_step_ids(
    engine: amends.Engine, world: CoreWorld, steps: object
) -> None:
    """A byte string is refused as a string is (it named "step 115", its first byte)."""
    async with engine.saga("One write") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    with pytest.raises(amends.ConfigError, match=r"steps= must be a list of step ids, got b"):
        await engine.undo(saga.id, steps=steps)  # type: ignore[arg-type]
    assert await engine.log.get_reversal(saga_id=saga.id) is None
