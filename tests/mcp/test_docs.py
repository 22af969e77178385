"""docs/mcp.md is tested: its gateway config and client config start a working gateway, and
every TOML example in it loads (issue 14: "the example config is tested")."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from amends.integrations.mcp import load_config, load_contracts
from conftest import ROOT, text_of

DOC = ROOT / "docs" / "mcp.md"


def block_after(marker: str) -> str:
    text = DOC.read_text()
    at = text.index(f"<!-- tested: {marker}")
    m = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(text, at)
    assert m is not None, marker
    return m.group(1)


def toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)


def test_every_toml_example_in_the_docs_loads(tmp_path: Path) -> None:
    """Contract examples load as contracts; gateway examples load as configs."""
    blocks = toml_blocks()
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        include = re.fullmatch(r'--8<--\s+"([^"]+)"\s*', block)  # a file the page includes
        path.write_text((ROOT / include.group(1)).read_text() if include else block)
        if "[[upstream]]" in block:
            cfg = load_config(path)
            assert cfg.upstreams
        else:
            assert load_contracts(path).tools


@pytest.mark.slow
async def test_the_documented_client_and_gateway_configs_run(tmp_path: Path) -> None:
    """The JSON client config starts the documented gateway; a call is a step; undo reverts it."""
    from mcp import Client, StdioServerParameters

    gateway_toml = tmp_path / "gateway.toml"
    gateway_toml.write_text(block_after("gateway-config"))
    client = json.loads(block_after("client-config"))["mcpServers"]["amends"]
    args = [str(gateway_toml) if a.endswith("gateway.toml") else a for a in client["args"]]
    bin_dir = str(Path(sys.executable).parent)  # where `amends` is installed
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    elsewhere = tmp_path / "elsewhere"  # clients start servers in unpredictable places
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=client["command"], args=args, env=env, cwd=str(elsewhere)
    )
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"crm.update_field", "amends_undo"} <= names
        r = await c.call_tool(
            "crm.update_field", {"record_id": "acme", "field": "stage", "value": "won"}
        )
        assert not r.is_error, text_of(r)
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content["status"] == "fully_reversed", text_of(undo)
    assert (tmp_path / "amends.db").exists() and (tmp_path / "demo.world").exists()
    assert list(elsewhere.iterdir()) == []
