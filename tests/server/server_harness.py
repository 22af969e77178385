"""A real ``amends serve`` app on 127.0.0.1 (uvicorn in a thread) over a seeded SQLite log.

The catalog is the core tests' small dict-backed world (``core_world``), so these tests do not
move when the sandbox does. ``pay.refund`` is slowed so an undo is still running after the
server's ~1 s wait (the 202 path and live progress are exercised).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

import amends
from amends.server import ServerSettings, TokenStore, create_app
from core_world import CoreWorld, fresh

REFUND_DELAY = 1.6


@dataclass
class Live:
    url: str
    db: str
    world: CoreWorld
    tokens: TokenStore
    acme: str
    """A token of tenant ``acme``."""
    globex: str
    """A token of tenant ``globex``."""
    sagas: dict[str, str]
    """name -> saga id: ``acme1``, ``acme2``, ``acme3`` (tenant acme), ``globex1``."""

    def auth(self, tenant: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, tenant)}"}


async def _seed(db: str, catalog: amends.Catalog, world: CoreWorld) -> dict[str, str]:
    world.crm["r1"] = {"stage": "lead", "version": 1}
    world.crm["r2"] = {"stage": "lead", "version": 1}
    world.crm["r3"] = {"stage": "lead", "version": 1}
    world.crm["g1"] = {"stage": "lead", "version": 1}
    ids: dict[str, str] = {}
    engine = amends.Engine(catalog, log=db)
    try:
        for name, tenant, rec in (
            ("acme1", "acme", "r1"),
            ("acme2", "acme", "r2"),
            ("acme3", "acme", "r3"),
            ("globex1", "globex", "g1"),
        ):
            async with engine.saga(f"Close the deal {name}", tenant=tenant) as saga:
                a = saga.call("crm.update_field", record_id=rec, field="stage", value="won")
                b = saga.call("pay.charge", customer=f"cust-{name}", cents=5000, after=[a])
                saga.call("mail.send", to=f"{name}@example.com", subject="Deal closed", after=[b])
            ids[name] = saga.id
    finally:
        await engine.close()
    return ids


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    db = str(tmp_path / "server.db")
    world, catalog = fresh()
    sagas: dict[str, str] = {}
    # its own thread: Playwright's sync API may already own this thread's event loop
    seeder = threading.Thread(target=lambda: sagas.update(asyncio.run(_seed(db, catalog, world))))
    seeder.start()
    seeder.join(60)
    if len(sagas) != 4:
        pytest.fail(f"seeding the saga log {db} failed: got {sagas!r}")
    world.delay["pay.refund"] = REFUND_DELAY
    tokens = TokenStore(str(tmp_path / "server.db.tokens"))
    acme, globex = tokens.create("acme"), tokens.create("globex")
    app = create_app(
        lambda: amends.Engine(catalog, log=db),
        ServerSettings(tokens=tokens, undo_label="Take it back"),
    )
    sock = _free_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the amends server did not start on 127.0.0.1 within 20 s")
        time.sleep(0.02)
    try:
        yield Live(f"http://127.0.0.1:{port}", db, world, tokens, acme, globex, sagas)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        tokens.close()


def log_snapshot(db: str) -> tuple[int, int, int]:
    """(events, reversals, compensations) rows in the saga log: proof nothing was written."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("events", "reversals", "compensations")
        )
    finally:
        conn.close()
