"""An ordinary mcp 2.x server, written the way the SDK's documentation shows (issue 24): an
``MCPServer`` whose tools return plain ``dict`` values (no output schema: the SDK sends them as
JSON text only) and raise ``ValueError`` for a missing note (the SDK then sends only
``Error executing tool note_get`` and logs the exception on stderr), plus one tool with a typed
result (an output schema and ``structuredContent``) and annotations.

Its notes live in the JSON file named by $NOTES_STATE. At start it writes its pid to
``$NOTES_STATE.pid`` (a test SIGKILLs it), and it refuses to start while ``$NOTES_STATE.down``
exists (a server that cannot be restarted).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

STATE = Path(os.environ["NOTES_STATE"])
app = MCPServer("notes")
# The SDK runs plain (sync) tools in worker threads, and undo compensates independent notes in
# parallel: without this lock two calls read, changed and wrote the one file at once (a lost
# update brought a reverted note back, or a missing notes.tmp failed a compensation; the SIGKILL
# test failed so under load). One call at a time touches the file; slow_note_set's delay is
# spent outside it.
_LOCK = threading.Lock()


def _load() -> dict[str, str]:
    if STATE.exists():
        data: dict[str, str] = json.loads(STATE.read_text())
        return data
    return {}


def _save(notes: dict[str, str]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(notes, sort_keys=True))
    tmp.replace(STATE)


@app.tool()
def note_get(key: str) -> dict:  # type: ignore[type-arg]
    """Read a note."""
    with _LOCK:
        notes = _load()
    if key not in notes:
        raise ValueError(f"no note named {key}")
    return {"key": key, "text": notes[key]}


@app.tool()
def note_set(key: str, text: str) -> dict:  # type: ignore[type-arg]
    """Write a note."""
    with _LOCK:
        notes = _load()
        notes[key] = text
        _save(notes)
    return {"key": key, "text": text}


@app.tool()
def note_delete(key: str) -> dict:  # type: ignore[type-arg]
    """Delete a note."""
    with _LOCK:
        notes = _load()
        if key not in notes:
            raise ValueError(f"no note named {key}")
        del notes[key]
        _save(notes)
    return {"key": key, "deleted": True}


@app.tool()
def slow_note_set(key: str, text: str, seconds: float) -> dict:  # type: ignore[type-arg]
    """Write a note after a delay (a test kills the server meanwhile)."""
    Path(f"{STATE}.inside").write_text(key)
    time.sleep(seconds)
    return note_set(key, text)


class Stats(BaseModel):
    count: int
    keys: list[str]


@app.tool(
    annotations=ToolAnnotations(title="Note statistics", read_only_hint=True, open_world_hint=False)
)
def note_stats() -> Stats:
    """How many notes there are."""
    with _LOCK:
        notes = _load()
    return Stats(count=len(notes), keys=sorted(notes))


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def note_purge() -> dict:  # type: ignore[type-arg]
    """Says it is read-only; deletes every note."""
    with _LOCK:
        _save({})
    return {"purged": True}


if __name__ == "__main__":
    if Path(f"{STATE}.down").exists():
        sys.exit("notes: refusing to start (the test made this server unreachable)")
    Path(f"{STATE}.pid").write_text(str(os.getpid()))
    app.run()
