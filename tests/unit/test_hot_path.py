"""Issue 12, the engine hot path: the shortcuts give exactly what the slow path gave."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import sqlite3
import struct
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import Inverse, StepState
from amends._contracts import json_copy
from amends._log.base import CompensationWrite, StepIntent
from amends._log.records import chain_hash, chain_hash_v1, dumps
from core_world import CoreWorld


def _round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


@pytest.mark.parametrize(
    "value",
    [
        1,
        -0.0,
        2.5,
        "x\ud800y",
        None,
        True,
        {"b": 1, "a": [1, (2, 3), {"z": None, "y": False}]},
        (1, "a"),
        [],
        {},
        10**40,
    ],
)
def test_json_copy_equals_the_json_round_trip_with_the_same_key_order(value: Any) -> None:
    """Plain JSON data is copied directly, to the same value, types and sorted key order."""
    got, want = json_copy(value), _round_trip(value)
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # key order and int/float kinds too


def test_json_copy_of_other_values_takes_the_round_trip() -> None:
    """Int keys become strings, NaN stays NaN, subclasses of int lose their class."""
    assert json_copy({2: "a", 1: "b"}) == {"1": "b", "2": "a"}
    assert math.isnan(json_copy({"n": float("nan")})["n"])

    class Count(int):
        pass

    got = json_copy([Count(3)])
    assert got == [3] and type(got[0]) is int


def test_json_copy_is_a_copy_the_caller_cannot_change_afterwards() -> None:
    """What is logged is not changed by a tool that mutates its data after returning it."""
    data = {"a": [1, {"b": 2}]}
    got = json_copy(data)
    data["a"][1]["b"] = 3  # type: ignore[index]
    data["a"].append(4)
    assert got == {"a": [1, {"b": 2}]}


def test_json_copy_refuses_what_json_refuses() -> None:
    """Non-JSON values and circular data raise what json raises (callers turn it into errors)."""
    with pytest.raises(TypeError):
        json_copy({"when": object()})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        json_copy({"a": loop})


_ENCODE_CASES = [
    1,
    -0.0,
    2.5,
    1.7e9 + 0.123,
    float("nan"),
    float("inf"),
    'x\ud800y \u00e9 "q"\n',
    None,
    True,
    {"b": 1, "a": [1, (2, 3), {"z": None, "y": False}], "\u00e9": "\u2603"},
    (1, "a"),
    [],
    {},
    10**40,
    ["prev", "saga_1", None, "rev_1", "step.intent#i", 1.5, '{"a":1}'],
]


@pytest.mark.parametrize("value", _ENCODE_CASES)
def test_log_encoder_writes_the_same_text_as_json_dumps(value: Any) -> None:
    """The log's one reused C encoder gives byte for byte what json.dumps(sort_keys=True,
    separators=(",", ":")) gives, so stored blobs and hash-chain messages are unchanged."""
    assert dumps(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))


def test_log_encoder_refuses_what_json_refuses_and_keeps_working_after() -> None:
    """A non-JSON value raises TypeError, circular data ValueError (as json.dumps); the next
    value encodes normally (no stale state left from the failure)."""
    shared: dict[str, Any] = {"x": 1}
    with pytest.raises(TypeError, match="object"):
        dumps({"a": shared, "b": object()})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps({"a": loop})
    assert dumps({"a": shared, "b": [shared]}) == '{"a":{"x":1},"b":[{"x":1}]}'


def test_a_step_logs_every_field_of_its_inverse() -> None:
    """_saga._finish_done builds the logged inverse field by field (no dataclasses.replace);
    a new Inverse field must be added there too, and this test says so."""
    assert [f.name for f in dataclasses.fields(Inverse)] == [
        "tool",
        "args",
        "deadline",
        "landed",
        "no_drift_check",
        "undo_after",
    ]


async def test_the_logged_inverse_is_what_inverse_to_dict_gives(tmp_path: Any) -> None:
    """The inverse a step logs, built field by field, equals Inverse.to_dict() of the recorded
    inverse with the call's landed probe, its no-drift reason and the step's undo_after."""
    catalog = amends.Catalog()

    @catalog.tool("t.probe", reversibility="read_only")
    async def probe(call: amends.Call, k: str) -> str:
        return "v"

    @catalog.tool("t.set", reversibility="reversible")
    async def set_(call: amends.Call, k: str) -> str:
        call.inverse("t.set", deadline=4102444800.0, k=k)
        call.landed("t.probe", {"k": k}, equals="v")
        call.no_drift_check(reason="only this saga sees it")
        return "ok"

    engine = amends.Engine(catalog, log=amends.SqliteLog(str(tmp_path / "inv.db")))
    async with engine.saga("inverse fields") as saga:
        first = saga.call("t.set", k="a")
        await saga.call("t.set", k="b", undo_after=[first])
    record = await engine.log.get_saga(saga.id)
    assert record is not None
    logged = record.steps[1].inverse
    want = Inverse(
        "t.set",
        {"k": "b"},
        deadline="2100-01-01T00:00:00+00:00",
        landed=amends.Expectation("t.probe", {"k": "b"}, "v"),
        no_drift_check="only this saga sees it",
        undo_after=("s1",),
    ).to_dict()
    assert logged == want
    await engine.close()


def test_chain_hash_covers_the_stored_text_encoded_once() -> None:
    """Issue 29 (this test pinned the old message for issue 12, and changes on purpose): the
    chain hashes a header of length-prefixed fields and the 8 bytes of ``at``, then the stored
    text's own bytes, not the text escaped again inside a JSON list. The old message is still
    what ``chain_hash_v1`` gives, so that logs written before verify
    (tests/unit/test_log_written_before.py)."""
    fields = ["p", "saga_1", "s1", None, "step.done#f", 1700000000.25]
    text = '{"state":"done"}'
    head = b"amends.chain.2|1:p|6:saga_1|2:s1|~|11:step.done#f|" + struct.pack("<d", 1700000000.25)
    want = hashlib.sha256(head + text.encode()).hexdigest()
    got = chain_hash(None, "p", "saga_1", "s1", None, "step.done#f", 1700000000.25, text)
    assert got == want
    # fields that would run together without their lengths do not give the same hash
    assert chain_hash(None, "p", "saga_1", "s1", "", "step.done#f", 1700000000.25, text) != got
    assert chain_hash(None, "p", "saga_", "1s1", None, "step.done#f", 1700000000.25, text) != got
    old = json.dumps([*fields, text], sort_keys=True, separators=(",", ":"))
    assert (
        chain_hash_v1(None, "p", "saga_1", "s1", None, "step.done#f", 1700000000.25, text)
        == hashlib.sha256(old.encode()).hexdigest()
    )


async def test_cancelled_while_the_outcome_is_written_the_write_lands_and_undo_refunds(
    engine: amends.Engine, world: CoreWorld
) -> None:
    """Rule 1 without a shielded task per step: the agent's task cancelled while a finished
    step's outcome is written still logs it done with its inverse; the agent sees
    CancelledError and undo refunds the charge. Issue 29: the step's task no longer waits for
    its outcome (it handed it to the log), the agent's wait for it is what the cancel
    interrupts, and the saga's exit waits for the write (the step's task ends cancelled only
    when tracing made it wait for its outcome too, so its state is what is checked)."""
    real = engine.log.finish_step
    writing = asyncio.Event()

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        writing.set()
        await asyncio.sleep(0.1)
        await real(*args, **kwargs)

    engine.log.finish_step = slow_finish  # type: ignore[method-assign]
    ids: list[str] = []
    steps: list[amends.Step] = []

    async def agent() -> None:
        async with engine.saga("cancelled late") as saga:
            ids.append(saga.id)
            steps.append(saga.call("pay.charge", customer="c1", cents=5))
            await steps[0]

    task = asyncio.create_task(agent())
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps[0].task is not None and steps[0].task.done()
    assert steps[0].state == "done"
    logged = await engine.log.get_saga(ids[0])
    assert logged is not None
    assert (logged.steps[0].state, logged.steps[0].inverse is not None) == ("done", True)
    report = await engine.undo(ids[0])
    assert report.step("s1").state == StepState.COMPENSATED
    assert world.charges["ch_1"]["refunded"] == 5


def _gather_catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("t.ok", reversibility="irreversible")
    async def ok(call: amends.Call, i: int, wait: float = 0.0) -> int:
        await asyncio.sleep(wait)
        return i * 10

    @catalog.tool("t.refuse", reversibility="irreversible")
    async def refuse(call: amends.Call, wait: float) -> None:
        await asyncio.sleep(wait)
        raise amends.PermanentError(f"refused after {wait}")

    return catalog


async def test_saga_gather_returns_results_in_argument_order_not_finishing_order() -> None:
    """Without a task per step, gather still returns each step's result in the order asked."""
    engine = amends.Engine(_gather_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("gather order") as saga:
        slow = saga.call("t.ok", i=1, wait=0.05)
        fast = saga.call("t.ok", i=2)
        await fast
        assert await saga.gather(slow, fast, saga.call("t.ok", i=3)) == [10, 20, 30]
        assert await saga.gather() == []
    await engine.close()


async def test_saga_gather_raises_the_first_failure_in_time_and_every_step_counts_as_seen() -> None:
    """gather raises the step that failed first (not the first argument); a step failing
    later is seen by the agent too, so leaving the saga raises nothing more; the steps still
    running when gather raised are not cancelled."""
    engine = amends.Engine(_gather_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("gather failure") as saga:
        late = saga.call("t.refuse", wait=0.1)
        early = saga.call("t.refuse", wait=0.01)
        running = saga.call("t.ok", i=4, wait=0.05)
        with pytest.raises(amends.StepFailedError, match="refused after 0.01") as info:
            await saga.gather(late, early, running)
        assert info.value.step_id == early.id
        assert (late.state, running.state) == ("intent", "intent")
    # the saga waited for both; neither is raised again at exit
    assert (late.state, running.state, running.result) == ("failed", "done", 40)
    await engine.close()


async def test_saga_gather_of_an_already_failed_step_raises_it_at_once() -> None:
    """A step that failed before gather is raised without waiting for the others."""
    engine = amends.Engine(_gather_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("gather done") as saga:
        failed = saga.call("t.refuse", wait=0)
        await saga.settle()
        slow = saga.call("t.ok", i=5, wait=0.2)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(amends.StepFailedError):
            await saga.gather(slow, failed)
        assert loop.time() - t0 < 0.15
    await engine.close()


async def test_cancelling_a_saga_gather_leaves_its_steps_running() -> None:
    """Only the wait is cancelled (as asyncio.shield did): the step still runs to done."""
    engine = amends.Engine(_gather_catalog(), log=amends.SqliteLog(":memory:"))
    async with engine.saga("gather cancelled") as saga:
        step = saga.call("t.ok", i=6, wait=0.05)
        waiter = asyncio.ensure_future(saga.gather(step))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert step.task is not None and not step.task.done()
        assert await step == 60
    assert step.state == "done"
    await engine.close()


async def _one_batch(log: amends.SqliteLog, writes: list[Any]) -> tuple[list[Any], list[int]]:
    """Run the log writes ``writes`` (coroutine functions) as one group commit: the writer is
    held on a first write while the others queue. Returns their outcomes (a value or the
    exception) and the sizes of the batches committed meanwhile."""
    db = log.db
    sizes: list[int] = []
    commit = db._commit

    def counting(batch: list[Any]) -> Any:
        sizes.append(len(batch))
        return commit(batch)

    db._commit = counting  # type: ignore[method-assign]
    db._writing.acquire()  # hold the writer so that the next writes queue up as one batch
    try:
        held = asyncio.ensure_future(log.renew_saga_leases([], "o", 0.0))
        for _ in range(1000):  # until the writer took the first write (it waits for the lock)
            await asyncio.sleep(0.005)
            if db._jobs.empty():
                break
        queued = [asyncio.ensure_future(w()) for w in writes]
        for _ in range(1000):  # until all are queued behind it
            await asyncio.sleep(0.005)
            if db._jobs.qsize() == len(writes):
                break
    finally:
        db._writing.release()
    await held
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    db._commit = commit  # type: ignore[method-assign]
    return list(outcomes), sizes


async def test_a_step_after_a_claim_in_the_same_batch_is_refused(tmp_path: Any) -> None:
    """Issue 12: a batch reads "no reversal" once per saga; an undo claimed in the middle of
    the same transaction still refuses the steps written after it (issue 2 #4)."""
    log = amends.SqliteLog(str(tmp_path / "batch.db"))
    await log.create_saga(
        "saga_b", "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0
    )
    await log.begin_step(
        StepIntent(
            "saga_b",
            "s0",
            seq=1,
            tool="t.x",
            args={},
            deps=[],
            resources=[],
            declared="reversible",
            now=2.0,
        )
    )

    def begin(step_id: str, seq: int) -> Any:
        return lambda: log.begin_step(
            StepIntent(
                "saga_b",
                step_id,
                seq=seq,
                tool="t.x",
                args={},
                deps=[],
                resources=[],
                declared="reversible",
                now=2.0,
            )
        )

    def claim() -> Any:
        return log.claim_reversal(
            "saga_b", reversal_id="rev_b", budget={}, owner="o", lease_until=9e9, now=3.0
        )

    (s1, s2, got, s3), sizes = await _one_batch(
        log, [begin("s1", 2), begin("s2", 3), claim, begin("s3", 4)]
    )
    assert sizes[-1] == 4  # the four writes were one transaction
    assert (s1, s2, got.outcome, s3) == (True, True, "new", False)
    saga = await log.get_saga("saga_b")
    assert saga is not None
    assert [(s.step_id, s.state) for s in saga.steps] == [
        ("s0", "intent"),
        ("s1", "intent"),
        ("s2", "intent"),
        ("s3", "cancelled"),
    ]
    assert await log.verify("saga_b") == []  # the hash chain runs through the batch
    await log.close()


async def test_a_take_over_in_the_same_batch_fences_the_old_workers_later_records(
    tmp_path: Any,
) -> None:
    """Issue 12: compensation records of one group commit check the reversal's generation
    once; a take-over written in between makes the old worker's next record fail (fencing)."""
    log = amends.SqliteLog(str(tmp_path / "fence.db"))
    await log.create_saga(
        "saga_f", "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0
    )
    first = await log.claim_reversal(
        "saga_f", reversal_id="rev_f", budget={}, owner="w1", lease_until=5.0, now=2.0
    )
    assert first.reversal.generation == 1

    def record(step_id: str) -> Any:
        return lambda: log.record_compensation(
            CompensationWrite(
                "rev_f",
                1,
                step_id,
                state="dispatched",
                attempts=0,
                detail="dispatching",
                data={},
                calls_spent=1,
                tokens_spent=0,
                event="compensation.dispatched",
                now=10.0,
            )
        )

    def take_over() -> Any:
        return log.claim_reversal(
            "saga_f", reversal_id="rev_other", budget={}, owner="w2", lease_until=9e9, now=10.0
        )

    (a, b, taken, c), sizes = await _one_batch(
        log, [record("s1"), record("s2"), take_over, record("s3")]
    )
    assert sizes[-1] == 4  # one transaction
    assert (a, b) == (None, None)
    assert taken.outcome == "taken_over" and taken.reversal.generation == 2
    assert isinstance(c, amends.LeaseLostError)
    comps = await log.get_compensations("rev_f")
    assert sorted(comps) == ["s1", "s2"]  # the fenced worker's third record was not written
    assert await log.verify("saga_f") == []
    await log.close()


async def test_undo_reads_the_saga_once_in_its_claim(
    tmp_path: Any, catalog: amends.Catalog, world: CoreWorld
) -> None:
    """Issue 12: a fresh undo plans from the saga its claim read (no get_saga, no read of
    compensations it just created), and a catalog lacking a tool is still refused with nothing
    written."""
    log = amends.SqliteLog(str(tmp_path / "once.db"))
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("Close the ACME deal") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
    before = await log.events(saga.id)
    wrong_catalog = amends.Catalog()
    for spec in catalog:
        if spec.name != "pay.refund":
            wrong_catalog.register(
                spec.name, spec.fn, reversibility=spec.reversibility if spec.explicit else None
            )
    with pytest.raises(amends.ContractError, match=r"needs tools .*pay\.refund"):
        await amends.Engine(wrong_catalog, log=log).undo(saga.id)
    assert await log.get_reversal(saga_id=saga.id) is None
    assert await log.events(saga.id) == before  # nothing written
    with pytest.raises(amends.SagaNotFoundError, match="saga_missing"):
        await engine.undo("saga_missing")
    reads = 0
    get_saga = log.get_saga

    async def counting(saga_id: str) -> Any:
        nonlocal reads
        reads += 1
        return await get_saga(saga_id)

    log.get_saga = counting  # type: ignore[method-assign]
    comp_reads = 0
    get_compensations = log.get_compensations

    async def counting_comps(reversal_id: str) -> Any:
        nonlocal comp_reads
        comp_reads += 1
        return await get_compensations(reversal_id)

    log.get_compensations = counting_comps  # type: ignore[method-assign]
    report = await engine.undo(saga.id)
    assert (reads, comp_reads) == (0, 0)  # a new reversal has no compensation to read yet
    assert report.status == "partially_reversed"
    assert [s.state for s in report.steps] == [StepState.REVERTED, StepState.COMPENSATED]
    assert world.crm["r1"]["stage"] == "lead"
    assert [c["refunded"] for c in world.charges.values()] == [5000]
    await engine.close()


_FAN_OUT_CALLS = """
import asyncio, os, sys
import amends

catalog = amends.Catalog()

@catalog.tool("t.noop", reversibility="reversible")
async def noop(call, i):
    call.inverse("t.noop", i=i)
    call.no_drift_check(reason="a test no-op: nothing anyone could change")
    return i

async def fan_out(engine, k):
    async with engine.saga(f"fan-out {k}") as saga:
        steps = [saga.call("t.noop", i=i) for i in range(k)]
        assert await saga.gather(*steps) == list(range(k))
    return saga.id

async def main():
    engine = amends.Engine(catalog, log=amends.SqliteLog(sys.argv[1]))
    await fan_out(engine, 200)  # warm-up: imports, caches, the log's first statements
    package = os.path.dirname(amends.__file__) + os.sep
    calls = 0
    def count(frame, event, arg):  # this thread only (cProfile sees every thread on 3.12+)
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.startswith(package):
            calls += 1
    sys.setprofile(count)
    saga_id = await fan_out(engine, 200)
    sys.setprofile(None)
    record = await engine.log.get_saga(saga_id)
    await engine.close()
    print(calls, *(s.state for s in record.steps))

asyncio.run(main())
"""


def test_a_fan_out_step_makes_at_most_51_calls_into_amends_on_the_event_loop(
    tmp_path: Path,
) -> None:
    """Issue 29: the step's recording path keeps its call budget (69.4 amends calls per step
    of a 200-step fan-out on a SQLite file before lane Q-fanout, 49.4 after, 51.4 on main
    fb501c3, 50.4 after lane st wrote the intent from its parts), counted on the event-loop
    thread, amends' own functions only, so Python's asyncio does not move it: by
    ``sys.setprofile``, which sees one thread, as cProfile did before Python 3.12. In a fresh
    interpreter: OpenTelemetry imported by another test, or a signing key in the environment,
    would add work that is not the recording path's. Every step is still durable and done."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "AMENDS_LOG_KEY"}
    out = subprocess.run(
        [sys.executable, "-c", _FAN_OUT_CALLS, str(tmp_path / "fan.db")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout.split()
    calls, states = int(out[0]), out[1:]
    assert states == ["done"] * 200
    assert calls / 200 <= 51, f"{calls / 200:.1f} amends calls per step"


def test_a_spec_with_another_function_is_the_spec_dataclasses_replace_makes() -> None:
    """Issue 25 item 6: ``call_with`` runs a framework's function under the catalog's contract
    with a copy of the spec made without ``dataclasses.replace``; field for field it is the
    spec ``replace`` makes, and the catalog's own spec keeps its function."""
    import dataclasses

    from amends._contracts import ToolSpec
    from amends._fields import replaced

    catalog = amends.Catalog()

    @catalog.tool("crm.set", reversibility="reversible", resources=lambda a: [a["r"]])
    async def original(call: amends.Call, r: str) -> str:
        return r

    async def framework_fn(call: amends.Call, r: str) -> str:
        return r

    spec = catalog.get("crm.set")
    mine, theirs = replaced(spec, fn=framework_fn), dataclasses.replace(spec, fn=framework_fn)
    assert type(mine) is ToolSpec
    assert {f.name: getattr(mine, f.name) for f in dataclasses.fields(ToolSpec)} == {
        f.name: getattr(theirs, f.name) for f in dataclasses.fields(ToolSpec)
    }
    assert mine.fn is framework_fn and spec.fn is original
    assert catalog.get("crm.set").fn is original


async def test_a_file_log_binds_no_none_for_forward_records_and_names_each_steps_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, the file log's per-step costs that are not the recording itself: a forward
    record is written with its ``reversal_id`` NULL in the statement (sqlite3 runs an adapter
    lookup for every bound ``None``, ~3 k instructions a record) and a step's Task is named
    after its step (asyncio on Python 3.11 formats a ``Task-N`` name for an unnamed one). The
    rows are the ones a bound ``None`` wrote: NULL, and the chain verifies; an undo's records
    still carry their reversal id."""
    from amends._log import sqlite as sqlite_mod

    bound: list[tuple[str, tuple[Any, ...]]] = []
    real = sqlite_mod._Cursor.execute

    def execute(self: Any, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        if sql.startswith("INSERT INTO records"):
            bound.append((sql, tuple(params)))
        return real(self, sql, params)

    monkeypatch.setattr(sqlite_mod._Cursor, "execute", execute)
    catalog = amends.Catalog()

    @catalog.tool("t.noop", reversibility="reversible")
    async def noop(call: amends.Call, i: int) -> int:
        call.inverse("t.noop", i=i)
        call.no_drift_check(reason="a test no-op: nothing anyone could change")
        return i

    log = amends.SqliteLog(str(tmp_path / "fan.db"))
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("fan") as saga:
        steps = [saga.call("t.noop", i=i) for i in range(20)]
        assert [s.task.get_name() for s in steps if s.task] == [s.id for s in steps]
        await saga.gather(*steps)
    forward = len(bound)
    assert forward == 2 * 20 + 2  # started, 20 intents, 20 outcomes, completed
    steps_bound = [params for _sql, params in bound[:forward] if params[1] is not None]
    assert len(steps_bound) == 40 and all(None not in params for params in steps_bound)
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert any(params[2] == report.reversal_id for _sql, params in bound[forward:])
    with closing(sqlite3.connect(str(tmp_path / "fan.db"))) as conn:
        rows = conn.execute(
            "SELECT kind, reversal_id IS NULL FROM records WHERE saga_id=? ORDER BY rec_id",
            (saga.id,),
        ).fetchall()
    assert [k for k, null in rows if not null] == [k for k, _n in rows[42:]]
    assert all(null for _k, null in rows[:42])
    assert await log.verify(saga.id) == []
    await engine.close()


async def test_a_group_commit_inserts_its_records_in_one_executemany_and_a_bad_one_fails_alone(
    tmp_path: Path,
) -> None:
    """Issue 29: a file log's group commit holds the rows of its record appends and inserts
    them with one ``executemany`` before COMMIT, not one ``execute`` each. An append that fails
    (here a trigger refuses step ``bad``) fails its own write only: the batch runs again one
    savepoint per write, unheld, its neighbours commit, and the chain verifies."""
    log = amends.SqliteLog(str(tmp_path / "batch.db"))
    db = log.db
    db._conn.execute(
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON records WHEN NEW.step_id = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END"
    )
    await log.create_saga(
        "saga_m", "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0
    )
    calls: list[tuple[str, str, int]] = []
    make_cursor = db._write_cursor

    class Spy:
        def __init__(self, real: Any) -> None:
            self.real = real

        def execute(self, sql: str, params: Any = ()) -> Any:
            calls.append(("execute", sql.split("(")[0].strip(), 1))
            return self.real.execute(sql, params)

        def executemany(self, sql: str, rows: Any) -> Any:
            rows = list(rows)
            calls.append(("executemany", sql.split("(")[0].strip(), len(rows)))
            return self.real.executemany(sql, rows)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    def spied() -> Any:
        cur = make_cursor()
        cur._cur = Spy(cur._cur)
        return cur

    db._write_cursor = spied  # type: ignore[method-assign]

    def begin(step_id: str, seq: int) -> Any:
        return lambda: log.begin_step(
            StepIntent(
                "saga_m",
                step_id,
                seq=seq,
                tool="t.x",
                args={"n": seq},
                deps=[],
                resources=[],
                declared="reversible",
                now=2.0 + seq,
            )
        )

    good, sizes = await _one_batch(log, [begin(f"s{i}", i) for i in range(1, 5)])
    assert sizes[-1] == 4 and good == [True] * 4
    inserts = [c for c in calls if c[1] == "INSERT INTO records"]
    assert inserts == [("executemany", "INSERT INTO records", 4)]

    calls.clear()
    got, sizes = await _one_batch(log, [begin("s5", 5), begin("bad", 6), begin("s7", 7)])
    assert sizes[-1] == 3
    assert got[0] is True and got[2] is True
    assert isinstance(got[1], amends.LogError) and "refused by a test trigger" in str(got[1])
    # held and refused at the flush, then each write alone under its savepoint
    assert [c for c in calls if c[1] == "INSERT INTO records"] == [
        ("executemany", "INSERT INTO records", 3),
        ("execute", "INSERT INTO records", 1),
        ("execute", "INSERT INTO records", 1),
        ("execute", "INSERT INTO records", 1),
    ]
    db._write_cursor = make_cursor  # type: ignore[method-assign]
    saga = await log.get_saga("saga_m")
    assert saga is not None
    assert [s.step_id for s in saga.steps] == ["s1", "s2", "s3", "s4", "s5", "s7"]
    assert [s.args for s in saga.steps] == [{"n": n} for n in (1, 2, 3, 4, 5, 7)]
    assert await log.verify("saga_m") == []
    await log.close()
