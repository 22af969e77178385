"""Runs one scenario against an engine (amends, the naive stack, or a broken engine).

The world is the real :mod:`amends.sandbox` (its vendors and its catalog, built once per process
and bound to each saga's own world with :func:`amends.sandbox.use_world`). Forward pass with the
scenario's forward faults; world mutations by other actors; reversal faults and the crash point;
the undo requests (single, repeated, concurrent); after a simulated crash, a fresh engine on the
same log runs ``recover()``. The result holds everything the invariants need: the world's effect
journal (each effect tagged with the step and phase that caused it), every report returned, and
how long each request took.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from amends import (
    AmendsError,
    Budget,
    Call,
    Catalog,
    Engine,
    RetryPolicy,
    Saga,
    SagaLog,
    SqliteLog,
    Step,
    StepState,
    UndoReport,
)

from ..sandbox import World, current_world, sandbox_catalog, use_world
from ..sandbox.world import SimulatedCrash
from .cascade import CascadeRun, run_cascade
from .generator import INVERSE_OF, Mutation, Scenario
from .naive import NaiveUndoStack

__all__ = [
    "EVAL_TIMEOUT",
    "FAST_RETRY",
    "INVERSE_STALL",
    "SagaResult",
    "eval_catalog",
    "previewable",
    "run_scenario",
]

FAST_RETRY = RetryPolicy(max_attempts=5, initial_backoff=0.0005, max_backoff=0.004)
"""Retries without wall-clock waits worth measuring (the sandbox has zero latency)."""
CRASH_LEASE = 0.15
"""Lease of an engine that will crash: recovery may take over this long after the crash."""
EVAL_TIMEOUT = 10.0
"""Seconds a sandbox tool call may take in the eval (longer than a stall: the stalled call acts)."""
STALL_HOLD = EVAL_TIMEOUT - 1.0
"""The most a stalled forward call is held, should nothing cut it (it is cut once the undo has
answered, or ``Scenario.stall_seconds`` after the undo was asked): inside the tool timeout."""
INVERSE_STALL = 1.0
"""Seconds an inverse of ``Scenario.inverse_stalls`` stalls before its vendor gives up (a
``TransientError``): far past the ``stall`` family's seconds budget, so undo cuts it off."""
SLOW_ANSWER = 0.02
"""Seconds a ``slow`` reversal fault holds its call before it acts (the undo_order family's
processor slow to refund): long enough for whatever does not wait for it to run first."""

_CATALOG: list[Catalog] = []


def eval_catalog() -> Catalog:
    """The sandbox catalog the eval uses, built once per process (issue 12: not per saga); its
    tools act on the world bound with :func:`amends.sandbox.use_world`. It adds one tool a
    careless author wrote: ``careless.update_field`` records an inverse but no expectation and
    no reason why none is needed (rule 4: it must never be reverted blindly)."""
    if not _CATALOG:
        catalog = sandbox_catalog(timeout=EVAL_TIMEOUT)
        catalog.register(
            "careless.update_field",
            _careless_update_field,
            reversibility="reversible",
            resources=lambda a: [f"crm:{a['record_id']}"],
            timeout=EVAL_TIMEOUT,
            idempotent=True,
        )
        _CATALOG.append(catalog)
    return _CATALOG[0]


async def _careless_update_field(call: Call, record_id: str, field: str, value: Any) -> Any:
    """Set a CRM field and record how to put the old value back -- and nothing else."""
    world = current_world()
    await world.gate("careless.update_field")
    out = world.crm.update_field(record_id, field, value, idempotency_key=call.idempotency_key)
    call.inverse("crm.update_field", record_id=record_id, field=field, value=out["old"])
    return out


_WORLDS: dict[tuple[int, str], World] = {}


def new_world(sc: Scenario) -> World:
    """A fresh in-memory sandbox world with the scenario's CRM records: a copy of one built
    once per process for the same seed and records (issue 12: not seeded again per saga)."""
    key = (sc.seed, repr(sc.records))
    template = _WORLDS.get(key)
    if template is None:
        if len(_WORLDS) > 64:
            _WORLDS.clear()
        template = World(seed=sc.seed)
        for rid, fields in sc.records.items():
            template.crm.create_record(rid, fields)
        _WORLDS[key] = template
    return template.copy()


EngineFactory = Callable[..., Engine]


@dataclass
class SagaResult:
    scenario: Scenario
    engine: str
    forward: dict[str, str]
    """step_id -> forward state (done, failed, skipped, ...)."""
    results: dict[str, Any]
    effects: list[dict[str, Any]]
    reports: list[UndoReport]
    durations: list[float]
    crashed: bool
    world: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    """Exceptions an undo request raised (an engine must answer, not raise)."""
    answered_at: list[int] = field(default_factory=list)
    """Length of the world's effect journal when each request got its answer."""
    stalled: list[str] = field(default_factory=list)
    """Steps whose forward call stalled (the stall family)."""
    preview: dict[str, str] | None = None
    """step_id -> the state ``engine.preview`` predicted just before undo, when the world does
    not change between the two (no reversal fault, crash, stall or mutation in between);
    ``None`` otherwise (rule 10)."""
    preview_residue: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    """step_id -> the settle date (``None``: does not settle) of each residue the same preview
    said undo would leave for the step; a step predicted to leave none is absent (rule 10)."""
    preview_cut: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    """step_id -> (verb, reversibility) of each step that preview predicted ``over_budget``
    (rule 6: it keeps Revert/Compensate, as the report does; the ``words`` invariant)."""
    cascade: CascadeRun | None = None
    """What the scripted cascading agent did after the undo (``cascading_apology``)."""
    continued: UndoReport | str | None = None
    """The stall family (issue 23): once the stalled call finished, the reversal continued with
    a new budget (``engine.resume``): its report, or why it refused; ``None``: not asked."""
    continued_effects: list[dict[str, Any]] = field(default_factory=list)
    """The world's effect journal after that continuation (``effects``: before it)."""
    finished: tuple[str, ...] = ()
    """The steps a person resolved before ``continued`` (``finish == "resolve"``), or asked to
    retry (``finish == "retry"``)."""
    rest: SagaResult | None = None
    """The saga after its rest was undone too (``rest_later``): the whole-saga undo's report,
    with the world's effects since the forward pass (the selection's and the rest's)."""


def _mutate(
    world: World, sc: Scenario, results: dict[str, Any], mutations: tuple[Mutation, ...]
) -> None:
    by_id = {s.step_id: s for s in sc.steps}
    for m in mutations:
        s = by_id.get(m.step_id or "")
        res = results.get(m.step_id or "")
        if m.kind == "human_edit_other":
            world.crm.human_edit("r4", "phone", m.value)
            continue
        if s is None or res is None:
            continue  # the step never ran: nothing for the other actor to touch
        if m.kind in ("human_edit", "lookalike_edit"):
            world.crm.human_edit(s.args["record_id"], s.args["field"], m.value)
        elif m.kind == "webhook_edit":
            world.crm.webhook_edit(s.args["record_id"], s.args["field"], m.value)
        elif m.kind == "dispute":
            world.payments.dispute(res["id"])
        elif m.kind == "settle":
            world.payments.settle(res["id"])
        elif m.kind == "close_card":
            world.payments.close_card(s.args["customer"])
        elif m.kind == "attendee_decline":
            world.calendar.attendee_decline(res["id"], s.args["attendees"][0])
        elif m.kind == "recipient_reads":
            world.mail.recipient_reads(res["id"])
        elif m.kind == "member_reads":
            world.chat.member_reads(res["id"], res["notified"][0])
        elif m.kind == "collaborator_edit":
            world.docs.collaborator_edit(res["id"], str(m.value))
        elif m.kind == "advance":
            world.advance(float(m.value))


async def run_scenario(
    sc: Scenario,
    engine: str = "amends",
    *,
    engine_factory: EngineFactory | None = None,
    log: SagaLog | None = None,
    crash_log: SagaLog | None = None,
    restarted: SagaLog | None = None,
) -> SagaResult:
    """Run ``sc`` end to end with ``engine`` ("amends" or "naive", or a custom factory).

    ``log`` may be shared by many scenarios (their saga ids differ), except by one with a crash
    point: its recovery scans the whole log, so it runs on ``crash_log`` (a log no other
    scenario uses meanwhile) or a private log file (see :func:`run_scenario_both`).
    """
    out = await run_scenario_both(
        sc, engine_factory=engine_factory, log=log, crash_log=crash_log, restarted=restarted,
        amends=engine != "naive", naive=engine == "naive",
    )  # fmt: skip
    return out[0]


async def run_scenario_both(
    sc: Scenario,
    *,
    engine_factory: EngineFactory | None = None,
    log: SagaLog | None = None,
    crash_log: SagaLog | None = None,
    restarted: SagaLog | None = None,
    amends: bool = True,
    naive: bool = True,
) -> list[SagaResult]:
    """One forward pass and mutations, then the reversal by amends and, on an identical copy of
    the world, by the naive undo stack: both engines undo literally the same saga.

    A scenario with a crash point runs on ``crash_log``, a log no other scenario uses while
    this one runs (its recovery scans the whole log), or else on a private log file. Its
    recovery reopens that log from its file (:func:`reopen`): the recovering engine reads only
    what the crashed one committed, as after a real restart (issue 29). ``restarted``, when
    given, is that new connection opened beforehand (:func:`reopen` of ``crash_log``): a batch
    keeps one per pooled crash log file instead of opening one per crash saga. It never served
    the crashed engine, so what recovery reads through it is still only what was committed.
    """
    async with contextlib.AsyncExitStack() as stack:
        use: SagaLog
        if sc.crash is not None and crash_log is not None:
            use = crash_log
        elif sc.crash is not None:
            use = await stack.enter_async_context(crash_log_file())
        elif log is None:
            use = SqliteLog(":memory:", synchronous="OFF")
            stack.push_async_callback(use.close)
        else:
            use = log
        reopened = restarted if use is crash_log else None
        return await _run_both(sc, engine_factory, use, stack, reopened, amends=amends, naive=naive)


@contextlib.asynccontextmanager
async def crash_log_file(directory: str | None = None) -> AsyncIterator[SqliteLog]:
    """A saga log in a file of its own (in ``directory``, or a temporary one removed after),
    for a scenario whose worker crashes: its recovery reopens the file (:func:`reopen`).

    In a given ``directory`` (a batch's), the file starts as a copy of a new log made there
    once (:func:`_copy_of_new_log`): the same bytes ``SqliteLog`` would write, without building
    the schema again for each crash scenario."""
    with contextlib.ExitStack() as files:
        fresh = directory is None
        if directory is None:
            directory = files.enter_context(tempfile.TemporaryDirectory(prefix="amends-eval-"))
        fd, path = tempfile.mkstemp(suffix=".db", dir=directory)
        os.close(fd)
        os.unlink(path)  # SqliteLog creates it, owner-only (0600)
        if not fresh:
            await _copy_of_new_log(directory, path)
        log = SqliteLog(path, synchronous="OFF")
        try:
            yield log
        finally:
            await log.close()


async def _copy_of_new_log(directory: str, path: str) -> None:
    """Write at ``path`` (owner-only, 0600) a copy of a new, empty saga log file made once in
    ``directory`` (issue 29: building a log's schema cost ~10 M instructions, ~11 times per
    100 eval sagas). Two new logs made with the same chain key are the same bytes (the schema,
    its version, the shard heads: ``tests/evals/test_eval_batch.py``), so the copy is the file
    ``SqliteLog(path)`` would have made; the template is named by that key. Nothing is written
    if the template cannot be made whole (a write-ahead file left): ``SqliteLog`` then
    creates the log itself."""
    key = hashlib.sha256(os.environ.get("AMENDS_LOG_KEY", "").encode()).hexdigest()[:16]
    template = os.path.join(directory, f"new-log-{key}.template")
    if not _exists(template):
        # crash scenarios start together: the first makes it, the others wait for it
        async with _MAKING.setdefault(template, asyncio.Lock()):
            if not _exists(template):
                made = _unused_path(directory)
                await SqliteLog(made, synchronous="OFF").close()
                _kept_whole(made, template)
        _MAKING.pop(template, None)
        if not _exists(template):
            return
    _copy_private(template, path)


_MAKING: dict[str, asyncio.Lock] = {}
"""Template path -> the lock its maker holds while it makes it (:func:`_copy_of_new_log`)."""


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _unused_path(directory: str) -> str:
    fd, path = tempfile.mkstemp(suffix=".db", dir=directory)
    os.close(fd)
    os.unlink(path)
    return path


def _kept_whole(made: str, template: str) -> bool:
    """``made`` (a closed log) becomes ``template``, unless a journal of it is left over."""
    if any(os.path.exists(made + tail) for tail in ("-wal", "-journal")):
        return False
    os.replace(made, template)  # whole or absent: a concurrent scenario may be reading it
    return True


def _copy_private(src: str, dst: str) -> None:
    """``src``'s bytes into a new file ``dst``, owner-only (0600) from its creation."""
    with open(src, "rb") as f:
        data = f.read()
    with open(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(data)


def reopen(log: SagaLog) -> SagaLog | None:
    """A new connection to ``log``'s file, as a restarted worker opens it (``synchronous=OFF``:
    a process crash loses nothing SQLite committed; only power loss would), with the same
    chain key (rule 11). ``None`` for a log without a file of its own (``:memory:``, a
    server): recovery then uses the same object."""
    if isinstance(log, SqliteLog) and log.path != ":memory:":
        return SqliteLog(log.path, synchronous="OFF", signing_key=log.signing_key)
    return None


async def _run_both(
    sc: Scenario,
    engine_factory: EngineFactory | None,
    log: SagaLog,
    closing: contextlib.AsyncExitStack,
    reopened: SagaLog | None,
    *,
    amends: bool,
    naive: bool,
) -> list[SagaResult]:
    world = new_world(sc)
    catalog = eval_catalog()
    factory = engine_factory or Engine
    lease = CRASH_LEASE if sc.crash else 15.0
    eng = factory(catalog, log=log, retry=FAST_RETRY, lease_seconds=lease)
    handles: dict[str, Step] = {}
    sagas: list[Saga] = []

    async def forward_pass() -> None:
        with use_world(world):
            try:
                async with eng.saga(f"eval {sc.ref} ({sc.family})", actor="agent:eval") as saga:
                    sagas.append(saga)
                    for spec in sc.steps:
                        args: dict[str, Any] = {  # another step's result where it refers to one
                            k: handles[v["$ref"]][v["key"]]
                            if isinstance(v, dict) and "$ref" in v
                            else v
                            for k, v in spec.args.items()
                        }
                        after = [handles[a] for a in spec.after]
                        more = {"undo_after": [handles[a] for a in spec.undo_after]}
                        handles[spec.step_id] = saga.call(
                            spec.tool, step_id=spec.step_id, after=after,
                            **(more if spec.undo_after else {}), **args,
                        )  # fmt: skip
            except (AmendsError, ConnectionError, TimeoutError):
                pass  # a forward step failed or is in doubt (injected): undo what did run

    for tool, kind, times in sc.forward_faults:
        world.faults.add(tool, kind, times=times, words=sc.words)  # type: ignore[arg-type]
    if sc.step_faults:  # on one step's calls only (rule 9's retry: not the retry's)
        tools = {s.step_id: s.tool for s in sc.steps}
        for sid, kind, times in sc.step_faults:
            world.faults.add(tools[sid], kind, times=times, step=sid,  # type: ignore[arg-type]
                             words=sc.words)  # fmt: skip
    if sc.stall:  # held until the undo answered or stall_seconds after it was asked
        world.faults.add(sc.stall, "slow", delay=STALL_HOLD)
    if any(kind == "answer_other_id" for _, kind, _ in sc.step_faults):
        _decoys(world)  # what a lying vendor's answer names: someone else's, made before
    fwd = asyncio.create_task(forward_pass())
    if sc.stall:  # undo is asked while the stalled call is still in flight
        while not fwd.done() and any(f["op"] == sc.stall for f in world.faults.pending()):
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)
    else:
        await fwd
    saga = sagas[0]
    world.faults.clear()
    forward = {sid: h.state for sid, h in handles.items()}
    results = {sid: h.result for sid, h in handles.items() if h.state == "done"}
    _mutate(world, sc, results, sc.mutations)
    out: list[SagaResult] = []
    if naive:
        record = await log.get_saga(saga.id)
        assert record is not None
        copy = world.copy()
        stack = NaiveUndoStack.from_saga(catalog, record)

        async def naive_request() -> UndoReport:
            return await stack.undo()

        async def naive_recover() -> list[UndoReport]:
            return []  # the user clicks Undo again: the stack was never cleared

        out.append(await _reversal(sc, "naive", copy, naive_request, naive_recover,
                                   forward, results))  # fmt: skip
    if amends:
        budget = Budget(
            tool_calls=sc.budget_calls, seconds=sc.budget_seconds, tokens=sc.budget_tokens
        )
        current = [eng]
        predicted, residue, cut = await _predict(eng, saga.id, budget, world, sc)

        async def request() -> UndoReport:
            return await current[0].undo(saga.id, budget=budget, **_selected(sc))

        async def recover() -> list[UndoReport]:
            await asyncio.sleep(CRASH_LEASE * 1.2)  # the dead worker's lease runs out
            restarted = reopened  # a new worker's connection to the log's file
            if restarted is None:
                restarted = reopen(log)  # opened now, closed with this saga
                if restarted is not None:
                    closing.push_async_callback(restarted.close)
            fresh = factory(catalog, log=restarted or log, retry=FAST_RETRY, lease_seconds=lease)
            current[0] = fresh
            return list((await fresh.recover()).resumed)

        out.insert(0, await _reversal(sc, "amends", world, request, recover, forward,
                                      results))  # fmt: skip
        first = out[0].reports[0].steps if out[0].reports else ()
        if not any(o.state.value == "failed" for o in first):
            # a vendor refusing an inverse (a finance lock nobody declared) is not
            # something a preview can see without sending the inverse (rule 10)
            out[0].preview, out[0].preview_residue, out[0].preview_cut = predicted, residue, cut
        if sc.cascade:  # issue 27 part 3: an agent finishes the manual actions
            for tool, kind, times in sc.follow_up_faults:
                world.faults.add(tool, kind, times=times)  # type: ignore[arg-type]
            with use_world(world):
                out[0].cascade = await run_cascade(current[0], saga.id, sc)
            out[0].effects, out[0].world = world.effects(), world.snapshot()
        if sc.rest_later and not out[0].crashed:  # issue 27: the rest of the saga, later
            out[0].rest = await _the_rest(out[0], current[0], saga.id, budget, world)
        if sc.finish and not out[0].crashed and out[0].reports and not sc.stall:
            await _finish(out[0], current[0], saga.id, world)
        if sc.stall:  # the stalled call acts late: the oracle judges the final world
            await fwd
            out[0].effects, out[0].world = world.effects(), world.snapshot()
            with use_world(world):  # issue 23: what it left can be finished
                out[0].continued = await _continue(current[0], saga.id)
            out[0].continued_effects = world.effects()
    world.faults.cut_stalls()  # no undo was asked of this world (naive alone): let it act
    await fwd
    return out


def _decoys(world: World) -> None:
    """One resource of each kind a lying vendor may name (``answer_other_id``), made by someone
    else before the saga: another customer's charge, a wire, an event, a post, a draft, a
    scheduled email. An inverse taken from such an answer acts on it (never undone by the
    saga's own inverses first, so the wrong refund or delete always shows in the world)."""
    world.payments.charge("cus_globex", 4242, description="someone else's")
    world.payments.wire("acct-decoy", 4242)
    world.calendar.create_event("Board meeting", "2026-12-10T10:00:00+00:00", ["cy@globex.test"])
    world.chat.post("#finance", "quarterly numbers")
    world.docs.create_draft("Contract", "signed")
    world.mail.send_delayed("di@initech.test", "Invoice", "", delay=3600.0)


UNCHECKED = "could not check the world before undoing"
"""How a report's detail says a step's drift check could not run (the oracle's own copy)."""


async def _finish(r: SagaResult, eng: Engine, saga_id: str, world: World) -> None:
    """Issue 23, ``Scenario.finish``: a person resolves every other step the budget stopped and
    continues, or retries every step whose drift check could not run once the vendors answer;
    ``r.continued`` is the continuation's report (or why it was refused)."""
    last = r.reports[-1].steps
    if r.scenario.finish == "resolve":
        stopped = [o.step_id for o in last if o.state.value in ("over_budget", "blocked")]
        r.finished = tuple(stopped[::2])
        for sid in r.finished:
            await eng.resolve(saga_id, sid, by="eval:person", note="handled by hand")
    else:
        r.finished = tuple(
            o.step_id for o in last if o.state.value == "drifted" and o.detail.startswith(UNCHECKED)
        )
    if not r.finished:
        return
    world.faults.clear()  # the vendors answer again
    retry = r.finished if r.scenario.finish == "retry" else ()
    with use_world(world):
        r.continued = await _continue(eng, saga_id, retry)
    r.continued_effects = world.effects()


async def _continue(eng: Engine, saga_id: str, retry: Sequence[str] = ()) -> UndoReport | str:
    """The reversal continued with a new budget (``retry``: those steps retried), or why it
    was refused (rule 6)."""
    try:
        if retry:
            return await eng.retry(saga_id, list(retry), budget=Budget())
        return await eng.resume(saga_id, budget=Budget())
    except AmendsError as exc:
        return f"{type(exc).__name__}: {exc}"


async def _the_rest(
    first: SagaResult, eng: Engine, saga_id: str, budget: Budget, world: World
) -> SagaResult:
    """Undo the whole saga after its selection (issue 27): the result a whole-saga undo is
    judged by (every invariant), with both runs' effects; each run has its own budget."""
    reports: list[UndoReport] = []
    errors: list[str] = []
    with use_world(world):
        try:
            reports.append(await eng.undo(saga_id, budget=budget))
        except Exception as exc:  # an engine must answer, not raise
            errors.append(f"{type(exc).__name__}: {exc}")
    whole = dataclasses.replace(
        first.scenario, select=(), rest_later=False, requests="single", n_requests=1,
        budget_calls=2 * first.scenario.budget_calls,
    )  # fmt: skip
    return dataclasses.replace(
        first, scenario=whole, effects=world.effects(), world=world.snapshot(),
        reports=reports, errors=errors, preview=None, preview_cut={}, rest=None,
    )  # fmt: skip


def _selected(sc: Scenario) -> dict[str, Any]:
    """``steps=`` for a selective scenario (issue 27); nothing otherwise, so an engine built
    before selections (a user's subclass) is called as it was."""
    return {"steps": list(sc.select)} if sc.select else {}


def previewable(sc: Scenario) -> bool:
    """Whether the world stays as the preview saw it until undo runs (rule 10's condition): no
    fault injected into the reversal, no crash, no stalled step, nobody acting meanwhile."""
    changes = any(kind != "slow" for _, kind, _ in sc.reversal_faults)  # slow: as asked, later
    return not (changes or sc.crash is not None or sc.stall or sc.recovery_mutations)


async def _predict(
    eng: Engine, saga_id: str, budget: Budget, world: World, sc: Scenario
) -> tuple[
    dict[str, str] | None, dict[str, tuple[str | None, ...]], dict[str, tuple[str | None, str]]
]:
    """What ``engine.preview`` predicts for each step, right before undo: its state (``None``
    when the world may change in between, or the engine has no preview), the settle dates of
    the residue it says undo will leave, and the verb and class of each step it predicts
    ``over_budget``."""
    if not previewable(sc):
        return None, {}, {}
    with use_world(world):
        preview = await eng.preview(saga_id, budget=budget, **_selected(sc))
    states = {p.step_id: p.predicted.value for p in preview.steps if p.predicted is not None}
    residue = {
        p.step_id: tuple(r.settles_at for r in p.expected_residue)
        for p in preview.steps
        if p.predicted is not None and p.expected_residue
    }
    cut = {
        p.step_id: (p.verb, p.reversibility.value)
        for p in preview.steps
        if p.predicted is StepState.OVER_BUDGET
    }
    return states, residue, cut


async def _reversal(
    sc: Scenario,
    engine: str,
    world: World,
    request: Callable[[], Awaitable[UndoReport]],
    recover: Callable[[], Awaitable[list[UndoReport]]],
    forward: dict[str, str],
    results: dict[str, Any],
) -> SagaResult:
    for tool, kind, times in sc.reversal_faults:
        delay = SLOW_ANSWER if kind == "slow" else 0.0
        world.faults.add(tool, kind, times=times, delay=delay,  # type: ignore[arg-type]
                         words=sc.words)  # fmt: skip
    tools = {s.step_id: s.tool for s in sc.steps}
    for sid in sc.inverse_stalls:  # cut off in flight by the seconds budget (issue 23)
        world.faults.add(INVERSE_OF[tools[sid]], "timeout", delay=INVERSE_STALL, step=sid)
    if sc.crash:
        world.faults.arm_crash(sc.crash[0], after_effect=sc.crash[1], op=sc.crash_op)
    with use_world(world):
        return await _requests(sc, engine, world, request, recover, forward, results)


async def _requests(
    sc: Scenario,
    engine: str,
    world: World,
    request: Callable[[], Awaitable[UndoReport]],
    recover: Callable[[], Awaitable[list[UndoReport]]],
    forward: dict[str, str],
    results: dict[str, Any],
) -> SagaResult:
    reports: list[UndoReport] = []
    durations: list[float] = []
    errors: list[str] = []
    answered_at: list[int] = []
    crashed = False
    if sc.stall:  # rule 7: the stalled call holds on past the request, up to stall_seconds
        timer = asyncio.get_running_loop().call_later(sc.stall_seconds, world.faults.cut_stalls)

    async def timed() -> None:
        t0 = time.monotonic()
        try:
            reports.append(await request())
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        durations.append(time.monotonic() - t0)
        answered_at.append(world.effect_count())
        if sc.stall:  # answered: whether it waited for the stalled call is now settled
            world.faults.cut_stalls()

    try:
        if sc.requests == "concurrent":
            outs = await asyncio.gather(
                *(timed() for _ in range(sc.n_requests)), return_exceptions=True
            )
            if any(isinstance(o, SimulatedCrash) for o in outs):
                raise SimulatedCrash("concurrent")
        else:
            for _ in range(sc.n_requests):
                await timed()
    except SimulatedCrash:
        crashed = True
        world.faults.disarm_crash()
        _mutate(world, sc, results, sc.recovery_mutations)  # while the worker is down
        t0 = time.monotonic()
        reports.extend(await recover())
        durations.append(time.monotonic() - t0)
        await timed()  # a later request gets the same reversal (naive: runs its stack again)
    world.faults.clear()
    if sc.stall:
        timer.cancel()
    return SagaResult(
        sc, engine, forward, results, world.effects(), reports, durations, crashed,
        world.snapshot(), errors, answered_at, list(world.faults.stalled),
    )  # fmt: skip
