"""Issue 27: two callers in two processes racing overlapping selective undos of one saga, on
SQLite and PostgreSQL: every step is compensated at most once, only what the selections need."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import vendor

from conftest import output, run_worker, worker_cmd

pytestmark = pytest.mark.slow

SAGA = "saga-sel"


def test_overlapping_selections_from_two_processes_compensate_each_step_once(
    log_url: str, tmp_path: Path
) -> None:
    """Saga: s1 put k0, s2 put k1, s3 charge after s2, s4 put k3, s5 mail after s4, s6 put k5.
    Callers ask s2 (closure s2, s3) and s3,s4 (closure s3, s4, s5), two of each, at once."""
    vpath = tmp_path / "vendor.db"
    output(run_worker(log_url, vpath, "forward", SAGA))
    procs = [
        subprocess.Popen(
            worker_cmd(log_url, vpath, "undo", SAGA, "--lease", "15", "--steps", steps),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for steps in ("s2", "s3,s4", "s2", "s3,s4")
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert len({o["reversal_id"] for o in outs}) == 1, "one reversal, extended by selections"
    kv, effects, requests = vendor.world(vpath)
    undo = [r[2] for r in requests if r[1] == "compensate"]
    assert sorted(undo) == sorted(f"amends:{SAGA}:{s}:undo" for s in ("s2", "s3", "s4"))
    assert len({e[2] for e in effects}) == len(effects)
    # what no selection needed stands
    assert kv[f"{SAGA}:k0"] == "v0" and kv[f"{SAGA}:k5"] == "v5"
    assert f"{SAGA}:k1" not in kv and f"{SAGA}:k3" not in kv  # s2, s4 reverted (deleted)
    assert kv[f"refund:{SAGA}:c"] == "200"  # s3 refunded once
    for o in outs:
        states = {s["step_id"]: s["state"] for s in o["steps"]}
        assert "s1" not in states and "s6" not in states
        assert states.get("s3") == "compensated"
    last = max(outs, key=lambda o: o["continuations"])
    assert sorted(s["step_id"] for s in last["steps"]) == ["s2", "s3", "s4", "s5"]
    assert last["selection"]["kept"] == ["s1", "s6"]
