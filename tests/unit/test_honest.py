"""Issue 10: honest by default. Each test pins one clause of DESIGN.md rules 3-10 and fails when
the engine breaks it (the world is checked, not only the report)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amends
from amends import StepState
from amends._report import STANDING, verb_for
from core_world import CoreWorld, fresh, refunds


def charge_tool(catalog: amends.Catalog, world: CoreWorld, name: str, **behave: Any) -> None:
    """A charge that takes effect, then misbehaves as told (rule 9 scenarios)."""

    @catalog.tool(name, reversibility="compensable", timeout=behave.get("timeout"))
    async def charge(call: amends.Call, customer: str, cents: int) -> dict[str, Any]:
        cid = f"ch_{len(world.charges) + 1}"
        world.charges[cid] = {"customer": customer, "cents": cents, "refunded": 0}
        if behave.get("inverse_first"):
            call.inverse("pay.refund", charge_id=cid, cents=cents)
            call.expect("pay.get_charge", {"charge_id": cid}, equals=0, path="refunded")
        if behave.get("bad_inverse"):
            call.inverse("pay.refund", charge_id=cid, cents=object())
        if behave.get("hang"):
            await asyncio.sleep(30)
        raise behave.get("fail", RuntimeError("connection reset by peer"))


# --- rule 9: unknown means in doubt ---------------------------------------------------------


async def test_forward_exception_after_acting_is_in_doubt_never_failed(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """A charge that raised a plain exception may have charged: in_doubt with a manual action,
    and the report never claims the saga was undone."""
    charge_tool(catalog, world, "pay.flaky_charge")
    async with engine.saga("charge", actor="ann") as saga:
        s = saga.call("pay.flaky_charge", customer="c1", cents=900)
        with pytest.raises(amends.StepFailedError, match="in_doubt"):
            await s
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None and logged.steps[0].state == "in_doubt"
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.IN_DOUBT
    assert "raised RuntimeError: connection reset by peer" in s1.detail
    assert s1.verb == "Acknowledge"
    assert s1.manual_action is not None and s1.manual_action.who
    assert s1.manual_action.draft and "pay.flaky_charge" in s1.manual_action.draft
    assert report.status == "cannot_undo"
    assert world.charges["ch_1"]["refunded"] == 0  # the charge stands, and the report says so


async def test_forward_exception_after_recording_the_inverse_is_compensated(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Rule 9: an inverse recorded before the failure means the effect happened: logged done
    with its inverse, and undo refunds it."""
    charge_tool(catalog, world, "pay.flaky_charge", inverse_first=True)
    async with engine.saga("charge") as saga:
        s = saga.call("pay.flaky_charge", customer="c1", cents=900)
        with pytest.raises(amends.StepFailedError, match="recorded its inverse first"):
            await s
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None and logged.steps[0].state == "done"
    assert logged.steps[0].inverse is not None
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.COMPENSATED
    assert world.charges["ch_1"]["refunded"] == 900


async def test_vendor_refusal_means_no_effect_and_even_a_permanent_error_after_the_inverse_counts(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Only PermanentError/TransientError mean "no effect"; with an inverse recorded first,
    the effect is compensated whatever the tool raised."""
    charge_tool(catalog, world, "pay.refused", fail=amends.PermanentError("no"))
    charge_tool(
        catalog, world, "pay.late_refusal", inverse_first=True, fail=amends.PermanentError("x")
    )
    async with engine.saga("charges") as saga:
        a = saga.call("pay.refused", customer="c1", cents=1)
        b = saga.call("pay.late_refusal", customer="c2", cents=2)
        await saga.settle()
        for s in (a, b):
            with pytest.raises(amends.StepFailedError):
                await s
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.NOT_NEEDED
    assert report.step("s2").state is StepState.COMPENSATED
    assert world.charges["ch_2"]["refunded"] == 2


async def test_forward_timeout_is_in_doubt_and_names_the_timeout(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Rule 8: the detail names the real cause (timed out after N s)."""
    charge_tool(catalog, world, "pay.slow", hang=True, timeout=0.05)
    async with engine.saga("slow") as saga:
        s = saga.call("pay.slow", customer="c1", cents=5)
        with pytest.raises(amends.StepFailedError):
            await s
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.IN_DOUBT
    assert "pay.slow timed out after 0.05 s" in report.step("s1").detail


async def test_a_non_json_inverse_is_a_contract_violation_in_doubt(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Rule 8: a tool that misuses Call after acting is in_doubt, with `violation` set."""
    charge_tool(catalog, world, "pay.bad", bad_inverse=True)
    async with engine.saga("bad") as saga:
        s = saga.call("pay.bad", customer="c1", cents=5)
        with pytest.raises(amends.StepFailedError):
            await s
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.IN_DOUBT
    assert s1.violation is not None and "must be JSON data" in s1.violation
    assert "contract violation inside pay.bad" in s1.detail
    assert report.violations == [f"s1 (pay.bad): {s1.violation}"]


# --- rule 4: no drift check means no blind overwrite -----------------------------------------


def blind_update(catalog: amends.Catalog, world: CoreWorld) -> None:
    @catalog.tool("crm.blind_update", reversibility="reversible")
    async def blind(call: amends.Call, record_id: str, field: str, value: Any) -> None:
        world.record(call)
        before = world.crm[record_id][field]
        if call.phase == "forward":
            call.inverse("crm.blind_update", record_id=record_id, field=field, value=before)
        world.crm[record_id][field] = value


async def test_reversible_step_without_expectation_or_reason_is_never_reverted_blindly(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """A human's edit after the agent's is never overwritten by a step with no drift check: the
    step is a contract violation, needs review, and its inverse is not dispatched."""
    blind_update(catalog, world)
    async with engine.saga("blind", actor="ann") as saga:
        await saga.call("crm.blind_update", record_id="r1", field="stage", value="won")
    world.crm["r1"]["stage"] = "lost"  # a person changed it since
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.DRIFTED
    assert s1.violation is not None and "no expectation" in s1.violation
    # issue 26: a person reads what it means (nothing drifted); the violation is for engineers
    assert s1.detail.startswith("amends cannot check this step safely: ")
    assert s1.manual_action is not None and s1.manual_action.draft
    assert "call." not in s1.manual_action.draft + s1.manual_action.what
    assert world.crm["r1"]["stage"] == "lost"
    assert [c for c in world.calls if c[1] == "compensate"] == []  # never dispatched
    assert report.status == "cannot_undo"


async def test_no_drift_check_reason_allows_the_inverse_and_is_shown(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """A step that said why no expectation is needed is reverted, and the reason is reported."""
    async with engine.saga("note") as saga:
        await saga.call("crm.note", record_id="r1", text="hello")
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.REVERTED
    assert s1.detail == (
        "reverted with crm.delete_note; no drift check: a note only this saga wrote; deleting "
        "it removes nothing else"
    )
    assert world.crm["r1"]["notes"] == []
    plan = await engine.preview(saga.id)
    assert plan["s1"].to_dict()["no_drift_check"].startswith("a note only this saga wrote")


async def test_a_probe_that_raises_is_never_a_match(
    engine: amends.Engine, world: CoreWorld
) -> None:
    async with engine.saga("update") as saga:
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    world.faults["crm.read_field"] = [RuntimeError("probe exploded")]
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.DRIFTED
    assert "probe exploded" in report.step("s1").detail
    assert world.crm["r1"]["stage"] == "won"  # not touched


def test_idempotent_is_declared_on_the_tool_and_defaults_to_false() -> None:
    catalog = amends.Catalog()

    @catalog.tool("a.keyed", reversibility="irreversible", idempotent=True)
    async def keyed(call: amends.Call) -> None: ...

    @catalog.tool("a.plain", reversibility="irreversible")
    async def plain(call: amends.Call) -> None: ...

    assert catalog.get("a.keyed").idempotent is True
    assert catalog.get("a.plain").idempotent is False
    with pytest.raises(amends.ContractError, match="idempotent= of tool 'a.bad' must be True"):
        catalog.register("a.bad", plain, idempotent="yes")  # type: ignore[arg-type]


# --- item 9: cancelling the agent's task ---------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_cancelling_the_agent_task_returns_promptly_and_leaves_the_step_in_doubt(
    engine: amends.Engine, catalog: amends.Catalog, kind: str
) -> None:
    started = threading.Event()

    if kind == "async":

        @catalog.tool("pay.hang", reversibility="irreversible")
        async def hang(call: amends.Call) -> None:
            started.set()
            await asyncio.sleep(30)

    else:

        @catalog.tool("pay.hang", reversibility="irreversible")
        def hang_sync(call: amends.Call) -> None:
            started.set()
            time.sleep(3)

    saga_ids: list[str] = []

    async def agent() -> None:
        async with engine.saga("hangs") as saga:
            saga_ids.append(saga.id)
            await saga.call("pay.hang")

    task = asyncio.create_task(agent())
    while not started.is_set():
        await asyncio.sleep(0.005)
    t0 = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t0 < 1.0
    logged = await engine.log.get_saga(saga_ids[0])
    assert logged is not None and logged.steps[0].state == "in_doubt"
    assert "cancelled while the tool was running" in (logged.steps[0].error or "")


# --- rule 7: follow-ups and budgets ----------------------------------------------------------


def follow_up_tools(catalog: amends.Catalog, world: CoreWorld, chain: list[str]) -> None:
    """``fx.do``'s inverse ``fx.undo`` asks for follow-up ``chain[0]``, which asks for
    ``chain[1]``, ... Each follow-up listed in ``world.faults`` fails as told."""

    @catalog.tool("fx.do", reversibility="reversible")
    async def do(call: amends.Call) -> None:
        world.record(call)
        call.inverse("fx.undo", depth=0)
        call.no_drift_check(reason="a scratch value only this saga uses")

    @catalog.tool("fx.undo", reversibility="irreversible")
    async def undo(call: amends.Call, depth: int) -> None:
        world.record(call)
        await world.fault(call.tool)
        if depth < len(chain):
            call.follow_up(chain[depth], depth=depth + 1)

    for name in set(chain):
        if name in catalog:
            continue

        @catalog.tool(name, reversibility="irreversible")
        async def follow(call: amends.Call, depth: int) -> None:
            world.record(call)
            await world.fault(call.tool)
            call.residue(f"{call.tool} done", parties=["ops"])
            if depth < len(chain):
                call.follow_up(chain[depth], depth=depth + 1)


async def test_nested_follow_ups_all_run_and_each_spends_budget(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    follow_up_tools(catalog, world, ["fx.notify", "fx.archive"])
    async with engine.saga("fx") as saga:
        await saga.call("fx.do")
    report = await engine.undo(saga.id)
    assert [c[0] for c in world.calls if c[1] != "forward"] == [
        "fx.undo",
        "fx.notify",
        "fx.archive",
    ]
    assert report.tool_calls == 3
    assert report.step("s1").state is StepState.REVERTED
    assert [r.what for r in report.residue] == ["fx.notify done", "fx.archive done"]


async def test_a_failed_follow_up_keeps_the_inverse_state_and_becomes_residue_and_a_manual_action(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Following "failed" advice would refund twice: the inverse succeeded, so the step stays
    reverted; the missing follow-up is residue and a manual action."""
    follow_up_tools(catalog, world, ["fx.notify", "fx.archive"])
    world.faults["fx.notify"] = [amends.PermanentError("mail server down")]
    async with engine.saga("fx") as saga:
        await saga.call("fx.do")
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.REVERTED
    assert [r.what for r in s1.residue] == [
        "follow-up fx.notify(depth=1) was not made (fx.notify failed permanently: mail server down)"
    ]
    assert s1.manual_action is not None and "fx.notify(depth=1)" in s1.manual_action.what
    assert report.status == "partially_reversed"
    assert "fx.archive" not in [c[0] for c in world.calls]  # asked for by the failed one only


async def test_an_unknown_follow_up_tool_fails_that_follow_up_only_and_undo_finishes(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    follow_up_tools(catalog, world, ["fx.nope"])
    del catalog._tools["fx.nope"]  # the follow-up names a tool the catalog does not have
    async with engine.saga("fx") as saga:
        await saga.call("fx.do")
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.REVERTED
    assert "no tool of that name is in the catalog" in s1.residue[0].what
    rev = await engine.log.get_reversal(saga_id=saga.id)
    assert rev is not None and rev.state == "done"


async def test_follow_ups_cut_off_by_the_budget_keep_the_state_and_endless_ones_stop(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    follow_up_tools(catalog, world, ["fx.more"] * 50)
    async with engine.saga("fx") as saga:
        await saga.call("fx.do")
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=4))
    assert report.tool_calls == 4
    s1 = report.step("s1")
    assert s1.state is StepState.REVERTED
    assert "tool-call budget of 4 spent" in s1.residue[-1].what
    assert s1.manual_action is not None


async def test_an_inverse_raising_amends_own_errors_is_a_failed_inverse_not_a_take_over_loop(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    calls: list[int] = []

    @catalog.tool("nested.do", reversibility="reversible")
    async def do(call: amends.Call) -> None:
        call.inverse("nested.undo")
        call.no_drift_check(reason="test")

    @catalog.tool("nested.undo", reversibility="irreversible")
    async def undo(call: amends.Call) -> None:
        calls.append(1)
        raise amends.LeaseLostError("a nested engine lost its lease")

    async with engine.saga("nested") as saga:
        await saga.call("nested.do")
    t0 = time.monotonic()
    report = await asyncio.wait_for(engine.undo(saga.id, budget=amends.Budget(tool_calls=5)), 5)
    assert time.monotonic() - t0 < 2
    assert calls == [1]
    assert report.step("s1").state is StepState.FAILED
    assert "raised LeaseLostError: a nested engine lost its lease" in report.step("s1").detail


async def test_seconds_budget_bounds_waiting_for_a_step_in_flight_while_independent_steps_proceed(
    engine: amends.Engine, world: CoreWorld
) -> None:
    gate = asyncio.Event()
    in_flight = asyncio.Event()

    async def slow_charge() -> None:
        in_flight.set()
        await gate.wait()

    world.hooks["pay.charge"] = slow_charge
    saga_ids: list[str] = []

    async def agent() -> None:
        async with engine.saga("busy") as saga:
            saga_ids.append(saga.id)
            a = saga.call("crm.update_field", record_id="r2", field="stage", value="won")
            await a
            saga.call("pay.charge", customer="c1", cents=300)

    task = asyncio.create_task(agent())
    await in_flight.wait()
    t0 = time.monotonic()
    report = await engine.undo(saga_ids[0], budget=amends.Budget(seconds=0.4))
    assert time.monotonic() - t0 < 1.5
    assert report.step("s1").state is StepState.REVERTED  # independent: not held up
    assert world.crm["r2"]["stage"] == "lead"
    s2 = report.step("s2")
    assert s2.state is StepState.IN_DOUBT
    assert "still running when the time budget of 0.4 s ran out" in s2.detail
    gate.set()
    await task


async def test_a_step_in_flight_in_another_process_is_waited_for_then_compensated(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Any
) -> None:
    """Another engine (as another process would) runs the saga; undo here waits for its step
    within the seconds budget and compensates it once it is logged done."""
    db = str(tmp_path / "x.db")
    runner = amends.Engine(catalog, log=db)
    undoer = amends.Engine(catalog, log=db, poll_interval=0.01)
    gate = asyncio.Event()
    in_flight = asyncio.Event()

    async def slow_charge() -> None:
        in_flight.set()
        await gate.wait()

    world.hooks["pay.charge"] = slow_charge
    saga_ids: list[str] = []

    async def agent() -> None:
        async with runner.saga("busy") as saga:
            saga_ids.append(saga.id)
            await saga.call("pay.charge", customer="c1", cents=300)

    task = asyncio.create_task(agent())
    await in_flight.wait()
    undo = asyncio.create_task(undoer.undo(saga_ids[0], budget=amends.Budget(seconds=5)))
    await asyncio.sleep(0.2)
    assert not undo.done()
    gate.set()
    report = await undo
    await task
    assert report.step("s1").state is StepState.COMPENSATED
    assert world.charges["ch_1"]["refunded"] == 300
    await runner.close()
    await undoer.close()


def test_undo_sync_with_a_plain_def_inverse_stuck_in_a_thread_returns_within_the_bound(
    catalog: amends.Catalog,
) -> None:
    release = threading.Event()

    @catalog.tool("doc.write", reversibility="reversible")
    def write(call: amends.Call) -> None:
        call.inverse("doc.unwrite")
        call.no_drift_check(reason="a draft only this saga can see")

    @catalog.tool("doc.unwrite", reversibility="irreversible")
    def unwrite(call: amends.Call) -> None:
        release.wait(10)  # stuck

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))

    async def forward() -> str:
        async with engine.saga("doc") as saga:
            await saga.call("doc.write")
        return saga.id

    saga_id = amends.run(forward())
    t0 = time.monotonic()
    report = engine.undo_sync(saga_id, budget=amends.Budget(seconds=0.3))
    elapsed = time.monotonic() - t0
    release.set()
    assert elapsed < 1.5
    s1 = report.step("s1")
    assert s1.state is StepState.IN_DOUBT
    assert "the time budget of 0.3 s ran out while doc.unwrite was running" in s1.detail
    amends.run(engine.close())


# --- rule 8: every manual action actionable, one verb per state ------------------------------


def test_one_verb_per_state() -> None:
    assert verb_for(StepState.REVERTED) == "Revert"
    assert verb_for(StepState.COMPENSATED) == "Compensate"
    assert verb_for(StepState.CANCELLED) == "Cancel"
    assert verb_for(StepState.NOT_NEEDED) is None
    assert {verb_for(s) for s in STANDING} == {"Acknowledge"}


async def test_every_manual_action_has_who_and_a_draft_naming_the_parties(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Drifted, failed, blocked, over budget, in doubt and an irreversible tool that gave no
    draft: each manual action says who can act and gives a draft naming the parties."""

    @catalog.tool("sms.send")
    async def sms(call: amends.Call, to: str) -> None:
        call.residue("a text message", parties=[to])

    charge_tool(catalog, world, "pay.flaky_charge")
    async with engine.saga("many", actor="ann") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=50, after=[a])  # refund fails
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")  # drifts
        saga.call("sms.send", to="+1555")
        e = saga.call("pay.flaky_charge", customer="c9", cents=1)
        await saga.settle()
        await b
        with pytest.raises(amends.StepFailedError):
            await e
    world.human_edit("r2", "stage", "lost")
    world.faults["pay.refund"] = [amends.PermanentError("closed card")]
    report = await engine.undo(saga.id)
    states = {s.step_id: s.state for s in report.steps}
    assert states == {
        "s1": StepState.BLOCKED,
        "s2": StepState.FAILED,
        "s3": StepState.DRIFTED,
        "s4": StepState.ACKNOWLEDGED,
        "s5": StepState.IN_DOUBT,
    }
    for s in report.steps:
        m = s.manual_action
        assert m is not None and m.who and m.draft, s
        assert s.verb == "Acknowledge"
    assert "c1" in report.step("s2").manual_action.draft  # type: ignore[union-attr,operator]
    assert "+1555" in report.step("s4").manual_action.draft  # type: ignore[union-attr,operator]
    assert "ann" in report.step("s2").manual_action.who  # type: ignore[union-attr]


# --- rule 3: undo order against forward order ------------------------------------------------


class Finance:
    """Deals and a processor: a refund is refused while its deal is closed; a deal can only be
    deleted once its charge is refunded (the "finance lock")."""

    def __init__(self) -> None:
        self.deals: dict[str, dict[str, Any]] = {}
        self.ops: list[str] = []
        self.refund_wait = 0.0
        """Seconds the processor takes to answer a refund (0: at once)."""

    def catalog(self) -> amends.Catalog:
        catalog = amends.Catalog()
        f = self

        @catalog.tool("deal.get", reversibility="read_only")
        async def get(call: amends.Call, deal: str) -> Any:
            return dict(f.deals.get(deal, {}))

        @catalog.tool("deal.create", reversibility="reversible")
        async def create(call: amends.Call, deal: str) -> None:
            f.deals[deal] = {"status": "open", "charged": 0}
            f.ops.append(f"create {deal}")
            call.inverse("deal.delete", deal=deal)
            call.expect("deal.get", {"deal": deal}, equals=True, path="exists")
            f.deals[deal]["exists"] = True

        @catalog.tool("deal.delete", reversibility="irreversible")
        async def delete(call: amends.Call, deal: str) -> None:
            if f.deals[deal]["charged"]:
                raise amends.PermanentError(f"deal {deal} has an unrefunded charge")
            del f.deals[deal]
            f.ops.append(f"delete {deal}")

        @catalog.tool("deal.close", reversibility="reversible")
        async def close(call: amends.Call, deal: str) -> None:
            f.deals[deal]["status"] = "closed"
            f.ops.append(f"close {deal}")
            call.inverse("deal.reopen", deal=deal)
            call.expect("deal.get", {"deal": deal}, equals="closed", path="status")

        @catalog.tool("deal.reopen", reversibility="irreversible")
        async def reopen(call: amends.Call, deal: str) -> None:
            f.deals[deal]["status"] = "open"
            f.ops.append(f"reopen {deal}")

        @catalog.tool("deal.charge", reversibility="compensable")
        async def charge(call: amends.Call, deal: str, cents: int) -> None:
            f.deals[deal]["charged"] = cents
            f.ops.append(f"charge {deal}")
            call.inverse("deal.refund", deal=deal, cents=cents)
            call.expect("deal.get", {"deal": deal}, equals=cents, path="charged")
            call.residue(f"Refund of {cents} cents on {deal}", parties=["acme"])

        @catalog.tool("deal.refund", reversibility="irreversible")
        async def refund(call: amends.Call, deal: str, cents: int) -> None:
            if f.refund_wait:
                await asyncio.sleep(f.refund_wait)
            if f.deals[deal]["status"] == "closed":
                raise amends.PermanentError(f"deal {deal} is closed: reopen it before refunding")
            f.deals[deal]["charged"] = 0
            f.ops.append(f"refund {deal}")

        return catalog


@pytest.mark.parametrize("declared", [True, False])
async def test_finance_lock_undo_order_differs_from_forward_order(declared: bool) -> None:
    """With undo_after=[close] on the charge, undo reopens, then refunds, then deletes; without
    it (the reversed forward order) the refund is refused and the rest is blocked."""
    f = Finance()
    engine = amends.Engine(f.catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("finance lock") as saga:
        create = saga.call("deal.create", deal="d1")
        close = saga.call("deal.close", deal="d1", after=[create])
        saga.call(
            "deal.charge",
            deal="d1",
            cents=700,
            after=[close],
            undo_after=[close] if declared else [],
        )
    report = await engine.undo(saga.id)
    undo_ops = f.ops[3:]
    if declared:
        assert undo_ops == ["reopen d1", "refund d1", "delete d1"]
        assert [s.state for s in report.steps] == [
            StepState.REVERTED,
            StepState.REVERTED,
            StepState.COMPENSATED,
        ]
        assert report.status == "partially_reversed"
        assert f.deals == {}
        logged = await engine.log.get_saga(saga.id)
        assert logged is not None and logged.steps[2].inverse is not None
        assert logged.steps[2].inverse["undo_after"] == ["s2"]  # persisted with the step
    else:
        assert undo_ops == []
        assert report.step("s3").state is StepState.FAILED
        assert report.step("s2").state is StepState.BLOCKED
        assert report.status == "cannot_undo"
    await engine.close()


@pytest.mark.parametrize("log", ["memory", "file"])
async def test_the_deals_delete_waits_for_the_refund_its_charge_declared_after_the_reopen(
    log: str, tmp_path: Path
) -> None:
    """Rule 3: the charge depends on the create through the close; ``undo_after=[close]``
    replaces only the edge between the charge and the close, so the create's inverse (delete)
    still waits for the charge's (refund). With a processor that takes its time to refund,
    the delete ran during the refund's wait and was refused (an unrefunded charge): the plan
    ordered delete after reopen only."""
    f = Finance()
    f.refund_wait = 0.05
    where = ":memory:" if log == "memory" else str(tmp_path / "finance.db")
    engine = amends.Engine(f.catalog(), log=amends.SqliteLog(where))
    async with engine.saga("finance lock, a slow refund") as saga:
        create = saga.call("deal.create", deal="d1")
        close = saga.call("deal.close", deal="d1", after=[create])
        saga.call("deal.charge", deal="d1", cents=700, after=[close], undo_after=[close])
    preview = await engine.preview(saga.id)
    report = await engine.undo(saga.id)
    assert f.ops[3:] == ["reopen d1", "refund d1", "delete d1"]
    assert [s.state for s in report.steps] == [
        StepState.REVERTED,
        StepState.REVERTED,
        StepState.COMPENSATED,
    ]
    assert [s.predicted for s in preview.steps] == [s.state for s in report.steps]
    assert f.deals == {}
    await engine.close()


def test_undo_waits_keep_what_a_declaration_does_not_replace() -> None:
    """The declared pair swaps; every other pair the forward graph orders, directly or through
    the declared step, keeps its order (rule 3)."""
    from amends._planner import undo_cycle, undo_waits

    finance = [("s1", (), ()), ("s2", ("s1",), ()), ("s3", ("s2",), ("s2",))]
    assert undo_waits(finance) == {"s1": {"s2", "s3"}, "s2": set(), "s3": {"s2"}}
    chain = [("a", (), ()), ("b", ("a",), ()), ("c", ("b",), ("b",)), ("d", ("c",), ())]
    assert undo_waits(chain) == {"a": {"b", "c", "d"}, "b": {"d"}, "c": {"b", "d"}, "d": set()}
    undeclared = [(sid, deps, ()) for sid, deps, _ in chain]
    assert undo_waits(undeclared) == {"a": {"b", "c", "d"}, "b": {"c", "d"}, "c": {"d"}, "d": set()}
    # two swaps in a row: c's inverse must still land before a's (c depends on a through b),
    # while the declarations put a's before b's before c's: no order is safe, so it is refused
    swaps = [("a", (), ()), ("b", ("a",), ("a",)), ("c", ("b",), ("b",))]
    assert undo_cycle(swaps) == ["a", "b", "c"]
    both = [*swaps[:2], ("c", ("b",), ("b", "a"))]  # c also declares it waits for a: an order
    assert undo_cycle(both) == [] and undo_waits(both)["c"] == {"a", "b"}


async def test_an_undo_order_cycle_is_refused_when_the_step_is_called() -> None:
    f = Finance()
    engine = amends.Engine(f.catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("cycle") as saga:
        a = saga.call("deal.create", deal="d1")
        b = saga.call("deal.close", deal="d1", after=[a])
        with pytest.raises(amends.ContractError) as err:
            saga.call("deal.charge", deal="d1", cents=1, after=[b], undo_after=[a])
        assert "the inverses of s1, s2, s3 would each wait for another of them" in str(err.value)
        assert len(saga.steps) == 2  # the refused step never started
        with pytest.raises(amends.ContractError, match="takes earlier steps of this saga"):
            saga.call("deal.get", deal="d1", undo_after=["s1"])  # type: ignore[list-item]
    await engine.close()


# --- rule 5: never a second effect after a crash ---------------------------------------------


class Crash(BaseException):
    """The worker dies here (not an Exception: nothing in the engine may catch it)."""


def ledger(catalog: amends.Catalog, refunds: list[str], *, landed: bool, crash_after: bool) -> None:
    """A charge whose refund vendor ignores idempotency keys (``idempotent`` not declared)."""
    state: dict[str, int] = {"refunded": 0}

    @catalog.tool("led.get", reversibility="read_only")
    async def get(call: amends.Call) -> dict[str, int]:
        return dict(state)

    @catalog.tool("led.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> None:
        call.inverse("led.refund", cents=cents)
        call.expect("led.get", equals=0, path="refunded")
        if landed:
            call.landed("led.get", equals=cents, path="refunded")

    @catalog.tool("led.refund", reversibility="irreversible")
    async def refund(call: amends.Call, cents: int) -> None:
        if not refunds and not crash_after:
            refunds.append("crash-before")
            raise Crash()  # dies before the vendor applied anything
        state["refunded"] += cents
        refunds.append(call.idempotency_key)
        if crash_after and len(refunds) == 1:
            raise Crash()  # dies after the vendor applied the refund, before the log knows


@pytest.mark.parametrize(
    ("landed", "crash_after", "state", "refund_count"),
    [
        (True, True, StepState.COMPENSATED, 1),  # the landed probe shows it: done, not re-sent
        (False, True, StepState.IN_DOUBT, 1),  # cannot tell: in_doubt, not re-sent
        (False, False, StepState.COMPENSATED, 1),  # the world shows it did not land: sent once
    ],
)
async def test_a_compensation_in_flight_at_a_crash_is_not_re_sent_to_a_vendor_ignoring_keys(
    tmp_path: Any, landed: bool, crash_after: bool, state: StepState, refund_count: int
) -> None:
    refunds: list[str] = []
    catalog = amends.Catalog()
    ledger(catalog, refunds, landed=landed, crash_after=crash_after)
    db = str(tmp_path / "l.db")
    first = amends.Engine(catalog, log=db, lease_seconds=0.2)
    async with first.saga("pay") as saga:
        await saga.call("led.charge", cents=400)
    with pytest.raises(Crash):
        await first.undo(saga.id)
    await first.close()
    await asyncio.sleep(0.25)
    second = amends.Engine(catalog, log=db, lease_seconds=0.2)
    report = (await second.recover()).resumed[0]
    await second.close()
    s1 = report.step("s1")
    assert s1.state is state, s1.detail
    assert len([r for r in refunds if r != "crash-before"]) == refund_count
    if state is StepState.IN_DOUBT:
        assert "does not honour idempotency keys, so it was not sent again" in s1.detail
        assert s1.manual_action is not None and s1.manual_action.draft


# --- rule 10: the preview is honest ---------------------------------------------------------


async def close_deal(engine: amends.Engine) -> amends.Saga:
    async with engine.saga("Close the ACME deal", actor="ann") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        await saga.gather(a, b)
    return saga


async def test_preview_re_observes_every_expectation_and_shows_drift_as_needs_review(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    world.human_edit("r1", "stage", "lost")
    before = len(world.calls)
    preview = await engine.preview(saga.id)
    assert [c[1] for c in world.calls[before:]] == ["probe", "probe"]  # nothing but probes
    assert await engine.log.get_reversal(saga_id=saga.id) is None  # nothing written
    s1, s2 = preview["s1"], preview["s2"]
    assert (s1.action, s1.verb, s1.needs_review) == ("review", "Acknowledge", True)
    assert s1.check == "someone changed it since the agent acted: expected 'won', found 'lost'"
    assert (s2.action, s2.verb, s2.needs_review) == ("compensate", "Compensate", False)
    assert preview.to_dict()["needs_review"] == ["s1"]
    report = await engine.undo(saga.id)  # undo agrees with the preview
    assert report.step("s1").state is StepState.DRIFTED


async def test_after_the_undo_window_closes_the_step_is_acknowledged_in_preview_and_undo(
    engine: amends.Engine, catalog: amends.Catalog
) -> None:
    sent: list[str] = []

    @catalog.tool("bank.wire", reversibility="compensable")
    async def wire(call: amends.Call, to: str, window: float) -> None:
        call.inverse("bank.recall", to=to, deadline=time.time() + window)
        call.no_drift_check(reason="a wire cannot be changed by anyone else")

    @catalog.tool("bank.recall", reversibility="irreversible")
    async def recall(call: amends.Call, to: str) -> None:
        sent.append(to)

    async with engine.saga("wires") as saga:
        saga.call("bank.wire", to="open", window=3600)
        saga.call("bank.wire", to="closing", window=0.05)
    early = await engine.preview(saga.id)
    assert [p.action for p in early.steps] == ["compensate", "compensate"]
    assert [w["step_id"] for w in early.to_dict()["undo_windows"]] == ["s1", "s2"]
    await asyncio.sleep(0.1)
    late = await engine.preview(saga.id)
    assert [p.action for p in late.steps] == ["compensate", "acknowledge"]
    assert late["s2"].reason.startswith("the undo window of bank.recall closed at ")
    report = await engine.undo(saga.id)
    assert report.step("s2").state is StepState.ACKNOWLEDGED
    assert sent == ["open"]


# --- rule 6: continue and resolve ------------------------------------------------------------


async def test_resume_continues_an_over_budget_reversal_as_the_same_reversal(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    first = await engine.undo(saga.id, budget=amends.Budget(tool_calls=2))
    assert first.step("s1").state is StepState.OVER_BUDGET
    assert f"amends undo {saga.id} --continue" in first.step("s1").manual_action.what  # type: ignore[union-attr]
    assert "run undo again" not in first.to_json()
    again = await engine.undo(saga.id, budget=amends.Budget())  # undo joins: same report
    assert again.step("s1").state is StepState.OVER_BUDGET
    report = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert report.reversal_id == first.reversal_id
    assert report.continuations == 1
    assert report.step("s1").state is StepState.REVERTED
    assert report.step("s2").state is StepState.COMPENSATED
    assert refunds(world) == 1  # the refund logged done was not sent again
    assert world.crm["r1"]["stage"] == "lead"
    assert report.status == "partially_reversed"


async def test_resolve_records_who_handled_it_and_resume_proceeds_past_it(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    world.faults["pay.refund"] = [amends.PermanentError("card closed")]
    first = await engine.undo(saga.id)
    assert first.step("s2").state is StepState.FAILED
    assert first.step("s1").state is StepState.BLOCKED
    res = await engine.resolve(saga.id, "s2", by="ann", note="refunded by bank transfer")
    assert (res.by, res.note) == ("ann", "refunded by bank transfer")
    shown = await engine.report(saga.id)
    assert shown is not None and shown.handled("s2") is not None
    assert [m.step_id for m in shown.open_manual_actions] == ["s1"]
    report = await engine.resume(saga.id, budget=amends.Budget())
    assert report.step("s2").state is StepState.FAILED  # the engine's outcome is kept
    assert report.step("s1").state is StepState.REVERTED  # unblocked by the resolution
    assert world.crm["r1"]["stage"] == "lead"
    assert report.open_manual_actions == []
    handled = report.to_dict()["manual_actions"][0]["handled"]
    assert (handled["by"], handled["note"]) == ("ann", "refunded by bank transfer")
    assert "handled by ann at " in report.render("text")
    assert report.status == "cannot_undo"
    assert refunds(world) == 0


async def test_resolve_refuses_unknown_steps_and_anonymous_people(engine: amends.Engine) -> None:
    saga = await close_deal(engine)
    with pytest.raises(amends.ContractError):
        await engine.resolve(saga.id, "s9", by="ann", note="checked")
    with pytest.raises(amends.ConfigError, match="must name who handled"):
        await engine.resolve(saga.id, "s1", by=" ", note="checked")
    with pytest.raises(amends.SagaNotFoundError):
        await engine.resolve("nope", "s1", by="ann", note="checked")


async def test_concurrent_resume_requests_join_one_continuation(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Any
) -> None:
    db = str(tmp_path / "c.db")
    one, two = amends.Engine(catalog, log=db), amends.Engine(catalog, log=db)
    saga = await close_deal(one)
    await one.undo(saga.id, budget=amends.Budget(tool_calls=2))
    # concurrent: each request has read the reversal before either continues it (without this
    # gate a fast first request could finish before the second even looked, and the second
    # would then rightly continue again)
    both_read = asyncio.Event()
    readers: set[int] = set()
    for engine in (one, two):
        original = engine.log.get_saga  # the snapshot (with its reversal) resume judges

        async def gated(*a: Any, _orig: Any = original, _who: int = id(engine), **kw: Any) -> Any:
            rev = await _orig(*a, **kw)
            readers.add(_who)
            if len(readers) == 2:
                both_read.set()
            await both_read.wait()
            return rev

        engine.log.get_saga = gated  # type: ignore[method-assign]
    a, b = await asyncio.gather(
        one.resume(saga.id, budget=amends.Budget()),
        two.resume(saga.id, budget=amends.Budget()),
    )
    assert a.reversal_id == b.reversal_id
    assert (a.continuations, b.continuations) == (1, 1)
    assert a.step("s1").state is StepState.REVERTED
    # issue 23: a later request finds nothing left to continue and says so (it used to run a
    # continuation that attempted nothing)
    with pytest.raises(amends.SagaStateError, match="nothing to continue"):
        await one.resume(saga.id, budget=amends.Budget())
    report = await one.report(saga.id)
    assert report is not None and report.continuations == 1
    assert refunds(world) == 1
    assert sum(1 for e in world.effects if e[0] == "crm.update_field") == 2  # forward + revert
    await one.close()
    await two.close()


# --- rule 3, property: any declarations on any DAG ------------------------------------------


def _reachable(edges: dict[int, set[int]], i: int) -> set[int]:
    seen: set[int] = set()
    todo = list(edges[i])
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo.extend(edges[j])
    return seen


def _oracle_waits(deps: dict[int, list[int]], after: dict[int, list[int]]) -> dict[int, set[int]]:
    """Independent statement of rule 3: each step waits for every step depending on it, directly
    or through others; each declared pair flipped (that pair alone); then everything reachable."""
    forward: dict[int, set[int]] = {i: set() for i in deps}
    for t, ds in deps.items():
        for d in ds:
            forward[d].add(t)
    direct = {i: _reachable(forward, i) for i in forward}
    for s, os_ in after.items():
        for o in os_:
            direct[o].discard(s)
            direct[s].add(o)
    return {i: _reachable(direct, i) for i in direct}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph=st.lists(st.sets(st.integers(0, 9), max_size=3), min_size=1, max_size=10),
    declared=st.lists(st.sets(st.integers(0, 9), max_size=2), min_size=10, max_size=10),
)
def test_undo_order_declarations_are_kept_on_any_dag_and_every_cycle_is_refused(
    graph: list[set[int]], declared: list[set[int]]
) -> None:
    world, catalog = fresh()
    deps: dict[int, list[int]] = {}
    after: dict[int, list[int]] = {}
    refused: list[int] = []

    async def go() -> amends.UndoReport:
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        async with engine.saga("dag") as saga:
            steps: dict[int, amends.Step] = {}
            for i, ds in enumerate(graph):
                d = sorted(j for j in ds if j in steps)
                a = sorted(j for j in declared[i] if j in steps)
                cycle = i in _oracle_waits({**deps, i: d}, {**after, i: a})[i]
                try:
                    steps[i] = saga.call(
                        "crm.note",
                        step_id=f"n{i}",
                        record_id="r1",
                        text=f"n{i}",
                        after=[steps[j] for j in d],
                        undo_after=[steps[j] for j in a],
                    )
                except amends.ContractError as exc:
                    assert cycle, exc
                    refused.append(i)
                    continue
                assert not cycle
                deps[i], after[i] = d, a
        report = await engine.undo(saga.id)
        await engine.close()
        return report

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # not the test runner's event loop
        report = pool.submit(asyncio.run, go()).result()
    undone = [e[1] for e in world.effects if e[0] == "crm.delete_note"]
    position = {text: k for k, text in enumerate(undone)}
    waits = _oracle_waits(deps, after)
    for i in deps:
        assert report.step(f"n{i}").state is StepState.REVERTED
        for j in waits[i]:
            assert position[f"n{j}"] < position[f"n{i}"], (i, j, undone)


def test_preview_resume_and_resolve_have_sync_twins() -> None:
    world, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    saga = amends.run(close_deal(engine))
    preview = engine.preview_sync(saga.id)
    assert [p.action for p in preview.steps] == ["revert", "compensate"]
    first = engine.undo_sync(saga.id, budget=amends.Budget(tool_calls=2))
    assert first.step("s1").state is StepState.OVER_BUDGET
    res = engine.resolve_sync(saga.id, "s1", by="ann", note="looked at it")
    assert res.by == "ann"
    # issue 23: a resolved step is the person's until the resolution is withdrawn
    engine.withdraw_resolution_sync(saga.id, "s1", by="ann", note="not handled after all")
    report = engine.resume_sync(saga.id, budget=amends.Budget())
    assert report.step("s1").state is StepState.REVERTED
    assert world.crm["r1"]["stage"] == "lead"
    amends.run(engine.close())


async def test_a_take_over_after_a_crash_keeps_the_spent_budget(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Any
) -> None:
    """Rule 7: nothing resets a reversal's budget but a continuation; the worker that takes over
    after a crash goes on with what the dead one spent, including the inverse it had in flight
    (paid for before it was sent). With the budget spent, the step in flight stays over budget
    (continuable, the earlier attempt named) and is finished by a continuation."""
    db = str(tmp_path / "b.db")
    first = amends.Engine(catalog, log=db, lease_seconds=0.2)
    async with first.saga("three writes") as saga:  # one resource: inverses run s3, s2, s1
        for value in ("won", "negotiation", "closed"):
            await saga.call("crm.update_field", record_id="r1", field="stage", value=value)
    inverses = [0]

    def crash_in_the_second_inverse() -> None:
        if world.calls[-1][1] == "compensate":
            inverses[0] += 1
            if inverses[0] == 2:
                raise Crash()

    world.hooks["crm.update_field"] = crash_in_the_second_inverse
    with pytest.raises(Crash):  # s3: probe + inverse; s2: probe + inverse (dies) = 4 calls
        await first.undo(saga.id, budget=amends.Budget(tool_calls=4))
    await first.close()
    await asyncio.sleep(0.25)
    second = amends.Engine(catalog, log=db, lease_seconds=0.2)
    report = (await second.recover()).resumed[0]
    assert [s.state for s in report.steps] == [
        StepState.BLOCKED,  # waits for s2 (one resource)
        StepState.OVER_BUDGET,  # in flight at the crash; a 5th call would overspend
        StepState.REVERTED,
    ]
    assert report.step("s2").detail == (
        "tool-call budget of 4 spent before crm.update_field could run; an earlier attempt of "
        "crm.update_field was sent before a worker stopped and may have taken effect: "
        "continuing with a new budget checks it before anything is sent again"
    )
    assert report.tool_calls == 4  # the 4 calls made, the one in flight included
    assert world.crm["r1"]["stage"] == "negotiation"  # s2's inverse died before it applied
    done = await second.resume(saga.id, budget=amends.Budget(tool_calls=10))
    await second.close()
    assert [s.state for s in done.steps] == [StepState.REVERTED] * 3
    assert world.crm["r1"]["stage"] == "lead"  # as before the saga


async def test_cancelled_while_the_intent_is_written_the_step_is_cancelled_not_in_doubt(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Item 9 / rule 8: the tool was never called, so the step says so (not in doubt)."""
    real = engine.log.begin_step
    writing = asyncio.Event()

    async def slow_begin(*args: Any, **kwargs: Any) -> bool:
        writing.set()
        await asyncio.sleep(0.1)
        return await real(*args, **kwargs)

    engine.log.begin_step = slow_begin  # type: ignore[method-assign]
    ids: list[str] = []

    async def agent() -> None:
        async with engine.saga("cancelled early") as saga:
            ids.append(saga.id)
            await saga.call("pay.charge", customer="c1", cents=5)

    task = asyncio.create_task(agent())
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.charges == {}  # never called
    report = await engine.undo(ids[0])
    s1 = report.step("s1")
    assert (s1.state, s1.verb) == (StepState.CANCELLED, "Cancel")
    assert s1.detail == "the agent's task was cancelled before the tool was called; it never ran"
