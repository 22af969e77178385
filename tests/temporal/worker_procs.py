"""Worker processes for the Temporal tests that need real ones (faults, racing selections)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devserver import DevServer

HERE = Path(__file__).parent


class Workers:
    """Worker processes started with ``amends worker``'s code; every one is reaped at the end."""

    def __init__(self, server: DevServer, db: str, ledger_path: Path, queue: str) -> None:
        self.server, self.db, self.ledger_path, self.queue = server, db, ledger_path, queue
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable, str(HERE / "worker_proc.py"), "--temporal", self.server.target,
                "--db", self.db, "--catalog", "ledger:catalog", "--task-queue", self.queue,
                "--heartbeat", "0.3",
            ],
            env={**os.environ, "AMENDS_TEST_LEDGER": str(self.ledger_path), **env},
            stderr=subprocess.PIPE,
        )  # fmt: skip
        self.procs.append(proc)
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()  # "amends worker: serving ..." once polling
        assert "serving task queue" in line, line + proc.stderr.read().decode()
        return proc

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            if p.stderr is not None:
                p.stderr.close()
