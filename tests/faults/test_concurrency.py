"""Many workers at once: 8 undo callers, a paused worker whose lease expires, a server restart."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import vendor

from conftest import output, run_worker, worker_cmd

pytestmark = pytest.mark.slow

SAGA = "saga-c"


def test_eight_processes_undo_the_same_saga_once(log_url: str, tmp_path: Path) -> None:
    vpath = tmp_path / "vendor.db"
    output(run_worker(log_url, vpath, "forward", SAGA))
    procs = [
        subprocess.Popen(
            worker_cmd(log_url, vpath, "undo", SAGA, "--lease", "15"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert len({o["reversal_id"] for o in outs}) == 1, "exactly one reversal"
    assert all(o == outs[0] for o in outs), "every caller gets the same report"
    _, effects, requests = vendor.world(vpath)
    undo = [r[2] for r in requests if r[1] == "compensate"]
    assert sorted(undo) == sorted(f"amends:{SAGA}:{s}:undo" for s in ("s1", "s2", "s3", "s4", "s6"))
    assert len({e[2] for e in effects}) == len(effects)


def test_a_paused_worker_is_fenced_after_its_lease_is_taken_over(
    log_url: str, tmp_path: Path
) -> None:
    vpath = tmp_path / "vendor.db"
    output(run_worker(log_url, vpath, "forward", SAGA))
    marker = tmp_path / "paused"
    slow = subprocess.Popen(
        worker_cmd(log_url, vpath, "undo", SAGA, "--lease", "1", "--pause-file", str(marker)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline and slow.poll() is None, "never reached a probe"
            time.sleep(0.01)
        slow.send_signal(signal.SIGSTOP)  # merely slow: paused mid-reversal, before a dispatch
        try:
            time.sleep(1.5)  # its lease (1 s) expires; it cannot renew while stopped
            second = output(run_worker(log_url, vpath, "undo", SAGA, "--lease", "1"))
            _, applied_before_resume, sent_before_resume = vendor.world(vpath)
        finally:
            slow.send_signal(signal.SIGCONT)
        stdout, stderr = slow.communicate(timeout=60)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.communicate()
    assert slow.returncode == 0, stderr[-3000:]
    first = json.loads(stdout.strip().splitlines()[-1])
    assert first == second, "the resumed worker joins the reversal the second one finished"
    _, effects, requests = vendor.world(vpath)
    # The fence is checked on every log write, so the resumed worker stops at its next write. A
    # call it had already logged as dispatched before it was paused may still go out (the fence
    # cannot reach into the vendor): it carries the same idempotency key, so it applies nothing.
    extra = requests[len(sent_before_resume) :]
    assert requests[: len(sent_before_resume)] == sent_before_resume
    assert {r[2] for r in extra} <= {r[2] for r in sent_before_resume}, extra
    assert len(extra) <= 1, f"the fenced worker kept sending after it resumed: {extra}"
    assert effects == applied_before_resume, "the fenced worker changed the world after resuming"
    undo_effects = sorted(e[2] for e in effects if e[2].endswith(":undo"))
    assert undo_effects == sorted(f"amends:{SAGA}:{s}:undo" for s in ("s1", "s2", "s3", "s4", "s6"))
    assert len({e[2] for e in effects}) == len(effects), "an effect was applied twice"
    assert second["status"] == "cannot_undo"
    assert [s["state"] for s in second["steps"]] == [
        "reverted",
        "reverted",
        "compensated",
        "reverted",
        "acknowledged",
        "reverted",
    ]


@pytest.fixture
def own_pg_server() -> Iterator[object]:
    """A PostgreSQL of this test's own: restarting the session's server made its shutdown
    checkpoint fsync every file of every database the session had created (18,297 files, 66 s
    on a loaded machine), the restart timed out, and every later PostgreSQL test failed."""
    from pg import PgServer, PgUnavailable

    try:
        server = PgServer()
    except PgUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.postgres
def test_postgres_restart_mid_reversal_loses_nothing(own_pg_server: object, tmp_path: Path) -> None:
    from pg import PgServer

    pg_server = own_pg_server
    assert isinstance(pg_server, PgServer)
    log_url = pg_server.new_database()
    vpath = tmp_path / "vendor.db"
    output(run_worker(log_url, vpath, "forward", SAGA))
    marker = tmp_path / "paused"
    # the worker pauses 5 s inside its first probe; we restart the server meanwhile
    proc = subprocess.Popen(
        worker_cmd(log_url, vpath, "undo", SAGA, "--lease", "15", "--pause-file", str(marker)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "worker never reached a probe"
        time.sleep(0.01)
    restarted: list[BaseException | None] = []

    def restart() -> None:
        try:
            pg_server.restart()
        except BaseException as exc:  # reported below, with the server's log
            restarted.append(exc)
        else:
            restarted.append(None)

    t = threading.Thread(target=restart)
    t.start()
    t.join(90)
    assert restarted == [None], (
        f"restart failed: {restarted}\n{pg_server.logfile.read_text()[-3000:]}"
    )
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, f"the engine must retry through a restart: {stderr[-3000:]}"
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["status"] == "cannot_undo"
    assert [s["state"] for s in report["steps"]] == [
        "reverted",
        "reverted",
        "compensated",
        "reverted",
        "acknowledged",
        "reverted",
    ]
    kv, _effects, requests = vendor.world(vpath)
    assert kv == {
        f"charge:{SAGA}:c": "200",
        f"refund:{SAGA}:c": "200",
        f"mail:{SAGA}@x.test:hi": "hi",
    }
    undo = [r[2] for r in requests if r[1] == "compensate"]
    assert len(undo) == len(set(undo)) == 5
    again = output(run_worker(log_url, vpath, "undo", SAGA))
    assert again == report
