"""A worker process whose wall clock may be wrong (issue 21 item 11).

usage: skew_child.py LOG_URL VENDOR MODE SAGA_ID DIR
MODE: forward | undo | recover. ``$AMENDS_TEST_SKEW`` shifts this process's ``time.time`` by that
many seconds (a server whose clock runs ahead), before amends is imported. The first refund the
vendor receives is held in flight (``DIR/inflight`` appears) until ``DIR/release`` exists.
Writes ``DIR/ready-MODE`` just before it starts, prints one JSON line with its result.
"""

from __future__ import annotations

import os
import time

_SKEW = float(os.environ.get("AMENDS_TEST_SKEW", "0"))
if _SKEW:
    _real = time.time
    time.time = lambda: _real() + _SKEW  # every time.time() of this process, amends' included

import asyncio  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import amends  # noqa: E402
from amends._log.sqlite import switch_to_wal  # noqa: E402

LOG, VENDOR, MODE, SAGA, DIR = sys.argv[1:6]


def vendor() -> sqlite3.Connection:
    conn = sqlite3.connect(VENDOR, isolation_level=None, timeout=60)
    switch_to_wal(conn, 60)  # two children open the vendor file together
    conn.execute("CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, status TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS refunds (n INTEGER PRIMARY KEY, id TEXT, pid INT)")
    return conn


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _touch(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(os.getpid()))


def catalog() -> amends.Catalog:
    cat = amends.Catalog()

    @cat.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> Any:
        return vendor().execute("SELECT status FROM charges WHERE id=?", (charge_id,)).fetchone()[0]

    @cat.tool("pay.charge", reversibility="compensable")
    async def charge(call: amends.Call, cents: int) -> Any:
        vendor().execute("INSERT INTO charges VALUES ('ch_1', 'captured')")
        call.inverse("pay.refund", charge_id="ch_1")
        call.expect("pay.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1"}

    @cat.tool("pay.refund", reversibility="irreversible")  # the processor ignores keys
    async def refund(call: amends.Call, charge_id: str) -> Any:
        inflight, release = os.path.join(DIR, "inflight"), os.path.join(DIR, "release")
        if not _exists(inflight):  # the first refund stays in flight at the processor
            _touch(inflight)
            while not _exists(release):
                await asyncio.sleep(0.05)
        conn = vendor()
        conn.execute("INSERT INTO refunds (id, pid) VALUES (?, ?)", (charge_id, os.getpid()))
        conn.execute("UPDATE charges SET status='refunded' WHERE id=?", (charge_id,))
        return {"refunded": charge_id}

    return cat


async def main() -> None:
    engine = amends.Engine(catalog(), log=LOG, lease_seconds=3.0, poll_interval=0.05)
    try:
        _touch(os.path.join(DIR, f"ready-{MODE}"))
        out: Any = None
        if MODE == "forward":
            async with engine.saga("Charge", saga_id=SAGA) as saga:
                saga.call("pay.charge", cents=500)
        elif MODE == "undo":
            out = (await engine.undo(SAGA)).to_dict()
        elif MODE == "recover":
            rec = await engine.recover()
            out = [r.to_dict() for r in rec.resumed]
        print(json.dumps(out), flush=True)
    finally:
        await engine.close()


asyncio.run(main())
