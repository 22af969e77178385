"""Rule 11 through the gateway: a sensitive argument is logged ``[redacted:NAME]``; an inverse that
needs it back gets it at undo time from the contract's resolver (``secret_env``), with a real
upstream process that refuses the inverse unless it receives the real value."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import KV_CONTRACTS, KvSetup, text_of, write_kv_config

pytestmark = pytest.mark.slow

SECRET = "sk_live_51Hx9TopSecretKey"
SUBSCRIBE = """
[[tool]]
name = "get_subscription"
reversibility = "read_only"

[[tool]]
name = "subscribe"
reversibility = "reversible"
sensitive = ["api_key"]
secret_env = { api_key = "KV_TEST_API_KEY" }

[tool.inverse]
tool = "unsubscribe"
args = { account = "{args.account}", api_key = "{args.api_key}" }

[tool.expect]
probe = "get_subscription"
args = { account = "{args.account}" }
path = "active"
equals = true
"""


@pytest.fixture
def kv_secret(tmp_path: Path) -> KvSetup:
    """The kv contracts plus ``subscribe``, whose inverse needs the sensitive ``api_key``."""
    contracts = tmp_path / "contracts.toml"
    contracts.write_text(KV_CONTRACTS.read_text() + SUBSCRIBE)
    setup = write_kv_config(tmp_path)
    setup.config.write_text(setup.config.read_text().replace(str(KV_CONTRACTS), str(contracts)))
    return setup


def _gateway(setup: KvSetup, env: dict[str, str]) -> Any:
    from mcp import StdioServerParameters

    base = {k: v for k, v in os.environ.items() if k != "KV_TEST_API_KEY"}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "amends.integrations.mcp", "serve", "--config", str(setup.config)],
        cwd=str(setup.dir),
        env={**base, **env},
    )


def _dump(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


async def test_inverse_gets_the_redacted_api_key_back_from_secret_env(kv_secret: KvSetup) -> None:
    """rule 11: the log holds [redacted:api_key], never the key; at undo the resolver reads
    $KV_TEST_API_KEY and the upstream's unsubscribe, which checks the key, accepts it."""
    from mcp import Client

    async with Client(_gateway(kv_secret, {"KV_TEST_API_KEY": SECRET})) as c:
        r = await c.call_tool("kv_subscribe", {"account": "acme", "api_key": SECRET})
        assert not r.is_error, text_of(r)
        status = await c.call_tool("amends_status", {})
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content["status"] == "fully_reversed", undo.structured_content
    assert [s["state"] for s in undo.structured_content["steps"]] == ["reverted"]
    world = kv_secret.world()
    assert world["subscriptions"]["acme"]["active"] is False
    assert world["journal"] == [["subscribe", "acme"], ["unsubscribe", "acme"]]
    dumped = _dump(kv_secret.db)
    assert SECRET not in dumped
    assert "[redacted:api_key]" in dumped  # the inverse is stored with the marker
    for shown in (text_of(status), str(status.structured_content), str(undo.structured_content)):
        assert SECRET not in shown


async def test_without_the_secret_the_inverse_fails_honestly_and_names_the_variable(
    kv_secret: KvSetup,
) -> None:
    """rule 8/11: $KV_TEST_API_KEY unset in the process that runs undo: unsubscribe is never
    sent with the marker, the step is failed (not reverted), the detail names the variable."""
    from mcp import Client

    async with Client(_gateway(kv_secret, {})) as c:
        r = await c.call_tool("kv_subscribe", {"account": "acme", "api_key": SECRET})
        assert not r.is_error, text_of(r)
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert report["status"] == "cannot_undo", report
    (step,) = report["steps"]
    assert step["state"] == "failed"
    assert "KV_TEST_API_KEY" in step["detail"] and SECRET not in str(report)
    world = kv_secret.world()
    assert world["subscriptions"]["acme"]["active"] is True
    assert world["journal"] == [["subscribe", "acme"]]  # nothing reached the upstream
    assert SECRET not in _dump(kv_secret.db)
