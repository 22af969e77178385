"""Helpers of the contract-language tests (tests/contract_file): a gateway over
``upstream_plain.py`` with a contract file the test writes, run as a real subprocess behind a
real ``mcp.Client``; and loopback HTTP vendors that record every raw request."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PLAIN_SERVER = Path(__file__).parent / "contract_file" / "upstream_plain.py"


@dataclass
class Plain:
    """A gateway config over the plain upstream, its world file and saga log."""

    dir: Path
    config: Path
    state: Path
    db: Path

    def world(self) -> dict[str, Any]:
        if not self.state.exists():
            return {"notes": {}, "hooks": {}, "mail": {}, "deals": {}, "charges": {}, "journal": []}
        data: dict[str, Any] = json.loads(self.state.read_text())
        return data

    def seed(self, **parts: Any) -> None:
        data = self.world()
        data.update(parts)
        self.state.write_text(json.dumps(data))

    def gateway(self, env: dict[str, str] | None = None) -> Any:
        """Parameters that start ``amends mcp serve`` over stdio with exactly ``env`` added to
        this process's environment (variables a test names are removed first)."""
        from mcp import StdioServerParameters

        names = set(env or {}) | {"ACME_API_KEY", "API_KEY"}
        base = {k: v for k, v in os.environ.items() if k not in names}
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "amends.integrations.mcp", "serve", "--config", str(self.config)],
            cwd=str(self.dir),
            env={**base, **(env or {})},
        )

    def dump(self) -> str:
        """Every row of the saga log as SQL text."""
        con = sqlite3.connect(self.db)
        try:
            return "\n".join(con.iterdump())
        finally:
            con.close()


def plain_gateway(directory: Path, contracts: str, *, prefix: bool = False) -> Plain:
    """A gateway config whose one upstream is the plain server, with ``contracts`` as its
    contract file."""
    state = directory / "plain.json"
    (directory / "contracts.toml").write_text(contracts)
    config = directory / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"
title = "plain session"

[[upstream]]
name = "plain"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(PLAIN_SERVER))}]
env = {{ PLAIN_STATE = {json.dumps(str(state))} }}
contracts = ["contracts.toml"]
prefix = {"true" if prefix else "false"}
"""
    )
    return Plain(directory, config, state, directory / "saga.db")


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@dataclass
class Vendor:
    """What a loopback HTTP vendor received: each request's method, raw target and headers."""

    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)
    """Each request's JSON body (``None`` without one), in the order of :attr:`requests`."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self) -> list[str]:
        with self.lock:
            return [p for _, p, _ in self.requests]


Handler = Callable[[BaseHTTPRequestHandler, Vendor], None]


@contextmanager
def http_vendor(handle: Handler) -> Iterator[tuple[str, Vendor]]:
    """A loopback HTTP server calling ``handle(request, vendor)`` for every request; yields its
    base URL and the record of what it received (``self.path`` is the raw request target)."""
    vendor = Vendor()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with vendor.lock:
                vendor.requests.append((self.command, self.path, dict(self.headers)))
                vendor.bodies.append(body)
            handle(self, vendor)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", vendor
    finally:
        server.shutdown()
        server.server_close()


def reply(req: BaseHTTPRequestHandler, code: int, body: Any, **headers: str) -> None:
    """Answer ``req`` with ``body`` (JSON unless it is already text)."""
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    try:
        req.send_response(code)
        for k, v in headers.items():
            req.send_header(k, v)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up waiting (a timeout test)


def file_catalog(path: Path, text: str, transport: Any) -> Any:
    """A catalog of the MCP-style contract file ``text`` (written to ``path``) whose tools go
    through ``transport``: the applier driven by the real engine, with the world in memory."""
    import amends
    from amends.contract_file import Binding, read_file, registration, tool_function

    path.write_text(text)
    cf = read_file(path, transport="mcp")
    binding = Binding(transport, cf.tools)
    catalog = amends.Catalog()
    for name, contract in cf.tools.items():
        catalog.register(
            name, tool_function(contract, binding, name), **registration(contract, binding)
        )
    return catalog
