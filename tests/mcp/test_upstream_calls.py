"""One upstream ``tools/call`` without a real server: the kept connection is reused while it
lives and started again once it died, and the SDK's failures read through the one table
(``Upstream._failed``): a connection lost mid-call is unknown, a JSON-RPC rejection is
permanent, any other protocol error is unknown (lane gw: ``Upstream.call`` without a context
manager or a lock per call)."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from mcp_types import CONNECTION_CLOSED

from amends import PermanentError, TransientError
from amends.integrations.mcp.config import UpstreamConfig
from amends.integrations.mcp.upstream import Upstream, UpstreamError, UpstreamGone
from mcp import MCPError


class _Client:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, dict[str, Any], Any]] = []

    async def call_tool(self, tool: str, args: dict[str, Any], meta: Any = None) -> Any:
        self.calls.append((tool, args, meta))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class _Conn:
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.errlog = None
        self.dead = False
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def _kept(client: _Client) -> tuple[Upstream, _Conn]:
    up = Upstream(UpstreamConfig(name="u", command="true"))
    conn = _Conn(client)
    up._keep = True
    up._lock = asyncio.Lock()
    up._conn = conn  # type: ignore[assignment]
    return up, conn


def _ok(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def test_a_live_kept_connection_is_reused_and_the_arguments_are_a_json_copy() -> None:
    client = _Client(_ok("fine"))
    up, conn = _kept(client)
    args = {"k": [1, 2]}
    for _ in range(3):
        got = await up.call("t", args, {"m": 1})
        assert got.ok and got.text == "fine" and got.error_text is None
    assert up._conn is conn and up.restarts == 0
    assert [c[0] for c in client.calls] == ["t", "t", "t"]
    sent = client.calls[0][1]
    assert sent == args and sent is not args and sent["k"] is not args["k"]
    assert client.calls[0][2] == {"m": 1}


async def test_a_dead_kept_connection_is_started_again_before_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old_client, new_client = _Client(_ok("old")), _Client(_ok("new"))
    up, old = _kept(old_client)
    old.dead = True
    new = _Conn(new_client)

    async def open_(self: Any) -> Any:
        return new

    from amends.integrations.mcp import upstream as module

    monkeypatch.setattr(module._Connection, "open", open_)
    monkeypatch.setattr(module._Connection, "__init__", lambda self, up: None)
    got = await up.call("t", {})
    assert got.text == "new" and old.closed and up._conn is new and up.restarts == 1
    assert old_client.calls == []


@pytest.mark.parametrize(
    ("raised", "expected", "dead", "words"),
    [
        (
            MCPError(CONNECTION_CLOSED, "Connection closed"),
            UpstreamGone,
            True,
            "closed while t was running (the server stopped)",
        ),
        (BrokenPipeError("pipe"), UpstreamGone, True, "failed while t was running"),
        (MCPError(-32602, "bad params"), PermanentError, False, "u.t rejected the call: bad"),
        (MCPError(-32601, "no method"), PermanentError, False, "u.t rejected the call: no"),
        (MCPError(-32603, "boom"), UpstreamError, False, "protocol error -32603 (boom)"),
    ],
)
async def test_each_failure_of_the_sdk_reads_through_the_one_table(
    raised: Exception, expected: type[Exception], dead: bool, words: str
) -> None:
    up, conn = _kept(_Client(raised))
    with pytest.raises(expected) as caught:
        await up.call("t", {})
    assert words in str(caught.value)
    assert type(caught.value) is expected
    assert caught.value.__cause__ is raised
    assert conn.dead is dead


async def test_an_sdk_rejection_result_is_permanent_and_another_error_result_is_its_words() -> None:
    rejected = _ok("Unknown tool: t")
    rejected.is_error = True
    up, _ = _kept(_Client(rejected))
    with pytest.raises(PermanentError, match="u.t rejected the call: Unknown tool: t"):
        await up.call("t", {})
    said = _ok("the vendor said no")
    said.is_error = True
    up, _ = _kept(_Client(said))
    got = await up.call("t", {})
    assert not got.ok and got.error_text == "the vendor said no"


async def test_a_kept_connection_that_cannot_start_again_refuses_as_transient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    up, old = _kept(_Client(_ok("old")))
    old.dead = True
    from amends.integrations.mcp import upstream as module

    async def fail(self: Any) -> Any:
        raise OSError("no such command")

    monkeypatch.setattr(module._Connection, "open", fail)
    monkeypatch.setattr(module._Connection, "__init__", lambda self, up: None)
    with pytest.raises(TransientError, match="could not reach upstream 'u'"):
        await up.call("t", {})
    assert up._conn is None
