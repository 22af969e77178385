"""The approval gate: before an irreversible call the user is asked through MCP elicitation; a
client that cannot be asked gets the call refused (issue 14, must deliver 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import KvSetup, text_of, write_kv_config

pytestmark = pytest.mark.slow


@pytest.fixture
def gated(tmp_path: Path) -> KvSetup:
    return write_kv_config(tmp_path, extra_gateway='approval = "irreversible"')


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_user_is_asked_with_class_and_parties_and_a_no_is_never_sent(
    gated: KvSetup, mode: str
) -> None:
    import mcp_types as types

    from mcp import Client

    asked: list[str] = []
    answers = iter([True, False])

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": next(answers)})

    async with Client(gated.gateway(), mode=mode, elicitation_callback=elicit) as c:
        yes = await c.call_tool("kv_send_email", {"to": "bob@example.com", "subject": "Hi"})
        no = await c.call_tool("kv_send_email", {"to": "eve@example.com", "subject": "Hi"})
        free = await c.call_tool("kv_kv_set", {"key": "a", "value": "1"})  # reversible: not asked
    assert not yes.is_error, text_of(yes)
    assert no.is_error and "did not approve" in text_of(no)
    assert not free.is_error
    assert len(asked) == 2
    assert "kv.send_email" in asked[0] and "irreversible" in asked[0]
    assert "Undo CANNOT take this back" in asked[0]
    assert gated.world()["emails"] == [{"to": "bob@example.com", "subject": "Hi"}]


async def test_a_client_that_cannot_be_asked_gets_a_clear_refusal(gated: KvSetup) -> None:
    from mcp import Client

    async with Client(gated.gateway()) as c:
        r = await c.call_tool("kv_send_email", {"to": "bob@example.com", "subject": "Hi"})
        ok = await c.call_tool("kv_kv_set", {"key": "a", "value": "1"})
    assert r.is_error and "cannot be asked" in text_of(r) and "when_no_elicitation" in text_of(r)
    assert not ok.is_error
    assert gated.world()["emails"] == []
