"""A real ``amends serve`` app on 127.0.0.1 (uvicorn in a thread) over a seeded SQLite log.

The catalog is the core tests' small dict-backed world (``core_world``), so these tests do not
move when the sandbox does. ``pay.refund`` is slowed so an undo is still running after the
server's ~1 s wait (the 202 path and live progress are exercised).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
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
    try:
        with serving(app) as url:
            yield Live(url, db, world, tokens, acme, globex, sagas)
    finally:
        tokens.close()


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port, in a thread; its base URL."""
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
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


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


def sign_in(client: Any, token: str, origin: str) -> str:
    """Sign ``client`` (an httpx or TestClient) in through the form, as a browser does; returns
    the page key the sign-in handed to the page (what its script sends as ``X-Amends-CSRF``)."""
    import re

    page = client.get(f"{origin}/login")
    nonce = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert nonce is not None, page.text
    r = client.post(
        f"{origin}/login",
        data={"token": token, "csrf": nonce.group(1)},
        headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"},
        follow_redirects=False,
    )
    assert r.status_code == 200, r.text
    key = re.search(r'<meta name="amends-key" content="([^"]+)">', r.text)
    assert key is not None, r.text
    return key.group(1)


TESTS = Path(__file__).resolve().parents[1]
TOOLS_MODULE = """from core_world import fresh

world, catalog = fresh()
world.crm.update({crm!r})
world.charges.update({charges!r})
world.delay["pay.refund"] = {refund_delay!r}
"""


@dataclass
class Served:
    """One ``amends serve`` process (see :func:`serve_process`)."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    output: Path
    """The process's stdout and stderr (its access log among them)."""

    def stop(self) -> str:
        """Stop the server (SIGINT, as Ctrl-C) and return everything it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.output.read_text(errors="replace")


@contextlib.contextmanager
def serve_process(
    tmp_path: Path,
    db: str,
    *flags: str,
    world: CoreWorld | None = None,
    refund_delay: float = 0.0,
) -> Iterator[Served]:
    """``amends serve --db db`` as a real process on a free loopback port, until the block ends.

    Its catalog is the core world's, over a copy of ``world``'s CRM records and charges (the
    server's own copy: what it changes is not seen here), ``pay.refund`` slowed by
    ``refund_delay`` seconds.
    """
    module = TOOLS_MODULE.format(
        crm=world.crm if world else {},
        charges=world.charges if world else {},
        refund_delay=refund_delay,
    )
    (tmp_path / "sec_tools.py").write_text(module)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS)])}
    env.pop("AMENDS_TRUSTED_PROXIES", None)
    sock = _free_socket()
    port = sock.getsockname()[1]
    sock.close()
    output = tmp_path / f"serve-{port}.log"
    with output.open("wb") as out:
        argv = ["serve", "--db", db, "--port", str(port), "--catalog", "sec_tools:catalog"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "amends.cli", *argv, *flags],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = Served(f"http://127.0.0.1:{port}", port, proc, output)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"amends serve exited {proc.returncode}: {served.stop()}")
            try:
                httpx.get(f"{served.url}/openapi.json", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{served.url} did not answer within 60 s: {served.stop()}")
                time.sleep(0.1)
        yield served
    finally:
        served.stop()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium through Playwright (``scripts/test-deps.sh`` installs it)."""
    from playwright.sync_api import Error, sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing; install it with `apt-get install -y chromium "
            f"chromium-driver` (scripts/test-deps.sh does)",
            pytrace=False,
        )
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except Error as exc:
            pytest.fail(f"chromium at {CHROMIUM} could not start: {exc}", pytrace=False)
        try:
            yield b
        finally:
            b.close()


def browser_sign_in(page: Any, url: str, token: str) -> None:
    """Sign in through the form (POST); the token never appears in a URL."""
    page.goto(f"{url}/login")
    page.fill("#token", token)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(f"{url}/")


@dataclass
class Seeded:
    """A seeded SQLite log with its token file (see :func:`seeded_log`)."""

    db: str
    sagas: dict[str, str]
    """name -> saga id, as :func:`_seed` made them."""
    acme: str
    """A token of tenant acme."""
    world: CoreWorld
    """The world the sagas ran against (a server process gets a copy: ``serve_process``)."""


def seeded_log(tmp_path: Path, name: str = "attack.db") -> Seeded:
    """The four sagas of :func:`_seed` in a fresh SQLite log, and a token of acme beside it."""
    db = str(tmp_path / name)
    world, catalog = fresh()
    sagas = asyncio.run(_seed(db, catalog, world))
    store = TokenStore(db + ".tokens")
    acme = store.create("acme")
    store.close()
    return Seeded(db, sagas, acme, world)
