"""``amends recover`` and ``amends doctor``: operate a saga log (SQLite file or PostgreSQL).

``recover`` resumes every reversal whose worker stopped and marks forward steps left with intent
but no result ``in_doubt``. ``doctor`` checks the log and says what to do about each finding; it
exits 1 when something needs action, 2 when the log cannot be opened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from amends import AmendsError, ConfigError, LogCorruptedError

from .._log import file_permission_problems
from .._log.integrity import LOG
from .._log.sql import SCHEMA_VERSION
from .._log.tally import is_tally_problem
from ._hints import command, complete

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
    from ._common import CATALOG_HELP

    rec = sub.add_parser(
        "recover",
        help="after a crash: resume unfinished reversals, mark unfinished forward steps "
        "in_doubt; exits 1 if a reversal could not be resumed (the others are)",
    )
    _db_arg(rec)
    rec.add_argument("--catalog", action="append", metavar="REF", help=CATALOG_HELP)
    rec.add_argument("--json", action="store_true", help="print JSON")
    rec.set_defaults(handler=_recover)

    doc = sub.add_parser(
        "doctor",
        help="check a saga log: schema version, stuck reversals, in-doubt steps, leases; "
        "exits 1 when something needs action",
    )
    _db_arg(doc)
    doc.add_argument("--json", action="store_true", help="print JSON")
    doc.add_argument(
        "--verify",
        action="store_true",
        help="also check the history's hash chain: finds an edited, inserted or deleted event "
        "and a stored report that does not match (rule 11); prints the log's anchor",
    )
    doc.add_argument(
        "--anchor",
        metavar="ANCHOR",
        help="with --verify: an anchor an earlier `doctor --verify` printed; finds the log "
        "rolled back to before it (a restored backup), which nothing inside the log can show",
    )
    doc.set_defaults(handler=_doctor)


def _recover(args: argparse.Namespace) -> int:
    try:
        out = asyncio.run(recover(args.db, args.catalog))
    except AmendsError as exc:
        from ._common import safe

        sys.stderr.write(f"amends recover: {complete(safe(exc, keep_newlines=True))}\n")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        _print_recovery(out)
    return 1 if out["failed"] else 0


def _print_recovery(out: dict[str, Any]) -> None:
    from ._common import safe

    for item in out["in_doubt"]:
        sys.stdout.write(
            f"in doubt: saga {safe(item['saga_id'])} step {safe(item['step_id'])} (its outcome "
            f"is unknown; check the vendor, then undo the saga)\n"
        )
    for r in out["resumed"]:
        sys.stdout.write(
            f"resumed reversal {safe(r['reversal_id'])} of saga {safe(r['saga_id'])}: "
            f"{safe(r['status'])}\n"
        )
    for f in out["failed"]:
        sys.stdout.write(
            f"NOT recovered: reversal {safe(f['reversal_id'])} of saga {safe(f['saga_id'])}: "
            f"{safe(f['error'])}\n"
        )
    for r in out.get("resolved", ()):
        sys.stdout.write(
            f"resolved: saga {safe(r['saga_id'])} step {safe(r['step_id'])} (its follow-up was "
            f"sent; the resolution its process stopped before writing is written now)\n"
        )
    if not any(out.get(k) for k in ("in_doubt", "resumed", "failed", "resolved")):
        sys.stdout.write("nothing to recover\n")


async def recover(db: str, catalog_specs: list[str] | None) -> dict[str, Any]:
    """``amends recover``: mark unfinished forward steps in_doubt, then resume each reversal
    whose worker stopped, each with the catalog its saga recorded, among those the operator
    allowed (``catalog_specs``, else ``$AMENDS_CATALOGS``; rule 12: none named by the log).

    One reversal that cannot be resumed (its catalog is missing, an error) is reported under
    ``failed`` and the others carry on (issue 11).

    Raises:
        LogError: The log does not exist or cannot be opened.
        LogCorruptedError: The log's storage is damaged (nothing is recovered).
    """
    from amends import Budget, Catalog, Engine

    from ._common import allowed_catalogs, catalog_for_saga, open_existing_log

    allowed = allowed_catalogs(catalog_specs, db)
    log = open_existing_log(db)
    out: dict[str, Any] = {"in_doubt": [], "resumed": [], "failed": []}
    try:
        damage = await log.storage_problems()
        if damage:  # issue 21.12: never recover from a log with holes in it
            raise LogCorruptedError(
                f"saga log {db!r} is damaged ({'; '.join(damage[:3])}); nothing was recovered. "
                f"Stop every process using it and restore it from a backup "
                f"(`{command('doctor', db=db)}` lists the damage)",
                path=db,
            )
        now = time.time()
        out["in_doubt"] = [{"saga_id": s, "step_id": st} for s, st in await log.mark_in_doubt(now)]
        for rev in await log.expired_reversals(now):
            try:
                saga = await log.get_saga(rev.saga_id)
                assert saga is not None
                engine = Engine(catalog_for_saga(allowed, saga), log=log)
                # Budget.from_dict clamps a NaN/infinite budget an older amends stored.
                report = await engine.undo(rev.saga_id, budget=Budget.from_dict(rev.budget))
            except Exception as exc:  # one bad reversal must not stop the others
                out["failed"].append(
                    {
                        "saga_id": rev.saga_id,
                        "reversal_id": rev.reversal_id,
                        "error": str(exc) if isinstance(exc, AmendsError) else repr(exc),
                    }
                )
                continue
            out["resumed"].append(
                {
                    "saga_id": report.saga_id,
                    "reversal_id": report.reversal_id,
                    "status": report.status.value,
                }
            )
        # issue 27: a follow-up logged sent whose process stopped before its resolution
        done = await Engine(Catalog(), log=log).recover(resume=False)
        if done.resolved:  # the key only when there is one: the JSON reads as before otherwise
            out["resolved"] = [{"saga_id": s, "step_id": st} for s, st in done.resolved]
        return out
    finally:
        await log.close()


async def diagnose(
    target: str, *, now: float | None = None, verify: bool = False, anchor: str | None = None
) -> list[Finding]:
    """Check the saga log at ``target`` and return what was found, each with its fix.

    ``verify=True`` also walks the tamper-evident history (rule 11) of every saga, and reports
    the log's anchor; ``anchor`` (an earlier one) is checked against the log (rule 12).

    Raises:
        LogError: The log cannot be opened (including SchemaVersionError).
    """
    from ._common import open_existing_log

    now = time.time() if now is None else now
    log = open_existing_log(target, read_only=True)
    try:
        findings: list[Finding] = []
        version = await log.schema_version()
        findings.append(
            Finding("ok", f"schema version {version} (this amends writes {SCHEMA_VERSION})", "")
        )
        for problem in await log.storage_problems():  # issue 21.12: a damaged page is found
            findings.append(
                Finding(
                    "action",
                    f"the log's storage is damaged: {problem}",
                    "stop every process using the log and restore it from a backup; amends "
                    "cannot tell what a damaged page held (undo could act on a history with "
                    "holes)",
                )
            )
        health = await log.health(now)  # issue 9: all SQL lives in amends._log
        for problem in file_permission_problems(target if isinstance(target, str) else ""):
            findings.append(Finding("action", problem, "chmod 600 the file (rule 11)"))
        from ..server.auth import token_file_problems  # no FastAPI needed

        for problem in token_file_problems(target if isinstance(target, str) else ""):
            findings.append(Finding("action", problem, "chmod 600 the token file (rule 11)"))
        read_only = _read_only(target)
        if read_only:
            findings.append(
                Finding(
                    "info",
                    f"the log is read-only ({read_only}): show and doctor work; undo, resolve "
                    f"and recover need write access",
                    "",
                )
            )
        if verify:
            for p in await log.verify():
                where = f"event {p.event_id}" if p.event_id is not None else "its history"
                if is_tally_problem(p):  # rule 12: a reversal cut off
                    what = "the log: a saga's reversal was cut off or rolled back (the tally "
                    what += f"of reversal records does not verify: records {p.what})"
                elif p.saga_id == LOG:  # rule 12: a saga deleted as a whole
                    what = f"the log: its sagas were {p.what}"
                elif p.what == "report mismatch":
                    what = f"saga {p.saga_id}: the stored report does not match its history"
                else:
                    what = f"saga {p.saga_id}: {where} was {p.what}"
                fix = f"{p.detail}; restore the log from a backup and find out who changed it"
                findings.append(Finding("action", what, fix))
            findings.append(Finding("ok", "history hash chain checked (--verify)", ""))
            findings.extend(await _anchor_findings(log, anchor))
        for saga_id, owner, _lease in health.stale_sagas:
            findings.append(
                Finding(
                    "action",
                    f"saga {saga_id} is still 'running' but its worker ({owner}) stopped "
                    f"renewing its lease",
                    f"run `{command('recover', db=target)}`: its unfinished steps become in_doubt",
                )
            )
        for saga_id, step_id, tool in health.in_doubt:
            findings.append(
                Finding(
                    "action",
                    f"step {step_id} ({tool}) of saga {saga_id} is in_doubt: its outcome is "
                    f"unknown",
                    f"check the vendor for that call, then "
                    f"`{command('undo', saga_id, db=target)}`; "
                    f"the report will list it as a manual action",
                )
            )
        for rev_id, saga_id, owner, generation, _lease in health.stuck_reversals:
            findings.append(
                Finding(
                    "action",
                    f"reversal {rev_id} of saga {saga_id} is stuck: its worker ({owner}, "
                    f"generation {generation}) stopped renewing its lease",
                    f"run `{command('recover', db=target)}` to resume it (nothing logged done "
                    f"is sent again)",
                )
            )
        for saga_id, owner, lease in health.live_sagas:
            findings.append(
                Finding(
                    "info",
                    f"saga {saga_id} is paused, waiting for a person's answer: no worker holds "
                    f"it; the process that gets the answer continues it"
                    if owner == "paused"  # handed off between processes (an approval gate)
                    else f"saga {saga_id} is running on {owner} (lease for {lease - now:.0f} s "
                    f"more)",
                    "",
                )
            )
        for rev_id, saga_id, owner, generation, lease in health.live_reversals:
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


def _read_only(target: str) -> str | None:
    """Why the SQLite log at ``target`` cannot be written, or ``None`` (issue 11 item 4)."""
    path = target.removeprefix("sqlite:///")
    if "://" in path or path == ":memory:" or not os.path.exists(path):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.stat(path).st_mode & 0o222 or not os.access(path, os.W_OK):
        return "the file is not writable"
    if not os.stat(folder).st_mode & 0o222 or not os.access(folder, os.W_OK):
        return "its directory is not writable"
    return None


async def _anchor_findings(log: Any, anchor: str | None) -> list[Finding]:
    """Rule 12: the log's anchor now, and the log against an earlier one (a rollback)."""
    if not hasattr(log, "anchor"):
        return []
    now, problems = await log.anchor(anchor)
    found = [
        Finding(
            "action",
            "the log: it was rolled back to before the anchor given (--anchor)",
            f"{p.detail}; restore the newest copy of the log and find out who replaced it",
        )
        for p in problems
    ]
    if anchor is not None and not problems:
        found.append(Finding("ok", "the log holds everything the anchor given covers", ""))
    found.append(
        Finding(
            "info",
            f"log anchor {now}",
            "keep it outside the log's host; `amends doctor --verify --anchor <it>` later "
            "finds the log rolled back to before it (a restored backup)",
        )
    )
    return found


def _doctor(args: argparse.Namespace) -> int:
    from ._common import safe

    try:
        if args.anchor is not None and not args.verify:
            raise ConfigError(
                f"--anchor {args.anchor[:80]!r} is checked with the history: add --verify"
            )
        findings = asyncio.run(diagnose(args.db, verify=args.verify, anchor=args.anchor))
    except ConfigError as exc:  # a bad --anchor: the log is fine, the command line is not
        if args.json:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
        else:
            sys.stderr.write(f"amends doctor: {complete(safe(exc))}\n")
        return 2
    except AmendsError as exc:
        if args.json:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
        else:
            sys.stdout.write(f"ACTION  cannot open the saga log: {complete(safe(exc))}\n")
        return 2
    needs = any(f.level == "action" for f in findings)
    if args.json:
        sys.stdout.write(
            json.dumps({"ok": not needs, "findings": [asdict(f) for f in findings]}, indent=2)
            + "\n"
        )
    else:
        for f in findings:
            # issue 11 item 6: ids and owners come from the log; never raw escapes
            sys.stdout.write(f"{f.level.upper():7} {safe(f.what)}\n")
            if f.fix:
                sys.stdout.write(f"        fix: {safe(f.fix)}\n")
        sys.stdout.write("needs action\n" if needs else "healthy\n")
    return 1 if needs else 0
