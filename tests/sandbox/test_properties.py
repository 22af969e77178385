"""Property tests: payment rules hold for any sequence of operations, and a world on a SQLite
file agrees with an in-memory world operation by operation."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amends
from amends.sandbox import World

Op = tuple[Any, ...]

ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("charge"), st.sampled_from(["cus_acme", "cus_globex"]),
                  st.integers(1, 5000), st.sampled_from([None, "k1", "k2"])),
        st.tuples(st.just("refund"), st.integers(1, 4), st.integers(1, 6000),
                  st.sampled_from([None, "u1", "u2"])),
        st.tuples(st.just("dispute"), st.integers(1, 4)),
        st.tuples(st.just("close_card"), st.sampled_from(["cus_acme", "cus_globex"])),
        st.tuples(st.just("advance"), st.integers(0, 3 * 86400)),
        st.tuples(st.just("crm"), st.sampled_from(["stage", "amount"]), st.text(max_size=3),
                  st.sampled_from([None, 1, 2, 3])),
        st.tuples(st.just("mail"), st.sampled_from(["now", "delayed", "cancel"])),
    ),
    max_size=25,
)  # fmt: skip


def apply(world: World, op: Op) -> str:
    """Apply one operation; returns "ok" or the error class name (so two worlds can agree)."""
    try:
        kind = op[0]
        if kind == "charge":
            world.payments.charge(op[1], op[2], idempotency_key=op[3])
        elif kind == "refund":
            world.payments.refund(f"ch_{op[1]}", op[2], idempotency_key=op[3])
        elif kind == "dispute":
            world.payments.dispute(f"ch_{op[1]}")
        elif kind == "close_card":
            world.payments.close_card(op[1])
        elif kind == "advance":
            world.advance(op[1])
        elif kind == "crm":
            world.crm.update_field("acme", op[1], op[2], if_version=op[3])
        elif kind == "mail":
            if op[1] == "now":
                world.mail.send("a@x", "s", "b")
            elif op[1] == "delayed":
                world.mail.send_delayed("a@x", "s", "b")
            else:
                world.mail.cancel_scheduled("msg_1")
    except amends.PermanentError as exc:
        return type(exc).__name__
    return "ok"


@settings(max_examples=150, deadline=None)
@given(ops_strategy)
def test_payment_rules_hold_for_any_sequence(ops: list[Op]) -> None:
    """Never refunded more than charged, at most one refund per charge, one effect per refund."""
    world = World()
    for op in ops:
        apply(world, op)
    snap = world.snapshot()
    charges = snap["payments"]["charges"]
    refunds = snap["payments"]["refunds"]
    for ch in charges.values():
        assert 0 <= ch["refunded"] <= ch["cents"]
        assert len(ch["refunds"]) <= 1
        assert ch["refunded"] == sum(refunds[r]["cents"] for r in ch["refunds"])
    effects = world.effects()
    assert len([e for e in effects if e["op"] == "refund"]) == len(refunds)
    assert len([e for e in effects if e["op"] == "charge"]) == len(charges)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops_strategy)
def test_sqlite_world_agrees_with_memory_world(ops: list[Op]) -> None:
    """The same operations give the same answers, state and effects on both stores."""
    with tempfile.TemporaryDirectory() as tmp:
        mem = World(seed=1)
        disk = World(str(Path(tmp) / "w.world"), seed=1)
        for op in ops:
            assert apply(mem, op) == apply(disk, op), op
        assert mem.snapshot() == disk.snapshot()
        assert mem.effects() == disk.effects()
        reopened = World(str(Path(tmp) / "w.world"), seed=1)
        assert reopened.snapshot() == disk.snapshot()
        disk.close()
        reopened.close()
