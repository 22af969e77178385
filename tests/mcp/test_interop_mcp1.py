"""mcp 1.x peers on either side of the gateway: a 1.x client, and a 1.x upstream server
(installed by scripts/mcp-deps.sh into .amends-mcp/mcp1, from PyPI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HERE, ROOT, KvSetup, write_kv_config

pytestmark = pytest.mark.slow

MCP1_PYTHON = ROOT / ".amends-mcp" / "mcp1" / "bin" / "python"


@pytest.fixture(scope="module")
def mcp1_python() -> Path:
    """The mcp 1.x interpreter; installed by the project's own script when missing."""
    if not MCP1_PYTHON.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "mcp-deps.sh")], check=True, timeout=600)
    out = subprocess.run(
        [str(MCP1_PYTHON), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("1."), out.stdout
    return MCP1_PYTHON


def test_mcp1_client_through_the_gateway(kv: KvSetup, mcp1_python: Path) -> None:
    """An mcp 1.x client (2025 handshake) sees the tools, gets a step, and undoes it."""
    out = subprocess.run(
        [str(mcp1_python), str(HERE / "mcp1_client.py"), sys.executable, str(kv.config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(kv.dir),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["protocol"].startswith("2025-")
    assert "kv_kv_set" in got["tools"] and "amends_undo" in got["tools"]
    assert got["set"]["value"] == "v1" and got["step"]["reversibility"] == "reversible"
    assert got["undo"]["status"] == "fully_reversed"
    assert kv.world()["kv"] == {}


async def test_gateway_forwards_to_an_mcp1_upstream(tmp_path: Path, mcp1_python: Path) -> None:
    """The gateway (mcp 2.x client side) drives an upstream server running mcp 1.x."""
    from mcp import Client

    setup = write_kv_config(tmp_path)
    text = setup.config.read_text().replace(
        json.dumps(sys.executable), json.dumps(str(mcp1_python))
    )
    setup.config.write_text(text)
    setup.human_sets("plan", "basic")
    async with Client(setup.gateway()) as c:
        r = await c.call_tool("kv_kv_set", {"key": "plan", "value": "pro"})
        assert r.meta["amends/step"]["state"] == "done"
        assert setup.world()["kv"]["plan"] == "pro"
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content["status"] == "fully_reversed"
    assert setup.world()["kv"]["plan"] == "basic"
