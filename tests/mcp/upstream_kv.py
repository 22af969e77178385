"""A small upstream MCP server for the gateway's tests, built with the official SDK (stdio).

Its world is a JSON file named by $KV_STATE, so a test can read the final state and make a
"human edit" between the agent's call and the undo. Every write appends to a journal in that
file, so a test can count effects (two refunds would show as two entries).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.types import ToolAnnotations

try:  # mcp 2.x
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x: the same server as a 1.x peer (interop test)
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

STATE = Path(os.environ["KV_STATE"])
app = MCPServer("kv-upstream")
# The SDK runs plain (sync) tools in worker threads: parallel compensations read, modify and write
# the world's file at once (a lost update, or a missing kv.tmp under load). One call at a time
# touches the file; a tool's deliberate delay is spent outside the lock, so calls still overlap.
_LOCK = threading.RLock()


def serial(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the world's file read and written by one call at a time."""

    @functools.wraps(fn)
    def one_at_a_time(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return fn(*args, **kwargs)

    return one_at_a_time


def _load() -> dict[str, Any]:
    if STATE.exists():
        data: dict[str, Any] = json.loads(STATE.read_text())
        return data
    return {"kv": {}, "charges": {}, "journal": [], "emails": []}


def _save(data: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(STATE)


@app.tool()
@serial
def kv_get(key: str) -> dict[str, Any]:
    """Read one key."""
    data = _load()
    if key not in data["kv"]:
        raise ToolError(f"not found: {key}")
    return {"key": key, "value": data["kv"][key]}


@app.tool()
@serial
def kv_set(key: str, value: str) -> dict[str, Any]:
    """Write one key."""
    data = _load()
    old = data["kv"].get(key)
    data["kv"][key] = value
    data["journal"].append(["kv_set", key, value])
    _save(data)
    return {"key": key, "value": value, "old": old}


@app.tool()
@serial
def kv_delete(key: str) -> dict[str, Any]:
    """Delete one key."""
    data = _load()
    if key not in data["kv"]:
        raise ToolError(f"not found: {key}")
    del data["kv"][key]
    data["journal"].append(["kv_delete", key])
    _save(data)
    return {"key": key, "deleted": True}


@app.tool()
@serial
def charge(customer: str, cents: int) -> dict[str, Any]:
    """Charge a customer."""
    data = _load()
    cid = f"ch_{len(data['charges']) + 1}"
    data["charges"][cid] = {"id": cid, "customer": customer, "cents": cents, "refunded": 0}
    data["journal"].append(["charge", cid, cents])
    _save(data)
    return data["charges"][cid]  # type: ignore[no-any-return]


@app.tool()
def refund(charge_id: str) -> dict[str, Any]:
    """Refund a charge in full (slowly, so concurrent undos overlap)."""
    time.sleep(0.3)
    with _LOCK:
        data = _load()
        ch = data["charges"][charge_id]
        ch["refunded"] += ch["cents"]
        data["journal"].append(["refund", charge_id, ch["cents"]])
        _save(data)
        return ch  # type: ignore[no-any-return]


@app.tool()
@serial
def get_charge(charge_id: str) -> dict[str, Any]:
    """Read a charge."""
    return _load()["charges"][charge_id]  # type: ignore[no-any-return]


@app.tool()
@serial
def send_email(to: str, subject: str) -> dict[str, Any]:
    """Send an email (there is no unsend)."""
    data = _load()
    data["emails"].append({"to": to, "subject": subject})
    data["journal"].append(["send_email", to])
    _save(data)
    return {"to": to, "status": "delivered"}


@app.tool()
@serial
def subscribe(account: str, api_key: str) -> dict[str, Any]:
    """Start a paid subscription; only the same API key can end it."""
    data = _load()
    data.setdefault("subscriptions", {})[account] = {"active": True, "api_key": api_key}
    data["journal"].append(["subscribe", account])
    _save(data)
    return {"account": account, "active": True}


@app.tool()
@serial
def unsubscribe(account: str, api_key: str) -> dict[str, Any]:
    """End a subscription; refused unless ``api_key`` is the one it was started with."""
    data = _load()
    sub = data.get("subscriptions", {}).get(account)
    if sub is None or sub["api_key"] != api_key:
        data["journal"].append(["unsubscribe refused", account, api_key])
        _save(data)
        raise ToolError(f"Refused: wrong api key for {account}")
    sub["active"] = False
    data["journal"].append(["unsubscribe", account])
    _save(data)
    return {"account": account, "active": False}


@app.tool()
@serial
def get_subscription(account: str) -> dict[str, Any]:
    """Read a subscription (never its key)."""
    sub = _load().get("subscriptions", {}).get(account)
    if sub is None:
        raise ToolError(f"not found: {account}")
    return {"account": account, "active": sub["active"]}


@app.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
@serial
def peek(key: str) -> dict[str, Any]:
    """Read one key (the server hints read-only; no contract says so)."""
    return {"key": key, "value": _load()["kv"].get(key)}


@app.tool()
@serial
def refuse_write(key: str) -> dict[str, Any]:
    """Always refused by the server, before doing anything."""
    raise ToolError(f"Refused: {key} is locked")


@app.tool()
@serial
def flaky_write(key: str, value: str) -> dict[str, Any]:
    """Writes, then reports an error: the caller cannot know whether the write happened."""
    data = _load()
    data["kv"][key] = value
    data["journal"].append(["flaky_write", key, value])
    _save(data)
    raise ToolError("connection reset while committing")


@app.tool()
def slow_set(key: str, value: str, seconds: float) -> dict[str, Any]:
    """Write after a delay (the gateway is killed meanwhile in the crash test)."""
    time.sleep(seconds)
    return kv_set(key, value)


@app.tool()
@serial
def with_meta(key: str) -> Any:
    """Answers with the server's own _meta on the result and on its content (not for agents)."""
    import mcp.types as t

    return t.CallToolResult(
        content=[t.TextContent(type="text", text=f"read {key}", _meta={"internal": "block"})],
        _meta={"internal": "result"},
    )


@app.tool()
def retire(tool: str) -> dict[str, Any]:
    """Remove one of this server's tools (a deploy that drops it): later calls of it are
    rejected by the SDK before anything runs."""
    app.remove_tool(tool)
    return {"retired": tool}


if __name__ == "__main__":
    app.run()
