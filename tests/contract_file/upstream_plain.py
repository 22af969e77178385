"""An ordinary MCP server written from the mcp 2.x SDK's docs (``MCPServer``, plain functions),
for the contract-language tests: some tools return a bare ``dict`` (so the answer is JSON *text*,
no ``structuredContent``), one raises ``ValueError`` (the SDK hides its message), one takes an
optional argument, and a webhook can be deleted only with the API key that created it.

Its world is the JSON file named by ``$PLAIN_STATE``; every write is journaled there, so a test
reads the final state and counts effects.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

STATE = Path(os.environ["PLAIN_STATE"])
app = MCPServer("plain")
_LOCK = threading.Lock()  # the SDK runs plain tools in threads: one read-modify-write at a time


def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``app.tool()``, with the world's file read and written by one call at a time."""

    @functools.wraps(fn)
    def serial(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return fn(*args, **kwargs)

    return app.tool()(serial)


def _load() -> dict[str, Any]:
    if STATE.exists():
        data: dict[str, Any] = json.loads(STATE.read_text())
        return data
    return {"notes": {}, "hooks": {}, "mail": {}, "deals": {}, "charges": {}, "journal": []}


def _save(data: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(STATE)


@tool
def note_get(key: str) -> dict:  # type: ignore[type-arg]  # a bare dict: answered as text only
    """Read a note."""
    notes = _load()["notes"]
    if key not in notes:
        raise ToolError(f"no note named {key}")
    return {"key": key, "text": notes[key]}


@tool
def note_set(key: str, text: str) -> dict:  # type: ignore[type-arg]
    """Write a note."""
    data = _load()
    data["notes"][key] = text
    data["journal"].append(["note_set", key, text])
    _save(data)
    return {"key": key, "text": text}


@tool
def note_delete(key: str) -> dict:  # type: ignore[type-arg]
    """Delete a note."""
    data = _load()
    if key not in data["notes"]:
        raise ValueError(f"no note named {key}")  # the SDK answers "Error executing tool ..."
    del data["notes"][key]
    data["journal"].append(["note_delete", key])
    _save(data)
    return {"key": key, "deleted": True}


@tool
def hooks_create(url: str, api_key: str) -> dict[str, Any]:
    """Register a webhook; only the same API key can delete it."""
    data = _load()
    data["hooks"][url] = {"active": True, "api_key": api_key}
    data["journal"].append(["hooks_create", url])
    _save(data)
    return {"url": url, "active": True}


@tool
def hooks_delete(url: str, api_key: str) -> dict[str, Any]:
    """Delete a webhook; refused unless ``api_key`` is the one it was created with."""
    data = _load()
    hook = data["hooks"].get(url)
    if hook is None or hook["api_key"] != api_key:
        data["journal"].append(["hooks_delete refused", url])
        _save(data)
        raise ToolError(f"Refused: wrong api key for {url}")
    hook["active"] = False
    data["journal"].append(["hooks_delete", url])
    _save(data)
    return {"url": url, "active": False}


@tool
def hooks_get(url: str) -> dict[str, Any]:
    """Read a webhook (never its key)."""
    hook = _load()["hooks"].get(url)
    if hook is None:
        raise ToolError(f"no webhook {url}")
    return {"url": url, "active": hook["active"]}


@tool
def mail_archive(message_id: str, folder: str = "inbox") -> dict[str, Any]:
    """Move a message from ``folder`` (default: the inbox) to the archive."""
    data = _load()
    data["mail"][message_id] = {"folder": "archive", "was": folder}
    data["journal"].append(["mail_archive", message_id, folder])
    _save(data)
    return {"message_id": message_id, "folder": "archive"}


@tool
def mail_move(message_id: str, folder: str) -> dict[str, Any]:
    """Move a message to ``folder``."""
    data = _load()
    data["mail"][message_id] = {"folder": folder}
    data["journal"].append(["mail_move", message_id, folder])
    _save(data)
    return {"message_id": message_id, "folder": folder}


@tool
def mail_get(message_id: str) -> dict[str, Any]:
    """Read where a message is."""
    msg = _load()["mail"].get(message_id)
    if msg is None:
        raise ToolError(f"no message {message_id}")
    return {"message_id": message_id, "folder": msg["folder"]}


@tool
def deal_close(deal_id: str) -> dict[str, Any]:
    """Mark a deal won."""
    data = _load()
    data["deals"][deal_id] = "won"
    data["journal"].append(["deal_close", deal_id])
    _save(data)
    return {"deal_id": deal_id, "stage": "won"}


@tool
def deal_reopen(deal_id: str) -> dict[str, Any]:
    """Reopen a deal."""
    data = _load()
    data["deals"][deal_id] = "open"
    data["journal"].append(["deal_reopen", deal_id])
    _save(data)
    return {"deal_id": deal_id, "stage": "open"}


@tool
def deal_get(deal_id: str) -> dict[str, Any]:
    """Read a deal's stage."""
    return {"deal_id": deal_id, "stage": _load()["deals"].get(deal_id, "open")}


@tool
def charge(customer: str, cents: int) -> dict[str, Any]:
    """Charge a customer."""
    data = _load()
    cid = f"ch_{len(data['charges']) + 1}"
    data["charges"][cid] = {"id": cid, "customer": customer, "cents": cents, "refunded": 0}
    data["journal"].append(["charge", cid, cents])
    _save(data)
    return data["charges"][cid]  # type: ignore[no-any-return]


@tool
def refund(charge_id: str) -> dict[str, Any]:
    """Refund a charge in full; refused while its deal is still closed (see the contract's
    undo_after)."""
    data = _load()
    if "won" in data["deals"].values():
        raise ToolError("Refused: reopen the deal before refunding")
    ch = data["charges"][charge_id]
    ch["refunded"] += ch["cents"]
    data["journal"].append(["refund", charge_id])
    _save(data)
    return ch  # type: ignore[no-any-return]


@tool
def get_charge(charge_id: str) -> dict[str, Any]:
    """Read a charge."""
    return _load()["charges"][charge_id]  # type: ignore[no-any-return]


@tool
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Send an email (there is no unsend)."""
    data = _load()
    data["journal"].append(["send_email", to, subject])
    _save(data)
    return {"to": to, "status": "delivered"}


if __name__ == "__main__":
    app.run()
