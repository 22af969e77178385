"""Two gateway configs on one saga log (issue 24, item 6): each saga names the config of the
gateway that ran it, so `amends undo` and `amends serve`, with both configs allowed (issue 21
item 2: `--catalog`, `$AMENDS_CATALOGS`; a log never names what is loaded), undo each with its own
upstream, after both gateways have stopped."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import (
    KV_CONTRACTS,
    KV_SERVER,
    NOTES_CONTRACTS,
    NOTES_SERVER,
    free_port,
    gateway_params,
)

pytestmark = pytest.mark.slow


def _config(directory: Path, name: str, upstream: str, server: Path, contracts: Path) -> Path:
    state_var = "KV_STATE" if server == KV_SERVER else "NOTES_STATE"
    path = directory / f"{name}.toml"
    path.write_text(
        f'[gateway]\nlog = "saga.db"\ntitle = "{name} session"\n\n'
        f'[[upstream]]\nname = "{upstream}"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = [{json.dumps(str(server))}]\n"
        f"env = {{ {state_var} = {json.dumps(str(directory / (upstream + '.json')))} }}\n"
        f"contracts = [{json.dumps(str(contracts))}]\n"
    )
    return path


def _params(config: Path) -> Any:
    return gateway_params(config, config.parent)


def _cli(
    directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amends.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=str(directory.parent),  # not the configs' directory: paths come from the log
        env=env,
    )


def _serve(db: str, cwd: Path, *configs: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    allowed = [arg for c in configs for arg in ("--catalog", str(c))]
    proc = subprocess.Popen(
        [sys.executable, "-m", "amends.cli", "serve", "--db", db, "--no-auth", "--host",
         "127.0.0.1", "--port", str(port), *allowed],
        cwd=str(cwd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    return proc, port


@pytest.mark.timeout(300)  # ten real processes (two gateways, their upstreams, two CLI undos, a
# server): at load 13 on 2 cores each start took 5-10 s and the test passed 120 s once
async def test_each_saga_is_undone_with_the_gateway_config_that_ran_it(tmp_path: Path) -> None:
    from mcp import Client

    crm = _config(tmp_path, "crm-gateway", "crm", KV_SERVER, KV_CONTRACTS)
    notes = _config(tmp_path, "notes-gateway", "notes", NOTES_SERVER, NOTES_CONTRACTS)
    async with Client(_params(crm)) as c:
        s1 = (await c.call_tool("crm_kv_set", {"key": "stage", "value": "won"})).meta
        await c.call_tool("amends_begin", {"title": "second"})
        s2 = (await c.call_tool("crm_kv_set", {"key": "owner", "value": "ann"})).meta
    async with Client(_params(notes)) as c:  # started last: it named itself next to the log
        s3 = (await c.call_tool("notes_note_set", {"key": "memo", "text": "hi"})).meta
    crm_saga, crm_saga2, notes_saga = (m["amends/step"]["saga_id"] for m in (s1, s2, s3))
    db = str(tmp_path / "saga.db")

    by_flag = await asyncio.to_thread(
        _cli, tmp_path, "undo", crm_saga, "--db", db, "--catalog", str(crm), "--json"
    )
    assert by_flag.returncode == 0, by_flag.stderr[-2000:]
    assert json.loads(by_flag.stdout)["status"] == "fully_reversed"
    both = {**os.environ, "AMENDS_CATALOGS": f"{crm},{notes}"}  # the saga's config selects
    recorded = await asyncio.to_thread(
        lambda: _cli(tmp_path, "undo", notes_saga, "--db", db, "--json", env=both)
    )
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    assert json.loads(recorded.stdout)["status"] == "fully_reversed"
    assert json.loads((tmp_path / "crm.json").read_text())["kv"] == {"owner": "ann"}
    assert json.loads((tmp_path / "notes.json").read_text()) == {}

    # the web server, allowed both gateways' configs, serves the sagas of each
    proc, port = _serve(db, tmp_path.parent, crm, notes)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            for _ in range(300):
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                try:
                    await http.get("/sagas")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            posted = await http.post(f"/sagas/{crm_saga2}/undo", json={})
            assert posted.status_code in (200, 202), posted.text
            rev = posted.json()["reversal_id"]
            deadline = time.monotonic() + 60
            while (got := (await http.get(f"/reversals/{rev}")).json())["state"] != "done":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert got["report"]["status"] == "fully_reversed"
    assert json.loads((tmp_path / "crm.json").read_text())["kv"] == {}
