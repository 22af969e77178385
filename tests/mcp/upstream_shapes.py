"""An ordinary mcp 2.x server whose tools stress what the gateway must pass through unchanged
(issue 24): arguments named like amends' own options (``call``, ``after``, ``step_id``,
``undo_after``, ``deadline``), a slow async write a client cancels, progress notifications,
a tool list that changes while the gateway runs, a ``delete`` refused while
``$SHAPES_STATE.locked`` exists, and a ``get`` that cannot reach its store while
``$SHAPES_STATE.down`` exists.

Its world lives in the JSON file named by $SHAPES_STATE; ``$SHAPES_STATE.inside`` appears when
``slow_put`` has started (a test cancels it then).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

STATE = Path(os.environ["SHAPES_STATE"])
app = MCPServer("shapes")
_LOCK = threading.Lock()


def _load() -> dict[str, Any]:
    if STATE.exists():
        data: dict[str, Any] = json.loads(STATE.read_text())
        return data
    return {}


def _save(data: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(STATE)


@app.tool()
def get(key: str) -> dict[str, Any]:
    """Read one key; unavailable while ``$SHAPES_STATE.down`` exists (the store unreachable)."""
    if Path(f"{STATE}.down").exists():
        raise ToolError("Service unavailable: the store did not answer")
    with _LOCK:
        data = _load()
    if key not in data:
        raise ValueError(f"no key {key}")
    return {"key": key, "value": data[key]}


@app.tool()
def put(key: str, value: Any) -> dict[str, Any]:
    """Write one key."""
    with _LOCK:
        data = _load()
        old = data.get(key)
        data[key] = value
        _save(data)
    return {"key": key, "value": value, "old": old}


@app.tool()
def delete(key: str) -> dict[str, Any]:
    """Delete one key; refused while ``$SHAPES_STATE.locked`` exists (a cause a person fixes)."""
    if Path(f"{STATE}.locked").exists():
        raise ToolError(f"Refused: {key} is locked")
    with _LOCK:
        data = _load()
        data.pop(key, None)
        _save(data)
    return {"deleted": key}


@app.tool()
def schedule(call: str, after: str, step_id: str, undo_after: str, tool: str) -> dict[str, Any]:
    """Book a call slot; every argument is named like one of amends' own options."""
    return put(f"slot:{call}", [after, step_id, undo_after, tool])


@app.tool()
def set_due(task: str, deadline: str) -> dict[str, Any]:
    """Move a task's deadline (an argument named like the undo window's key)."""
    return put(f"due:{task}", deadline)


@app.tool()
async def slow_put(key: str, value: str, seconds: float) -> dict[str, Any]:
    """Write one key after a delay (a client cancels it meanwhile)."""
    await anyio.Path(f"{STATE}.inside").write_text(key)
    await anyio.sleep(seconds)
    return put(key, value)


@app.tool()
async def progress_put(key: str, value: str, ctx: Context) -> dict[str, Any]:
    """Write one key, reporting progress three times first."""
    for i in (1, 2, 3):
        await ctx.report_progress(i, 3, f"part {i} of 3")
    return put(key, value)


@app.tool()
async def deploy(add: str, drop: str, ctx: Context) -> dict[str, Any]:
    """Add a tool named ``add`` (it writes key ``add``) and drop the tool named ``drop``, as a
    redeploy does, and say so (``notifications/tools/list_changed``)."""

    def added(value: str) -> dict[str, Any]:
        return put(add, value)

    app.add_tool(added, name=add, description=f"Write key {add}.")
    if drop:
        app.remove_tool(drop)
    await ctx.notify_tools_changed()
    return {"added": add, "dropped": drop}


if __name__ == "__main__":
    if os.environ.get("SHAPES_PORT"):  # streamable HTTP (a test restarts it behind its URL)
        app.run("streamable-http", host="127.0.0.1", port=int(os.environ["SHAPES_PORT"]))
    else:
        app.run()
