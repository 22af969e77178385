"""A vendor whose world lives in a SQLite file outside every engine process.

Every request that reaches it is appended to ``requests`` (so duplicate sends are countable); every
effect actually applied is appended to ``effects`` with its idempotency key (a replayed key applies
nothing, like a real vendor). ``hook(point)`` is called before and after each request: the fault
tests use it to SIGKILL or pause a worker at an exact point.

Each process (and thread) keeps one connection per vendor file (``WAL``, ``synchronous=NORMAL``: a
committed request survives a SIGKILL of the process), so what the load test measures is the saga
log, not opening SQLite files (issue 12: a connection per request cost more than the log did).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import amends
from amends._log.sqlite import switch_to_wal

Hook = Callable[[str], None]


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    switch_to_wal(conn, 60)  # durable across process kills; waits out a process creating it
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "op TEXT NOT NULL, k TEXT NOT NULL, idem TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS effects_idem ON effects (idem)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS requests (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "tool TEXT NOT NULL, phase TEXT NOT NULL, idem TEXT NOT NULL)"
    )
    return conn


_open: dict[tuple[str, int], sqlite3.Connection] = {}


def shared(path: str | Path) -> sqlite3.Connection:
    """This thread's connection to the vendor file ``path``, opened once."""
    key = (str(path), threading.get_ident())
    conn = _open.get(key)
    if conn is None:
        conn = _open[key] = connect(path)
    return conn


def make_catalog(path: str | Path, hook: Hook | None = None) -> amends.Catalog:
    """kv.get (probe), kv.put (reversible), pay.charge (compensable), pay.refund, mail.send."""
    point: Hook = hook or (lambda _p: None)

    def apply(call: amends.Call, op: str, k: str, v: str | None) -> None:
        point(f"{call.phase}:{call.tool}:before")
        conn = shared(path)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO requests (tool, phase, idem) VALUES (?, ?, ?)",
                (call.tool, call.phase, call.idempotency_key),
            )
            seen = conn.execute(
                "SELECT 1 FROM effects WHERE idem=?", (call.idempotency_key,)
            ).fetchone()
            if not seen:
                if v is None:
                    conn.execute("DELETE FROM kv WHERE k=?", (k,))
                else:
                    conn.execute(
                        "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v=excluded.v",
                        (k, v),
                    )
                conn.execute(
                    "INSERT INTO effects (op, k, idem) VALUES (?, ?, ?)",
                    (op, k, call.idempotency_key),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        point(f"{call.phase}:{call.tool}:after")

    def read(k: str) -> str | None:
        row = shared(path).execute("SELECT v FROM kv WHERE k=?", (k,)).fetchone()
        return None if row is None else str(row[0])

    catalog = amends.Catalog()

    @catalog.tool("kv.get", reversibility="read_only")
    async def kv_get(call: amends.Call, key: str) -> Any:
        point(f"{call.phase}:{call.tool}:before")
        return read(key)

    # the vendor applies each idempotency key once (``effects``): resending is safe (rule 5)
    @catalog.tool(
        "kv.put", reversibility="reversible", idempotent=True, resources=lambda a: [a["key"]]
    )
    async def kv_put(call: amends.Call, key: str, value: str | None) -> Any:
        before = read(key)
        apply(call, "put", key, value)
        call.inverse("kv.put", key=key, value=before)
        call.expect("kv.get", {"key": key}, equals=value)
        return {"key": key, "value": value}

    @catalog.tool("pay.charge", reversibility="compensable", idempotent=True)
    async def charge(call: amends.Call, who: str, cents: int) -> Any:
        apply(call, "charge", f"charge:{who}", str(cents))
        call.inverse("pay.refund", who=who, cents=cents)
        # rule 4: the charge must still stand (not refunded or disputed) when it is refunded
        call.expect("kv.get", {"key": f"charge:{who}"}, equals=str(cents))
        call.residue(f"Refund of {cents} cents to {who}", parties=[who], settles_in_business_days=3)
        return {"charged": cents}

    @catalog.tool("pay.refund", reversibility="irreversible", idempotent=True)
    async def refund(call: amends.Call, who: str, cents: int) -> Any:
        apply(call, "refund", f"refund:{who}", str(cents))
        return {"refunded": cents}

    @catalog.tool("mail.send")  # irreversible
    async def send(call: amends.Call, to: str, subject: str) -> Any:
        apply(call, "mail", f"mail:{to}:{subject}", subject)
        call.acknowledge(who="the sender", parties=[to], draft=f"Please disregard '{subject}'.")
        return {"sent": True}

    return catalog


async def record_saga(engine: amends.Engine, saga_id: str, steps: int = 6) -> None:
    """One saga of ``steps`` steps over independent keys, a chain, a charge and an email."""
    async with engine.saga(f"saga {saga_id}", saga_id=saga_id) as saga:
        prev = saga.call("kv.put", key=f"{saga_id}:k0", value="v0")
        handles = [prev]
        for i in range(1, steps):
            if i == 2:
                h = saga.call("pay.charge", who=f"{saga_id}:c", cents=100 * i, after=[prev])
            elif i == 4:
                h = saga.call("mail.send", to=f"{saga_id}@x.test", subject="hi", after=[prev])
            elif i % 2:
                h = saga.call("kv.put", key=f"{saga_id}:k{i}", value=f"v{i}")
            else:
                h = saga.call("kv.put", key=f"{saga_id}:k{i}", value=f"v{i}", after=[prev])
            handles.append(h)
            prev = h
        await saga.gather(*handles)


def world(
    path: str | Path,
) -> tuple[dict[str, str], list[tuple[str, str, str]], list[tuple[str, ...]]]:
    """(kv, effects (op, key, idem), requests (tool, phase, idem))."""
    conn = connect(path)
    try:
        kv = {str(k): str(v) for k, v in conn.execute("SELECT k, v FROM kv")}
        effects = [tuple(r) for r in conn.execute("SELECT op, k, idem FROM effects ORDER BY n")]
        requests = [
            tuple(r) for r in conn.execute("SELECT tool, phase, idem FROM requests ORDER BY n")
        ]
        return kv, effects, requests  # type: ignore[return-value]
    finally:
        conn.close()
