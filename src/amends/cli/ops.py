"""``amends recover`` and ``amends doctor``: operate a saga log (SQLite file or PostgreSQL).

``recover`` resumes every reversal whose worker stopped and marks forward steps left with intent
but no result ``in_doubt``. ``doctor`` checks the log and says what to do about each finding; it
exits 1 when something needs action, 2 when the log cannot be opened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import AmendsError
from ..log import open_log
from ..log.sql import SCHEMA_VERSION, SqlSagaLog, Tx

__all__ = ["Finding", "diagnose", "register"]


@dataclass(frozen=True)
class Finding:
    """One thing ``doctor`` found: how bad, what, and what to do about it."""

    level: str  # "ok" | "info" | "action"
    what: str
    fix: str


def _db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default="amends.db",
        help="saga log: a path or URL (sqlite:///f.db, postgresql://...); default amends.db",
    )


def register(sub: Any) -> None:
    """Add the ``recover`` and ``doctor`` subcommands."""
    rec = sub.add_parser(
        "recover",
        help="after a crash: resume unfinished reversals, mark unfinished forward steps in_doubt",
    )
    _db_arg(rec)
    rec.add_argument(
        "--catalog",
        help="MODULE:ATTR of the catalog (a Catalog or callable(db) -> Catalog); "
        "default $AMENDS_CATALOG or amends.sandbox:demo_catalog",
    )
    rec.add_argument("--json", action="store_true", help="print JSON")
    rec.set_defaults(handler=_recover)

    doc = sub.add_parser(
        "doctor",
        help="check a saga log: schema version, stuck reversals, in-doubt steps, leases; "
        "exits 1 when something needs action",
    )
    _db_arg(doc)
    doc.add_argument("--json", action="store_true", help="print JSON")
    doc.set_defaults(handler=_doctor)


def _recover(args: argparse.Namespace) -> int:
    from ..engine import Engine
    from ._common import load_catalog

    async def go() -> dict[str, Any]:
        engine = Engine(load_catalog(args.catalog, args.db), log=args.db)
        try:
            rec = await engine.recover()
        finally:
            await engine.close()
        return {
            "in_doubt": [{"saga_id": s, "step_id": st} for s, st in rec.in_doubt],
            "resumed": [
                {"saga_id": r.saga_id, "reversal_id": r.reversal_id, "status": r.status.value}
                for r in rec.resumed
            ],
        }

    try:
        out = asyncio.run(go())
    except AmendsError as exc:
        sys.stderr.write(f"amends recover: {exc}\n")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        for item in out["in_doubt"]:
            sys.stdout.write(
                f"in doubt: saga {item['saga_id']} step {item['step_id']} (its outcome is "
                f"unknown; check the vendor, then undo the saga)\n"
            )
        for r in out["resumed"]:
            sys.stdout.write(
                f"resumed reversal {r['reversal_id']} of saga {r['saga_id']}: {r['status']}\n"
            )
        if not out["in_doubt"] and not out["resumed"]:
            sys.stdout.write("nothing to recover\n")
    return 0


async def diagnose(target: str, *, now: float | None = None) -> list[Finding]:
    """Check the saga log at ``target`` and return what was found, each with its fix.

    Raises:
        LogError: The log cannot be opened (including SchemaVersionError).
    """
    now = time.time() if now is None else now
    log = open_log(target)
    try:
        findings: list[Finding] = []
        version = await log.schema_version()
        findings.append(
            Finding("ok", f"schema version {version} (this amends writes {SCHEMA_VERSION})", "")
        )
        if not isinstance(log, SqlSagaLog):  # pragma: no cover - every shipped log is SQL
            return findings

        def scan(tx: Tx) -> dict[str, list[tuple[Any, ...]]]:
            return {
                "in_doubt": tx.execute(
                    "SELECT saga_id, step_id, tool FROM steps WHERE state='in_doubt' AND "
                    "saga_id NOT IN (SELECT saga_id FROM reversals WHERE state='done') "
                    "ORDER BY saga_id, seq"
                ),
                "stale_sagas": tx.execute(
                    "SELECT saga_id, owner, lease_until FROM sagas WHERE state='running' AND "
                    "(lease_until IS NULL OR lease_until <= ?) ORDER BY saga_id",
                    (now,),
                ),
                "live_sagas": tx.execute(
                    "SELECT saga_id, owner, lease_until FROM sagas WHERE state='running' AND "
                    "lease_until > ? ORDER BY saga_id",
                    (now,),
                ),
                "stuck": tx.execute(
                    "SELECT reversal_id, saga_id, owner, generation, lease_until FROM reversals "
                    "WHERE state='running' AND (lease_until IS NULL OR lease_until <= ?) "
                    "ORDER BY requested_at",
                    (now,),
                ),
                "live": tx.execute(
                    "SELECT reversal_id, saga_id, owner, generation, lease_until FROM reversals "
                    "WHERE state='running' AND lease_until > ? ORDER BY requested_at",
                    (now,),
                ),
            }

        rows = await log.db.read(scan)
        for saga_id, owner, _lease in rows["stale_sagas"]:
            findings.append(
                Finding(
                    "action",
                    f"saga {saga_id} is still 'running' but its worker ({owner}) stopped "
                    f"renewing its lease",
                    "run `amends recover --db URL`: its unfinished steps become in_doubt",
                )
            )
        for saga_id, step_id, tool in rows["in_doubt"]:
            findings.append(
                Finding(
                    "action",
                    f"step {step_id} ({tool}) of saga {saga_id} is in_doubt: its outcome is "
                    f"unknown",
                    f"check the vendor for that call, then `amends undo {saga_id} --db URL`; "
                    f"the report will list it as a manual action",
                )
            )
        for rev_id, saga_id, owner, generation, _lease in rows["stuck"]:
            findings.append(
                Finding(
                    "action",
                    f"reversal {rev_id} of saga {saga_id} is stuck: its worker ({owner}, "
                    f"generation {generation}) stopped renewing its lease",
                    "run `amends recover --db URL` to resume it (nothing logged done is sent "
                    "again)",
                )
            )
        for saga_id, owner, lease in rows["live_sagas"]:
            findings.append(
                Finding(
                    "info",
                    f"saga {saga_id} is running on {owner} (lease for {lease - now:.0f} s more)",
                    "",
                )
            )
        for rev_id, saga_id, owner, generation, lease in rows["live"]:
            findings.append(
                Finding(
                    "info",
                    f"reversal {rev_id} of saga {saga_id} is running on {owner} (generation "
                    f"{generation}, lease for {lease - now:.0f} s more)",
                    "",
                )
            )
        return findings
    finally:
        await log.close()


def _doctor(args: argparse.Namespace) -> int:
    try:
        findings = asyncio.run(diagnose(args.db))
    except AmendsError as exc:
        if args.json:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
        else:
            sys.stdout.write(f"ACTION  cannot open the saga log: {exc}\n")
        return 2
    needs = any(f.level == "action" for f in findings)
    if args.json:
        sys.stdout.write(
            json.dumps({"ok": not needs, "findings": [asdict(f) for f in findings]}, indent=2)
            + "\n"
        )
    else:
        for f in findings:
            sys.stdout.write(f"{f.level.upper():7} {f.what}\n")
            if f.fix:
                sys.stdout.write(f"        fix: {f.fix}\n")
        sys.stdout.write("needs action\n" if needs else "healthy\n")
    return 1 if needs else 0
