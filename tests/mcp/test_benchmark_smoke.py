"""benchmarks/mcp_gateway.py runs at a tiny size, so the gateway benchmark cannot rot."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_gateway_benchmark_measures_direct_and_gateway_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call kind is timed both ways, through real processes; a capture read costs one
    upstream round trip and no extra durable commit."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import common, mcp_gateway

    monkeypatch.setattr(common, "SCRATCH", tmp_path / "bench")
    monkeypatch.setattr(mcp_gateway, "scratch", common.scratch)
    monkeypatch.chdir(ROOT)  # the upstream is `python -m benchmarks.mcp_gateway`
    loop = asyncio.new_event_loop()
    try:
        got = loop.run_until_complete(mcp_gateway._measure(5))
    finally:
        loop.close()
    counts = {k: got.pop(k) for k in ("per call send", "per call set")}
    assert set(got) == {
        "direct get", "direct set", "direct send",
        "gateway get", "gateway set", "gateway send", "durable step",
        "in-process direct send", "in-process gateway send",
        "in-process direct set", "in-process gateway set",
    }  # fmt: skip
    assert all(len(v) == 5 and min(v) > 0 for v in got.values())
    # [durable commits, log writes, upstream round trips] per call: the step's intent and
    # result; a capture read is one more round trip, never a second durable step
    # (rounded: a batch re-run on a busy database may add a fraction of a commit)
    rounded = {k: [round(x) for x in v] for k, v in counts.items()}
    assert rounded == {"per call send": [2, 2, 1], "per call set": [2, 2, 2]}


def _instructions_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import gateway_instructions

    monkeypatch.setattr(sys, "path", list(sys.path))  # the child puts the tree's src first
    return gateway_instructions


def test_gateway_instructions_counts_each_call_kind_between_two_dumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``benchmarks/gateway_instructions.py``'s child: after uncounted warm-ups, each call kind
    (direct and through the gateway, without a contract and with a capture read) runs between
    a dump at the start and one at the end (the figures are the second dump of each pair)."""
    import ctypes

    gi = _instructions_module(monkeypatch)
    seen: list[str] = []

    class Client:
        def __getattr__(self, name: str) -> object:
            return lambda: seen.append(name)

    monkeypatch.setattr(ctypes, "CDLL", lambda path: Client())
    monkeypatch.setattr(gi, "N", 2)
    monkeypatch.setattr(gi, "WARM", 1)
    gi.child(str(ROOT), "client.so", str(tmp_path))
    assert seen == ["cg_start", "cg_dump", "cg_dump", "cg_stop"] * len(gi.KINDS)


def test_a_gateway_steps_outcome_is_committed_on_the_event_loop_not_by_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lane gw: the upstream's answer reaches the step from an SDK task that is still ready to
    run; the gateway lets it end its turn, so the step's outcome record finds the loop idle and
    the log commits it inline (the same transaction and fsync) instead of handing it to its
    writer thread, two thread hops per call. A stray timer may still meet a write: a few."""
    from amends._log import sqlite as sqlite_backend

    gi = _instructions_module(monkeypatch)
    gateway, config = gi._gateway(str(ROOT), str(tmp_path))
    queued: list[str] = []
    real_write = sqlite_backend._SqliteDatabase.write

    def write(db: Any, fn: Any, size: int = 0, **kw: Any) -> Any:
        before = db._jobs.qsize()
        got = real_write(db, fn, size, **kw)
        if db._jobs.qsize() > before or not got.done():
            queued.append(fn.__qualname__)
        return got

    async def main() -> None:
        async with gateway(config) as gw:
            send = gi._calls(gw, "gateway send")
            await send(0, 3)  # the saga's opening
            queued.clear()
            monkeypatch.setattr(sqlite_backend._SqliteDatabase, "write", write)
            await send(3, 20)

    asyncio.run(main())
    outcomes = [q for q in queued if q.startswith("SqlSagaLog.finish_step")]
    assert len(outcomes) <= 4, queued
