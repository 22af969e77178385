"""Fast checks of the Temporal integration that need no server: idempotent log writes, lazy
imports, clear errors for bad input."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time

import pytest
from temporalio.testing import ActivityEnvironment

import amends
from amends.cli.worker import register
from amends.integrations.temporal import TemporalRunner, connect
from amends.integrations.temporal._activities import RecordInput, ReversalActivities
from amends.integrations.temporal._codec import saga_from_dict, to_dict
from core_world import fresh


async def test_a_log_write_retried_by_temporal_records_its_event_once() -> None:
    """amends.record run again after it committed (its worker died before reporting back)
    writes no second event; a new write of the same step does."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    claim = await engine.log.claim_reversal(
        "s", reversal_id="rev_1", budget={}, owner="temporal:x", lease_until=time.time() + 60,
        now=time.time(),
    )  # fmt: skip
    acts = ReversalActivities(catalog, engine.log)
    first = RecordInput(
        "rev_1", claim.reversal.generation, "s1", "dispatched", 0, "dispatching", {"key": "k"},
        1, 0, "compensation.dispatched", time.time(), event_key="run-a:1",
    )  # fmt: skip
    env = ActivityEnvironment()
    await env.run(acts.record, first)
    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal's retry of the same write
    await env.run(acts.record, first)
    second = dataclasses.replace(
        first, state="reverted", event="compensation.reverted", event_key="run-a:2"
    )
    await env.run(acts.record, second)
    kinds = [e.kind for e in await engine.log.events("s") if e.kind.startswith("compensation.")]
    assert kinds == ["compensation.dispatched", "compensation.reverted"]
    comps = await engine.log.get_compensations("rev_1")
    assert comps["s1"].state == "reverted"
    await engine.close()


async def test_saga_records_survive_the_json_round_trip_of_a_temporal_payload() -> None:
    """What an activity returns about a saga is rebuilt exactly in the workflow."""
    _, catalog = fresh()
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("t", saga_id="s", actor="a") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=100, after=[a])
    rec = await engine.log.get_saga("s")
    assert rec is not None
    import json

    assert saga_from_dict(json.loads(json.dumps(to_dict(rec)))) == rec
    await engine.close()


def test_import_amends_does_not_import_temporalio() -> None:
    """The Temporal SDK is an optional extra, imported only with the integration."""
    code = "import sys, amends; sys.exit('temporalio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


async def test_bad_temporal_address_is_a_clear_error() -> None:
    """An address that is not HOST:PORT names the value and an example."""
    with pytest.raises(amends.ConfigError, match=r"'localhost' is not HOST:PORT; e\.g\."):
        await connect("localhost")


def test_bad_heartbeat_is_a_clear_error() -> None:
    with pytest.raises(amends.ConfigError, match="heartbeat_timeout must be positive, got 0"):
        TemporalRunner("127.0.0.1:7233", heartbeat_timeout=0)


def test_worker_command_refuses_a_non_positive_heartbeat() -> None:
    """``amends worker --heartbeat 0`` says what is wrong before connecting anywhere."""
    parser = argparse.ArgumentParser(prog="amends")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["worker", "--temporal", "127.0.0.1:1", "--db", "x.db", "--heartbeat", "0"]
    )
    with pytest.raises(amends.ConfigError, match="--heartbeat must be a positive number"):
        args.handler(args)
