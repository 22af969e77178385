"""Fault-test fixtures: ``log_url`` on each backend, and a runner for the worker process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

WORKER = Path(__file__).with_name("worker.py")

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[pytest.mark.postgres]),
]


@pytest.fixture(params=BACKENDS)
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'log.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def worker_cmd(log: str, vendor: Path, mode: str, saga: str, *extra: str) -> list[str]:
    return [sys.executable, str(WORKER), log, str(vendor), mode, saga, *extra]


def run_worker(
    log: str, vendor: Path, mode: str, saga: str, *extra: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        worker_cmd(log, vendor, mode, saga, *extra), capture_output=True, text=True, timeout=timeout
    )


def output(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, f"worker failed ({proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
