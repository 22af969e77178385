"""Issue 21 item 11: leases are judged by the database's clock, on SQLite and PostgreSQL.

Process A undoes a saga; its refund is in flight at a processor that ignores idempotency keys.
Process B, whose clock runs 60 s ahead, asks for the same undo (or runs recovery). Judged by
B's clock A's lease expired long ago; judged by the database's, it is live: B must join A's
reversal, never take it over, and the refund is made once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("skew_child.py")


def _start(log: str, tmp: Path, mode: str, skew: float = 0.0) -> subprocess.Popen[str]:
    env = {**os.environ, "AMENDS_TEST_SKEW": str(skew)}
    return subprocess.Popen(
        [sys.executable, str(CHILD), log, str(tmp / "vendor.db"), mode, "saga-skew", str(tmp)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _result(proc: subprocess.Popen[str]) -> object:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("second", ["undo", "recover"])
def test_a_worker_whose_clock_runs_a_minute_ahead_never_takes_over_a_live_reversal(
    log_url: str, tmp_path: Path, second: str
) -> None:
    assert _result(_start(log_url, tmp_path, "forward")) is None
    first = _start(log_url, tmp_path, "undo")
    skewed = None
    try:
        _wait_for(tmp_path / "inflight", first)  # A's refund is at the processor, unanswered
        skewed = _start(log_url, tmp_path, second, skew=60.0)
        _wait_for(tmp_path / f"ready-{second}", skewed)
        time.sleep(4.0)  # B claims (or scans for expired leases) while A's refund is in flight
        (tmp_path / "release").write_text("go")
        a = _result(first)
        b = _result(skewed)
    finally:
        for proc in (first, skewed):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    conn = sqlite3.connect(tmp_path / "vendor.db")
    refunds = conn.execute("SELECT id, pid FROM refunds").fetchall()
    conn.close()
    assert [r[0] for r in refunds] == ["ch_1"]  # one refund, never a second
    assert refunds[0][1] == first.pid  # made by A, whose reversal it was
    assert isinstance(a, dict) and a["steps"][0]["state"] == "compensated"
    if second == "undo":
        assert b == a  # B joined A's reversal: the same report
    else:
        assert b == []  # nothing to recover: A's lease is live by the database's clock
