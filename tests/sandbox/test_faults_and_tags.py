"""What the eval suite needs from the sandbox: effects tagged with the step that caused them,
fault-injection points (acts then raises, answer lost after the inverse, stalls, transient N
times, a crash at the Nth call), and one catalog shared by many worlds (``use_world``)."""

from __future__ import annotations

import asyncio

import pytest

import amends
from amends.sandbox import SimulatedCrash, World, sandbox_catalog, use_world

FAST = amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


def tagged(world: World) -> list[tuple[str, str, str]]:
    """(tag, vendor, op) of every effect a tool caused, in order."""
    return [(e["tag"], e["vendor"], e["op"]) for e in world.effects() if e.get("tag")]


async def test_effects_are_tagged_with_step_and_phase_and_other_actors_are_not(sw: World) -> None:
    eng = amends.Engine(sandbox_catalog(sw), log=amends.SqliteLog(":memory:"), retry=FAST)
    async with eng.saga("tagging") as saga:
        saga.call("crm.update_field", step_id="a", record_id="acme", field="stage", value="won")
        saga.call("payments.charge", step_id="b", customer="cus_acme", cents=700)
    sw.crm.human_edit("acme", "owner", "kim")  # another actor: no tag
    report = await eng.undo(saga.id)
    assert report.status == "partially_reversed"
    assert tagged(sw) == [
        ("a:forward", "crm", "update_field"),
        ("b:forward", "payments", "charge"),
        ("a:compensate", "crm", "update_field"),
        ("b:compensate", "payments", "refund"),
    ] or tagged(sw) == [
        ("a:forward", "crm", "update_field"),
        ("b:forward", "payments", "charge"),
        ("b:compensate", "payments", "refund"),
        ("a:compensate", "crm", "update_field"),
    ]
    human = [e for e in sw.effects() if e.get("actor") == "human"]
    assert len(human) == 1 and "tag" not in human[0]
    calls = {e["call"] for e in sw.effects() if e.get("tag")}
    assert len(calls) == 4  # one number per tool call
    await eng.close()


async def test_act_then_raise_applies_the_effect_and_the_tool_sees_an_error(sw: World) -> None:
    """The vendor acts, the connection drops: the charge exists, the tool recorded no inverse."""
    sw.faults.add("payments.charge", "act_then_raise")
    eng = amends.Engine(sandbox_catalog(sw), log=amends.SqliteLog(":memory:"), retry=FAST)
    with pytest.raises((amends.AmendsError, ConnectionError)):
        async with eng.saga("charge") as saga:
            saga.call("payments.charge", step_id="c", customer="cus_acme", cents=900)
    assert tagged(sw) == [("c:forward", "payments", "charge")]
    assert sw.payments.get_charge("ch_1")["cents"] == 900
    record = await eng.log.get_saga(saga.id)
    assert record is not None and record.steps[0].inverse is None
    await eng.close()


async def test_act_then_raise_on_a_tool_that_reads_first_fires_after_its_write(sw: World) -> None:
    """``crm.update_field`` reads the record (one vendor operation) before it writes (another):
    the fault fires once the write committed, so the write stands and the step is in doubt. It
    fired after the read, before anything was written, and the "acted" call had no effect."""
    sw.faults.add("crm.update_field", "act_then_raise")
    eng = amends.Engine(sandbox_catalog(sw), log=amends.SqliteLog(":memory:"), retry=FAST)
    with pytest.raises(amends.StepFailedError, match="act_then_raise"):
        async with eng.saga("write") as saga:
            saga.call("crm.update_field", step_id="w", record_id="acme", field="stage", value="x")
    assert tagged(sw) == [("w:forward", "crm", "update_field")]
    assert sw.crm.read_field("acme", "stage") == "x"
    record = await eng.log.get_saga(saga.id)
    assert record is not None and record.steps[0].state == "in_doubt"
    assert sw.faults.pending() == [] and not sw._after
    await eng.close()


async def test_raise_after_inverse_loses_the_answer_after_the_inverse_was_recorded(
    sw: World,
) -> None:
    from amends._calls import invoke

    sw.faults.add("crm.add_note", "raise_after_inverse")
    cat = sandbox_catalog(sw)
    call = amends.Call(saga_id="s", step_id="n", tool="crm.add_note", phase="forward",
                       idempotency_key="k")  # fmt: skip
    with pytest.raises(ConnectionResetError, match="raise_after_inverse"):
        await invoke(cat.get("crm.add_note").fn, call, {"record_id": "acme", "text": "hi"}, None)
    assert tagged(sw) == [("n:forward", "crm", "add_note")]
    assert sw.crm.get("acme")["notes"] == {"note_1": "hi"}
    assert isinstance(call.recorded_inverse, amends.Inverse)
    assert call.recorded_inverse.tool == "crm.delete_note"


async def test_act_then_raise_commits_the_effect_in_a_world_file(tmp_path: object) -> None:
    """On a SQLite world the effect is committed before the error (not rolled back with it)."""
    path = f"{tmp_path}/w.world"
    with World(path) as w:
        w.faults.add("payments.charge", "act_then_raise")
        cat = sandbox_catalog(w)
        call = amends.Call(saga_id="s", step_id="x", tool="payments.charge", phase="forward",
                           idempotency_key="k")  # fmt: skip
        from amends._calls import invoke

        with pytest.raises(ConnectionResetError, match="act_then_raise"):
            await invoke(cat.get("payments.charge").fn, call, {"customer": "cus_acme",
                                                               "cents": 5}, None)  # fmt: skip
    with World(path) as again:
        assert [e["op"] for e in again.effects() if e.get("tag")] == ["charge"]


async def test_transient_n_times_then_success_and_stall_times_out(sw: World) -> None:
    sw.faults.add("crm.update_field", "transient", times=3)
    sw.faults.add("chat.post", "timeout", delay=5.0)
    eng = amends.Engine(sandbox_catalog(sw, timeout=0.05), log=amends.SqliteLog(":memory:"),
                        retry=amends.RetryPolicy(max_attempts=1))  # fmt: skip
    with pytest.raises(amends.AmendsError):
        async with eng.saga("stall") as saga:
            saga.call("chat.post", step_id="p", channel="#sales", text="hi")
    assert tagged(sw) == []  # the stalled post never acted
    eng2 = amends.Engine(sandbox_catalog(sw), log=amends.SqliteLog(":memory:"), retry=FAST)
    async with eng2.saga("retries") as saga2:
        saga2.call("crm.update_field", step_id="u", record_id="acme", field="stage", value="x")
    assert tagged(sw) == [("u:forward", "crm", "update_field")]
    assert sw.faults.pending() == []
    await eng.close()
    await eng2.close()


async def test_a_fault_on_one_step_hits_only_that_steps_calls(sw: World) -> None:
    """``faults.add(op, kind, step=...)``: the refusal hits the step named, not an earlier call
    of the same tool nor the agent's retry of it, however the calls interleave (rule 9's retry
    in the eval)."""
    sw.faults.add("crm.update_field", "permanent", step="b")
    sw.faults.add("crm.update_field", "transient", times=8, step="d")
    assert sw.faults.pending() == [
        {"op": "crm.update_field", "kind": "permanent", "times": 1, "delay": 0.0, "step": "b"},
        {"op": "crm.update_field", "kind": "transient", "times": 8, "delay": 0.0, "step": "d"},
    ]
    eng = amends.Engine(sandbox_catalog(sw), log=amends.SqliteLog(":memory:"), retry=FAST)
    with pytest.raises(amends.StepFailedError):
        async with eng.saga("refused, then retried") as saga:
            saga.call("crm.update_field", step_id="a", record_id="acme", field="owner", value="x")
            saga.call("crm.update_field", step_id="b", record_id="acme", field="stage", value="W")
            saga.call("crm.update_field", step_id="c", record_id="acme", field="stage", value="w")
            saga.call("crm.update_field", step_id="d", record_id="globex", field="stage", value="w")
    record = await eng.log.get_saga(saga.id)
    assert record is not None
    assert [(s.step_id, s.state) for s in record.steps] == [
        ("a", "done"), ("b", "failed"), ("c", "done"), ("d", "failed")
    ]  # fmt: skip
    written = [("a:forward", "crm", "update_field"), ("c:forward", "crm", "update_field")]
    assert tagged(sw) == written
    assert sw.faults.pending() == [  # 5 tries of d (the retry policy's), none of the others
        {"op": "crm.update_field", "kind": "transient", "times": 3, "delay": 0.0, "step": "d"}
    ]
    with pytest.raises(amends.ConfigError, match="a fault's step must be a step id"):
        sw.faults.add("crm.update_field", "permanent", step=3)  # type: ignore[arg-type]
    await eng.close()


async def test_a_slow_call_stalls_until_cut_then_acts(sw: World) -> None:
    """``slow`` holds the call before it acts; ``cut_stalls`` ends the stall and the call acts
    (the eval cuts a stall once the engine answered). A stall after the cut does not wait."""
    sw.faults.add("chat.post", "slow", delay=3600.0)
    sw.faults.add("chat.post", "slow", delay=3600.0)
    eng = amends.Engine(sandbox_catalog(sw, timeout=7200.0), log=amends.SqliteLog(":memory:"))
    async with eng.saga("stall") as saga:
        first = saga.call("chat.post", step_id="p", channel="#sales", text="hi")
        while not sw.faults.stalled:  # the call is now sleeping in the vendor
            await asyncio.sleep(0.001)
        assert tagged(sw) == [] and first.state == "intent"  # logged, not yet done
        sw.faults.cut_stalls()
        await first
        saga.call("chat.post", step_id="q", channel="#sales", text="again", after=[first])
    posts = [t for t in tagged(sw) if t[2] == "post"]
    assert posts == [("p:forward", "chat", "post"), ("q:forward", "chat", "post")]
    assert sw.faults.stalled == ["p", "q"] and sw.faults.pending() == []
    await eng.close()


async def test_arm_crash_before_and_after_the_nth_call(sw: World) -> None:
    cat = sandbox_catalog(sw)
    from amends._calls import invoke

    def call(step: str) -> amends.Call:
        return amends.Call(saga_id="s", step_id=step, tool="crm.update_field",
                           phase="forward", idempotency_key=f"k{step}")  # fmt: skip

    fn = cat.get("crm.update_field").fn
    args = {"record_id": "acme", "field": "stage", "value": "v"}
    sw.faults.arm_crash(2)
    await invoke(fn, call("1"), args, None)
    with pytest.raises(SimulatedCrash, match="before"):
        await invoke(fn, call("2"), args, None)
    sw.faults.arm_crash(1, after_effect=True)
    with pytest.raises(SimulatedCrash, match="after"):
        await invoke(fn, call("3"), {**args, "value": "w"}, None)
    assert [e["tag"] for e in sw.effects() if e.get("tag")] == ["1:forward", "3:forward"]
    with pytest.raises(amends.ConfigError, match="positive call number"):
        sw.faults.arm_crash(0)


async def test_one_catalog_serves_many_worlds_bound_per_task() -> None:
    """``sandbox_catalog()`` (no world) acts on the world bound by use_world in each task."""
    cat = sandbox_catalog()
    log = amends.SqliteLog(":memory:")
    eng = amends.Engine(cat, log=log, retry=FAST)
    worlds = [World(seed=i) for i in range(3)]

    async def one(i: int, w: World) -> None:
        with use_world(w):
            async with eng.saga(f"w{i}") as saga:
                saga.call("crm.update_field", record_id="acme", field="stage", value=f"v{i}")

    await asyncio.gather(*(one(i, w) for i, w in enumerate(worlds)))
    assert [w.crm.read_field("acme", "stage") for w in worlds] == ["v0", "v1", "v2"]
    with pytest.raises(amends.AmendsError, match="use_world"):
        async with eng.saga("unbound") as saga:
            saga.call("crm.read_field", record_id="acme", field="stage")
    await eng.close()


def test_ledger_ignores_idempotency_keys_every_request_applies(sw: World) -> None:
    """The legacy ledger has no replay table: a second reversal books a second entry."""
    entry = sw.ledger.post("acme", 500, "deal")
    sw.ledger.reverse(entry["id"])
    sw.ledger.reverse(entry["id"])
    assert sw.ledger.get_entry(entry["id"])["status"] == "reversed"
    assert sw.ledger.balance("acme") == -500  # credited twice
    assert [e["op"] for e in sw.effects() if e["vendor"] == "ledger"] == [
        "post",
        "reverse_entry",
        "reverse_entry",
    ]
    with pytest.raises(amends.PermanentError, match="non-zero int"):
        sw.ledger.post("acme", 0)
    with pytest.raises(amends.PermanentError, match="no entry"):
        sw.ledger.get_entry("le_99")


async def _engine(world: World) -> amends.Engine:
    return amends.Engine(sandbox_catalog(world), log=amends.SqliteLog(":memory:"), retry=FAST)


async def test_finance_lock_undo_after_reopens_the_deal_then_refunds(sw: World) -> None:
    """Rule 3: the charge's refund waits for the deal's reopening (undo_after); without the
    declaration the processor refuses the refund and the deal's revert is blocked."""
    for declare in (True, False):
        world = World(seed=1)
        eng = await _engine(world)
        async with eng.saga("finance lock") as saga:
            close = saga.call("crm.update_field", record_id="acme", field="stage",
                              value="closed_won")  # fmt: skip
            saga.call("payments.charge", customer="cus_acme", cents=900, deal="acme",
                      after=[close], undo_after=[close] if declare else [])  # fmt: skip
        report = await eng.undo(saga.id)
        states = [s.state.value for s in report.steps]
        if declare:
            assert states == ["reverted", "compensated"]
            assert report.status == "partially_reversed"
            assert world.payments.get_charge("ch_1")["refunded"] == 900
            assert world.crm.read_field("acme", "stage") == "negotiation"
        else:
            assert states == ["blocked", "failed"]
            assert "finance lock" in report.steps[1].detail
            assert world.payments.get_charge("ch_1")["refunded"] == 0
        await eng.close()


async def test_cancel_event_asks_nested_follow_ups_announce_then_log(sw: World) -> None:
    """Rule 7: the cancellation's follow-up (announce) asks its own follow-up (log activity);
    both run, tagged follow_up, and each spends budget."""
    eng = await _engine(sw)
    async with eng.saga("event") as saga:
        saga.call("calendar.create_event", title="Kickoff", start="2026-12-09T15:00:00+00:00",
                  attendees=["a@x"], announce="#sales", log_to="acme")  # fmt: skip
    report = await eng.undo(saga.id)
    assert [s.state.value for s in report.steps] == ["compensated"]
    assert [(t, op) for t, _, op in tagged(sw)] == [
        ("s1:forward", "invite"),
        ("s1:compensate", "cancellation_notice"),
        ("s1:follow_up", "post"),
        ("s1:follow_up", "notify"),
        ("s1:follow_up", "notify"),
        ("s1:follow_up", "notify"),
        ("s1:follow_up", "log_activity"),
    ]
    assert report.tool_calls == 4  # probe, cancel, announce, log
    await eng.close()


async def test_private_note_is_reverted_without_drift_check_and_says_why(sw: World) -> None:
    eng = await _engine(sw)
    async with eng.saga("note") as saga:
        saga.call("docs.create_private_note", text="todo")
    plan = await eng.preview(saga.id)
    assert "only this saga can see" in str(plan.to_dict())
    report = await eng.undo(saga.id)
    assert [s.state.value for s in report.steps] == ["reverted"]
    assert sw.docs.get("doc_1")["status"] == "deleted"
    with pytest.raises(amends.PermanentError, match="private"):
        sw.docs.collaborator_edit("doc_1", "x")
    await eng.close()


async def test_two_edits_of_one_post_are_undone_newest_first(sw: World) -> None:
    """chat.edit declares the message as its resource (even when the id is another step's
    result): the second edit is reverted before the first, so both revert and nothing drifts."""
    eng = await _engine(sw)
    async with eng.saga("edits") as saga:
        post = saga.call("chat.post", step_id="post", channel="#sales", text="v0")
        saga.call("chat.edit", step_id="e1", message_id=post["id"], text="v1")
        saga.call("chat.edit", step_id="e2", message_id=post["id"], text="v2")
    report = await eng.undo(saga.id)
    assert {s.step_id: s.state.value for s in report.steps} == {
        "post": "compensated",
        "e1": "reverted",
        "e2": "reverted",
    }
    undone = [t for t, _, op in tagged(sw) if t.endswith(":compensate")]
    assert undone == ["e2:compensate", "e1:compensate", "post:compensate"]
    await eng.close()


@pytest.mark.parametrize("store", ["memory", "file"])
async def test_act_then_raise_fires_once_the_outermost_vendor_operation_committed(
    store: str, tmp_path: object
) -> None:
    """Cancelling an event reads it through a nested vendor operation first; the injected
    ``act_then_raise`` fires only when the outermost one has committed (issue 29: in memory,
    "inside a vendor operation" is this thread holding the store's reentrant lock), so the
    cancellation stands and its notice is in the journal."""
    with World(None if store == "memory" else f"{tmp_path}/w.world") as w:
        event = w.calendar.create_event("Kickoff", "2026-12-09T15:00:00+00:00", ["a@x"])
        w.faults.add("calendar.cancel_event", "act_then_raise")
        await w.gate("calendar.cancel_event")
        with pytest.raises(ConnectionResetError, match="act_then_raise"):
            w.calendar.cancel_event(event["id"])
        assert w.calendar.get(event["id"])["status"] == "cancelled"
        assert [e["op"] for e in w.effects()][-1:] == ["cancellation_notice"]
        assert w.faults.pending() == []
        w.calendar.get(event["id"])  # the fault fired once: nothing left to fire
