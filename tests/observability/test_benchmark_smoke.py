"""The telemetry benchmark (``python -m benchmarks --only telemetry``) runs, so it cannot rot:
one process per mode, each measuring a real fan-out and undo."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import telemetry  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["off", "api", "sdk"])
def test_each_telemetry_mode_measures_a_real_fan_out_and_undo(mode: str, tmp_path: Path) -> None:
    got = telemetry._child(mode, REPO / "src", tmp_path / "bench.db")
    assert set(got) == {"mem", "cpu", "full", "undo"}
    assert all(v > 0 for v in got.values())
