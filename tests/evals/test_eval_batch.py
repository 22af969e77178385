"""Issue 29: the batch runner (many sagas on one event loop, logs shared per batch, crash logs
pooled as files) checks exactly what the single-saga path checks, and a crashed worker's
recovery reopens the saga log from its file, as a restarted process would."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import pytest

from amends import Engine, SqliteLog
from amends.evals import suite
from amends.evals.generator import FAMILIES, generate
from amends.evals.invariants import check
from amends.evals.runner import run_scenario, run_scenario_both
from amends.evals.suite import run_indexes

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

SEED = 6


def _verdict(r: Any) -> tuple[str, ...]:
    return tuple(name for name, msgs in check(r).items() if msgs)


def _counts(t: suite.EngineTally) -> dict[str, Any]:
    """The tally's counts (its first 20 failing refs depend on the order sagas finish in)."""
    return {
        "sagas": t.sagas,
        "silently_wrong": t.silently_wrong,
        "violations": t.violations,
        "checked": t.checked,
        "families": t.by_family,
    }


def _holds(r: Any) -> bool:
    return not any(check(r).values())


async def test_the_batch_runner_and_the_single_saga_path_agree_on_a_fixed_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every family twice (seed 6, indexes 0-35): each saga's verdict per engine in the batch
    (shared in-memory logs, pooled crash log files, several sagas at once) equals its verdict
    when it runs alone on logs of its own; so do the tallies."""
    indexes = list(range(2 * len(FAMILIES)))
    batch: dict[tuple[str, str], tuple[str, ...]] = {}

    def spy(r: Any) -> Any:
        out = check(r)
        batch[(r.scenario.ref, r.engine)] = tuple(k for k, v in out.items() if v)
        return out

    monkeypatch.setattr(suite, "check", spy)
    tallies = await run_indexes(indexes, SEED, ("amends", "naive"))
    alone: dict[tuple[str, str], tuple[str, ...]] = {}
    single = {e: suite.EngineTally(e) for e in ("amends", "naive")}
    for i in indexes:
        for r in await run_scenario_both(generate(SEED, i)):
            alone[(r.scenario.ref, r.engine)] = _verdict(r)
            single[r.engine].add(r, check(r))
    assert len(batch) == len(alone) == 2 * len(indexes)
    assert batch == alone
    assert {e: _counts(t) for e, t in tallies.items()} == {e: _counts(t) for e, t in single.items()}
    assert set(tallies["amends"].by_family) == set(FAMILIES)
    # not a vacuous agreement: amends holds every invariant, naive breaks some on this seed
    assert not any(v for (_, e), v in batch.items() if e == "amends")
    assert sum(1 for (_, e), v in batch.items() if e == "naive" and "honesty" in v) > 18


def _crash_index(family: str) -> int:
    return next(i for i in range(200) if generate(SEED, i).family == family)


@pytest.mark.parametrize("family", ["crash", "keyless_crash"])
async def test_recovery_after_a_crash_reopens_the_log_from_its_file(family: str) -> None:
    """The engine that recovers works on a new connection to the crashed worker's log file (a
    real reopen), not on the crashed worker's log object; the world shows the reversal done
    once, every invariant holds, and the private file is removed afterwards."""
    sc = generate(SEED, _crash_index(family))
    logs: list[Any] = []

    def factory(*args: Any, **kw: Any) -> Engine:
        logs.append(kw["log"])
        return Engine(*args, **kw)

    r = await run_scenario(sc, engine_factory=factory)
    assert r.crashed
    assert len(logs) == 2
    crashed, restarted = logs
    assert isinstance(crashed, SqliteLog) and isinstance(restarted, SqliteLog)
    assert restarted is not crashed
    assert crashed.path == restarted.path != ":memory:"
    assert not Path(crashed.path).parent.exists()  # the private file is gone
    assert _holds(r), check(r)


async def test_a_pooled_crash_log_is_reopened_and_stays_usable_for_the_next_crash(
    tmp_path: Path,
) -> None:
    """In a batch, two crash sagas in a row on one pooled log file (signed with a key): each
    recovery reopens the file with the same key, the second saga's recovery finds nothing of
    the first left to resume, and the hash chain both connections wrote verifies (rule 11)."""
    # a crash point N in 1..2*steps may lie past the reversal's last call (nothing crashes:
    # 6:25, once FAMILIES grew to 19); one in the middle of the first call of one of the saga's
    # inverse tools falls on a call the reversal makes (no fault or edit blocks it in `crash`)
    found = [sc for sc in map(functools.partial(generate, SEED), range(200))
             if sc.family == "crash" and sc.crash_op is not None]  # fmt: skip
    log = SqliteLog(tmp_path / "crash.db", synchronous="OFF", signing_key=b"eval key")
    try:
        for sc in found[:2]:
            logs: list[Any] = []

            def factory(*args: Any, _seen: list[Any] = logs, **kw: Any) -> Engine:
                _seen.append(kw["log"])
                return Engine(*args, **kw)

            r = await run_scenario(sc, engine_factory=factory, crash_log=log)
            assert r.crashed and logs[0] is log and logs[1] is not log
            assert logs[1].path == log.path and logs[1].signing_key == b"eval key"
            assert _holds(r), check(r)
        assert not await log.expired_reversals(float("inf"))
        assert await log.verify() == []
    finally:
        await log.close()


def test_worker_processes_are_forked_only_while_no_other_thread_runs() -> None:
    """Issue 29: a forked worker skips re-importing amends (~0.4 s of CPU each), but forking
    while another thread runs can copy a lock it holds: then workers are spawned."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert suite._start_method() == "spawn"
    finally:
        stop.set()
        other.join()
    if threading.active_count() == 1:  # pytest may run helper threads of its own
        assert suite._start_method() == "fork"


async def test_each_pooled_crash_log_keeps_one_reopened_connection_that_recovery_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the connection a restarted worker reopens a pooled crash log file with is kept
    with the file (not opened again per crash saga). Each crash saga still recovers on that
    other connection to the same file, never on the crashed engine's log object; the files
    are fewer than the crash sagas (so connections were reused), and every invariant holds."""
    from amends.evals import runner

    # the crash families: a mixed scenario's crash point can fall on a call its faults refuse
    # (a crash "after the effect" of a call that had none does not fire), which depends on
    # what the forward pass ran, not on the connections this test is about; and of those, the
    # crashes in the middle of an inverse the saga has (a crash point N in 1..2*steps may lie
    # past the reversal's last call: 6:25, once FAMILIES grew to 19)
    crashes = [i for i in range(200) if generate(SEED, i).family in ("crash", "keyless_crash")
               and generate(SEED, i).crash_op is not None][:6]  # fmt: skip
    assert len(crashes) == 6
    logs_by_saga: dict[str, list[Any]] = {}
    opened: list[Any] = []

    class Spy(Engine):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self._eval_log = kw["log"]

        async def recover(self, *args: Any, **kw: Any) -> Any:
            logs_by_saga.setdefault("recover", []).append(self._eval_log)
            return await super().recover(*args, **kw)

    def counting_reopen(log: Any) -> Any:
        out = runner.reopen(log)
        opened.append((log, out))
        return out

    monkeypatch.setattr(runner, "Engine", Spy)
    monkeypatch.setattr(suite, "reopen", counting_reopen)
    tallies = await run_indexes(crashes, SEED, ("amends",), concurrency=1)
    t = tallies["amends"]
    assert t.sagas == 6 and not any(t.violations.values()), t.examples
    recovered_on = logs_by_saga["recover"]
    assert len(recovered_on) == 6  # every crash saga recovered
    crashed_logs = {id(c) for c, _ in opened}
    restarted_logs = {id(r) for _, r in opened}
    # sagas one after another (the sleepy gate lets at most 16 at once; here they overlap
    # little), yet fewer files and connections were opened than there were crash sagas
    assert 1 <= len(opened) < 6
    assert {id(x) for x in recovered_on} <= restarted_logs
    assert not crashed_logs & restarted_logs
    for crashed, restarted in opened:
        assert restarted is not crashed and restarted.path == crashed.path != ":memory:"
