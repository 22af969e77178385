"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, server mode,
streamable HTTP), run directly against the reference ``server-everything`` and against ``amends
mcp serve`` proxying it: every check that passes directly passes through the gateway (issue 24,
item 9). Both are installed, pinned, by scripts/mcp-deps.sh."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port

pytestmark = pytest.mark.slow

NODE = ROOT / ".amends-mcp" / "node" / "node_modules"
SUITE = NODE / ".bin" / "conformance"
EVERYTHING = NODE / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
_ROW = re.compile(r"^[✓✗] ([\w-]+): (\d+) passed, (\d+) failed$", re.M)


def _listening(port: int, proc: subprocess.Popen[bytes], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} within {seconds} s")


def _start(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd,
        cwd=str(cwd),
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # stopped with its children (the gateway's upstream)
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _suite(url: str, cwd: Path) -> dict[str, bool]:
    """Each scenario of the suite's active server set: passed (no failed check) or not."""
    run = subprocess.run(
        [str(SUITE), "server", "--url", url],
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=600,
    )
    rows = {m.group(1): int(m.group(3)) == 0 for m in _ROW.finditer(run.stdout)}
    assert rows, run.stdout[-3000:] + run.stderr[-3000:]
    return rows


def _conformance(tmp_path: Path) -> tuple[dict[str, bool], dict[str, bool]]:
    port = free_port()
    direct = _start(["node", str(EVERYTHING), "streamableHttp"], tmp_path, {"PORT": str(port)})
    try:
        _listening(port, direct)
        straight = _suite(f"http://127.0.0.1:{port}/mcp", tmp_path)
    finally:
        _stop(direct)
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "everything"\ncommand = "node"\n'
        f'args = [{json.dumps(str(EVERYTHING))}, "stdio"]\nprefix = false\n'
    )
    port = free_port()
    gateway = _start(
        [sys.executable, "-m", "amends.integrations.mcp", "serve", "--config", str(config),
         "--http", f"127.0.0.1:{port}"],
        tmp_path,
    )  # fmt: skip
    try:
        _listening(port, gateway)
        through = _suite(f"http://127.0.0.1:{port}/mcp", tmp_path)
    finally:
        _stop(gateway)
    return straight, through


async def test_every_check_passing_directly_passes_through_the_gateway(tmp_path: Path) -> None:
    straight, through = await asyncio.to_thread(_conformance, tmp_path)
    passed_directly = {name for name, ok in straight.items() if ok}
    assert passed_directly, straight  # the suite ran and the reference server passed some
    lost = sorted(name for name in passed_directly if not through.get(name))
    assert lost == [], f"pass directly, fail through the gateway: {lost}"
    # the gateway's tools reached the upstream (not only the handshake)
    assert {"tools-list", "tools-call-simple-text", "tools-call-error"} <= passed_directly
