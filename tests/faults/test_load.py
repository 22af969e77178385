"""Load (bounded, loopback only): 1,000 sagas x 12 steps recorded by 4 worker processes on one
PostgreSQL log, then undone concurrently by 4 processes; the audit accounts for every step and
finds zero duplicate effects. Throughput is printed (run with ``-s``); ``python -m benchmarks
--only pgload`` measures the same load against issue 12's goal (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import load
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SAGAS = int(os.environ.get("AMENDS_LOAD_SAGAS", "1000"))


@pytest.mark.timeout(900)  # the one test allowed past 120 s (see docs/operations.md)
def test_load_1000_sagas_by_4_workers_then_undone_every_step_once(
    pg_url: str, tmp_path: Path
) -> None:
    """Every step is done, every saga reversed, every compensation sent once, no effect twice."""
    vpath = tmp_path / "vendor.db"
    fwd = load.run_phase(pg_url, vpath, "record-many", SAGAS)
    undo = load.run_phase(pg_url, vpath, "undo-many", SAGAS)
    world = load.audit(pg_url, vpath, SAGAS, undo)

    assert dict(world.statuses) == {"cannot_undo": SAGAS}  # every saga sent one email: it stands
    assert world.step_states == {"done": SAGAS * load.STEPS}
    assert world.completed_sagas == SAGAS
    assert world.reversal_states == {"done": SAGAS}
    # per saga: 10 puts reverted, 1 charge compensated, 1 email acknowledged
    comps = world.compensation_states
    assert comps.get("reverted") == SAGAS * 10 and comps.get("compensated") == SAGAS, comps
    assert world.duplicates == 0
    assert world.log_problems == []
    assert world.compensations_sent == SAGAS * 11 and world.most_sends == 1
    assert world.undo_effects == SAGAS * 11
    # forward: 12 effects per saga (one per step) plus the 11 inverses
    assert world.effects == SAGAS * (load.STEPS + 11)
    print(
        f"\nLOAD forward: {SAGAS / fwd.seconds:.1f} sagas/s ({fwd.seconds:.1f} s, worker CPU "
        f"{fwd.worker_cpu:.1f} s); undo: {SAGAS / undo.seconds:.1f} sagas/s ({undo.seconds:.1f} "
        f"s, worker CPU {undo.worker_cpu:.1f} s); duplicates: {world.duplicates}"
    )


def test_the_pgload_benchmark_reports_rates_cpu_and_duplicates_of_an_audited_run(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m benchmarks --only pgload`` at 8 sagas: a row per direction with its rate and
    CPU, the 100 sagas/s targets and the duplicate count (0), after auditing the world."""
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from benchmarks import common, pgload

    monkeypatch.setattr(common, "SCRATCH", tmp_path / "bench")  # the vendor files go here
    (sec,) = pgload.run(pg_server, quick=True, sagas=8)
    assert [row[0] for row in sec.rows] == ["forward", "undo"]
    assert all(float(row[2]) > 0 and float(row[4]) > 0 for row in sec.rows)
    assert [t.goal for t in sec.targets] == [">= 100 sagas/s", ">= 100 sagas/s", "0"]
    assert sec.targets[2].measured == "0" and sec.targets[2].met
    assert "96 steps done, 8 reversals done, 88 compensations each sent once" in sec.notes[0]
