"""Issue 29: a step hands its outcome record to the log and does not wait for it (counted here;
tests/conformance/test_outcome_handoff.py checks rule 1 where the outcome is used, on both
backends)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import amends

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fanout import budget  # noqa: E402


def test_a_fan_out_step_wakes_the_event_loop_three_times_not_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted per step of a 300-step fan-out on a SQLite file (deterministic counts): the
    step's task starts, wakes once when its intent is durable, and gather hears it end; the
    outcome's durability is waited for once per committed batch, not by every step (4.01
    callbacks per step before, one of them the task's second wake-up). Tracing off (another
    test may have set a tracer provider for the whole process)."""
    monkeypatch.setattr("amends._telemetry.tracer", lambda: None)
    catalog = amends.Catalog()

    @catalog.tool("bench.noop", reversibility="read_only")
    async def noop(call: amends.Call, i: int) -> int:
        return i

    loop = asyncio.new_event_loop()
    try:
        engine = amends.Engine(catalog, log=amends.SqliteLog(tmp_path / "log.db"))
        counts = budget(loop, engine, 300)
        loop.run_until_complete(engine.close())
    finally:
        loop.close()
    assert counts["Tasks"] < 1.05, counts  # one per step (and the saga's heartbeat)
    assert counts["futures"] < 2.2  # the intent's and the outcome's write, and a few waits
    assert counts["loop callbacks"] < 3.5, counts
