"""Issue 25 item 12: Temporal's errors reach a user as amends' own (one line, the value, the fix),
never as a raw ``RPCError`` or a traceback: an unknown namespace, a server that is down."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from devserver import DevServer
from temporalio.client import Client

import amends
from amends.integrations.temporal import TemporalRunner, TemporalUnavailableError

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
AMENDS = Path(sys.executable).parent / "amends"


async def one_step_saga(engine: amends.Engine) -> str:
    async with engine.saga("Put k0") as saga:
        await saga.call("kv.put", k="k0", v="agent")
    return saga.id


@pytest.fixture
def ledger_engine(tmp_path: Path) -> amends.Engine:
    import ledger

    path = tmp_path / "ledger.db"
    ledger.connect(path).close()
    return amends.Engine(ledger.make_catalog(path), log=amends.SqliteLog(str(tmp_path / "a.db")))


def test_amends_worker_with_an_unknown_namespace_says_so_in_one_line_and_exits_2(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """``amends worker --namespace nosuch``: one line naming the namespace and the fix, exit 2;
    it never claims to serve (it printed "serving task queue ..." then two tracebacks, exit 1)."""
    ledger_db = tmp_path / "ledger.db"
    proc = subprocess.run(
        [
            str(AMENDS), "worker", "--temporal", temporal_server.target, "--namespace", "nosuch",
            "--db", str(tmp_path / "amends.db"), "--catalog", "ledger:catalog",
        ],
        env={**os.environ, "PYTHONPATH": str(HERE), "AMENDS_TEST_LEDGER": str(ledger_db)},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"amends: error: Temporal at {temporal_server.target!r} has no namespace 'nosuch'; "
        f"create it (`temporal operator namespace create --namespace nosuch`) or fix --namespace"
    ]
    assert proc.stdout == ""


async def test_undo_through_an_unknown_namespace_is_a_config_error(
    temporal_server: DevServer, ledger_engine: amends.Engine
) -> None:
    """``engine.undo`` through a TemporalRunner whose namespace does not exist raises a
    ConfigError naming it (it raised a raw temporalio RPCError); the log is unchanged."""
    engine = ledger_engine
    saga_id = await one_step_saga(engine)
    runner = TemporalRunner(temporal_server.target, namespace="nosuch")
    on_temporal = amends.Engine(engine.catalog, log=engine.log, runner=runner)
    with pytest.raises(amends.ConfigError, match="has no namespace 'nosuch'; create it"):
        await on_temporal.undo(saga_id)
    assert await engine.log.get_reversal(saga_id=saga_id) is None
    client = await Client.connect(temporal_server.target)  # the same error with a client given
    runner = TemporalRunner(Client(client.service_client, namespace="nosuch"))
    on_temporal = amends.Engine(engine.catalog, log=engine.log, runner=runner)
    with pytest.raises(amends.ConfigError, match="has no namespace 'nosuch'"):
        await on_temporal.undo(saga_id)
    await engine.close()


async def test_undo_while_the_server_is_down_raises_an_amends_error(
    tmp_path: Path, ledger_engine: amends.Engine
) -> None:
    """The server went away after the client connected: ``engine.undo`` raises
    TemporalUnavailableError (an AmendsError) naming the address and what to do (it raised a
    raw RPCError); nothing is written to the log."""
    engine = ledger_engine
    saga_id = await one_step_saga(engine)
    (tmp_path / "temporal").mkdir()
    server = DevServer(tmp_path / "temporal")
    try:
        client = await Client.connect(server.target)
    finally:
        server.stop()
    on_temporal = amends.Engine(engine.catalog, log=engine.log, runner=TemporalRunner(client))
    with pytest.raises(TemporalUnavailableError) as caught:
        await on_temporal.undo(saga_id, budget=amends.Budget(seconds=5))
    assert isinstance(caught.value, amends.AmendsError)
    assert str(caught.value).startswith(
        f"cannot reach Temporal at {server.target!r} to undo saga {saga_id!r}: "
    )
    assert str(caught.value).endswith(
        "; nothing was undone: start the server (`temporal server start-dev --db-filename "
        "temporal.db`) or fix the address, then undo again"
    )
    assert caught.value.saga_id == saga_id
    assert await engine.log.get_reversal(saga_id=saga_id) is None
    await engine.close()


async def test_a_budget_bounds_an_undo_no_worker_takes_up_and_the_report_names_the_queue(
    temporal_server: DevServer,
    temporal_client: Client,
    task_queue: str,
    ledger_engine: amends.Engine,
) -> None:
    """Issue 23: ``engine.undo(budget=Budget(seconds=2))`` through a TemporalRunner whose task
    queue no worker serves returns when the budget is spent (it waited forever, with nothing in
    the log): the reversal is in the log, nothing attempted (over_budget), and the caller's
    report names the queue nobody serves and how to go on. A worker started later finds the
    reversal done (one reversal, rule 6), and resume with a new budget finishes it."""
    from amends.integrations.temporal import make_worker

    engine = ledger_engine
    saga_id = await one_step_saga(engine)
    runner = TemporalRunner(temporal_client, task_queue=task_queue, heartbeat_timeout=1.0)
    on_temporal = amends.Engine(engine.catalog, log=engine.log, runner=runner)
    report = await asyncio.wait_for(on_temporal.undo(saga_id, budget=amends.Budget(seconds=2)), 60)
    assert report.status == "cannot_undo"
    [step] = report.steps
    assert step.state.value == "over_budget"
    # lane temporal2 item 1: the caller's budget (it said "time budget of 0s spent"), and the
    # queue named in the stored report too (rules 6, 8: it is what everyone reads later)
    assert step.detail == (
        f"time budget of 2s spent before kv.get could run; no worker serves Temporal task "
        f"queue {task_queue!r} (namespace 'default' at {temporal_server.target}): start one "
        f"(`amends worker --temporal {temporal_server.target} --task-queue {task_queue} --db "
        f"...`), then engine.resume({saga_id!r}) continues the reversal"
    ), step.detail
    stored = await engine.report(saga_id)
    assert stored is not None and stored.reversal_id == report.reversal_id
    assert [(s.state.value, s.detail) for s in stored.steps] == [("over_budget", step.detail)]
    assert stored.budget["seconds"] == report.budget["seconds"] == 2
    assert stored.seconds == report.seconds and stored.seconds >= 2
    assert stored.to_dict() == report.to_dict()
    async with make_worker(temporal_client, engine.catalog, engine.log, task_queue=task_queue):
        queued = temporal_client.get_workflow_handle(f"amends-reversal:{saga_id}")
        assert (await asyncio.wait_for(queued.result(), 60))["reversal_id"] == report.reversal_id
        final = await on_temporal.resume(saga_id, budget=amends.Budget(seconds=30))
    assert final.reversal_id == report.reversal_id
    assert [(s.tool, s.state.value) for s in final.steps] == [("kv.put", "reverted")]
    await engine.close()
