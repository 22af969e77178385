"""Rule 3 in ``amends eval``: the ``undo_order`` family's finance lock, with a processor slow to
refund. A declaration ``undo_after=[close]`` on the charge replaces the edge between the charge
and the close only: what the close depends on (an earlier write of the same CRM record) still
waits for the refund. The planner of before this change dropped that order, and an inverse ran
while the refund was still on its way; the oracle (``order``) names it on the final world."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from amends import _planner
from amends.evals import runner
from amends.evals.generator import FAMILIES, generate
from amends.evals.invariants import check, dependents
from amends.evals.runner import SLOW_ANSWER, run_scenario
from amends.evals.suite import run_indexes

K = FAMILIES.index("undo_order")
KNOWN = (1, 12)
"""A saga of the family (seed, index): a private note (s4), then two writes of CRM record r2
(s5 after the note, s9), the close of the deal r2 (s10, after them through the record), a charge
(s11) declared to be undone after the close, the refund slow."""


def undo_waits_before(
    steps: Iterable[tuple[str, Sequence[str], Sequence[str]]],
) -> dict[str, set[str]]:
    """``planner.undo_waits`` as it was: the declaration replaced the direct edge, and the
    order was reached along direct edges only."""
    items = list(steps)
    direct: dict[str, set[str]] = {sid: set() for sid, _, _ in items}
    for sid, deps, _ in items:
        for d in deps:
            direct.setdefault(d, set()).add(sid)
    for sid, _, after in items:
        for o in after:
            direct.setdefault(o, set()).discard(sid)
            direct.setdefault(sid, set()).add(o)
    return {sid: _planner._reach(direct, sid) for sid in direct}


def test_the_family_draws_declared_locks_with_a_slow_refund() -> None:
    scs = [generate(1, K + len(FAMILIES) * j) for j in range(40)]
    slow = [sc for sc in scs if sc.reversal_faults]
    assert 10 <= len(slow) <= 30 and SLOW_ANSWER > 0
    assert {sc.reversal_faults for sc in slow} == {(("payments.refund", "slow", 1),)}
    sc = generate(*KNOWN)
    assert sc.family == "undo_order" and sc.reversal_faults
    by_id = {s.step_id: s for s in sc.steps}
    assert by_id["s11"].tool == "payments.charge" and by_id["s11"].undo_after == ("s10",)
    assert by_id["s10"].args["record_id"] == by_id["s9"].args["record_id"] == "r2"
    assert by_id["s5"].after == ("s4",)
    for sid in ("s4", "s5", "s9"):  # through the close: rule 3 keeps that order
        assert "s11" in dependents(sc)[sid]


async def test_the_earlier_write_waits_for_the_slow_refund() -> None:
    r = await run_scenario(generate(*KNOWN))
    assert check(r) == {name: [] for name in check(r)}


async def test_the_oracle_catches_an_inverse_that_ran_before_the_slow_refund(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_planner, "undo_waits", undo_waits_before)
    monkeypatch.setattr(runner, "SLOW_ANSWER", 0.3)  # a loaded machine still sees the race
    r = await run_scenario(generate(*KNOWN))
    assert check(r)["order"] == [
        f"{sid} was undone before its dependent s11 was undone" for sid in ("s4", "s5", "s9")
    ]


async def test_the_family_holds_every_invariant_on_the_real_engine() -> None:
    indexes = [K + len(FAMILIES) * j for j in range(16)]
    tally = (await run_indexes(indexes, 1, ("amends",)))["amends"]
    assert tally.sagas == 16
    assert tally.violations == dict.fromkeys(tally.violations, 0), tally.examples
