"""Issue 29: an undo's step outcomes are built described (``ReversalPorts.describe``), not
copied once more after the run to describe them; what the report and the progress hooks get
is what :func:`amends._reversal.described` gives."""

from __future__ import annotations

from typing import Any

import pytest

import amends
from amends import StepState
from amends._reversal import described, runner


def _catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("note.put", reversibility="reversible", describe="Write the note '{key}'")
    async def put(call: amends.Call, key: str) -> None:
        call.inverse("note.delete", key=key)
        call.no_drift_check(reason="a test note: nobody else writes it")

    @catalog.tool("note.delete", reversibility="reversible", describe="Delete the note '{key}'")
    async def delete(call: amends.Call, key: str) -> None:
        return None

    @catalog.tool("mail.send", reversibility="irreversible")
    async def send(call: amends.Call, to: str) -> None:
        return None

    return catalog


async def test_undo_outcomes_are_built_described(monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = _catalog()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    seen: list[amends.StepOutcome] = []
    engine.progress_hooks.append(lambda _rev, outcome: seen.append(outcome))
    async with engine.saga("notes") as saga:
        await saga.call("note.put", key="a")
        await saga.call("mail.send", to="bob@acme.test")
        await saga.call("note.put", key="b")
    stored = await engine.log.get_saga(saga.id)
    assert stored is not None
    copies: list[Any] = []
    real = runner.replaced

    def counting(obj: Any, /, **changes: Any) -> Any:
        copies.append(obj)
        return real(obj, **changes)

    monkeypatch.setattr(runner, "replaced", counting)
    report = await engine.undo(saga.id)
    assert copies == []  # no outcome copied to describe it
    states = [s.state for s in report.steps]
    assert states == [StepState.REVERTED, StepState.ACKNOWLEDGED, StepState.REVERTED]
    index = {s.step_id: s for s in stored.steps}
    monkeypatch.setattr(runner, "replaced", real)
    for outcome in report.steps:
        bare = amends.StepOutcome(
            **{**outcome.__dict__, "description": "", "inverse_description": ""}
        )
        assert outcome == described(catalog, index[outcome.step_id], bare)
    assert report.steps[0].description == "Write the note 'a'"
    assert report.steps[0].inverse_description == "Delete the note 'a'"
    assert report.steps[1].description.startswith("mail.send(")
    assert report.steps[1].inverse_description == ""
    assert sorted(seen, key=lambda o: o.step_id) == sorted(report.steps, key=lambda o: o.step_id)
    await engine.close()
