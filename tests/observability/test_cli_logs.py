"""Issue 28 item 3 in the commands: ``amends undo --log-format json`` writes one JSON line per
reversal event on stderr (stdout keeps the report), and nothing else there; ``text`` (the default)
writes none; ``amends mcp serve --log-format json`` logs the gateway's reversals the same way
(``amends worker``'s: tests/observability/test_temporal.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from processes import amends_cli, free_port

pytestmark = pytest.mark.slow

FORWARD = """
import asyncio, sys
import amends
from amends.sandbox import demo_catalog

async def main(db):
    engine = amends.Engine(demo_catalog(db), log=db)
    async with engine.saga("Renew ACME", tenant="acme", actor="agent:sales") as saga:
        stage = saga.call("crm.update_field", record_id="acme", field="stage", value="won")
        saga.call("payments.charge", after=[stage], customer="cus_acme", cents=1200,
                  description="renewal")
    await engine.close()
    print(saga.id)

asyncio.run(main(sys.argv[1]))
"""


CATALOG = ("--catalog", "amends.sandbox:demo_catalog")  # rule 12: the operator names it


def forward_saga(db: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FORWARD), db],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_undo_log_format_json_writes_a_line_per_reversal_event(tmp_path: Path) -> None:
    db = str(tmp_path / "a.db")
    saga_id = forward_saga(db)
    run = amends_cli("undo", saga_id, "--db", db, "--json", "--log-format", "json", *CATALOG)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)  # stdout is the report, as without the flag
    events = [json.loads(line) for line in run.stderr.splitlines()]
    assert [(e["event"], e.get("step_id"), e.get("state")) for e in events] == [
        ("reversal.started", None, None),
        ("compensation.dispatched", "s2", "dispatched"),
        ("compensation.compensated", "s2", "compensated"),
        ("compensation.dispatched", "s1", "dispatched"),
        ("compensation.reverted", "s1", "reverted"),
        ("reversal.finished", None, None),
    ]
    assert {e["reversal_id"] for e in events} == {report["reversal_id"]}
    assert {e["saga_id"] for e in events} == {saga_id}
    assert events[-1]["outcome"] == report["status"] == "partially_reversed"
    assert events[-1]["tool_calls"] == report["tool_calls"]
    assert [e["tool"] for e in events[1:-1]] == [
        "payments.charge", "payments.charge", "crm.update_field", "crm.update_field"
    ]  # fmt: skip
    assert all(line.isascii() and line.isprintable() for line in run.stderr.splitlines())


def test_undo_without_the_flag_writes_no_log_lines(tmp_path: Path) -> None:
    db = str(tmp_path / "a.db")
    saga_id = forward_saga(db)
    run = amends_cli("undo", saga_id, "--db", db, "--json", *CATALOG)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    bad = amends_cli("undo", saga_id, "--db", db, "--log-format", "xml")
    assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr


def _kv_helpers() -> Any:
    """tests/mcp's kv upstream and gateway config writer (loaded by path: ``conftest`` is a
    name every test directory has)."""
    path = Path(__file__).parents[1] / "mcp" / "conftest.py"
    spec = importlib.util.spec_from_file_location("amends_tests_mcp_kv", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module


async def test_mcp_serve_log_format_json_logs_the_gateways_reversal(tmp_path: Path) -> None:
    """The gateway (a real process, streamable HTTP) undoes on the agent's ``amends_undo``: its
    stderr holds the reversal's JSON lines, and only JSON lines."""
    from mcp import Client

    kv = _kv_helpers().write_kv_config(tmp_path)
    port = free_port()
    err = tmp_path / "gateway.err"
    proc = _gateway(kv.config, kv.dir, port, err)
    try:
        await _listening(port, proc)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            await client.call_tool("kv_kv_set", {"key": "greeting", "value": "hello"})
            await client.call_tool("kv_charge", {"customer": "c1", "cents": 5000})
            undo = await client.call_tool("amends_undo", {})
        report = undo.structured_content
        assert report is not None and report["status"] == "partially_reversed"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(20)
    lines = [json.loads(line) for line in err.read_text().splitlines()]  # JSON, every one
    events = [e for e in lines if e["logger"] == "amends.events"]
    assert events[0]["event"] == "reversal.started"
    assert events[-1]["event"] == "reversal.finished"
    assert events[-1]["outcome"] == "partially_reversed"
    assert events[-1]["reversal_id"] == report["reversal_id"]
    upstream = [e for e in lines if e["logger"] == "amends.upstream"]
    assert upstream and {e["upstream"] for e in upstream} == {"kv"}  # its stderr, as JSON
    assert sorted(e["state"] for e in events[1:-1]) == [
        "compensated", "dispatched", "dispatched", "reverted"
    ]  # fmt: skip


def _gateway(config: Path, cwd: Path, port: int, err: Path) -> subprocess.Popen[bytes]:
    with err.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable, "-m", "amends.integrations.mcp", "serve", "--config",
                str(config), "--http", f"127.0.0.1:{port}", "--log-format", "json",
            ],
            cwd=str(cwd), stdout=subprocess.DEVNULL, stderr=out, start_new_session=True,
        )  # fmt: skip


async def _listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the gateway exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError("the gateway did not listen within 30 s")
