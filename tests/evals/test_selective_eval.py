"""Issue 27 in ``amends eval``: the ``selective`` family. amends undoes exactly each chosen step
and what depends on it (the oracle computes that closure on its own), the preview of the
selection predicts every state, and an engine that undoes more than it was asked is caught."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import amends
from amends.evals.generator import FAMILIES, PROBES, Scenario, StepSpec, generate
from amends.evals.invariants import check, selection_scope
from amends.evals.runner import run_scenario
from amends.evals.suite import run_indexes

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class SelectionIgnoredEngine(amends.Engine):
    """Broken on purpose: undoes the whole saga whatever steps were chosen."""

    async def undo(self, saga_id: str, **kw: Any) -> amends.UndoReport:
        kw.pop("steps", None)
        return await super().undo(saga_id, **kw)


async def test_the_selective_family_holds_every_invariant() -> None:
    k = FAMILIES.index("selective")
    indexes = [k + len(FAMILIES) * j for j in range(12)]
    assert {generate(5, i).family for i in indexes} == {"selective"}
    assert all(generate(5, i).select for i in indexes)
    amends_tally = (await run_indexes(indexes, 5, ("amends",)))["amends"]
    assert amends_tally.sagas == 12
    assert amends_tally.violations == dict.fromkeys(amends_tally.violations, 0), (
        amends_tally.examples
    )


def test_the_oracle_computes_the_closure_on_its_own() -> None:
    steps = (
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "a"}),
        StepSpec("s2", "payments.charge", {"customer": "c1", "cents": 100}),
        StepSpec("s3", "crm.update_field", {"record_id": "r2", "field": "stage",
                                            "value": {"$ref": "s2", "key": "id"}}),
        StepSpec("s4", "crm.update_field", {"record_id": "r1", "field": "owner", "value": "b"}),
        StepSpec("s5", "payments.charge", {"customer": "c2", "cents": 1}, after=("s4",)),
    )  # fmt: skip
    sc = Scenario(1, 0, "handmade", steps, select=("s2",))
    assert selection_scope(sc) == {"s2", "s3"}
    sc = Scenario(1, 0, "handmade", steps, select=("s1",))
    assert selection_scope(sc) == {"s1", "s4", "s5"}  # r1 written later, then after= it


async def test_an_engine_that_undoes_more_than_it_was_asked_is_caught() -> None:
    k = FAMILIES.index("selective")
    found = []
    for j in range(20):
        sc = generate(5, k + len(FAMILIES) * j)
        if sc.reversal_faults or sc.crash or sc.budget_calls < 200:
            continue
        if len(selection_scope(sc)) == len(sc.steps):
            continue  # the closure is the whole saga: nothing to tell apart
        good = check(await run_scenario(sc))
        bad = check(await run_scenario(sc, engine_factory=SelectionIgnoredEngine))
        assert good["honesty"] == [], good
        found.append(bad["honesty"])
        if len(found) == 3:
            break
    assert len(found) == 3
    assert all(any("undone although the selection did not need it" in m for m in h) for h in found)


async def test_the_rest_undone_later_is_judged_as_a_whole_saga_nothing_undone_twice() -> None:
    """Issue 27: "undo only this", then "undo the rest". The family does both for some sagas;
    the result after the rest is checked by every invariant as any whole-saga undo (with both
    runs' effects: a refund made twice is caught), in the same reversal."""
    k = FAMILIES.index("selective")
    later = [sc for j in range(40) if (sc := generate(5, k + len(FAMILIES) * j)).rest_later]
    assert len(later) >= 10
    refunded = 0
    for sc in later[:10]:
        r = await run_scenario(sc)
        assert r.rest is not None and r.rest.reports, sc.ref
        assert not any(check(r).values()), (sc.ref, check(r))
        whole = r.rest.reports[0]
        assert whole.selection is None and whole.reversal_id == r.reports[0].reversal_id
        assert {o.step_id for o in whole.steps} == {s.step_id for s in sc.steps}
        refunds = [e for e in r.rest.effects if e["op"] == "refund"]
        if not refunds:
            continue
        refunded += 1
        twice = dataclasses.replace(r.rest, effects=[*r.rest.effects, dict(refunds[0])])
        found = check(dataclasses.replace(r, rest=twice))["never_worse"]
        assert f"after the rest was undone: {refunds[0]['key']} refunded 2 times" in found
    assert refunded, "a charge was refunded in one of the two runs"


def test_the_oracle_needs_nothing_on_a_chosen_probes_account() -> None:
    """A chosen read: nothing built on it is needed (issue 27); reached from a chosen write, a
    read passes that write's dependency on."""
    steps = (
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "a"}),
        StepSpec("s2", "crm.read_field", {"record_id": "r1", "field": "stage"}, after=("s1",)),
        StepSpec("s3", "payments.charge", {"customer": "c1", "cents": 100}, after=("s2",)),
    )
    assert selection_scope(Scenario(1, 0, "handmade", steps, select=("s2",))) == {"s2"}
    for chosen in (("s1",), ("s1", "s2")):
        sc = Scenario(1, 0, "handmade", steps, select=chosen)
        assert selection_scope(sc) == {"s1", "s2", "s3"}


async def test_generated_selections_of_a_probe_undo_nothing_built_on_it() -> None:
    """Generated selective sagas whose selection names a probe a later step stands on: amends
    undoes none of those later steps (it used to refund and revert them: a honesty violation)."""
    indexes = [896, 1056, 1636]  # with 20 families (hostile_words): seed 1
    for i in indexes:
        sc = generate(1, i)
        tools = {s.step_id: s.tool for s in sc.steps}
        probes = {sid for sid in sc.select if tools[sid] in PROBES}
        assert sc.family == "selective" and probes, i
        assert any(set(s.after) & probes for s in sc.steps), i
    tally = (await run_indexes(indexes, 1, ("amends",)))["amends"]
    assert tally.sagas == 3
    assert tally.violations == dict.fromkeys(tally.violations, 0), tally.examples
