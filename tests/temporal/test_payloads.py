"""Issue 25 item 13: large arguments travel by reference to the saga log, never inside Temporal's
payloads (three 800 KB inverse arguments failed every workflow task with "[TMPRL1103] payloads
exceeded the error limit")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import ledger
import pytest
from temporalio.client import Client

import amends
from amends.integrations.temporal import TemporalRunner, make_worker, workflow_id

pytestmark = pytest.mark.slow

BIG = 800 * 1024


def big_value(i: int) -> str:
    """A document of 800 KB (what a restore-the-file inverse carries)."""
    return f"doc{i}:" + "".join(chr(97 + (i + j) % 26) for j in range(BIG))


@pytest.mark.parametrize("local_batch_seconds", [300.0, 0.0], ids=["local", "regular"])
async def test_three_800_kb_inverse_arguments_undo_through_temporal(
    temporal_client: Client, task_queue: str, tmp_path: Path, local_batch_seconds: float
) -> None:
    """Three steps whose inverses restore 800 KB documents: the reversal on Temporal restores
    all three with no workflow task failing, and no payload in the workflow's history holds a
    document (each travels by reference, resolved from the saga log by the activity that makes
    the call). Before, the first workflow task failed (TMPRL1103) after making the calls."""
    path = tmp_path / "ledger.db"
    conn = ledger.connect(path)
    for i in range(3):
        conn.execute("INSERT INTO kv VALUES (?, ?)", (f"k{i}", big_value(i)))
    conn.close()
    catalog = ledger.make_catalog(path)
    log = amends.SqliteLog(str(tmp_path / "amends.db"))
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("Overwrite three documents", saga_id="saga-big") as saga:
        for i in range(3):
            saga.call("kv.put", k=f"k{i}", v=f"short{i}")
    runner = TemporalRunner(
        temporal_client, task_queue=task_queue, local_batch_seconds=local_batch_seconds
    )
    on_temporal = amends.Engine(catalog, log=log, runner=runner)
    async with make_worker(temporal_client, catalog, log, task_queue=task_queue):
        report = await asyncio.wait_for(on_temporal.undo("saga-big"), 120)
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "reverted"),
        ("s3", "reverted"),
    ]
    assert ledger.state(path)["kv"] == {f"k{i}": big_value(i) for i in range(3)}
    history = await temporal_client.get_workflow_handle(workflow_id("saga-big")).fetch_history()
    failed = [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
    assert failed == [], failed[0].workflow_task_failed_event_attributes.failure.message
    largest = max(len(e.SerializeToString()) for e in history.events)
    assert largest < 64 * 1024, largest  # every document stayed out of Temporal's history
    assert "short0" in json.dumps(report.to_dict())
    await engine.close()


def roster_catalog(rosters: dict[str, list[str]]) -> amends.Catalog:
    """A reversible tool that replaces a team's roster (a long list of short names)."""
    catalog = amends.Catalog()

    @catalog.tool("roster.get", reversibility="read_only")
    async def get(call: amends.Call, team: str) -> list[str]:
        return list(rosters[team])

    @catalog.tool("roster.set", reversibility="reversible")
    async def set_(call: amends.Call, team: str, people: list[str]) -> int:
        before = list(rosters[team])
        rosters[team] = list(people)
        call.inverse("roster.set", team=team, people=before)
        call.expect("roster.get", {"team": team}, equals=list(people))
        return len(people)

    return catalog


def roster(i: int) -> list[str]:
    """70,000 short names: about 1 MB as JSON, no string of it long."""
    return [f"p{i}-{j:06d}" for j in range(70_000)]


async def test_three_inverses_with_1_mb_lists_of_short_values_undo_through_temporal(
    temporal_client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The class of item 13 beyond long strings: three inverses restoring rosters of 70,000
    names each (about 1 MB of JSON, every string short) undo through Temporal, no workflow task
    failing and nothing large in the workflow's history."""
    rosters = {f"t{i}": roster(i) for i in range(3)}
    catalog = roster_catalog(rosters)
    log = amends.SqliteLog(str(tmp_path / "amends.db"))
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("Replace three rosters", saga_id="saga-rosters") as saga:
        for i in range(3):
            saga.call("roster.set", team=f"t{i}", people=[f"new{i}"])
    runner = TemporalRunner(temporal_client, task_queue=task_queue)
    on_temporal = amends.Engine(catalog, log=log, runner=runner)
    async with make_worker(temporal_client, catalog, log, task_queue=task_queue):
        report = await asyncio.wait_for(on_temporal.undo("saga-rosters"), 120)
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "reverted"),
        ("s3", "reverted"),
    ]
    assert rosters == {f"t{i}": roster(i) for i in range(3)}
    handle = temporal_client.get_workflow_handle(workflow_id("saga-rosters"))
    history = await handle.fetch_history()
    failed = [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
    assert failed == [], failed[0].workflow_task_failed_event_attributes.failure.message
    largest = max(len(e.SerializeToString()) for e in history.events)
    assert largest < 256 * 1024, largest
    await engine.close()
