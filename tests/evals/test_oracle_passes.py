"""Issue 29: the oracle's shortcuts give what the plain walks gave.

``_descendants`` builds each step's transitive dependents from those of the later steps it
reaches, instead of a walk per step; ``_Scan`` reads the effect journal in one pass instead of
five. Each test below computes the same thing the plain way and compares.
"""

from __future__ import annotations

from typing import Any

from amends.evals import invariants
from amends.evals.generator import generate


def _walked(direct: dict[str, set[str]]) -> dict[str, set[str]]:
    return {sid: invariants._closure(direct, direct[sid]) for sid in direct}


def test_descendants_equal_a_walk_per_step_for_generated_scenarios() -> None:
    for i in range(300):
        sc = generate(1, i)
        ids = [s.step_id for s in sc.steps]
        grouped = invariants._Grouped(sc)
        if any(s.undo_after for s in sc.steps):
            continue  # undo_after rewires the edges first; both walk then
        direct: dict[str, set[str]] = {sid: set() for sid in ids}
        for sid in ids:  # direct edges again, as _Grouped builds them
            for d in grouped.waits[sid][0] | grouped.waits[sid][1]:
                direct[d].add(sid)
        assert invariants._descendants(ids, direct) == _walked(direct)
        assert grouped.dependents == _walked(direct)


def test_descendants_walk_a_step_that_reaches_an_earlier_one() -> None:
    direct = {"a": {"b"}, "b": {"c", "a"}, "c": set(), "d": {"a"}}
    assert invariants._descendants(["a", "b", "c", "d"], direct) == _walked(direct)


def _effect(seq: int, vendor: str, op: str, key: str, **more: Any) -> dict[str, Any]:
    return {"vendor": vendor, "op": op, "key": key, "at": f"t{seq}", **more}


def test_one_scan_finds_what_each_pass_found() -> None:
    effects = [
        _effect(0, "crm", "update_field", "r1.stage", tag="s1:forward", call=1),
        _effect(1, "crm", "update_field", "r1.stage", actor="ops"),  # another actor's change
        _effect(2, "payments", "charge", "ch_1", tag="s2:forward", call=2),
        _effect(3, "payments", "dispute", "ch_1", actor="bank"),
        _effect(4, "crm", "update_field", "r1.stage", tag="s1:compensate", call=3),
        _effect(5, "payments", "refund", "ch_1", tag="s2:compensate", call=4),
        _effect(6, "payments", "refund", "ch_1", tag="s2:compensate", call=5),
        _effect(7, "crm", "update_field", "r2.owner", tag="s3:forward", call=6),
        _effect(8, "mail", "deliver", "m1"),  # the clock's
    ]
    scan = invariants._Scan(effects)
    assert scan.tags == {
        "s1:forward": [0],
        "s2:forward": [2],
        "s1:compensate": [4],
        "s2:compensate": [5, 6],
        "s3:forward": [7],
    }
    assert scan.tags == invariants._by_tag(effects)
    assert scan.overwrote == [
        "s1: update_field overwrote another actor's change to crm r1.stage",
        "s2: refund overwrote another actor's change to payments ch_1",
        "s2: refund overwrote another actor's change to payments ch_1",  # the second refund
    ]
    assert scan.refunds == {"ch_1": 2}
    assert scan.writers == {"r1.stage": {"s1"}, "r2.owner": {"s3"}}
    assert scan.others == {"r1.stage"}
