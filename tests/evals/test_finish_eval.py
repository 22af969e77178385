"""Issue 23 in ``amends eval`` (``Scenario.finish``): after a budget-cut undo a person resolves
every other stopped step (handled by hand, invisible to any probe) and continues; after a
reversal whose drift checks could not reach a vendor, the vendors answer again and the steps
are retried. On the engine before the fix, the first sent the inverse of a resolved step (a
second refund) and the second was refused ("not failed")."""

from __future__ import annotations

import pytest

from amends import UndoReport
from amends.evals.generator import generate
from amends.evals.invariants import applicable, check
from amends.evals.runner import run_scenario

SEED = 1


# two budget sagas a person resolves, three whose drift checks are retried (since FAMILIES grew
# to 20 with hostile_words; the same kinds as before at other indexes)
@pytest.mark.parametrize("index", [47, 63, 83, 147, 223])
async def test_a_person_finishing_a_reversal_holds_the_finish_invariant(index: int) -> None:
    sc = generate(SEED, index)
    assert sc.finish in ("resolve", "retry")
    r = await run_scenario(sc)
    assert r.finished, "the scenario must exercise the class"
    assert isinstance(r.continued, UndoReport), r.continued
    assert "finish" in applicable(r)
    assert {k: v for k, v in check(r).items() if v} == {}


def test_the_generator_draws_both_kinds_of_finish() -> None:
    kinds = {generate(SEED, i).finish for i in range(200)}
    assert kinds == {"", "resolve", "retry"}
