"""Issue 24 item 5: the forward contract's ``secret_env`` reaches the inverse it records.

``hooks_create`` says its ``api_key`` comes back from ``$ACME_API_KEY``; its inverse tool
``hooks_delete`` declares ``api_key`` sensitive too, without ``secret_env`` (so its own default
would be ``$API_KEY``, which here holds another key). Undo must send the ACME key: the vendor
deletes a webhook only with the key that created it. Through a real gateway (MCP) and a loopback
vendor (HTTP), with one precedence: the forward tool's declaration, then the called tool's, then
the default."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import amends
from amends import StepState
from contract_setup import Plain, Vendor, http_vendor, plain_gateway, reply, text_of

SECRET = "acme_live_5Wq8RtY2"
OTHER = "default_key_that_is_wrong"

MCP_CONTRACTS = """
[errors]
refused = "^Refused:"

[[tool]]
name = "hooks_get"
reversibility = "read_only"

[[tool]]
name = "hooks_create"
reversibility = "reversible"
sensitive = ["api_key"]
secret_env = { api_key = "ACME_API_KEY" }
inverse = { tool = "hooks_delete", args = { url = "{args.url}", api_key = "{args.api_key}" } }
expect = { probe = "hooks_get", args = { url = "{args.url}" }, path = "active", equals = true }

[[tool]]
name = "hooks_delete"
reversibility = "irreversible"
sensitive = ["api_key"]
"""


@pytest.fixture
def hooks(tmp_path: Path) -> Plain:
    return plain_gateway(tmp_path, MCP_CONTRACTS)


async def _create_then_undo(setup: Plain, env: dict[str, str]) -> dict[str, object]:
    from mcp import Client

    async with Client(setup.gateway(env)) as c:
        r = await c.call_tool("hooks_create", {"url": "https://acme.test/h", "api_key": SECRET})
        assert not r.is_error, text_of(r)
        undo = await c.call_tool("amends_undo", {})
    report: dict[str, object] = undo.structured_content
    return report


@pytest.mark.slow
async def test_mcp_inverse_reads_the_variable_the_forward_contract_names(hooks: Plain) -> None:
    report = await _create_then_undo(hooks, {"ACME_API_KEY": SECRET, "API_KEY": OTHER})
    assert report["status"] == "fully_reversed", report
    world = hooks.world()
    assert world["hooks"]["https://acme.test/h"]["active"] is False
    assert world["journal"] == [
        ["hooks_create", "https://acme.test/h"],
        ["hooks_delete", "https://acme.test/h"],
    ]
    assert SECRET not in hooks.dump() and SECRET not in json.dumps(report)


@pytest.mark.slow
async def test_mcp_missing_variable_is_named_as_the_user_configured_it(hooks: Plain) -> None:
    """$ACME_API_KEY unset where undo runs: nothing is sent with a wrong key (not even the
    $API_KEY that is set), the step is failed, and the detail names ACME_API_KEY."""
    report = await _create_then_undo(hooks, {"API_KEY": OTHER})
    assert report["status"] == "cannot_undo", report
    (step,) = report["steps"]  # type: ignore[misc]
    assert step["state"] == "failed"
    assert (
        "read from $ACME_API_KEY, which is not set (secret_env of tool 'hooks_create'"
        in step["detail"]
    ), step["detail"]
    assert hooks.world()["journal"] == [["hooks_create", "https://acme.test/h"]]


def _hooks_vendor(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    """A webhook API that deletes a hook only with the key that created it."""
    with vendor.lock:
        created, last = vendor.bodies[0], vendor.bodies[-1]
    if req.command == "POST":
        return reply(req, 200, {"id": "wh_1", "active": True})
    if req.command == "GET":
        return reply(req, 200, {"id": "wh_1", "active": True})
    if last["api_key"] != created["api_key"]:
        return reply(req, 403, {"error": "wrong api key"})
    return reply(req, 200, {"id": "wh_1", "deleted": True})


async def test_http_inverse_reads_the_variable_the_forward_contract_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same precedence for HTTP tools: the DELETE carries the ACME key, not $API_KEY's."""
    monkeypatch.setenv("ACME_API_KEY", SECRET)
    monkeypatch.setenv("API_KEY", OTHER)
    with http_vendor(_hooks_vendor) as (base, vendor):
        path = tmp_path / "hooks.toml"
        path.write_text(f'''
[[tool]]
name = "hooks.get"
reversibility = "read_only"
http = {{ url = "{base}/hooks/{{args.id}}", method = "GET" }}

[[tool]]
name = "hooks.create"
reversibility = "reversible"
sensitive = ["api_key"]
secret_env = {{ api_key = "ACME_API_KEY" }}
http = {{ url = "{base}/hooks" }}

[tool.inverse]
tool = "hooks.delete"
args = {{ id = "{{result.id}}", api_key = "{{args.api_key}}" }}

[tool.expect]
probe = "hooks.get"
args = {{ id = "{{result.id}}" }}
path = "active"
equals = true

[[tool]]
name = "hooks.delete"
reversibility = "irreversible"
sensitive = ["api_key"]
http = {{ url = "{base}/hooks/{{args.id}}", method = "DELETE" }}
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("hook") as saga:
            await saga.call("hooks.create", url="https://acme.test/h", api_key=SECRET)
        report = await engine.undo(saga.id)
        await engine.close()
    assert report.step("s1").state is StepState.REVERTED, report.step("s1").detail
    sent = [(m, b) for (m, _p, _h), b in zip(vendor.requests, vendor.bodies, strict=True)]
    assert [m for m, _b in sent] == ["POST", "GET", "DELETE"]
    assert sent[-1][1] == {"id": "wh_1", "api_key": SECRET}
