"""A worker process for the crash tests: runs forward, undo, or recovery against a file log and a
file-backed vendor, and SIGKILLs itself at a chosen point (a real, unclean process death).

usage: crash_child.py DB VENDOR (forward|undo|recover) [KILL_POINT]
KILL_POINT: "<phase>:<tool>:<when>" e.g. "forward:pay.charge:after_effect",
            "compensate:pay.refund:before_effect".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from typing import Any

import amends

DB, VENDOR, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
KILL = sys.argv[4] if len(sys.argv) > 4 else ""


def vendor() -> sqlite3.Connection:
    conn = sqlite3.connect(VENDOR, isolation_level=None, timeout=10)
    conn.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "op TEXT NOT NULL, k TEXT NOT NULL, idem TEXT NOT NULL)"
    )
    return conn


def maybe_die(call: amends.Call, when: str) -> None:
    if f"{call.phase}:{call.tool}:{when}" == KILL:
        os.kill(os.getpid(), signal.SIGKILL)


ENGINE: list[amends.Engine] = []


def die_before_the_next_commit(call: amends.Call) -> None:
    """Issue 29: the tool has returned (this runs as it returns) and its outcome is on its way
    to the log; the process dies before the log's writer commits anything more. The event
    loop runs on meanwhile, so an agent that did not wait for the outcome would go on."""
    if f"{call.phase}:{call.tool}:before_outcome_commit" != KILL:
        return
    db: Any = ENGINE[0].log.db  # type: ignore[attr-defined]

    def commit(batch: Any) -> Any:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)

    db._commit = commit


def apply(call: amends.Call, op: str, k: str, v: str | None) -> bool:
    """Apply one effect idempotently: a replayed idempotency key changes nothing."""
    conn = vendor()
    try:
        conn.execute("BEGIN IMMEDIATE")
        seen = conn.execute(
            "SELECT 1 FROM effects WHERE idem=?", (call.idempotency_key,)
        ).fetchone()
        if seen:
            conn.execute("COMMIT")
            return False
        if v is None:
            conn.execute("DELETE FROM kv WHERE k=?", (k,))
        else:
            conn.execute(
                "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v=excluded.v", (k, v)
            )
        conn.execute(
            "INSERT INTO effects (op, k, idem) VALUES (?, ?, ?)", (op, k, call.idempotency_key)
        )
        conn.execute("COMMIT")
        return True
    finally:
        conn.close()


def read(k: str) -> str | None:
    conn = vendor()
    try:
        row = conn.execute("SELECT v FROM kv WHERE k=?", (k,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


catalog = amends.Catalog()


@catalog.tool("kv.get", reversibility="read_only")
async def kv_get(call: amends.Call, key: str) -> Any:
    maybe_die(call, "before_effect")
    return read(key)


@catalog.tool("kv.put", reversibility="reversible", resources=lambda a: [a["key"]], idempotent=True)
async def kv_put(call: amends.Call, key: str, value: str | None) -> Any:
    before = read(key)
    maybe_die(call, "before_effect")
    apply(call, "put", key, value)
    maybe_die(call, "after_effect")
    call.inverse("kv.put", key=key, value=before)
    call.expect("kv.get", {"key": key}, equals=value)
    return {"key": key, "value": value}


@catalog.tool("pay.charge", reversibility="compensable", idempotent=True)
async def charge(call: amends.Call, who: str, cents: int) -> Any:
    maybe_die(call, "before_effect")
    apply(call, "charge", f"charge:{who}", str(cents))
    maybe_die(call, "after_effect")
    call.inverse("pay.refund", who=who, cents=cents)
    call.expect("kv.get", {"key": f"refund:{who}"}, equals=None)  # not refunded since
    call.residue(f"Refund of {cents} cents to {who}", parties=[who], settles_in_business_days=3)
    die_before_the_next_commit(call)
    return {"charged": cents}


@catalog.tool("pay.refund", reversibility="irreversible", idempotent=True)
async def refund(call: amends.Call, who: str, cents: int) -> Any:
    maybe_die(call, "before_effect")
    apply(call, "refund", f"refund:{who}", str(cents))
    maybe_die(call, "after_effect")
    return {"refunded": cents}


def apply_ignoring_keys(call: amends.Call, op: str, k: str, v: str) -> None:
    """A vendor that ignores idempotency keys: every call applies again (rule 5's hard case)."""
    conn = vendor()
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v=excluded.v", (k, v)
        )
        n = conn.execute("SELECT COUNT(*) FROM effects").fetchone()[0]
        conn.execute(
            "INSERT INTO effects (op, k, idem) VALUES (?, ?, ?)",
            (op, k, f"{call.idempotency_key}#{n}"),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


@catalog.tool("ledger.charge", reversibility="compensable", idempotent=True)
async def ledger_charge(call: amends.Call, who: str, cents: int) -> Any:
    apply(call, "charge", f"charge:{who}", str(cents))
    call.inverse("ledger.refund", who=who, cents=cents)
    call.expect("kv.get", {"key": f"refund:{who}"}, equals=None)  # not refunded since
    if os.environ.get("LEDGER_LANDED_PROBE"):
        call.landed("kv.get", {"key": f"refund:{who}"}, equals=str(cents))
    call.residue(f"Refund of {cents} cents to {who}", parties=[who])
    return {"charged": cents}


@catalog.tool("ledger.refund", reversibility="irreversible")  # its vendor ignores keys
async def ledger_refund(call: amends.Call, who: str, cents: int) -> Any:
    maybe_die(call, "before_effect")
    apply_ignoring_keys(call, "refund", f"refund:{who}", str(cents))
    maybe_die(call, "after_effect")  # the vendor applied it; the log does not know yet
    return {"refunded": cents}


async def main() -> None:
    engine = amends.Engine(
        catalog, log=DB, lease_seconds=0.5, retry=amends.RetryPolicy(initial_backoff=0.001)
    )
    ENGINE.append(engine)
    if KILL.endswith(":before_outcome_commit"):  # every commit on the writer thread
        engine.log.db.inline_when_idle = False  # type: ignore[attr-defined]
    try:
        if MODE == "forward":
            async with engine.saga("crash test", saga_id="saga-crash") as saga:
                a = saga.call("kv.put", key="stage", value="won")
                b = saga.call("pay.charge", who="c1", cents=500, after=[a])
                c = saga.call("kv.put", key="owner", value="agent", after=[b])
                saga.call("kv.put", key="note", value="hello")
                await b
                print("the agent saw the charge", flush=True)
                await saga.gather(a, b, c)
        elif MODE == "ledger":
            async with engine.saga("ledger crash test", saga_id="saga-ledger") as saga:
                await saga.call("ledger.charge", who="c1", cents=700)
        elif MODE == "ledger-undo":
            print(json.dumps((await engine.undo("saga-ledger")).to_dict()))
        elif MODE == "ledger-recover":
            rec = await engine.recover()
            report = await engine.undo("saga-ledger")
            print(json.dumps({"resumed": len(rec.resumed), "report": report.to_dict()}))
        elif MODE == "undo":
            report = await engine.undo("saga-crash")
            print(json.dumps(report.to_dict()))
        elif MODE == "recover":
            rec = await engine.recover()
            report = await engine.undo("saga-crash")
            print(
                json.dumps(
                    {
                        "in_doubt": [list(x) for x in rec.in_doubt],
                        "resumed": len(rec.resumed),
                        "report": report.to_dict(),
                    }
                )
            )
    finally:
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
