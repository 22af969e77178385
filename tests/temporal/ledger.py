"""A payment ledger and key-value store in a SQLite file, shared by every worker process.

Every request that reaches a tool is appended to ``requests`` and every effect actually applied
to ``effects`` (so a compensation applied twice is countable). ``pay.refund`` honours idempotency
keys (a replayed key applies nothing); ``pay.refund_nokey`` does not, like a vendor without keys.

Fault points, for worker processes: ``AMENDS_TEST_KILL_AT=<phase>:<tool>:<before|after>`` SIGKILLs
the process at that point the first time any process reaches it (``AMENDS_TEST_KILL_ONCE`` names
the marker file that makes it once); ``AMENDS_TEST_DELAY=<seconds>`` slows every compensation.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import amends
from amends._log.sqlite import switch_to_wal


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    switch_to_wal(conn, 60)  # durable across process kills; waits out a process creating it
    conn.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, cents INTEGER NOT NULL, "
        "refunded INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "op TEXT NOT NULL, k TEXT NOT NULL, idem TEXT NOT NULL, pid INTEGER NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS requests (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "tool TEXT NOT NULL, phase TEXT NOT NULL, idem TEXT NOT NULL, pid INTEGER NOT NULL)"
    )
    return conn


def effects(path: str | Path) -> list[tuple[str, str, str, int]]:
    conn = connect(path)
    try:
        return [tuple(r) for r in conn.execute("SELECT op, k, idem, pid FROM effects ORDER BY n")]
    finally:
        conn.close()


def state(path: str | Path) -> dict[str, Any]:
    conn = connect(path)
    try:
        return {
            "kv": dict(conn.execute("SELECT k, v FROM kv ORDER BY k").fetchall()),
            "charges": {
                r[0]: {"cents": r[1], "refunded": r[2]}
                for r in conn.execute("SELECT id, cents, refunded FROM charges ORDER BY id")
            },
        }
    finally:
        conn.close()


def _point(name: str) -> None:
    if os.environ.get("AMENDS_TEST_KILL_AT") != name:
        return
    marker = os.environ.get("AMENDS_TEST_KILL_ONCE")
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another process already died here
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _idempotent_kw(flag: bool) -> dict[str, Any]:
    # rule 5: declare which vendors honour keys, where this amends knows the declaration
    known = inspect.signature(amends.Catalog.tool).parameters
    return {"idempotent": flag} if "idempotent" in known else {}


def make_catalog(path: str | Path) -> amends.Catalog:
    catalog = amends.Catalog()
    delay = float(os.environ.get("AMENDS_TEST_DELAY", "0") or 0)

    def request(call: amends.Call, conn: sqlite3.Connection) -> bool:
        """Log the request; True when this key was already applied (and the vendor honours it)."""
        conn.execute(
            "INSERT INTO requests (tool, phase, idem, pid) VALUES (?, ?, ?, ?)",
            (call.tool, call.phase, call.idempotency_key, os.getpid()),
        )
        return False

    def effect(conn: sqlite3.Connection, call: amends.Call, op: str, k: str) -> None:
        conn.execute(
            "INSERT INTO effects (op, k, idem, pid) VALUES (?, ?, ?, ?)",
            (op, k, call.idempotency_key, os.getpid()),
        )

    def seen(conn: sqlite3.Connection, call: amends.Call) -> bool:
        return bool(
            conn.execute("SELECT 1 FROM effects WHERE idem=?", (call.idempotency_key,)).fetchone()
        )

    async def slow(call: amends.Call) -> None:
        if delay and call.phase in ("compensate", "follow_up"):
            await asyncio.sleep(delay)

    @catalog.tool("kv.get", reversibility="read_only")
    async def kv_get(call: amends.Call, k: str) -> str | None:
        conn = connect(path)
        try:
            row = conn.execute("SELECT v FROM kv WHERE k=?", (k,)).fetchone()
            return None if row is None else str(row[0])
        finally:
            conn.close()

    @catalog.tool("kv.put", reversibility="reversible", **_idempotent_kw(True))
    async def kv_put(call: amends.Call, k: str, v: str) -> dict[str, Any]:
        await slow(call)
        _point(f"{call.phase}:kv.put:before")
        conn = connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            request(call, conn)
            before = conn.execute("SELECT v FROM kv WHERE k=?", (k,)).fetchone()
            if not seen(conn, call):
                conn.execute(
                    "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v=excluded.v",
                    (k, v),
                )
                effect(conn, call, "kv.put", f"{k}={v}")
            conn.execute("COMMIT")
        finally:
            conn.close()
        _point(f"{call.phase}:kv.put:after")
        if call.phase == "forward":
            call.inverse("kv.put", k=k, v="" if before is None else str(before[0]))
            call.expect("kv.get", {"k": k}, equals=v)
        return {"k": k, "v": v}

    def charge_tool(name: str, refund: str) -> None:
        @catalog.tool(name, reversibility="compensable", **_idempotent_kw(True))
        async def charge(call: amends.Call, customer: str, cents: int) -> dict[str, Any]:
            conn = connect(path)
            try:
                conn.execute("BEGIN IMMEDIATE")
                request(call, conn)
                cid = f"ch_{call.step_id}"
                conn.execute("INSERT OR IGNORE INTO charges VALUES (?, ?, 0)", (cid, cents))
                if not seen(conn, call):
                    effect(conn, call, name, cid)
                conn.execute("COMMIT")
            finally:
                conn.close()
            call.inverse(refund, charge_id=cid, cents=cents)
            call.expect("pay.get", {"charge_id": cid}, equals=0, path="refunded")
            call.residue(f"Refund of {cents / 100:.2f} to {customer}", parties=[customer])
            return {"id": cid}

    def refund_tool(name: str, honours_keys: bool) -> None:
        @catalog.tool(name, reversibility="irreversible", **_idempotent_kw(honours_keys))
        async def refund(call: amends.Call, charge_id: str, cents: int) -> dict[str, Any]:
            await slow(call)
            _point(f"{call.phase}:{name}:before")
            conn = connect(path)
            try:
                conn.execute("BEGIN IMMEDIATE")
                request(call, conn)
                if not (honours_keys and seen(conn, call)):
                    conn.execute(
                        "UPDATE charges SET refunded = refunded + ? WHERE id=?", (cents, charge_id)
                    )
                    effect(conn, call, name, charge_id)
                conn.execute("COMMIT")
            finally:
                conn.close()
            _point(f"{call.phase}:{name}:after")
            return {"refund_of": charge_id}

    charge_tool("pay.charge", "pay.refund")
    charge_tool("pay.charge_nokey", "pay.refund_nokey")
    refund_tool("pay.refund", True)
    refund_tool("pay.refund_nokey", False)

    @catalog.tool("pay.get", reversibility="read_only")
    async def pay_get(call: amends.Call, charge_id: str) -> dict[str, Any]:
        conn = connect(path)
        try:
            row = conn.execute(
                "SELECT cents, refunded FROM charges WHERE id=?", (charge_id,)
            ).fetchone()
            return {"cents": row[0], "refunded": row[1]}
        finally:
            conn.close()

    return catalog


def catalog(db: str) -> amends.Catalog:
    """``--catalog ledger:catalog`` for worker processes: the ledger in $AMENDS_TEST_LEDGER."""
    return make_catalog(os.environ["AMENDS_TEST_LEDGER"])
