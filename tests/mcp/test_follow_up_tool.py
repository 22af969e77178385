"""Issue 27 part 3 through the MCP gateway (real client and server processes): after an undo the
agent sends follow-ups with ``amends_follow_up``; each is a follow-up of the reversal in its
budget, and at the cap the engine stops the agent and says what is left."""

from __future__ import annotations

from typing import Any

# imported here, at collection: inside a test, `conftest` may name another directory's
from conftest import KvSetup, text_of


async def _call(client: Any, name: str, **args: Any) -> Any:
    return await client.call_tool(name, args)


async def test_an_agent_follows_up_through_the_gateway_until_the_budget_stops_it(
    kv: KvSetup,
) -> None:
    from mcp import Client

    async with Client(kv.gateway()) as c:
        await _call(c, "amends_begin", title="Invite two people")
        await _call(c, "kv_send_email", to="ann@example.com", subject="Party")
        await _call(c, "kv_send_email", to="bob@example.com", subject="Party")
        undo = await _call(c, "amends_undo", tool_calls=1)
        assert [m["step_id"] for m in undo.structured_content["manual_actions"]] == ["s1", "s2"]
        sent = await _call(
            c,
            "amends_follow_up",
            step_id="s1",
            tool="kv.send_email",
            args={"to": "ann@example.com", "subject": "Sorry"},
        )
        again = await _call(
            c,
            "amends_follow_up",
            step_id="s1",
            tool="kv.send_email",
            args={"to": "ann@example.com", "subject": "Sorry again"},
        )
        capped = await _call(
            c,
            "amends_follow_up",
            step_id="s2",
            tool="kv.send_email",
            args={"to": "bob@example.com", "subject": "Sorry"},
            tokens=5,
        )
        bad = await _call(c, "amends_follow_up", step_id="s2", tool="kv.send_email", args=[1])
    assert sent.structured_content["state"] == "sent"
    assert sent.structured_content["follow_up"]["follow_up_id"] == "s1+f1"
    assert [m["step_id"] for m in sent.structured_content["open_manual_actions"]] == ["s2"]
    assert again.structured_content["state"] == "not_done"  # s1 is handled: nothing sent
    assert "handled by" in again.structured_content["detail"]
    assert capped.structured_content["state"] == "not_done"
    assert "tool-call budget of 1 spent" in capped.structured_content["detail"]
    assert "Stopped: make no more follow-up calls. Manual actions still open: s2" in text_of(capped)
    assert bad.is_error and "amends_follow_up needs step_id, tool, args" in text_of(bad)
    emails = kv.world()["emails"]
    assert [(e["to"], e["subject"]) for e in emails] == [
        ("ann@example.com", "Party"),
        ("bob@example.com", "Party"),
        ("ann@example.com", "Sorry"),  # one follow-up: the cap of 1 call
    ]
