"""The eight engine rules of DESIGN.md, each pinned by tests that fail when the rule breaks."""

from __future__ import annotations

import asyncio
import threading

import pytest

import amends
from amends import StepState
from core_world import CoreWorld

pytestmark = pytest.mark.asyncio


async def close_deal(engine: amends.Engine) -> amends.Saga:
    async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        await saga.gather(a, b)
    return saga


# --- rule 1: write-ahead ---------------------------------------------------------------------


async def test_intent_is_durable_before_the_tool_runs(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """While the tool runs, the log already holds the step's intent (and no result yet)."""
    seen: list[str] = []

    async def look() -> None:
        saga = await engine.log.get_saga(saga_id)
        assert saga is not None
        seen.append(saga.steps[0].state)

    world.hooks["crm.update_field"] = look
    async with engine.saga("one step") as saga:
        saga_id = saga.id
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    assert seen == ["intent"]


async def test_result_and_inverse_are_durable_before_a_dependent_starts(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """A dependent's tool sees its prerequisite logged done, with inverse and expectation."""
    seen: list[tuple[str, object, object]] = []

    async def look() -> None:
        saga = await engine.log.get_saga(saga_id)
        assert saga is not None
        first = saga.steps[0]
        seen.append((first.state, first.inverse, first.expectation))

    world.hooks["pay.charge"] = look
    async with engine.saga("two steps") as saga:
        saga_id = saga.id
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=100, after=[a])
    assert seen == [
        (
            "done",
            {
                "tool": "crm.update_field",
                "args": {"record_id": "r1", "field": "stage", "value": "lead"},
            },
            {
                "probe": "crm.read_field",
                "args": {"record_id": "r1", "field": "stage"},
                "equals": "won",
                "path": [],
            },
        )
    ]


async def test_inverse_is_computed_at_execution_time_from_the_world_then(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """The inverse holds the value observed when the step ran, not a value looked up at undo."""
    async with engine.saga("stage twice") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="qualified")
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    assert [s.inverse["args"]["value"] for s in rec.steps if s.inverse] == ["lead", "qualified"]
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert world.crm["r1"]["stage"] == "lead"


# --- rule 2: inverse is data ------------------------------------------------------------------


async def test_reversible_tool_without_inverse_is_logged_and_reported_irreversible(
    engine: amends.Engine, world: CoreWorld
) -> None:
    async with engine.saga("broken tool") as saga:
        await saga.call("crm.forgetful", record_id="r1")
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    assert (rec.steps[0].declared, rec.steps[0].effective) == ("reversible", "irreversible")
    report = await engine.undo(saga.id)
    step = report.step("s1")
    assert step.state is StepState.ACKNOWLEDGED
    assert step.violation == (
        "tool 'crm.forgetful' is 'reversible' but recorded no inverse; "
        "call call.inverse(...) or register it as 'irreversible'"
    )
    assert report.violations == [f"s1 (crm.forgetful): {step.violation}"]
    assert report.status == "cannot_undo"
    assert "Contract violations:" in report.render("text")
    assert world.crm["r1"]["touched"] is True  # the engine did not pretend to undo it


# --- rule 3: order by dependency --------------------------------------------------------------


async def test_inverse_runs_only_after_the_inverses_of_its_dependents(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Adversarial saga (a): step 3's inverse depends on step 5's inverse succeeding."""
    async with engine.saga("five steps") as saga:
        saga.call("crm.note", record_id="r2", text="one")
        saga.call("crm.note", record_id="r2", text="two")
        s3 = saga.call("crm.update_field", record_id="r1", field="owner", value="cat")
        saga.call("crm.note", record_id="r2", text="four")
        saga.call("crm.update_field", record_id="r2", field="owner", value=s3["owner"])
    report = await engine.undo(saga.id)
    order = [e[2].split(":")[-2] for e in world.effects if e[2].endswith(":undo")]
    assert report.status == "fully_reversed"
    assert order.index("s5") < order.index("s3")
    assert world.crm["r1"]["owner"] == "ann" and world.crm["r2"]["owner"] == "bob"
    assert world.crm["r2"]["notes"] == []


async def test_shared_resources_order_inverses_in_reverse(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Two writes to one record (shared resource) are undone newest first, ending at the start."""
    async with engine.saga("two writes") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="qualified")
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None and rec.steps[1].deps == ("s1",)
    report = await engine.undo(saga.id)
    assert [s.state for s in report.steps] == [StepState.REVERTED, StepState.REVERTED]
    assert world.crm["r1"]["stage"] == "lead"


async def test_a_retry_on_the_resource_of_a_refused_step_runs_and_one_in_doubt_blocks_it(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """A step that waits only via a shared resource on a refused (``failed``) step runs: nothing
    happened, so the agent's retry is no guess. An ``in_doubt`` predecessor still blocks it (the
    world is unknown), and so does a failed step named in ``after=``."""
    world.faults["crm.update_field"] = [amends.PermanentError("record locked")]
    async with engine.saga("retry after a refusal") as saga:
        first = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.StepFailedError, match="record locked"):
            await first
        retry = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        assert (await retry)["stage"] == "won"
        after = saga.call(
            "crm.update_field", record_id="r2", field="stage", value="x", after=[first]
        )
        with pytest.raises(amends.StepFailedError, match="never ran"):
            await after
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    assert [(s.step_id, s.state, s.deps) for s in rec.steps] == [
        ("s1", "failed", ()),
        ("s2", "done", ("s1",)),
        ("s3", "skipped", ("s1",)),
    ]
    assert world.crm["r1"]["stage"] == "won" and world.crm["r2"]["stage"] == "lead"
    report = await engine.undo(saga.id)
    assert [(s.step_id, s.state) for s in report.steps] == [
        ("s1", StepState.NOT_NEEDED),
        ("s2", StepState.REVERTED),
        ("s3", StepState.NOT_NEEDED),
    ]
    assert report.status == "fully_reversed"
    assert world.crm["r1"]["stage"] == "lead"

    world.faults["crm.update_field"] = [RuntimeError("connection reset mid-write")]
    async with engine.saga("retry after an unknown outcome") as doubt:
        first = doubt.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.StepFailedError, match="connection reset"):
            await first
        blocked = doubt.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.StepFailedError, match="never ran"):
            await blocked
    assert first.state == "in_doubt"
    rec = await engine.log.get_saga(doubt.id)
    assert rec is not None
    assert [(s.state, s.error) for s in rec.steps] == [
        ("in_doubt", rec.steps[0].error),
        ("skipped", "never ran: step s1 (crm.update_field) it waits for is in_doubt"),
    ]
    assert world.crm["r1"]["stage"] == "lead"  # the blocked retry never wrote


async def test_a_retry_on_the_resource_of_a_step_that_acted_then_raised_never_runs() -> None:
    """A tool that records its inverse, acts, then raises is ``failed`` for the agent but
    logged done: its effect stands (rule 9), so a retry on the same resource is blocked like
    one behind an in-doubt step, never run as after a refusal (the count would be 2). With no
    expectation to check the effect against, undo leaves it to a person (drifted), honestly."""
    world = {"n": 0}
    catalog = amends.Catalog()

    @catalog.tool("kv.add", reversibility="reversible", resources=lambda a: [a["k"]])
    async def add(call: amends.Call, k: str) -> int:
        call.inverse("kv.sub", k=k)
        world[k] += 1
        raise ConnectionResetError("the answer was lost")

    @catalog.tool("kv.sub", reversibility="reversible", resources=lambda a: [a["k"]])
    async def sub(call: amends.Call, k: str) -> None:
        world[k] -= 1

    engine = amends.Engine(catalog, amends.SqliteLog(":memory:"))
    async with engine.saga("retry after an effect the agent saw fail") as saga:
        first = saga.call("kv.add", k="n")
        with pytest.raises(amends.StepFailedError, match="recorded its inverse first"):
            await first
        retry = saga.call("kv.add", k="n")
        with pytest.raises(amends.StepFailedError, match="never ran"):
            await retry
    assert (first.state, retry.state, world["n"]) == ("failed", "skipped", 1)
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    assert [(s.step_id, s.state) for s in rec.steps] == [("s1", "done"), ("s2", "skipped")]
    report = await engine.undo(saga.id)
    assert [(s.step_id, s.state, s.detail) for s in report.steps] == [
        ("s1", StepState.DRIFTED, report.steps[0].detail),
        ("s2", StepState.NOT_NEEDED, "never ran: step s1 (kv.add) it waits for is failed"),
    ]
    assert report.status == "cannot_undo" and world["n"] == 1  # one effect, for a person
    await engine.close()


async def test_a_step_skipped_over_a_refusal_does_not_block_its_resource_one_over_in_doubt_does(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """A ``skipped`` step never ran: a later step on its resource runs when nothing the skipped
    step waited for may have had an effect (a refused charge), and stays blocked when something
    may have (an in-doubt write to the same record, which the skipped step stood between)."""
    world.faults["pay.charge"] = [amends.PermanentError("card declined")]
    async with engine.saga("refused, skipped, then a write") as saga:
        charge = saga.call("pay.charge", customer="c1", cents=5)
        skipped = saga.call(
            "crm.update_field", record_id="r1", field="stage", value="paid", after=[charge]
        )
        later = saga.call("crm.update_field", record_id="r1", field="owner", value="sam")
        assert (await later)["owner"] == "sam"
        with pytest.raises(amends.StepFailedError, match="card declined"):
            await charge
        with pytest.raises(amends.StepFailedError, match="never ran"):
            await skipped
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    assert [(s.state, s.deps) for s in rec.steps] == [
        ("failed", ()),
        ("skipped", ("s1",)),
        ("done", ("s2",)),
    ]
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert report.step("s3").state is StepState.REVERTED
    assert world.crm["r1"] == {"stage": "lead", "owner": "ann", "version": 3}

    world.faults["crm.update_field"] = [RuntimeError("connection reset mid-write")]
    async with engine.saga("in doubt, skipped, then a write") as doubt:
        first = doubt.call("crm.update_field", record_id="r2", field="stage", value="won")
        skipped = doubt.call(
            "crm.update_field", record_id="r2", field="stage", value="x", after=[first]
        )
        later = doubt.call("crm.update_field", record_id="r2", field="owner", value="sam")
        for s in (first, skipped, later):
            with pytest.raises(amends.StepFailedError):
                await s
    rec = await engine.log.get_saga(doubt.id)
    assert rec is not None
    assert [(s.state, s.error) for s in rec.steps[1:]] == [
        ("skipped", "never ran: step s1 (crm.update_field) it waits for is in_doubt"),
        ("skipped", "never ran: step s2 (crm.update_field) it waits for is skipped"),
    ]
    assert world.crm["r2"] == {"stage": "lead", "owner": "bob", "version": 1}


async def test_independent_branches_are_compensated_concurrently(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Two independent inverses each wait for the other to start: only parallel runs finish."""
    async with engine.saga("two records") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
    started = {"r1": asyncio.Event(), "r2": asyncio.Event()}
    undo_calls = 0

    async def rendezvous() -> None:
        nonlocal undo_calls
        undo_calls += 1
        mine = "r1" if not started["r1"].is_set() else "r2"
        started[mine].set()
        await asyncio.wait_for(started["r2" if mine == "r1" else "r1"].wait(), 5)

    world.hooks["crm.update_field"] = rendezvous
    report = await engine.undo(saga.id)
    assert undo_calls == 2
    assert report.status == "fully_reversed"


async def test_failed_inverse_blocks_the_inverses_it_gates(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Adversarial saga (b): an inverse fails permanently mid-reversal; its prerequisites are
    blocked, not attempted, and the world is no worse than before undo."""
    async with engine.saga("chain") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("pay.charge", customer="c1", cents=700, after=[a])
        saga.call("crm.update_field", record_id="r2", field="stage", value="won")
        await b
    world.faults["pay.refund"] = [amends.PermanentError("card closed")]
    before_undo = {k: dict(v) for k, v in world.crm.items()}
    report = await engine.undo(saga.id)
    assert [(s.step_id, s.state) for s in report.steps] == [
        ("s1", StepState.BLOCKED),
        ("s2", StepState.FAILED),
        ("s3", StepState.REVERTED),
    ]
    assert report.step("s1").detail == (
        "not attempted: it must wait for s2 (pay.charge) to be "
        "undone first, and that step is failed"
    )
    assert report.step("s2").detail == "pay.refund failed permanently: card closed"
    assert world.crm["r1"] == before_undo["r1"]  # blocked: untouched
    assert world.charges["ch_1"]["refunded"] == 0
    assert [m.step_id for m in report.manual_actions] == ["s1", "s2"]
    assert report.status == "cannot_undo"


# --- rule 4: drift --------------------------------------------------------------------------


async def test_drift_is_detected_and_nothing_is_overwritten(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Adversarial saga (c): a human edits the CRM between forward and undo."""
    saga = await close_deal(engine)
    world.human_edit("r1", "stage", "lost")
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.DRIFTED
    assert s1.detail == (
        "someone changed it since the agent acted: expected 'won', found 'lost'; left as it is"
    )
    assert world.crm["r1"]["stage"] == "lost"  # the human's value stands
    assert report.step("s2").state is StepState.COMPENSATED
    assert report.status == "cannot_undo"
    assert report.manual_actions[0].what.startswith(
        "Review crm.update_field(field='stage', record_id='r1', value='won'): someone changed it"
    )


async def test_expectation_is_handed_to_the_inverse_as_a_precondition(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """If the world changes after the probe, the vendor's compare-and-set still refuses."""
    saga = await close_deal(engine)
    seen: list[object] = []

    def human_sneaks_in() -> None:
        # runs inside the inverse, after the drift probe passed
        if world.calls[-1][1] == "compensate":
            seen.append(True)
            world.human_edit("r1", "stage", "lost")

    world.hooks["crm.update_field"] = human_sneaks_in
    report = await engine.undo(saga.id)
    assert seen == [True]
    assert report.step("s1").state is StepState.DRIFTED
    assert "vendor refused the write" in report.step("s1").detail
    assert world.crm["r1"]["stage"] == "lost"


# --- rule 5: idempotent and retryable -----------------------------------------------------


async def test_transient_errors_are_retried_with_the_same_idempotency_key(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    world.faults["pay.refund"] = [amends.TransientError("rate limited")] * 2
    keys: list[str] = []
    orig = world.record

    def spy(call: amends.Call) -> None:
        if call.tool == "pay.refund":
            keys.append(call.idempotency_key)
        orig(call)

    world.record = spy  # type: ignore[method-assign]
    report = await engine.undo(saga.id)
    assert report.step("s2").state is StepState.COMPENSATED
    assert report.step("s2").attempts == 3
    assert keys == [f"amends:{saga.id}:s2:undo"] * 3
    assert world.charges["ch_1"]["refunded"] == 5000
    assert [c for c in world.calls if c[0] == "pay.refund"] == [
        ("pay.refund", "compensate", 1),
        ("pay.refund", "compensate", 2),
        ("pay.refund", "compensate", 3),
    ]


async def test_compensation_logged_done_is_never_dispatched_again(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: object
) -> None:
    """A worker dies after one compensation is logged done; the next resumes, not resending."""
    from pathlib import Path

    db = str(Path(str(tmp_path)) / "a.db")
    first = amends.Engine(catalog, log=db, lease_seconds=0.2)
    saga = await close_deal(first)

    class Crash(BaseException):
        pass

    world.faults["crm.update_field"] = [Crash()]  # s1's inverse runs after s2's (it gates it)
    with pytest.raises(Crash):
        await first.undo(saga.id)
    await first.close()
    refunds = [e for e in world.effects if e[0] == "pay.refund"]
    assert len(refunds) == 1
    await asyncio.sleep(0.25)  # the dead worker's lease expires
    second = amends.Engine(catalog, log=db, lease_seconds=0.2)
    recovered = await second.recover()
    await second.close()
    assert len(recovered.resumed) == 1
    report = recovered.resumed[0]
    assert report.status == "partially_reversed"
    assert [e for e in world.effects if e[0] == "pay.refund"] == refunds  # not sent again
    assert world.crm["r1"]["stage"] == "lead"


# --- rule 6: one reversal per saga ----------------------------------------------------------


async def test_concurrent_and_repeated_undo_join_one_reversal(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Adversarial saga (d): undo asked twice concurrently, then again: one compensation each."""
    saga = await close_deal(engine)
    r1, r2 = await asyncio.gather(engine.undo(saga.id), engine.undo(saga.id))
    r3 = await engine.undo(saga.id)
    assert r1.reversal_id == r2.reversal_id == r3.reversal_id
    assert r1.to_dict() == r2.to_dict() == r3.to_dict()
    undo_effects = [e for e in world.effects if e[2].endswith(":undo")]
    assert sorted(e[0] for e in undo_effects) == ["crm.update_field", "pay.refund"]


async def test_undo_from_many_threads_joins_one_reversal(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: object
) -> None:
    from pathlib import Path

    engine = amends.Engine(catalog, log=str(Path(str(tmp_path)) / "t.db"))
    saga = await close_deal(engine)
    reports: list[amends.UndoReport] = []
    lock = threading.Lock()

    def worker() -> None:
        r = engine.undo_sync(saga.id)
        with lock:
            reports.append(r)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    await asyncio.to_thread(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    await engine.close()
    assert len({r.reversal_id for r in reports}) == 1 and len(reports) == 6
    assert len([e for e in world.effects if e[2].endswith(":undo")]) == 2


# --- rule 7: budget -------------------------------------------------------------------------


async def test_tool_call_budget_stops_dispatch_and_reports_over_budget(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Probes count: 2 calls cover s2's probe and refund; s1 (which waits for s2) is over budget."""
    saga = await close_deal(engine)
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=2))
    assert report.step("s2").state is StepState.COMPENSATED
    assert report.step("s1").state is StepState.OVER_BUDGET
    assert report.step("s1").detail == (
        "tool-call budget of 2 spent before crm.read_field could run"
    )
    assert report.tool_calls == 2
    assert world.crm["r1"]["stage"] == "won"
    assert report.status == "cannot_undo"


async def test_retries_spend_budget(engine: amends.Engine, world: CoreWorld) -> None:
    saga = await close_deal(engine)
    world.faults["pay.refund"] = [amends.TransientError("rate limited")] * 10
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=4))
    s2 = report.step("s2")
    # issue 23: a retry the budget cut is over budget (continuable), never failed
    assert s2.state is StepState.OVER_BUDGET
    assert s2.attempts == 3  # probe + 3 refund attempts = 4 calls
    assert report.tool_calls == 4
    assert report.step("s1").state is StepState.BLOCKED
    assert world.charges["ch_1"]["refunded"] == 0


async def test_token_budget(catalog: amends.Catalog, world: CoreWorld) -> None:
    @catalog.tool("llm.summary", reversibility="reversible")
    async def summary(call: amends.Call, text: str) -> str:
        call.spend(tokens=700)
        call.inverse("llm.forget", text=text)
        call.no_drift_check(reason="a summary only this saga keeps")
        return text

    @catalog.tool("llm.forget", reversibility="irreversible")
    async def forget(call: amends.Call, text: str) -> None:
        call.spend(tokens=600)

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("summaries") as saga:
        a = saga.call("llm.summary", text="a")
        saga.call("llm.summary", text="b", after=[a])
    report = await engine.undo(saga.id, budget=amends.Budget(tokens=500))
    assert [s.state for s in report.steps] == [StepState.OVER_BUDGET, StepState.REVERTED]
    assert report.tokens == 600
    await engine.close()


async def test_seconds_budget_bounds_a_hanging_inverse(
    engine: amends.Engine, world: CoreWorld
) -> None:
    saga = await close_deal(engine)
    world.delay["pay.refund"] = 30.0
    report = await engine.undo(saga.id, budget=amends.Budget(seconds=0.3))
    assert report.step("s2").state is StepState.IN_DOUBT
    assert report.step("s1").state is StepState.BLOCKED
    assert report.seconds < 5


# --- rule 8: the report is the truth ---------------------------------------------------------


async def test_report_of_a_clean_reversal(engine: amends.Engine, world: CoreWorld) -> None:
    saga = await close_deal(engine)
    report = await engine.undo(saga.id)
    d = report.to_dict()
    assert d["status"] == "partially_reversed"
    assert d["headline"] == "2 of 2 taken back (1 compensated, leaving a trace)"
    assert [(s["step_id"], s["verb"], s["state"]) for s in d["steps"]] == [
        ("s1", "Revert", "reverted"),
        ("s2", "Compensate", "compensated"),
    ]
    assert d["residue"] == [
        {"what": "Refund of 50.00 to c1", "parties": ["c1"], "settles_at": "2026-12-07"}
    ]
    assert d["manual_actions"] == []
    assert d["tool_calls"] == 4  # two probes, two inverses
    assert amends.UndoReport.from_dict(d).to_dict() == d


async def test_irreversible_step_is_acknowledged_with_a_draft(
    engine: amends.Engine, world: CoreWorld
) -> None:
    async with engine.saga("tell bob", actor="agent:sales") as saga:
        await saga.call("mail.send", to="bob@acme.test", subject="Deal won")
    report = await engine.undo(saga.id)
    assert report.status == "cannot_undo"
    assert report.step("s1").verb == "Acknowledge"
    assert [m.to_dict() for m in report.manual_actions] == [
        {
            "step_id": "s1",
            "what": "mail.send(subject='Deal won', to='bob@acme.test') cannot be taken back",
            "who": "the sender",
            "parties": ["bob@acme.test"],
            "draft": "Please disregard my earlier message 'Deal won'.",
        }
    ]
    assert world.outbox == [{"to": "bob@acme.test", "subject": "Deal won"}]


async def test_read_only_and_failed_steps_are_not_needed(
    engine: amends.Engine, world: CoreWorld
) -> None:
    world.faults["pay.charge"] = [amends.PermanentError("card declined")]
    async with engine.saga("probe and fail") as saga:
        saga.call("crm.read_field", record_id="r1", field="stage")
        c = saga.call("pay.charge", customer="c1", cents=5)
        saga.call("mail.send", to="x@y.test", subject="paid", after=[c])
        with pytest.raises(amends.StepFailedError, match="card declined"):
            await c
    report = await engine.undo(saga.id)
    assert [(s.state, s.detail) for s in report.steps] == [
        (StepState.NOT_NEEDED, "read-only: nothing to undo"),
        (StepState.NOT_NEEDED, "the call failed, so it had no effect (card declined)"),
        (StepState.NOT_NEEDED, "never ran: step s2 (pay.charge) it waits for is failed"),
    ]
    assert report.status == "fully_reversed"
    assert world.outbox == []


async def test_a_retry_after_a_crash_that_fails_is_in_doubt_not_failed(
    catalog: amends.Catalog, world: CoreWorld, tmp_path: object
) -> None:
    """Rule 8: the first refund was sent (and applied) before the worker died; the retry after
    recovery fails permanently. The engine cannot know the first outcome: in_doubt, never failed."""
    from pathlib import Path

    db = str(Path(str(tmp_path)) / "r.db")
    first = amends.Engine(catalog, log=db, lease_seconds=0.2)
    saga = await close_deal(first)

    class Crash(BaseException):
        pass

    spec = catalog.get("pay.refund")
    real = spec.fn
    attempts: list[int] = []

    async def refund(call: amends.Call, charge_id: str, cents: int) -> object:
        attempts.append(1)
        if len(attempts) == 1:
            await real(call, charge_id=charge_id, cents=cents)
            raise Crash()  # the worker dies after the vendor applied the refund
        raise amends.PermanentError("processor unavailable for this charge")

    object.__setattr__(spec, "fn", refund)
    with pytest.raises(Crash):
        await first.undo(saga.id)
    await first.close()
    await asyncio.sleep(0.25)
    second = amends.Engine(catalog, log=db, lease_seconds=0.2)
    report = (await second.recover()).resumed[0]
    await second.close()
    s2 = report.step("s2")
    assert s2.state is StepState.IN_DOUBT
    assert s2.detail.startswith(
        "an earlier attempt of pay.refund was sent before a worker "
        "stopped, and this retry did not complete"
    )
    assert world.charges["ch_1"]["refunded"] == 5000  # it did take effect: in doubt was right
    assert report.step("s1").state is StepState.BLOCKED
    assert report.status == "cannot_undo"
