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
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT, free_port

pytestmark = pytest.mark.slow

NODE = ROOT / ".amends-mcp" / "node" / "node_modules"
SUITE = NODE / ".bin" / "conformance"
EVERYTHING = NODE / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
_ROW = re.compile(r"^[✓✗] ([\w-]+): (\d+) passed, (\d+) failed$", re.M)


def _listening(port: int, proc: subprocess.Popen[bytes], seconds: float = 60.0) -> bool:
    """Whether ``proc`` listens on ``port`` (``False``: it exited first); fails the test if it
    runs without listening for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} within {seconds} s")


def _serving(
    start: Callable[[int], subprocess.Popen[bytes]], tries: int = 3
) -> tuple[int, subprocess.Popen[bytes]]:
    """A server started by ``start(port)`` on a free port, listening. ``free_port`` closes its
    socket before the server binds, so another process on the machine can take the port in
    between: a server that exits before it listens is started again on another port (at most
    ``tries`` times); one that runs but never listens fails the test."""
    codes = []
    for _ in range(tries):
        port = free_port()
        proc = start(port)
        if _listening(port, proc):
            return port, proc
        codes.append(proc.returncode)
    raise AssertionError(f"the server exited before listening, {tries} times: {codes}")


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
    port, direct = _serving(
        lambda port: _start(
            ["node", str(EVERYTHING), "streamableHttp"], tmp_path, {"PORT": str(port)}
        )
    )
    try:
        straight = _suite(f"http://127.0.0.1:{port}/mcp", tmp_path)
    finally:
        _stop(direct)
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "everything"\ncommand = "node"\n'
        f'args = [{json.dumps(str(EVERYTHING))}, "stdio"]\nprefix = false\n'
    )
    serve = [sys.executable, "-m", "amends.integrations.mcp", "serve", "--config", str(config)]
    port, gateway = _serving(lambda port: _start([*serve, "--http", f"127.0.0.1:{port}"], tmp_path))
    try:
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
