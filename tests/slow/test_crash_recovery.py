"""Issue 2 #5: a real child process SIGKILLed mid-saga or mid-reversal; recovery in a new process.

The vendor lives in its own SQLite file, outside every engine process, so the test checks the
world itself: nothing applied twice, every logged step accounted for, and an honest report.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_child.py")

FORWARD_KILLS = [
    "forward:kv.put:before_effect",
    "forward:kv.put:after_effect",
    "forward:pay.charge:before_effect",
    "forward:pay.charge:after_effect",
]
UNDO_KILLS = [
    "probe:kv.get:before_effect",
    "compensate:kv.put:before_effect",
    "compensate:kv.put:after_effect",
    "compensate:pay.refund:before_effect",
    "compensate:pay.refund:after_effect",
]


def child(
    tmp: Path, mode: str, kill: str = "", db: str | None = None
) -> subprocess.CompletedProcess[str]:
    log = db or str(tmp / "log.db")
    return subprocess.run(
        [sys.executable, str(CHILD), log, str(tmp / "vendor.db"), mode, kill],
        capture_output=True,
        text=True,
        timeout=60,
    )


def world(tmp: Path) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    conn = sqlite3.connect(tmp / "vendor.db")
    kv = dict(conn.execute("SELECT k, v FROM kv").fetchall())
    effects = conn.execute("SELECT op, k, idem FROM effects ORDER BY n").fetchall()
    conn.close()
    return kv, effects


def logged_states(tmp: Path, db: str | None = None) -> dict[str, str]:
    query = "SELECT step_id, state FROM steps WHERE saga_id='saga-crash'"
    if db is not None:  # a PostgreSQL log
        import psycopg

        with psycopg.connect(db) as pg:
            return {str(k): str(v) for k, v in pg.execute(query).fetchall()}
    conn = sqlite3.connect(tmp / "log.db")
    rows = dict(conn.execute(query))
    conn.close()
    return rows


def check_honest(tmp: Path, out: dict[str, Any], db: str | None = None) -> None:
    kv, effects = world(tmp)
    idems = [e[2] for e in effects]
    assert len(idems) == len(set(idems)), f"an effect was applied twice: {effects}"
    assert sum(1 for e in effects if e[0] == "refund") <= 1
    states = logged_states(tmp, db)
    assert set(states.values()) <= {"done", "in_doubt", "skipped", "cancelled", "failed"}, states
    report = out["report"]
    by_step = {s["step_id"]: s for s in report["steps"]}
    for step_id, state in states.items():
        reported = by_step[step_id]["state"]
        if state == "in_doubt":
            assert reported == "in_doubt", (step_id, by_step[step_id])
        elif state == "done" and reported == "blocked":
            # rule 3: it waits for a dependent whose outcome is unknown
            assert "in_doubt" in states.values(), (step_id, by_step[step_id])
        elif state == "done":
            assert reported in ("reverted", "compensated"), (step_id, by_step[step_id])
        else:
            assert reported in ("not_needed", "cancelled"), (step_id, by_step[step_id])
    # the world agrees with every verified claim
    for step_id, key in (("s1", "stage"), ("s3", "owner"), ("s4", "note")):
        if by_step.get(step_id, {}).get("state") == "reverted":
            assert key not in kv, (step_id, kv)
        if by_step.get(step_id, {}).get("state") == "blocked":
            assert key in kv, (step_id, kv)  # blocked: not touched
    charged = any(e[0] == "charge" for e in effects)
    refunded = any(e[0] == "refund" for e in effects)
    s2 = by_step.get("s2", {}).get("state")
    if s2 == "compensated":
        assert charged and refunded
    if s2 in ("not_needed", "cancelled"):
        assert not charged
    expected_status = (
        "cannot_undo"
        if any(
            s["state"] in ("in_doubt", "failed", "blocked", "drifted", "over_budget")
            for s in report["steps"]
        )
        else "partially_reversed"
        if report["residue"]
        else "fully_reversed"
    )
    assert report["status"] == expected_status


@pytest.mark.parametrize("kill", FORWARD_KILLS)
def test_sigkill_during_forward_then_recover(tmp_path: Path, kill: str) -> None:
    died = child(tmp_path, "forward", kill)
    assert died.returncode == -signal.SIGKILL, died.stderr
    time.sleep(0.6)  # the dead worker's saga lease expires
    rec = child(tmp_path, "recover")
    assert rec.returncode == 0, rec.stderr
    out = json.loads(rec.stdout)
    assert out["in_doubt"], "the step killed mid-call must be found in doubt"
    check_honest(tmp_path, out)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_sigkill_after_a_step_returned_before_its_outcome_committed(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Issue 29: a step no longer waits for its outcome record. Killed after the charge
    returned and before its outcome committed: the agent never saw the charge, the step that
    depends on it never started, and recovery reports the charge in doubt, as before."""
    db = request.getfixturevalue("pg_url") if backend == "postgres" else None
    died = child(tmp_path, "forward", "forward:pay.charge:before_outcome_commit", db)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert "the agent saw the charge" not in died.stdout  # rule 1: it was not durable
    assert logged_states(tmp_path, db) == {"s1": "done", "s2": "intent", "s4": "done"}
    time.sleep(0.6)  # the dead worker's saga lease expires
    rec = child(tmp_path, "recover", db=db)
    assert rec.returncode == 0, rec.stderr
    out = json.loads(rec.stdout)
    assert out["in_doubt"] == [["saga-crash", "s2"]]
    check_honest(tmp_path, out, db)
    by_step = {s["step_id"]: s["state"] for s in out["report"]["steps"]}
    assert by_step == {"s1": "blocked", "s2": "in_doubt", "s4": "reverted"}
    assert out["report"]["status"] == "cannot_undo"
    kv, effects = world(tmp_path)
    assert [e[0] for e in effects] == ["put", "put", "charge", "put"]  # s1, s4, s2, s4's undo
    assert kv == {"stage": "won", "charge:c1": "500"}  # s3 never ran; s1 waits for s2


@pytest.mark.parametrize("kill", UNDO_KILLS)
def test_sigkill_during_reversal_then_recover(tmp_path: Path, kill: str) -> None:
    fwd = child(tmp_path, "forward")
    assert fwd.returncode == 0, fwd.stderr
    died = child(tmp_path, "undo", kill)
    assert died.returncode == -signal.SIGKILL, died.stderr
    time.sleep(0.6)  # the dead worker's reversal lease expires
    rec = child(tmp_path, "recover")
    assert rec.returncode == 0, rec.stderr
    out = json.loads(rec.stdout)
    assert out["resumed"] == 1
    check_honest(tmp_path, out)
    kv, effects = world(tmp_path)
    assert kv == {"charge:c1": "500", "refund:c1": "500"}  # every put undone, refund once
    assert out["report"]["status"] == "partially_reversed"
    again = child(tmp_path, "undo")
    assert json.loads(again.stdout) == out["report"]  # the same one reversal
    assert world(tmp_path)[1] == effects


def test_undo_from_two_processes_on_one_sqlite_file_is_one_reversal(tmp_path: Path) -> None:
    assert child(tmp_path, "forward").returncode == 0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                str(tmp_path / "log.db"),
                str(tmp_path / "vendor.db"),
                "undo",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert len({o["reversal_id"] for o in outs}) == 1
    assert all(o == outs[0] for o in outs)
    _, effects = world(tmp_path)
    assert sum(1 for e in effects if e[2].endswith(":undo")) == 4  # s1..s4 once each


@pytest.mark.parametrize(
    ("kill", "landed_probe", "state"),
    [
        # the vendor applied the refund, then the worker was SIGKILLed before logging it
        ("compensate:ledger.refund:after_effect", False, "in_doubt"),
        ("compensate:ledger.refund:after_effect", True, "compensated"),
        # killed before the vendor saw anything: the world shows it, so it is sent once
        ("compensate:ledger.refund:before_effect", False, "compensated"),
    ],
)
def test_sigkill_mid_refund_on_a_ledger_ignoring_keys_refunds_exactly_once(
    tmp_path: Path, kill: str, landed_probe: bool, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 5: a compensation in flight at a crash is re-sent only to a vendor that honours
    idempotency keys. This ledger does not, so recovery re-observes the world: exactly one
    refund, and an honest report (compensated when a probe shows it landed, else in_doubt)."""
    if landed_probe:
        monkeypatch.setenv("LEDGER_LANDED_PROBE", "1")
    assert child(tmp_path, "ledger").returncode == 0
    died = child(tmp_path, "ledger-undo", kill)
    assert died.returncode == -signal.SIGKILL, died.stderr
    time.sleep(0.6)  # the dead worker's lease expires
    done = child(tmp_path, "ledger-recover")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["resumed"] == 1
    _, effects = world(tmp_path)
    assert [e[0] for e in effects].count("refund") == 1, effects  # never a second refund
    step = out["report"]["steps"][0]
    assert step["state"] == state, step
    if state == "in_doubt":
        assert "does not honour idempotency keys, so it was not sent again" in step["detail"]
        assert step["manual_action"]["who"] and "c1" in step["manual_action"]["draft"]
        assert out["report"]["status"] == "cannot_undo"
    else:
        assert out["report"]["status"] == "partially_reversed"  # the refund settles later
