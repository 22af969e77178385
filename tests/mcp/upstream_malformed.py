"""A stdio MCP server written by hand (no SDK), whose answers are malformed on purpose
(issue 24: the gateway survives malformed responses). It speaks just enough JSON-RPC for a
client: ``initialize``, ``tools/list``, ``tools/call``; each call runs in a thread, so calls
overlap, and it exits at once when its stdin closes, as a server whose client went away.

Tools: ``bad_shape`` answers ``structuredContent`` its own ``outputSchema`` refuses;
``bad_content`` a content block of no known type; ``latin1`` a line that is not UTF-8;
``slow`` answers after 2 s; ``write`` answers well. Every call is appended to
``$MALFORMED_STATE``; the pid is in ``$MALFORMED_STATE.pid``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

STATE = os.environ["MALFORMED_STATE"]
_OUT = threading.Lock()
TOOLS = [
    {
        "name": "bad_shape",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    },
    {"name": "bad_content", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "slow", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "write", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "latin1", "inputSchema": {"type": "object", "properties": {}}},
]
ANSWERS = {
    "bad_shape": {"content": [{"type": "text", "text": "x"}], "structuredContent": {"count": "x"}},
    "bad_content": {"content": [{"type": "hologram", "data": 1}]},
    "slow": {"content": [{"type": "text", "text": "slow done"}]},
    "write": {"content": [{"type": "text", "text": "written"}]},
}


def send(message: dict[str, object]) -> None:
    with _OUT:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def call(mid: object, name: str) -> None:
    with _OUT, open(STATE, "a") as f:
        f.write(name + "\n")
    if name == "latin1":  # its text in Latin-1, not UTF-8: bytes no UTF-8 decoder accepts
        text = '{"content": [{"type": "text", "text": "caf\u00e9 \u00ff"}]}'
        line = f'{{"jsonrpc": "2.0", "id": {json.dumps(mid)}, "result": {text}}}\n'
        with _OUT:
            sys.stdout.flush()
            sys.stdout.buffer.write(line.encode("latin-1"))
            sys.stdout.buffer.flush()
        return
    if name == "slow":
        time.sleep(2)
    send({"jsonrpc": "2.0", "id": mid, "result": ANSWERS[name]})


def main() -> None:
    with open(f"{STATE}.pid", "w") as f:
        f.write(str(os.getpid()))
    for line in sys.stdin:
        message = json.loads(line)
        mid, method = message.get("id"), message.get("method")
        if mid is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "malformed", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            threading.Thread(target=call, args=(mid, message["params"]["name"])).start()
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
    os._exit(0)  # stdin closed: gone at once, calls in flight with it


if __name__ == "__main__":
    main()
