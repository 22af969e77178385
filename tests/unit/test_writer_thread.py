"""Issue 29, a file log's writer thread: what one group commit costs per record, counted (calls,
not seconds), and that the shortcuts settle and hash exactly as before."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import os
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log import records
from amends._log import sqlite as sqlite_log
from amends._log.base import StepFinish, StepIntent
from amends._log.records import chain_hash

SAGA = "saga_w"


class _ThreadCalls:
    """The calls made on the thread that enabled it, by (file, function), C functions under
    ``"~"``: what cProfile counted before Python 3.12. Since 3.12 cProfile profiles every
    thread (``sys.monitoring``), so the event loop's calls while the writer thread commits
    counted too (2,623 "calls to settle 64 writes"); ``sys.setprofile`` sees one thread."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], int] = {}

    def _count(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            key = (frame.f_code.co_filename, frame.f_code.co_name)
        elif event == "c_call":
            key = ("~", getattr(arg, "__qualname__", repr(arg)))
        else:
            return
        self.calls[key] = self.calls.get(key, 0) + 1

    def enable(self) -> None:
        sys.setprofile(self._count)

    def disable(self) -> None:
        sys.setprofile(None)


def _intent(step_id: str, seq: int) -> StepIntent:
    return StepIntent(SAGA, step_id, seq=seq, tool="t.x", args={"n": seq}, deps=[],
                      resources=[], declared="reversible", now=2.0 + seq)  # fmt: skip


async def _held_batch(log: amends.SqliteLog, writes: list[Any]) -> list[Any]:
    """Run ``writes`` (functions returning an awaitable log write) as one group commit: the
    writer thread is held on a first write while the others queue behind it."""
    db = log.db
    db._writing.acquire()
    try:
        first = asyncio.ensure_future(log.renew_saga_leases([], "o", 0.0))
        for _ in range(1000):  # until the writer thread took it (it waits for the lock)
            await asyncio.sleep(0.005)
            if db._jobs.empty():
                break
        queued = [asyncio.ensure_future(w()) for w in writes]
        for _ in range(1000):
            await asyncio.sleep(0.005)
            if db._jobs.qsize() == len(writes):
                break
    finally:
        db._writing.release()
    await first
    return list(await asyncio.gather(*queued))


async def test_a_group_commit_makes_four_amends_calls_per_record_and_settles_in_a_few(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: on the writer thread a record append is the write's function, ``_append``,
    ``chain_hash`` and the cursor's ``execute`` (4 calls into amends; 7 before: ``_head``, the
    ``chain_hash_kept`` wrapper and ``appended_to`` were Python calls of their own), and the
    batch's futures are handed to their event loop in a few calls, none per write (a
    ``setdefault`` and an ``append`` per write before). Counted on the writer
    thread, for a batch of 64 writes (32 intents, 32 outcomes); every record is committed, in
    order, and the chain verifies."""
    log = amends.SqliteLog(str(tmp_path / "w.db"))
    await log.create_saga(SAGA, "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0)
    db = log.db
    n = 64
    commit_profile, settle_profile = _ThreadCalls(), _ThreadCalls()
    commit, settle_all = db._commit, sqlite_log._settle_all

    def profiled_commit(batch: list[Any]) -> Any:
        if len(batch) != n:
            return commit(batch)
        commit_profile.enable()
        try:
            return commit(batch)
        finally:
            commit_profile.disable()

    def profiled_settle(settled: list[Any]) -> None:
        if len(settled) != n:
            return settle_all(settled)
        settle_profile.enable()
        try:
            return settle_all(settled)
        finally:
            settle_profile.disable()

    monkeypatch.setattr(db, "_commit", profiled_commit)
    monkeypatch.setattr(sqlite_log, "_settle_all", profiled_settle)

    async def finish(i: int) -> None:  # a coroutine, so it queues in turn after its intent
        await log.finish_step(SAGA, f"s{i}", StepFinish("done"), now=2.5 + i)

    writes: list[Any] = []
    for i in range(1, n // 2 + 1):
        writes.append(lambda i=i: log.begin_step(_intent(f"s{i}", i)))
        writes.append(lambda i=i: finish(i))
    got = await _held_batch(log, writes)
    assert got == [True, None] * (n // 2)

    package = os.path.dirname(amends.__file__) + os.sep
    stats = commit_profile.calls
    calls = sum(c for (path, _f), c in stats.items() if path.startswith(package))
    per_name: dict[str, int] = {}
    for (_path, name), c in stats.items():
        per_name[name] = per_name.get(name, 0) + c
    assert per_name.get("chain_hash") == n and "chain_hash_kept" not in per_name
    assert "_head" not in per_name and "appended_to" not in per_name
    assert calls <= 4 * n + 16, f"{calls} amends calls for {n} writes"
    settle_calls = sum(settle_profile.calls.values())
    assert 0 < settle_calls <= 24, f"{settle_calls} calls to settle {n} writes"

    saga = await log.get_saga(SAGA)
    assert saga is not None
    assert [s.step_id for s in saga.steps] == [f"s{i}" for i in range(1, n // 2 + 1)]
    assert {s.state for s in saga.steps} == {"done"}
    assert await log.verify(SAGA) == []
    await log.close()


def test_a_batch_settles_each_future_on_its_own_loop_and_blocking_callers_on_the_writer() -> None:
    """Issue 29: each event loop is woken once with the whole batch and settles only its own
    futures (a value, or the write's exception), skipping one whose awaiter was cancelled; a
    blocking caller's future is settled on the writer thread; a closed loop is no error."""
    a, b, closed = asyncio.new_event_loop(), asyncio.new_event_loop(), asyncio.new_event_loop()
    closed.close()
    try:
        fa, fa_err, fa_cancelled = a.create_future(), a.create_future(), a.create_future()
        fa_cancelled.cancel()
        fb = b.create_future()
        blocking: concurrent.futures.Future[Any] = concurrent.futures.Future()
        blocking_cancelled: concurrent.futures.Future[Any] = concurrent.futures.Future()
        blocking_cancelled.cancel()
        refused = amends.LogError("refused", path="w.db")
        settled: list[Any] = [
            ((None, a, fa, 0), True, "a"),
            ((None, b, fb, 0), True, "b"),
            ((None, None, blocking, 0), True, "blocking"),
            ((None, a, fa_err, 0), False, refused),
            ((None, a, fa_cancelled, 0), True, "late"),
            ((None, None, blocking_cancelled, 0), True, "late"),
            ((None, closed, closed.create_future(), 0), True, "nobody"),
        ]
        sqlite_log._settle_all(settled)
        assert blocking.result() == "blocking" and blocking_cancelled.cancelled()
        assert not fa.done() and not fa_err.done() and not fb.done()  # on their own loops
        a.run_until_complete(asyncio.sleep(0))
        assert fa.result() == "a" and fa_err.exception() is refused and fa_cancelled.cancelled()
        assert not fb.done()
        b.run_until_complete(asyncio.sleep(0))
        assert fb.result() == "b"
    finally:
        a.close()
        b.close()


def test_chain_hash_keyed_is_the_hmac_of_header_and_text_and_keep_remembers_the_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the message is hashed in one call (OpenSSL's one-shot HMAC when keyed), the
    same digest as an HMAC object over the header then the text (rule 11: logs written before
    verify); ``keep=True`` (the log's own appends) remembers the fields for rule 12's check,
    the default (a check hashing a row it read) does not."""
    monkeypatch.setattr(records, "_HASHED", [{}, {}])
    key, text = b"k" * 32, '{"state":"done"}'
    fields = ("p", "saga_1", "s1", None, "step.done#f", 1700000000.25, text)
    head = b"amends.chain.2|1:p|6:saga_1|2:s1|~|11:step.done#f|" + struct.pack("<d", 1700000000.25)
    mac = hmac.new(key, head, hashlib.sha256)
    mac.update(text.encode())
    assert chain_hash(key, *fields) == mac.hexdigest()
    plain = chain_hash(None, *fields)
    assert plain == hashlib.sha256(head + text.encode()).hexdigest()
    assert not records._hashed_here(plain, (None, *fields))
    assert chain_hash(None, *fields, True) == plain
    assert records._hashed_here(plain, (None, *fields))
    assert not records._hashed_here(plain, (None, *fields[:-1], '{"state":"failed"}'))


async def test_a_write_never_commits_inline_ahead_of_one_the_writer_thread_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write issued while an earlier one is in the writer thread's hands, taken off the queue
    but not committed yet, waits for it: the log keeps the order writes were issued in (on
    Python 3.13 ``SimpleQueue.put`` hands a job straight to the waiting writer, so the queue
    read empty and a quiet event loop committed the second write inline, first: an undo logged
    s2's compensation before s1's, a fan-out s3's intent before s1's)."""
    log = amends.SqliteLog(str(tmp_path / "o.db"))
    await log.create_saga(SAGA, "t", tenant=None, actor=None, owner="o", lease_until=9e9, now=1.0)
    db = log.db
    taken, release = threading.Event(), threading.Event()
    take_batch = sqlite_log.take_batch

    def held(jobs: Any, first: Any) -> list[Any]:  # the writer holds a job, not yet committing
        taken.set()
        release.wait(10)
        return take_batch(jobs, first)

    monkeypatch.setattr(sqlite_log, "take_batch", held)
    db.inline_when_idle = False  # the first write goes to the writer thread
    first = asyncio.ensure_future(log.begin_step(_intent("s1", 1)))
    await asyncio.to_thread(taken.wait, 10)
    db.inline_when_idle = True  # the loop is quiet now: the next write could commit inline
    second = asyncio.ensure_future(log.begin_step(_intent("s2", 2)))
    await asyncio.sleep(0.05)
    assert not second.done()  # behind s1, not ahead of it
    release.set()
    assert await first is True and await second is True
    saga = await log.get_saga(SAGA)
    assert saga is not None and [s.step_id for s in saga.steps] == ["s1", "s2"]
    assert [e.step_id for e in await log.events(SAGA)][1:] == ["s1", "s2"]
    assert await log.verify(SAGA) == []
    await log.close()
