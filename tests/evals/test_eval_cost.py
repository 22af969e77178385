"""Issue 29, the eval's CPU per saga: each shortcut gives exactly what the slower path gave."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import amends
from amends._planner import PreviewStep
from amends._report import StepOutcome
from amends._reversal.runner import described
from amends.evals.naive import NaiveUndoStack
from amends.sandbox import World, sandbox_catalog, use_world
from amends.sandbox import catalog as catalog_module


async def _saga(world: World, catalog: amends.Catalog) -> tuple[amends.Engine, str]:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    with use_world(world):
        async with engine.saga("stage and charge") as saga:
            saga.call("crm.update_field", record_id="acme", field="stage", value="won")
            saga.call("crm.add_note", record_id="acme", text="")
    return engine, saga.id


async def _logged(world: World, catalog: Any, *, preview: bool = False) -> tuple[Any, Any]:
    """The logged record of :func:`_saga`'s saga, and its undo preview if asked for."""
    engine, saga_id = await _saga(world, catalog)
    record = await engine.log.get_saga(saga_id)
    assert record is not None
    shown = None
    if preview:
        with use_world(world):
            shown = await engine.preview(saga_id)
    await engine.close()
    return record, shown


@pytest.mark.parametrize("kind", [StepOutcome, PreviewStep])
async def test_described_builds_the_value_dataclasses_replace_builds(kind: type) -> None:
    """``described`` copies the item without ``dataclasses.replace``: same fields, same type,
    and neither class may grow a field the copy would skip (init=False, __post_init__)."""
    world = World(seed=3)
    catalog = sandbox_catalog()
    record, preview = await _logged(world, catalog, preview=True)
    fields = dataclasses.fields(kind)
    assert all(f.init for f in fields) and not hasattr(kind, "__post_init__")
    for step in record.steps:
        if kind is StepOutcome:
            item: Any = StepOutcome(
                step.step_id, step.tool, "Revert", amends.StepState.REVERTED, ""
            )
        else:
            item = next(p for p in preview.steps if p.step_id == step.step_id)
            assert item.__dict__["step_id"] == step.step_id  # cached: not a field to copy
            item = dataclasses.replace(item, description="", inverse_description="")
        got = described(catalog, step, item)
        inv = step.inverse
        want = dataclasses.replace(
            item,
            description=catalog.describe(step.tool, step.args),
            inverse_description=catalog.describe(inv["tool"], inv["args"]) if inv else "",
        )
        assert type(got) is kind
        assert got == want
        assert got.description.startswith(("Set stage", "Add a note"))


async def test_the_naive_stack_sends_every_call_a_key_no_vendor_has_seen() -> None:
    """Its keys come from a counter, not uuid4: still one fresh key per call, so undoing the
    same stack twice applies the inverse twice (the naive stack has no idempotency)."""
    world = World(seed=3)
    catalog = sandbox_catalog()
    record, _ = await _logged(world, catalog)
    before = len(world.effects())
    with use_world(world):
        stack = NaiveUndoStack.from_saga(catalog, record)
        first = await stack.undo()
        again = NaiveUndoStack.from_saga(catalog, record)
        second = await again.undo()
    undone = world.effects()[before:]
    keys = [e["idempotency_key"] for e in undone]
    # the stage is written back by both stacks; the note is deleted once (the second delete
    # finds no note: the vendor refuses it)
    assert [e["op"] for e in undone] == ["delete_note", "update_field", "update_field"]
    assert len(set(keys)) == 3 and all(k.startswith("naive:") for k in keys)
    assert first.reversal_id != second.reversal_id


async def test_a_shared_catalog_tool_reads_the_bound_world_once_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool of ``sandbox_catalog()`` looks up the task's world once for its body and once for
    the faults due after it (no stand-in forwarding every attribute read), and acts on it."""
    reads: list[World] = []
    real = catalog_module.current_world

    def counted() -> World:
        reads.append(real())
        return reads[-1]

    monkeypatch.setattr(catalog_module, "current_world", counted)
    world = World(seed=3)
    engine, _ = await _saga(world, sandbox_catalog())
    await engine.close()
    assert len(reads) == 4 and all(w is world for w in reads)
    assert world.crm.read_field("acme", "stage") == "won"


async def test_a_planned_steps_cached_id_is_its_records_and_not_a_field() -> None:
    """``PlannedStep.step_id`` is read from the step record once; equality, ``replace`` and
    ``to_dict`` see the dataclass fields only."""
    world = World(seed=3)
    catalog = sandbox_catalog()
    engine, saga_id = await _saga(world, catalog)
    with use_world(world):
        first = await engine.preview(saga_id)
        again = await engine.preview(saga_id)
    await engine.close()
    for p, q in zip(first.steps, again.steps, strict=True):
        assert p.step_id == p.step.step_id and "step_id" in p.__dict__
        assert "step_id" not in q.__dict__ and p == q
        copy = dataclasses.replace(p, reason="changed")
        assert "step_id" not in copy.__dict__ and copy.step_id == p.step_id
        assert p.to_dict()["step_id"] == p.step.step_id


def test_an_in_memory_worlds_clock_follows_every_advance_and_its_copies(tmp_path: Any) -> None:
    """The in-memory world keeps its clock offset decoded (reset by ``advance``); a copy starts
    from the stored offset; a file world reads the offset another world on the file wrote."""
    world = World(seed=3)
    start = world.now()
    world.advance(60)
    assert world.now() == start + 60
    copy = world.copy()
    world.advance(30)
    assert (world.now(), copy.now()) == (start + 90, start + 60)
    copy.advance(1)
    assert (world.now(), copy.now()) == (start + 90, start + 61)
    path = str(tmp_path / "w.db")
    with World(path, seed=3) as one, World(path, seed=3) as two:
        assert one.now() == start
        two.advance(5)
        assert one.now() == start + 5 and one.iso() == two.iso()


async def test_the_planner_reads_a_logged_class_as_the_enum_does_and_refuses_unknown_ones() -> None:
    """The planner looks a step's logged class up instead of calling the enum; the plan is the
    same, and a class the enum does not know still raises the enum's ``ValueError``."""
    from amends._planner import plan

    world = World(seed=3)
    catalog = sandbox_catalog()
    record, _ = await _logged(world, catalog)
    planned = plan(record, catalog, now=0.0)
    assert [(p.action, p.reversibility) for p in planned.steps] == [
        ("revert", amends.Reversibility.REVERSIBLE),
        ("revert", amends.Reversibility.REVERSIBLE),
    ]
    bad = dataclasses.replace(record.steps[0], declared="undoable", effective=None)
    with pytest.raises(ValueError, match="'undoable' is not a valid Reversibility"):
        plan(dataclasses.replace(record, steps=(bad,)), catalog, now=0.0)


def test_a_crm_write_reads_its_record_in_its_own_transaction_not_a_nested_one() -> None:
    """One transaction per CRM operation; the record it reads is the one it writes back."""
    world = World(seed=3)
    opened: list[int] = []
    real = world.txn  # what world.atomic() returns: every vendor operation enters it

    class Counted:
        def __enter__(self) -> Any:
            opened.append(1)
            return real.__enter__()

        def __exit__(self, *exc: Any) -> Any:
            return real.__exit__(*exc)

    world.txn = Counted()
    out = world.crm.update_field("acme", "stage", "won", if_value="negotiation")
    assert len(opened) == 1 and out["old"] == "negotiation"
    assert world.crm.read_field("acme", "stage") == "won" and len(opened) == 2
    note = world.crm.add_note("acme", "hi")
    world.crm.delete_note("acme", note["id"])
    assert len(opened) == 4 and world.crm.get("acme")["notes"] == {}
    with pytest.raises(amends.PermanentError, match="no record 'nope'"):
        world.crm.update_field("nope", "stage", "won")


async def test_a_preview_line_carries_every_field_of_its_planned_step() -> None:
    """The preview copies the plan's fields from the step's own values (no getattr each)."""
    from amends._planner import PlannedStep, plan

    world = World(seed=3)
    catalog = sandbox_catalog()
    record, preview = await _logged(world, catalog, preview=True)
    planned = plan(record, catalog)
    assert len(preview.steps) == 2
    for line, p in zip(preview.steps, planned.steps, strict=True):
        for f in dataclasses.fields(PlannedStep):
            assert getattr(line, f.name) == getattr(p, f.name), f.name
        assert line.predicted is amends.StepState.REVERTED
