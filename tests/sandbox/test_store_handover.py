"""What a vendor operation no longer pays for (issue 29, lane evs4), and that the world's state
stays private all the same: an effect the world stamps is kept as built, not copied again; a
vendor operation enters the world's one transaction object without asking for it; the check for
a fault due after a call is made only when one is pending."""

from __future__ import annotations

from typing import Any

import pytest

from amends.sandbox import World
from amends.sandbox import world as world_mod


def test_an_effect_of_scalars_is_kept_as_stamped_and_stays_private() -> None:
    """The stamped effect dict is what the journal keeps (no second copy); the vendor's own
    dict, mutated after the commit, and what a reader gets, mutated, leave the journal alone."""
    w = World()
    handed: list[dict[str, Any]] = []
    real_write = w._store.write

    def spy(puts: Any, effects: Any = None) -> None:
        handed.extend(effects or [])
        real_write(puts, effects)

    w._store.write = spy  # type: ignore[method-assign]
    mine = {"vendor": "test", "op": "poke", "key": "k1", "n": 1}
    w.commit([("test.values", "k1", 1)], [mine])
    assert len(handed) == 1 and handed[0] is not mine  # the world stamps a dict of its own
    kept_value, inner = w._store._effects[-1]  # type: ignore[misc]
    assert kept_value is handed[0] and inner == ()  # kept as stamped: no copy of it
    mine["n"] = 99
    got = w.effects()[-1]
    assert got is not kept_value
    got["n"] = 42
    got["extra"] = True
    assert w.effects()[-1] == {
        "at": w.iso(),
        "vendor": "test",
        "op": "poke",
        "key": "k1",
        "n": 1,
        "idempotency_key": None,
    }


@pytest.mark.parametrize(
    "effect",
    [
        {"vendor": "test", "op": "poke", "key": "k", "attendees": ["a@x", "b@x"]},
        {"vendor": "test", "op": "poke", "key": "k", "rows": [{"a": 1}]},
    ],
    ids=["flat-list-value", "deep-value"],
)
def test_an_effect_holding_a_container_is_still_copied(effect: dict[str, Any]) -> None:
    """Only an effect of scalar values is kept as stamped: one whose value is a list (shared
    with the vendor's caller by the stamping's shallow copy) is copied as before."""
    w = World()
    w.commit([], [effect])
    inner_value = next(v for k, v in effect.items() if isinstance(v, list))
    inner_value.append("changed by the vendor's caller")
    assert "changed by the vendor's caller" not in str(w.effects()[-1])


def test_a_vendor_operation_enters_the_worlds_transaction_without_asking_for_it() -> None:
    """``atomic()`` returns ``txn``; a vendor method enters ``txn`` directly (issue 29: the
    two calls per vendor operation it took to ask for it)."""
    w = World()
    assert w.atomic() is w.txn and w.atomic() is w.atomic()

    def refused() -> Any:
        raise AssertionError("a vendor operation asked World.atomic() for its transaction")

    w.atomic = refused  # type: ignore[method-assign]
    out = w.crm.update_field("acme", "stage", "won")
    assert out["record"]["fields"]["stage"] == "won"
    assert w.get("crm.records", "acme")["fields"]["stage"] == "won"


def test_a_file_worlds_transaction_commits_through_txn(tmp_path: Any) -> None:
    """A file world's ``txn`` is its store (BEGIN IMMEDIATE ... COMMIT): another process's
    view, a second ``World`` on the file, sees each vendor write once it returned."""
    path = str(tmp_path / "w.world")
    with World(path) as w, World(path) as other:
        assert w.txn is w._store
        w.crm.update_field("acme", "stage", "won")
        assert other.get("crm.records", "acme")["fields"]["stage"] == "won"


def test_after_commit_is_asked_only_when_a_fault_is_pending(monkeypatch: Any) -> None:
    """No fault pending: a vendor operation does not call ``after_commit``; an
    ``act_then_raise`` fault pending: it does, and the fault still fires once the call wrote."""
    w = World()
    asked: list[int] = []
    real = world_mod.World.after_commit

    def counted(self: World) -> None:
        asked.append(1)
        real(self)

    monkeypatch.setattr(world_mod.World, "after_commit", counted)
    w.crm.update_field("acme", "stage", "won")
    assert asked == []
    w._after[id(None)] = "act_then_raise"  # a fault armed for the current call (none here)
    with pytest.raises(ConnectionResetError, match="act_then_raise"):
        w.crm.update_field("acme", "stage", "lost")
    assert asked == [1]
    assert w.get("crm.records", "acme")["fields"]["stage"] == "lost"  # the effect stands


async def test_a_tool_call_gates_in_its_wrapper_only_when_latency_or_a_fault_is_due(
    monkeypatch: Any,
) -> None:
    """No latency, fault or armed crash: a sandbox tool runs without entering ``World.gate``
    (issue 29: a coroutine per call for nothing); with one pending, the gate runs for the
    tool's own name before the vendor acts, and the fault takes effect as before."""
    from amends import Call, PermanentError
    from amends.sandbox import sandbox_catalog, use_world

    gated: list[str] = []
    real = world_mod.World.gate

    async def counted(self: World, op: str) -> None:
        gated.append(op)
        await real(self, op)

    monkeypatch.setattr(world_mod.World, "gate", counted)
    w = World()
    tool = sandbox_catalog().get("crm.update_field").fn

    def call(n: int) -> Call:
        return Call(saga_id="s", step_id=f"s{n}", tool="crm.update_field", phase="forward",
                    idempotency_key=f"k{n}")  # fmt: skip

    with use_world(w):
        out = await tool(call(1), record_id="acme", field="stage", value="won")
        assert out["old"] == "negotiation" and gated == []
        w.faults.add("crm.update_field", "permanent")
        with pytest.raises(PermanentError, match="injected fault"):
            await tool(call(2), record_id="acme", field="stage", value="lost")
        assert gated == ["crm.update_field"]
        assert w.get("crm.records", "acme")["fields"]["stage"] == "won"  # refused: no effect
        w.latency = 0.001
        await tool(call(3), record_id="acme", field="stage", value="lost")
        assert gated == ["crm.update_field"] * 2
        assert w.get("crm.records", "acme")["fields"]["stage"] == "lost"


async def test_bad_arguments_meet_no_fault_and_leave_no_coroutine_behind() -> None:
    """A call whose arguments do not fit the tool raises ``TypeError`` before the gate: the
    pending fault is still there for the next call; a fault raised by the gate closes the
    tool's coroutine (no "never awaited" warning)."""
    import warnings

    from amends import Call, TransientError
    from amends.sandbox import sandbox_catalog, use_world

    w = World()
    tool = sandbox_catalog().get("crm.update_field").fn
    call = Call(saga_id="s", step_id="s1", tool="crm.update_field", phase="forward",
                idempotency_key="k1")  # fmt: skip
    w.faults.add("crm.update_field", "transient")
    with use_world(w), warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError):
            await tool(call, record_id="acme", nonsense=1)
        assert len(w.faults.pending()) == 1
        with pytest.raises(TransientError):
            await tool(call, record_id="acme", field="stage", value="won")
        assert w.faults.pending() == []
        import gc

        gc.collect()  # a coroutine left unawaited would warn here
    assert w.get("crm.records", "acme")["fields"]["stage"] == "negotiation"
