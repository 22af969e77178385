"""benchmarks/mcp_gateway.py runs at a tiny size, so the gateway benchmark cannot rot."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_gateway_benchmark_measures_direct_and_gateway_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call kind is timed both ways, through real processes; a capture read costs one
    upstream round trip and no extra durable commit."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import common, mcp_gateway

    monkeypatch.setattr(common, "SCRATCH", tmp_path / "bench")
    monkeypatch.setattr(mcp_gateway, "scratch", common.scratch)
    monkeypatch.chdir(ROOT)  # the upstream is `python -m benchmarks.mcp_gateway`
    loop = asyncio.new_event_loop()
    try:
        got = loop.run_until_complete(mcp_gateway._measure(5))
    finally:
        loop.close()
    counts = {k: got.pop(k) for k in ("per call send", "per call set")}
    assert set(got) == {
        "direct get", "direct set", "direct send",
        "gateway get", "gateway set", "gateway send", "durable step",
        "in-process direct send", "in-process gateway send",
        "in-process direct set", "in-process gateway set",
    }  # fmt: skip
    assert all(len(v) == 5 and min(v) > 0 for v in got.values())
    # [durable commits, log writes, upstream round trips] per call: the step's intent and
    # result; a capture read is one more round trip, never a second durable step
    # (rounded: a batch re-run on a busy database may add a fraction of a commit)
    rounded = {k: [round(x) for x in v] for k, v in counts.items()}
    assert rounded == {"per call send": [2, 2, 1], "per call set": [2, 2, 2]}
