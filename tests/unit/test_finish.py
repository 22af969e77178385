"""Issue 23 item 2: every reversal can be finished. A retry cut by the budget is over budget and a
continuation finishes it; causes are exact (a call that never reached a vendor is no attempt)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import StepState
from core_world import CoreWorld, close_deal, refunds, without

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


# --- an inverse naming a tool the catalog does not have -------------------------------------


async def test_an_inverse_naming_an_unknown_tool_is_a_violation_when_the_step_runs_rest_undoes(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """`call.inverse("files.rm_typo", ...)` (never registered): a contract violation recorded
    when the step runs (it stands, needs a person at undo). Before: every undo of the saga raised
    ContractError "... undo it with the catalog that ran it" -- it was that catalog."""
    files: dict[str, str] = {}

    @catalog.tool("files.write", reversibility="reversible")
    async def write(call: amends.Call, path: str, text: str) -> None:
        files[path] = text
        call.inverse("files.rm_typo", path=path)
        call.no_drift_check(reason="a scratch file only this agent writes")

    async with engine.saga("files") as saga:
        await saga.call("files.write", path="/tmp/x", text="hi")
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None
    s1 = logged.steps[0]
    assert (s1.effective, s1.violation) == (
        "irreversible",
        "tool 'files.write' recorded inverse 'files.rm_typo' which is not in the catalog; "
        "register it or record an inverse the catalog has",
    )
    preview = await engine.preview(saga.id)
    assert preview.predicted("s1") is StepState.ACKNOWLEDGED
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.ACKNOWLEDGED
    assert report.step("s1").violation == s1.violation
    assert report.step("s1").manual_action is not None
    assert report.step("s2").state is StepState.REVERTED
    assert world.crm["r1"]["stage"] == "lead"
    assert files == {"/tmp/x": "hi"}  # it stands; a person is told


# --- retry: a failed compensation is tried again after a person fixed the cause --------------


def expired_key(world: CoreWorld) -> list[bool]:
    """The processor refuses refunds while the vendor API key is expired (``fixed`` flips it)."""
    fixed: list[bool] = []

    def hook() -> None:
        if not fixed:
            raise amends.PermanentError("vendor API key expired")

    world.hooks["pay.refund"] = hook
    return fixed


async def test_a_failed_compensation_is_retried_after_the_cause_is_fixed_and_what_it_gated_follows(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Before: undo, resume, and resolve + resume all left the refund failed and the hold in
    place. Now: retry, in the same reversal, through the drift check; the blocked CRM write
    follows; the costs add up over both runs."""
    saga = await close_deal(engine)
    fixed = expired_key(world)
    first = await engine.undo(saga.id)
    assert (first.step("s2").state, first.step("s1").state) == (
        StepState.FAILED,
        StepState.BLOCKED,
    )
    assert "once its cause is fixed" not in first.render("text")  # the CLI says it, not the report
    fixed.append(True)  # a person renews the key
    assert (await engine.undo(saga.id)).to_dict() == first.to_dict()  # undo joins: same report
    with pytest.raises(amends.SagaStateError, match="nothing to continue"):
        await engine.resume(saga.id)  # a continuation never retries a failed step
    report = await engine.retry(saga.id, ["s2"], by="ann")
    assert report.reversal_id == first.reversal_id
    assert (report.step("s2").state, report.step("s1").state) == (
        StepState.COMPENSATED,
        StepState.REVERTED,
    )
    assert report.continuations == 1
    # each run's own figures: the first (probe, refused refund), the retry (probe, refund, then
    # s1's probe and write-back); the total adds them up
    assert [r["tool_calls"] for r in report.runs] == [2, 4]
    assert report.tool_calls == 6  # cumulative, never reset to 0
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000
    assert world.crm["r1"]["stage"] == "lead"
    events = [e for e in await engine.log.events(saga.id) if e.step_id == "s2"]
    assert [e.kind for e in events if e.kind.startswith("compensation.")][-3:] == [
        "compensation.retry_asked",
        "compensation.dispatched",
        "compensation.compensated",
    ]
    with pytest.raises(amends.SagaStateError, match="nothing to continue"):
        await engine.resume(saga.id)


class Crash(BaseException):
    """The worker dies here (not an Exception: nothing in the engine may catch it)."""


async def test_a_retry_whose_worker_died_in_flight_is_taken_up_by_asking_again_refunding_once(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Path
) -> None:
    """A person retries the failed refund; the process dies while the refund is in flight (the
    processor applied it, the answer was lost). Asking again is what a person does. Before:
    "has no finished reversal, so no failed compensation to retry; wait for it to finish",
    however long they waited: the retry they asked could never be finished by asking again.
    Now: the second retry takes the run over (rule 6), the refund is sent again with the same
    key (rule 5: the processor honours it, nothing is refunded twice) and s1 follows."""
    db = str(tmp_path / "a.db")
    first = amends.Engine(catalog, log=db, lease_seconds=0.2)
    saga = await close_deal(first)
    fixed = expired_key(world)
    await first.undo(saga.id)
    fixed.append(True)  # the key is renewed

    def dies_after_refunding() -> None:
        world.hooks["pay.refund"] = lambda: None
        ch = world.charges["ch_1"]
        ch["refunded"] += ch["cents"]  # the processor acts ...
        world.effects.append(("pay.refund", "ch_1", f"amends:{saga.id}:s2:undo"))
        world.seen_keys[f"amends:{saga.id}:s2:undo"] = {"refund_of": "ch_1", "cents": 5000}
        raise Crash  # ... and the worker dies before its answer is logged

    world.hooks["pay.refund"] = dies_after_refunding
    with pytest.raises(Crash):
        await first.retry(saga.id, ["s2"], by="ann")
    await first.close()
    await asyncio.sleep(0.25)  # the dead worker's lease runs out
    second = amends.Engine(catalog, log=db, lease_seconds=0.2)
    try:
        report = await second.retry(saga.id, ["s2"], by="ann")
    finally:
        await second.close()
    assert report.reversal_id == (await first_report_id(db, saga.id))
    assert (report.step("s2").state, report.step("s1").state) == (
        StepState.COMPENSATED,
        StepState.REVERTED,
    )
    assert report.headline == "2 of 2 taken back (1 compensated, leaving a trace)"
    assert refunds(world) == 1 and world.charges["ch_1"]["refunded"] == 5000
    assert world.crm["r1"]["stage"] == "lead"


async def first_report_id(db: str, saga_id: str) -> str:
    log = amends.SqliteLog(db)
    try:
        saga = await log.get_saga(saga_id)
    finally:
        await log.close()
    assert saga is not None and saga.reversal is not None
    return saga.reversal.reversal_id


async def test_a_retry_goes_through_the_drift_check_again_and_never_refunds_twice(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    fixed = expired_key(world)
    await engine.undo(saga.id)
    fixed.append(True)
    world.charges["ch_1"]["refunded"] = 5000  # meanwhile someone refunded by hand
    report = await engine.retry(saga.id, ["s2"])
    assert report.step("s2").state is StepState.DRIFTED
    assert world.charges["ch_1"]["refunded"] == 5000 and refunds(world) == 0


async def test_retry_refuses_a_step_that_did_not_fail_or_was_handled_and_writes_nothing(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    with pytest.raises(amends.SagaStateError, match="no finished reversal"):
        await engine.retry(saga.id, ["s2"])
    expired_key(world)
    await engine.undo(saga.id)
    rows = await engine.log.events(saga.id)
    with pytest.raises(amends.SagaStateError, match="'s1' .* is blocked, not failed"):
        await engine.retry(saga.id, ["s1"])
    with pytest.raises(amends.ContractError, match="no step 's9'"):
        await engine.retry(saga.id, ["s9"])
    with pytest.raises(amends.ConfigError, match="list of step ids"):
        await engine.retry(saga.id, "s2")
    await engine.resolve(saga.id, "s2", by="ann", note="refunded by bank transfer")
    with pytest.raises(amends.SagaStateError, match="was handled by ann"):
        await engine.retry(saga.id, ["s2"])
    assert len(await engine.log.events(saga.id)) == len(rows) + 1  # only the resolution


async def test_concurrent_retry_requests_join_one_continuation(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: Any
) -> None:
    db = str(tmp_path / "r.db")
    one, two = amends.Engine(catalog, log=db), amends.Engine(catalog, log=db)
    saga = await close_deal(one)
    fixed = expired_key(world)
    await one.undo(saga.id)
    fixed.append(True)
    # concurrent: each request has checked the step before either retries it (else a fast
    # first request could finish before the second looked, which then rightly finds it undone)
    both_read = asyncio.Event()
    readers: set[int] = set()
    for engine in (one, two):
        original = engine.log.get_compensations

        async def gated(rid: str, _orig: Any = original, _who: int = id(engine)) -> Any:
            got = await _orig(rid)
            readers.add(_who)
            if len(readers) == 2:
                both_read.set()
            await both_read.wait()
            return got

        engine.log.get_compensations = gated  # type: ignore[method-assign]
    a, b = await asyncio.gather(one.retry(saga.id, ["s2"]), two.retry(saga.id, ["s2"]))
    assert a.reversal_id == b.reversal_id and a.continuations == b.continuations == 1
    assert a.step("s2").state is StepState.COMPENSATED
    assert refunds(world) == 1
    await one.close()
    await two.close()


# --- resolve: only a standing effect, who, a note, never erased, withdrawable -----------------


async def test_resolve_is_refused_for_a_step_whose_effect_no_longer_stands(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Before: resolve was accepted on a compensated step. Nothing is written now."""
    saga = await close_deal(engine)
    report = await engine.undo(saga.id)
    assert report.step("s2").state is StepState.COMPENSATED
    before = len(await engine.log.events(saga.id))
    with pytest.raises(amends.SagaStateError) as err:
        await engine.resolve(saga.id, "s2", by="ann", note="refunded by hand")
    assert str(err.value) == (
        f"step 's2' of saga {saga.id!r} is compensated: its effect no longer stands, so there "
        f"is nothing a person must handle and nothing to resolve"
    )
    with pytest.raises(amends.ConfigError, match="must say what the person did"):
        await engine.resolve(saga.id, "s1", by="ann", note=" ")
    fresh = await close_deal(engine)
    with pytest.raises(amends.SagaStateError, match="undo it first"):
        await engine.resolve(fresh.id, "s1", by="ann", note="checked")
    assert len(await engine.log.events(saga.id)) == before


async def test_a_second_resolution_keeps_the_first_and_a_withdrawal_reopens_the_action(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Before: a second resolve silently replaced the first, and nothing took one back. The
    headline counts a resolved standing effect as handled by a person, never "0 need your
    attention" while the effect stands."""
    saga = await close_deal(engine)
    expired_key(world)
    first = await engine.undo(saga.id)
    assert first.headline == "0 of 2 taken back · 2 need your attention"
    ann = await engine.resolve(saga.id, "s2", by="ann", note="refunded by bank transfer")
    again = await engine.resolve(saga.id, "s2", by="ann", note="refunded by bank transfer")
    assert again == ann  # the same request again records nothing new
    bob = await engine.resolve(saga.id, "s2", by="bob", note="confirmed with the bank")
    assert [(r.by, r.note) for r in bob.earlier] == [("ann", "refunded by bank transfer")]
    shown = await engine.report(saga.id)
    assert shown is not None
    assert shown.headline == "0 of 2 taken back · 1 handled by a person · 1 needs your attention"
    text = " ".join(shown.render("text").split())
    assert "handled by bob at " in text and "(earlier: handled by ann at " in text
    resumed = await engine.resume(saga.id)  # s1 was blocked by s2: unblocked by the resolution
    assert resumed.step("s1").state is StepState.REVERTED
    assert resumed.headline == "1 of 2 taken back · 1 handled by a person"
    back = await engine.withdraw_resolution(saga.id, "s2", by="bob", note="the bank reversed it")
    assert back.withdrawn and [r.by for r in back.earlier] == ["ann", "bob"]
    reopened = await engine.report(saga.id)
    assert reopened is not None and [m.step_id for m in reopened.open_manual_actions] == ["s2"]
    assert reopened.headline == "1 of 2 taken back · 1 needs your attention"
    history = [
        (e.data["by"], e.data.get("withdrawn", False))
        for e in await engine.log.events(saga.id)
        if e.kind == "step.resolved"
    ]
    assert history == [("ann", False), ("bob", False), ("bob", True)]
    with pytest.raises(amends.SagaStateError, match="no resolution to withdraw"):
        await engine.withdraw_resolution(saga.id, "s2", by="bob", note="again")


@pytest.mark.parametrize(
    ("by", "note", "wrong"),
    [
        ("ann\nresolved by: the bank", "refunded", "must be one line of at most 200 printable"),
        ("ann\x1b[2K", "refunded", "must be one line of at most 200 printable"),
        ("a" * 201, "refunded", "must be one line of at most 200 printable"),
        ("ann", "n" * 2001, "is 2001 characters, more than 2000"),
    ],
    ids=["newline", "escape", "long_by", "long_note"],
)
async def test_a_resolution_whose_by_is_not_one_line_or_whose_note_is_too_long_writes_nothing(
    engine: amends.Engine, world: CoreWorld, by: str, note: str, wrong: str
) -> None:
    """Before: the library and ``amends resolve --by`` recorded a multi-line or escape-laden
    ``by`` and a note of any length (HTTP took at most 2000 characters): the person's name
    shown in every later report could be made to read as something else. One limit for every
    way in; the error names the value, what is wrong and the fix, and the log is unchanged."""
    saga = await close_deal(engine)
    expired_key(world)
    await engine.undo(saga.id)
    before = len(await engine.log.events(saga.id))
    for call in (engine.resolve, engine.withdraw_resolution):
        with pytest.raises(amends.ConfigError, match=wrong):
            await call(saga.id, "s2", by=by, note=note)
    assert len(await engine.log.events(saga.id)) == before
    ok = await engine.resolve(saga.id, "s2", by=" ann ", note="n" * 2000)
    assert ok.by == "ann" and len(ok.note) == 2000


async def test_continuing_adds_up_the_costs_and_keeps_each_runs_own(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Before: `undo --continue` reset the cost line to "0 tool calls · 0 tokens"."""
    saga = await close_deal(engine)
    first = await engine.undo(saga.id, budget=amends.Budget(tool_calls=2))
    assert first.tool_calls == 2 and first.runs == ()
    report = await engine.resume(saga.id, budget=amends.Budget(tool_calls=10))
    assert [(r["run"], r["tool_calls"]) for r in report.runs] == [(0, 2), (1, 2)]
    assert report.tool_calls == 4
    assert report.seconds >= sum(r["seconds"] for r in report.runs) - 0.002
    text = " ".join(report.render("text").split())  # the cost line wraps at 80 columns
    assert "4 tool calls, 0 tokens" in text and "over 2 runs (2 + 2 tool calls)" in text


# --- a catalog that lost some of a saga's tools -------------------------------------------


async def test_a_catalog_missing_tools_is_refused_unless_asked_then_the_rest_is_undone(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    async with engine.saga("two deals") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000)
    upgraded = amends.Engine(without(catalog, "pay.refund"), log=engine.log)
    with pytest.raises(amends.ContractError, match="allow_missing_tools=True"):
        await upgraded.undo(saga.id)
    assert await engine.log.get_reversal(saga_id=saga.id) is None  # nothing written
    preview = await upgraded.preview(saga.id)
    assert preview.predicted("s2") is StepState.FAILED
    report = await upgraded.undo(saga.id, allow_missing_tools=True)
    assert report.step("s1").state is StepState.REVERTED
    s2 = report.step("s2")
    assert s2.state is StepState.FAILED
    assert s2.detail.startswith(
        "not attempted: its inverse tool 'pay.refund' is not in this engine's catalog"
    )
    assert s2.manual_action is not None and s2.attempts == 0
    assert world.charges["ch_1"]["refunded"] == 0 and world.crm["r1"]["stage"] == "lead"
    fixed = await engine.retry(saga.id, ["s2"])  # the tool is back: retry it
    assert fixed.step("s2").state is StepState.COMPENSATED
    assert world.charges["ch_1"]["refunded"] == 5000


async def test_a_step_whose_inverse_tool_is_missing_sets_no_budget_aside_for_itself_or_its_waiters(
    engine: amends.Engine, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Rules 7, 8: with the refund tool gone (allow_missing_tools), the charge's refund and the
    CRM write that waits for it call nothing, so a budget of 2 covers the other record's check
    and write-back. Before: both set calls aside they never spent, and r2's write was reported
    "tool-call budget of 2 spent before crm.read_field could run" after 0 tool calls (with 3:
    "leaves 1 call(s)"); the preview predicted the same false cut."""
    async with engine.saga("deal and a second record") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    upgraded = amends.Engine(without(catalog, "pay.refund"), log=engine.log)
    budget = amends.Budget(tool_calls=2)
    preview = await upgraded.preview(saga.id, budget=budget)
    expected = {"s1": StepState.BLOCKED, "s2": StepState.FAILED, "s3": StepState.REVERTED}
    assert {p.step_id: p.predicted for p in preview.steps} == expected
    assert preview.tool_calls == 2
    report = await upgraded.undo(saga.id, budget=budget, allow_missing_tools=True)
    assert {s.step_id: s.state for s in report.steps} == expected
    assert report.step("s3").detail == "reverted with crm.update_field"
    assert report.tool_calls == 2
    assert report.headline == "1 of 3 taken back · 2 need your attention"
    assert (world.crm["r1"]["stage"], world.crm["r2"]["stage"]) == ("won", "lead")
    assert world.charges["ch_1"]["refunded"] == 0
