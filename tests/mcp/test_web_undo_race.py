"""The gateway's sagas are in the same log as everything else: the web page's Undo (``amends
serve``) racing ``amends_undo`` gives one reversal and one refund (issue 14, must deliver 7)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from test_demo_through_gateway import sandbox_config

from amends.sandbox import World
from conftest import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Starts ``amends serve`` on the gateway's log (once it exists); its default catalog acts
    on the same sandbox world as ``amends sandbox mcp``."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> str:
        base, proc = _serve(tmp_path)
        procs.append(proc)
        return base

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def _serve(tmp_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "amends.cli", "serve", "--db", str(tmp_path / "saga.db"),
         "--no-auth", "--host", "127.0.0.1", "--port", str(port),
         # issue 21 item 2: the operator allows the gateway's config (sandbox_config writes it)
         "--catalog", str(tmp_path / "gateway.toml")],
        cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            httpx.get(f"{base}/sagas", timeout=0.5)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return base, proc


async def test_web_undo_racing_amends_undo_gives_one_reversal(
    tmp_path: Path, web: Callable[[], str]
) -> None:
    from mcp import Client, StdioServerParameters

    world_path = tmp_path / "saga.db.world"
    config = sandbox_config(tmp_path, world_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "amends.integrations.mcp", "serve", "--config", str(config)],
        cwd=str(tmp_path),
    )
    async with Client(params) as c:
        r = await c.call_tool(
            "payments.charge", {"customer": "cus_acme", "cents": 5000, "description": "x"}
        )
        base = web()
        http = httpx.AsyncClient(base_url=base, timeout=30)
        saga_id = r.meta["amends/step"]["saga_id"]
        charge_id = r.structured_content["id"]
        await c.call_tool(
            "crm.update_field", {"record_id": "acme", "field": "stage", "value": "won"}
        )
        web_post, mcp_undo = await asyncio.gather(
            http.post(f"/sagas/{saga_id}/undo", json={}), c.call_tool("amends_undo", {})
        )
        assert web_post.status_code in (200, 202), web_post.text
        web_rev = web_post.json()["reversal_id"]
        for _ in range(300):
            got = (await http.get(f"/reversals/{web_rev}")).json()
            if got["state"] == "done":
                break
            await asyncio.sleep(0.05)
        await http.aclose()
    report = mcp_undo.structured_content
    assert report["reversal_id"] == web_rev
    assert got["report"]["status"] == report["status"] == "partially_reversed"
    world = World(str(world_path))
    try:
        snap = world.snapshot()
        assert world.crm.read_field("acme", "stage") != "won"
    finally:
        world.close()
    refunds = [re for re in snap["payments"]["refunds"].values() if re["charge_id"] == charge_id]
    assert len(refunds) == 1, json.dumps(refunds)
