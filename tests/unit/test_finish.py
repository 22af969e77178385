"""Issue 23 item 2: every reversal can be finished. A retry cut by the budget is over budget and a
continuation finishes it; causes are exact (a call that never reached a vendor is no attempt)."""

from __future__ import annotations

import amends
from amends import StepState
from core_world import CoreWorld


async def close_deal(engine: amends.Engine) -> amends.Saga:
    async with engine.saga("Close the ACME deal", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
    return saga


def refunds(world: CoreWorld) -> int:
    return sum(1 for e in world.effects if e[0] == "pay.refund")


# --- a retry cut by the budget is over_budget, and resume finishes it -----------------------


async def test_a_retry_cut_by_the_budget_is_over_budget_and_resume_continues_it_and_what_it_gates(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """The refund is rate limited; the budget of 3 covers the probe, the refund and one retry.
    Before: 'failed' (docs: "failed permanently"), s1 blocked, and resume attempted nothing.
    Now: over_budget with the real cause, and resume refunds once and reverts s1."""
    saga = await close_deal(engine)
    world.faults["pay.refund"] = [amends.TransientError("rate limited")] * 2
    first = await engine.undo(saga.id, budget=amends.Budget(tool_calls=3))
    s2 = first.step("s2")
    assert s2.state is StepState.OVER_BUDGET
    assert s2.detail == (
        "tool-call budget of 3 spent before pay.refund could be tried again (after 2 "
        "attempt(s) the vendor refused for now)"
    )
    assert s2.manual_action is not None and "--continue" in s2.manual_action.what
    assert first.step("s1").state is StepState.BLOCKED
    assert world.charges["ch_1"]["refunded"] == 0
    report = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert (report.step("s2").state, report.step("s1").state) == (
        StepState.COMPENSATED,
        StepState.REVERTED,
    )
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000
    assert world.crm["r1"]["stage"] == "lead"


async def test_a_retry_the_time_budget_leaves_no_room_for_is_over_budget_not_failed(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    world.faults["pay.refund"] = [amends.TransientError("busy", retry_after=20.0)]
    first = await engine.undo(saga.id, budget=amends.Budget(seconds=5))
    s2 = first.step("s2")
    assert s2.state is StepState.OVER_BUDGET
    assert s2.detail == (
        "pay.refund failed transiently (busy) and the time budget of 5 s leaves no room to try "
        "it again"
    )
    report = await engine.resume(saga.id, budget=amends.Budget())
    assert report.step("s2").state is StepState.COMPENSATED
    assert refunds(world) == 1


# --- causes are exact (rule 8) ---------------------------------------------------------------


def follow_up_tools(catalog: amends.Catalog, world: CoreWorld) -> None:
    @catalog.tool("fx.do", reversibility="reversible")
    async def do(call: amends.Call) -> None:
        call.inverse("fx.undo")
        call.no_drift_check(reason="a test effect only this saga can see")

    @catalog.tool("fx.undo")
    async def undo(call: amends.Call) -> None:
        call.follow_up("fx.notify", to="ops")

    @catalog.tool("fx.notify")
    async def notify(call: amends.Call, to: str) -> None:
        world.effects.append(("fx.notify", to, call.idempotency_key))


async def test_a_follow_up_the_budget_cut_before_any_call_is_not_an_attempt(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Before: "tool-call budget of 1 spent before fx.notify could succeed (gave up after 1
    attempt(s))" although no call reached the vendor."""
    follow_up_tools(catalog, world)
    async with engine.saga("fx") as saga:
        await saga.call("fx.do")
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=1))
    s1 = report.step("s1")
    assert s1.state is StepState.REVERTED  # rule 7: the inverse's state stands
    (missing,) = s1.residue
    assert missing.what == (
        "follow-up fx.notify(to='ops') was not made (tool-call budget of 1 spent before "
        "fx.notify could run)"
    )
    assert "attempt(s)" not in repr(report.to_dict())
    assert not any(e[0] == "fx.notify" for e in world.effects)


# --- an inverse whose outcome is unknown is in doubt, and re-observed -------------------------


async def test_an_answer_lost_by_a_vendor_honouring_keys_is_asked_again_never_twice_applied(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """The processor refunds, then the connection drops ("Internal error"). It honours the
    idempotency key, so the refund is sent again with the same key: the replay applies nothing
    and brings the answer. Before: 'failed', and "undo it by hand" -- a second refund."""
    saga = await close_deal(engine)
    lost = [True]

    def hook() -> None:
        if lost.pop() if lost else False:
            ch = world.charges["ch_1"]
            ch["refunded"] += ch["cents"]  # the vendor acted ...
            world.effects.append(("pay.refund", "ch_1", "first attempt"))
            world.seen_keys[f"amends:{saga.id}:s2:undo"] = {"refund_of": "ch_1"}
            raise RuntimeError("Internal error")  # ... and its answer was lost

    world.hooks["pay.refund"] = hook
    report = await engine.undo(saga.id)
    s2 = report.step("s2")
    assert (s2.state, s2.detail) == (
        StepState.COMPENSATED,
        "compensated with pay.refund after 2 attempts",
    )
    assert report.step("s1").state is StepState.REVERTED
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000


def legacy_tools(catalog: amends.Catalog, world: CoreWorld, *, acts: bool) -> None:
    """A processor that ignores idempotency keys (rule 5: nothing is sent twice to it) and whose
    refund answers "Internal error" after acting (``acts``) or before."""

    @catalog.tool("legacy.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> str:
        world.charges["lg_1"] = {"customer": "acme", "cents": cents, "refunded": 0}
        call.inverse("legacy.refund", charge_id="lg_1", cents=cents)
        call.expect("pay.get_charge", {"charge_id": "lg_1"}, equals=0, path="refunded")
        return "lg_1"

    @catalog.tool("legacy.refund")
    async def refund(call: amends.Call, charge_id: str, cents: int) -> None:
        if acts:
            world.charges[charge_id]["refunded"] += cents
            world.effects.append(("legacy.refund", charge_id, call.idempotency_key))
        raise RuntimeError("Internal error")


async def test_a_refund_that_landed_but_whose_answer_was_lost_is_compensated_not_failed(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """The vendor ignores keys, so the refund is not sent again; the probe shows the charge
    refunded: the undo took effect. Before: 'failed', and the manual action said "Undo
    'legacy.charge(...)' by hand" -- a second refund."""
    legacy_tools(catalog, world, acts=True)
    async with engine.saga("legacy") as saga:
        await saga.call("legacy.charge", cents=5000)
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.COMPENSATED
    assert s1.detail == (
        "compensated with legacy.refund (legacy.refund raised RuntimeError: Internal error; "
        "whether it took effect is unknown, but pay.get_charge no longer shows the agent's write)"
    )
    assert s1.manual_action is None
    assert [e[0] for e in world.effects].count("legacy.refund") == 1


async def test_a_refund_whose_answer_was_lost_before_it_acted_is_failed_as_the_probe_shows(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """The 5xx came before the processor acted: the charge still shows unrefunded, verifiably, so
    the step is failed and undoing it by hand makes no second refund."""
    legacy_tools(catalog, world, acts=False)
    async with engine.saga("legacy") as saga:
        await saga.call("legacy.charge", cents=5000)
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.FAILED
    assert s1.detail == (
        "legacy.refund raised RuntimeError: Internal error; whether it took effect is unknown; "
        "pay.get_charge shows the agent's write is still there, so it did not take effect"
    )
    assert world.charges["lg_1"]["refunded"] == 0
    assert s1.manual_action is not None and "by hand" in s1.manual_action.what


async def test_an_inverse_with_no_probe_whose_answer_was_lost_is_in_doubt_and_says_check_first(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """No probe can tell: in_doubt, and the manual action says to check before acting, never to
    undo the step by hand (that could be a second refund)."""

    @catalog.tool("bank.pay", reversibility="compensable", describe="Pay {cents} cents to {to}")
    async def pay(call: amends.Call, to: str, cents: int) -> None:
        call.inverse("bank.refund", to=to, cents=cents)
        call.no_drift_check(reason="a payment only this saga can see")

    @catalog.tool("bank.refund", describe="Refund {cents} cents to {to}")
    async def refund(call: amends.Call, to: str, cents: int) -> None:
        world.effects.append(("bank.refund", to, call.idempotency_key))
        raise RuntimeError("Internal error")

    async with engine.saga("pay") as saga:
        await saga.call("bank.pay", to="acme", cents=5000)
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.IN_DOUBT
    assert s1.detail == (
        "bank.refund raised RuntimeError: Internal error; whether it took effect is unknown; no "
        "probe of the step can tell"
    )
    assert s1.manual_action is not None
    what = s1.manual_action.what
    assert what.startswith("Check whether 'Refund 5000 cents to acme' happened before acting")
    assert "Undo 'Pay 5000 cents to acme' by hand" not in what
    assert [e[0] for e in world.effects].count("bank.refund") == 1  # never sent twice
