"""Real ``amends`` processes for the observability tests: a command run to its end, and
``amends serve`` kept running on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def amends_cli(
    *argv: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``amends ARGV`` in a new process (as a user runs it); stdout and stderr kept apart."""
    return subprocess.run(
        [sys.executable, "-m", "amends.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Serving:
    url: str
    proc: subprocess.Popen[bytes]
    stderr: Path

    def stop(self) -> str:
        """Stop it as Ctrl-C does; everything it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.stderr.read_text(errors="replace")


@contextlib.contextmanager
def serving(tmp_path: Path, *flags: str, port: int | None = None) -> Iterator[Serving]:
    """``amends serve FLAGS --port P`` until the block ends (fails the test if it never
    answers)."""
    port = port or free_port()
    err = tmp_path / f"serve-{port}-{time.monotonic_ns()}.err"
    with err.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "amends.cli", "serve", *flags, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    s = Serving(f"http://127.0.0.1:{port}", proc, err)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"amends serve exited {proc.returncode}: {s.stop()}")
            try:
                httpx.get(f"{s.url}/static/style.css", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail(f"amends serve did not answer within 30 s: {s.stop()}")
                time.sleep(0.1)
        yield s
    finally:
        s.stop()
