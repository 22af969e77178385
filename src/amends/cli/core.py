"""``amends show``, ``amends undo``, ``amends resolve`` and ``amends audit``.

Read commands never create a log (issue 11 item 4); undo runs only with the catalog the saga
recorded, or the one ``--catalog`` names, and refuses one that lacks the saga's tools (item 3).
Every piece of saga data is printed through :func:`~amends.cli._common.markup` (item 6).
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import math
import os
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from amends import (
    Budget,
    Catalog,
    ChainProblem,
    ConfigError,
    Engine,
    Event,
    Outcome,
    SagaLog,
    SagaNotFoundError,
    SagaRecord,
    SagaStateError,
    UndoReport,
    current_report,
)

from .._catalog_ref import SANDBOX_REF
from .._describe import sentence
from .._selection import covers, select
from .._telemetry import add_log_format, configure_logging
from ._common import (
    NO_CATALOG,
    StepRows,
    add_catalog_argument,
    add_db_argument,
    allowed_catalogs,
    allowed_specs,
    budget_flag,
    catalog_for_saga,
    load_catalog,
    markup,
    open_existing_log,
    print_command,
    print_item,
    print_json,
    print_report,
    recorded_catalog,
    run_async,
    safe,
    screen,
)
from ._hints import command
from ._preview import print_planned, print_preview

__all__ = ["register"]


def _when(ts: float | None) -> str:
    if ts is None or not math.isfinite(ts):
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def register(sub: Any) -> None:
    show = sub.add_parser(
        "show",
        help="print a saga: its steps, its reversal and report (--history for the event log); "
        "without SAGA_ID, list sagas",
    )
    show.add_argument("saga_id", nargs="?", help="saga to show (omit to list recent sagas)")
    add_db_argument(show)
    add_catalog_argument(show)  # issue 26 item 6: before undo, the preview needs the catalog
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument(
        "--history", action="store_true", help="also print the event history, one line per event"
    )
    show.add_argument(
        "--details", action="store_true", help="with --history: each event's data, in full"
    )
    show.add_argument("--tenant", help="only this tenant's sagas (listing)")
    show.add_argument(
        "--limit", type=_limit, default=50, help="most sagas to list (1-10000, default 50)"
    )
    show.set_defaults(handler=_show)

    undo = sub.add_parser(
        "undo",
        help="undo a saga (joins its reversal if one exists); exits 0 "
        "when every effect was neutralised, 1 when some still stand",
    )
    undo.add_argument("saga_id")
    add_db_argument(undo)
    add_catalog_argument(undo)
    for name, flag, meta, text, bound in (
        ("tool_calls", "--budget-calls", "N", "most tool calls", Budget.MAX_TOOL_CALLS),
        ("tokens", "--budget-tokens", "N", "most tokens", Budget.MAX_TOKENS),
        ("seconds", "--budget-seconds", "S", "most seconds", Budget.MAX_SECONDS),
    ):
        default = getattr(Budget(), name)
        undo.add_argument(
            flag,
            dest=f"budget_{name}",
            type=budget_flag(name, flag),
            default=default,
            metavar=meta,
            help=f"{text} (default {default:,g}; finite, 0 to {int(bound):,})",
        )
    undo.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue a reversal that stopped short (budget spent, a step resolved) with the "
        "new budget (rule 6); exits 2 when nothing is left to continue",
    )
    undo.add_argument(
        "--retry",
        metavar="STEP",
        action="append",
        default=[],
        help="try a failed compensation again after its cause was fixed, through the drift "
        "check (repeatable, or a comma list); the steps it gated follow, in the same reversal",
    )
    undo.add_argument(
        "--allow-missing-tools",
        action="store_true",
        help="undo with a catalog that lacks some of the saga's tools (renamed in an "
        "upgrade): the rest is undone, each missing tool's steps are left to a person",
    )
    undo.add_argument(
        "--steps",
        metavar="STEP",
        action="append",
        default=[],
        help="undo only these steps and every step that depends on them, keeping the rest "
        "(repeatable, or a comma list, e.g. --steps s3,s5); the report names what was added "
        "and why (issue 27)",
    )
    undo.add_argument(
        "--since",
        metavar="STEP",
        help="undo every step after this one (a checkpoint), keeping it and the steps before",
    )
    undo.add_argument(
        "--dry-run",
        action="store_true",
        help="preview what undo would do now (probes only, nothing else is dispatched); "
        "with --steps/--since, the preview of that selection",
    )
    undo.add_argument("--json", action="store_true", help="print the report's to_dict() as JSON")
    add_log_format(undo)
    undo.set_defaults(handler=_undo)

    resolve = sub.add_parser(
        "resolve",
        help="record that a person handled a step's manual action (its effect still stands; "
        "then `undo --continue`), or withdraw that with --withdraw",
    )
    resolve.add_argument("saga_id")
    resolve.add_argument("step_id")
    add_db_argument(resolve)
    resolve.add_argument(
        "--by", help="who handled it (default: the operating-system user running amends)"
    )
    resolve.add_argument("--note", required=True, help="what they did or checked (required)")
    resolve.add_argument(
        "--withdraw",
        action="store_true",
        help="withdraw the step's resolution (it was not handled after all); --note says why",
    )
    resolve.add_argument("--json", action="store_true", help="print JSON")
    resolve.add_argument(
        "--catalog",
        action="append",
        metavar="REF",
        help="the catalog that ran the saga, repeated in the `undo --continue` command printed "
        "when the resolution unblocks a step (resolve itself calls no tool); repeatable",
    )
    resolve.set_defaults(handler=_resolve)

    audit = sub.add_parser(
        "audit",
        help="list every catalog tool with its reversibility; flag "
        "tools that are irreversible only by default",
    )
    add_catalog_argument(audit)
    add_db_argument(audit)
    audit.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any tool has no explicit reversibility (with --mcp-config: no contract)",
    )
    audit.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="audit the upstream tools of an MCP gateway config instead: each tool's contract "
        "class, the server's annotations shown as hints only (needs amends[mcp])",
    )
    audit.add_argument(
        "--suggest",
        metavar="FILE",
        help="with --mcp-config: write a draft contract file for the tools without a contract "
        "(not used until a person reviews it)",
    )
    audit.add_argument("--json", action="store_true", help="print JSON")
    audit.set_defaults(handler=_audit)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"--limit must be between 1 and 10000, got {value}")
    return value


async def _get(log: SagaLog, saga_id: str) -> SagaRecord:
    saga = await log.get_saga(saga_id)
    if saga is None:
        raise SagaNotFoundError(
            f"no saga {saga_id!r} in {log.url}; run `{command('show')}` to list sagas",
            saga_id=saga_id,
        )
    return saga


async def _read_saga(
    log: SagaLog, saga_id: str
) -> tuple[SagaRecord, list[Event], UndoReport | None, list[ChainProblem]]:
    """The saga, its history, its stored report with the resolutions that still hold, and what
    its hash-chain check found (rule 12: a report of an edited history is never read)."""
    try:
        saga = await _get(log, saga_id)
        problems = await log.verify(saga_id)
        if not problems and hasattr(log, "undo_problems"):  # rule 12: a saga rolled back
            problems = await log.undo_problems(saga_id)
        rev = saga.reversal
        report = None
        if not problems and rev is not None and rev.report is not None:
            report = await current_report(log, UndoReport.from_dict(rev.report))
        return saga, list(await log.events(saga_id)), report, problems
    finally:
        await log.close()


def _show(args: argparse.Namespace) -> int:
    console = screen()
    if args.saga_id is None:
        return _list(args, console)
    saga, events, report, problems = run_async(
        _read_saga(open_existing_log(args.db, read_only=True), args.saga_id)
    )
    if args.json:
        print_json(_saga_json(saga, events, problems))
        return 1 if problems else 0
    if problems:  # rule 12: say so, name what is wrong, show nothing of it as the record
        _print_unverified(console, saga, problems)
        return 1
    preview = None
    if saga.reversal is None and allowed_specs(args.catalog):
        preview = run_async(_preview(args.db, args.catalog, saga)).to_dict()
    _print_saga(console, saga, report, preview)
    if args.history or args.details:
        _print_history(console, events, args.details)
    return 0


def _print_unverified(console: Console, saga: SagaRecord, problems: list[ChainProblem]) -> None:
    console.print(f"[bold]{markup(saga.title)}[/bold]")
    console.print(
        f"[red]saga {markup(saga.saga_id)}: history does not verify[/red] — its log was edited, "
        f"so its steps and report are not shown as the record:"
    )
    for p in problems:
        where = "" if p.event_id is None else f" (event {p.event_id})"
        print_item(console, f"{markup(p.what)}{markup(where)}: {markup(p.detail)}")
    fix = command("doctor", "--verify")
    print_command(
        console, f"Check the whole log with `{markup(fix)}` and restore it from a backup."
    )


def _saga_json(
    saga: SagaRecord, events: list[Event], problems: list[ChainProblem]
) -> dict[str, Any]:
    """``amends show ID --json``: the saga as logged (``SagaRecord.to_dict``, so
    ``SagaRecord.from_dict`` reads it back), the catalog it ran with, its history, and
    ``integrity`` (as the HTTP API has it); the stored report is ``null`` when the history does
    not verify (rule 12)."""
    body = saga.to_dict()
    return {
        **(_without_report(body) if problems else body),
        "catalog": recorded_catalog(saga) or None,
        "history": [e.to_dict() for e in events],
        "integrity": {"verified": not problems, "problems": [p.to_dict() for p in problems]},
    }


async def _preview(db: str, specs: list[str] | None, saga: SagaRecord) -> Any:
    """``engine.preview`` of a saga not undone yet, with the catalog the operator allows that
    the saga ran with, chosen as ``undo`` chooses it (rule 12): the same evaluation undo runs
    (rule 10), never a second opinion. Probes only; nothing is written.

    Raises:
        ConfigError: None of the allowed catalogs is the saga's, or it lacks the saga's tools.
    """
    log = open_existing_log(db, read_only=True)
    try:
        catalog = catalog_for_saga(allowed_catalogs(specs, db), saga)
    except BaseException:
        await log.close()
        raise
    engine = Engine(catalog, log=log)
    try:
        return await engine.preview(saga.saga_id)
    finally:
        await engine.close()


def _print_saga(
    console: Console,
    saga: SagaRecord,
    report: UndoReport | None,
    preview: dict[str, Any] | None = None,
) -> None:
    """Concise (issue 17): the saga, then its report if it was undone, else its steps: with
    what undo would do (``preview``, issue 26 item 6), or a hint how to see it."""
    ref = recorded_catalog(saga).get("ref")
    console.print(f"[bold]{markup(saga.title)}[/bold]")
    print_item(
        console,
        f"saga {markup(saga.saga_id)} · {markup(saga.state)} · tenant "
        f"{markup(saga.tenant or '—')} · actor {markup(saga.actor or '—')} · "
        f"{_when(saga.created_at)} · catalog {markup(ref or 'not recorded')}",
        indent=0,
    )
    rev = saga.reversal
    if report is not None:
        console.print()
        print_report(report, console)
        hint = command("show", saga.saga_id, "--history")
        print_command(console, f"[dim]The event log: {markup(hint)}[/dim]")
        return
    if preview is not None:
        print_planned(console, saga, preview, _when(preview.get("checked_at")))
        return
    console.print("[bold]Steps[/bold]")
    rows = StepRows()
    for s in saga.steps:
        # issue 26 item 1: a tool with no declared class is not "irreversible" by its owner's word
        cls = (s.effective or s.declared) if s.explicit else "not declared"
        details = []
        if s.deps:
            details.append(f"after: {markup(', '.join(s.deps))}")
        if s.inverse:
            inv = sentence(s.inverse["tool"], s.inverse.get("args", {}))
            details.append(f"undo: {markup(inv)}")
        if s.violation:
            details.append(f"[red]contract violation:[/red] {markup(s.violation)}")
        rows.add(s.step_id, cls, s.state, sentence(s.tool, s.args), details)
    rows.print(console)
    if rev is None:
        # issue 26 items 3, 6: the preview and undo need the catalog, and only the operator
        # names one (rule 12: the log's reference is only a hint); without one allowed,
        # `undo` refuses, so no undo command is printed: none would run as printed
        see = command("show", saga.saga_id)
        named = f" (this log names {markup(repr(ref))}: check it is yours)" if ref else ""
        console.print(
            f"Not undone. What undo would do needs the catalog that ran it: allow it with "
            f"--catalog MODULE:ATTR or AMENDS_CATALOGS{named}, then"
        )
        print_command(console, f"{markup(see)}", indent=2)
        console.print("shows it, with the commands that preview and undo it.")
    else:
        console.print(f"Reversal {markup(rev.reversal_id)}: {markup(rev.state)}")


def _print_history(console: Console, events: list[Event], details: bool) -> None:
    """The event log, one line per event cut to the width (issue 26 item 5: it was a table of
    dict dumps, 354 lines at 80 columns); ``details`` adds each event's data, in full, under it."""
    days = {_when(e.at)[:10] for e in events}
    one_day = len(days) == 1
    title = f"History (append-only{', ' + next(iter(days)) + ' UTC' if one_day else ''})"
    console.print(f"[bold]{title}[/bold]")
    for e in events:
        at = _when(e.at)[11:] if one_day else _when(e.at)
        line = Text.assemble(
            (f"{e.event_id:>4} ", "dim"), f"{at} ", (safe(e.kind), "bold"),
            f" {safe(e.step_id)}" if e.step_id else "", f"  {safe(_summary(e.data))}",
        )  # fmt: skip
        console.print(line, no_wrap=True, overflow="ellipsis", crop=True)
        if details and e.data:
            data = escape(safe(json.dumps(e.data, indent=2, default=str), keep_newlines=True))
            print_item(console, f"[dim]{data}[/dim]", indent=6)
    if not details:
        more = command("show", events[0].saga_id, "--history", "--details") if events else ""
        print_command(console, f"[dim]Each event's data: {markup(more)}[/dim]")


def _summary(data: Any) -> str:
    """An event's data in a few words: its detail, the call it logs, or its plain fields."""
    if not isinstance(data, dict) or not data:
        return ""
    # who acted stays on the line (issue 21 item 4: an approval's "by" is what history is for)
    who = f"by {data['by']}: " if isinstance(data.get("by"), str) else ""
    if isinstance(data.get("detail"), str):
        return who + str(data["detail"])
    if isinstance(data.get("tool"), str) and isinstance(data.get("args"), dict):
        return who + sentence(data["tool"], data["args"])
    if isinstance(data.get("title"), str):
        return who + str(data["title"])
    plain = [f"{k}={v}" for k, v in data.items() if isinstance(v, str | int | float | bool)]
    nested = [k for k, v in data.items() if isinstance(v, dict | list)]
    return " ".join(plain + nested)


def _list(args: argparse.Namespace, console: Console) -> int:
    async def go() -> Any:
        log = open_existing_log(args.db, read_only=True)
        try:
            sagas = await log.list_sagas(tenant=args.tenant, limit=args.limit)
            # rule 12: a saga whose history does not verify never lists its stored outcome
            return sagas, {s.saga_id for s in sagas if await log.verify(s.saga_id)}
        finally:
            await log.close()

    sagas, unverified = run_async(go())
    if args.json:
        # issue 9.7: each saga as its record says (list_sagas reads no steps nor resolutions,
        # so those keys are left out rather than shown empty); "reversal" is the reversal record.
        print_json([_listed_json(s, s.saga_id in unverified) for s in sagas])
        return 0
    _print_list(console, sagas, args.db, unverified)
    return 0


def _listed_json(saga: SagaRecord, unverified: bool) -> dict[str, Any]:
    body = {k: v for k, v in saga.to_dict().items() if k not in ("steps", "resolutions")}
    return {
        **(_without_report(body) if unverified else body),
        "integrity": {"verified": not unverified},
    }


def _without_report(body: dict[str, Any]) -> dict[str, Any]:
    """A saga's JSON with its stored report ``null``: the history does not verify (rule 12)."""
    rev = body.get("reversal")
    return {**body, "reversal": {**rev, "report": None}} if isinstance(rev, dict) else body


def _minute(ts: float | None) -> str:
    return _when(ts)[:16] + "Z" if ts is not None and math.isfinite(ts) else "—"


def _undo_word(saga: SagaRecord, unverified: bool) -> str:
    if unverified:
        return "history does not verify"
    if saga.reversal is None:
        return "—"
    return str((saga.reversal.report or {}).get("status", saga.reversal.state))


_WIDE = 110
"""From this many columns the list is a table; below, two lines per saga (issue 26 item 5)."""


def _print_list(console: Console, sagas: list[SagaRecord], db: str, unverified: set[str]) -> None:
    """Sagas laid out for the width: ids, states and times are never broken, the title wraps
    by whole words (at 80 columns the table broke "comple/ted", "cannot/_undo", "create/d")."""
    rows = [
        (
            s.saga_id,
            s.title,
            s.tenant or "—",
            s.state,
            _undo_word(s, s.saga_id in unverified),
            _when(s.created_at)[:16] + "Z",
        )
        for s in sagas
    ]
    title = f"Sagas in {markup(db)} ({len(rows)})"
    if console.width >= _WIDE:
        table = Table(title=title, header_style="bold")
        for col in ("saga", "title", "tenant", "state", "undo", "created"):
            table.add_column(col, no_wrap=col != "title", overflow="fold")
        for row in rows:
            table.add_row(*(markup(v) for v in row))
        console.print(table)
        return
    console.print(f"[bold]{title}[/bold]")
    for saga_id, saga_title, tenant, state, undo, created in rows:
        print_item(console, f"[bold]{markup(saga_title)}[/bold]", indent=0)
        facts = [saga_id, f"tenant {tenant}", state, f"undo: {undo}", created]
        print_item(console, " · ".join(markup(f) for f in facts), indent=2)


def _undo(args: argparse.Namespace) -> int:
    budget = Budget(
        tool_calls=args.budget_tool_calls, tokens=args.budget_tokens, seconds=args.budget_seconds
    )
    retry = [s.strip() for item in args.retry for s in item.split(",") if s.strip()]
    modes = [m for m, on in (("--continue", args.continue_), ("--dry-run", args.dry_run),
                             ("--retry", bool(retry))) if on]  # fmt: skip
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)} exclude each other; give one of them")
    args.steps = _selected(args, modes)
    configure_logging(args.log_format)  # issue 28: a JSON line per reversal event, on stderr
    result = run_async(_undo_async(args, budget, retry))
    if not isinstance(result, UndoReport):  # the preview
        data = result.to_dict()
        if args.json:
            print_json(data)
        else:
            print_preview(data, _when(data.get("checked_at")))
            _print_selection(data.get("selection"))
        return 0
    if args.json:
        print_json(result.to_dict())
    else:
        if args.already_at is not None:  # issue 26 item 6: never the old report unannounced
            screen().print(
                f"Already undone at {markup(_when(args.already_at))}; nothing was done now. "
                f"The report of that undo:"
            )
        print_report(result)
        _print_selection(result.selection)
    return 1 if result.status == Outcome.CANNOT_UNDO else 0


def _selected(args: argparse.Namespace, modes: list[str]) -> list[str] | None:
    """``--steps`` as a list (``None`` when not given), refused with another mode."""
    steps = [s.strip() for item in args.steps for s in item.split(",") if s.strip()]
    if args.steps and not steps:
        raise ConfigError(
            f"--steps {' '.join(args.steps)!r} names no step; e.g. --steps s3,s5 (`amends show "
            f"{args.saga_id}` lists the steps)"
        )
    chosen = [m for m, on in (("--steps", bool(steps)), ("--since", args.since)) if on]
    clash = [m for m in modes if m != "--dry-run"]
    if chosen and clash:
        raise ConfigError(
            f"{chosen[0]} and {clash[0]} exclude each other: a continuation or a retry keeps "
            f"the reversal's selection; give one of them"
        )
    return steps or None


def _print_selection(selection: Any) -> None:
    """Issue 27: what a selective undo was asked, what its closure added and why, what stays."""
    if not selection:
        return
    console = screen()
    asked = ", ".join(selection.get("asked", ()))
    console.print(f"[bold]Selected[/bold]: {markup(asked)} and what depends on it")
    for a in selection.get("added", ()):
        print_item(console, f"+ {markup(a['step_id'])}: {markup(a['reason'])}", indent=2)
    kept = ", ".join(selection.get("kept", ())) or "none"
    print_item(console, f"kept as they are: {markup(kept)}", indent=0)


async def _undo_async(args: argparse.Namespace, budget: Budget, retry: list[str]) -> Any:
    log = open_existing_log(args.db)
    try:
        saga = await _get(log, args.saga_id)
        if (args.continue_ or retry) and saga.reversal is None:
            # as the HTTP API's 409 nothing_to_continue: say so, run nothing
            raise SagaStateError(
                f"nothing to {'continue' if args.continue_ else 'retry'}: saga "
                f"{saga.saga_id} has no reversal yet; undo it first: "
                f"`{command('undo', saga.saga_id)}`",
                saga_id=saga.saga_id,
            )
        rev = saga.reversal
        # a plain undo of a saga whose reversal finished joins it and does nothing (rule 6)
        plain = not (args.dry_run or retry or args.continue_)
        # issue 27: a reversal that does not cover this selection (or the whole saga) is
        # extended by this undo, so it is not "already undone"
        done = rev is not None and rev.state == "done"
        if done and rev is not None:
            done = covers(saga, rev.selection, select(saga, args.steps, args.since))
        args.already_at = rev.finished_at if plain and rev and done else None
        catalog = catalog_for_saga(
            allowed_catalogs(args.catalog, args.db), saga,
            continuing=args.continue_ or bool(retry), allow_missing=args.allow_missing_tools,
        )  # fmt: skip
    except BaseException:
        await log.close()
        raise
    engine = Engine(catalog, log=log, continue_hint=_continue_hint(args))
    allow = args.allow_missing_tools
    try:
        if args.dry_run:
            return await engine.preview(
                args.saga_id, budget=budget, steps=args.steps, since=args.since
            )
        if retry:
            return await engine.retry(args.saga_id, retry, budget=budget, by=_os_user())
        if args.continue_:
            return await engine.resume(args.saga_id, budget=budget, allow_missing_tools=allow)
        return await engine.undo(
            args.saga_id, budget=budget, allow_missing_tools=allow, steps=args.steps,
            since=args.since,
        )  # fmt: skip
    finally:
        await engine.close()


def _continue_hint(args: argparse.Namespace) -> str:
    """How to continue this reversal if it stops short, as a command that runs as printed
    (issue 26 item 3: this --db and --catalog, the budget given again, no placeholders)."""
    words = ["undo", args.saga_id, "--continue"]
    for name, flag in (("tool_calls", "--budget-calls"), ("tokens", "--budget-tokens"),
                       ("seconds", "--budget-seconds")):  # fmt: skip
        value = getattr(args, f"budget_{name}")
        if value > getattr(Budget(), name):  # a smaller one given: the default is larger
            words += [flag, f"{value:g}"]
    if args.allow_missing_tools:
        words.append("--allow-missing-tools")
    return command(*words)


def _os_user() -> str:
    """Who runs this command: the CLI's identity is the operating-system user (rule 12)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name (a container without /etc/passwd entry)
        return f"uid {os.getuid()}"


def _resolve(args: argparse.Namespace) -> int:
    by = args.by if args.by is not None else _os_user()

    async def go() -> tuple[Any, list[str]]:
        log = open_existing_log(args.db)
        # resolve() calls no tool: an empty catalog suffices, whatever ran the saga; what a
        # continuation would attempt is judged from the log (the steps' recorded dependencies)
        engine = Engine(Catalog(), log=log)
        try:
            if args.withdraw:
                return await engine.withdraw_resolution(
                    args.saga_id, args.step_id, by=by, note=args.note
                ), []
            res = await engine.resolve(args.saga_id, args.step_id, by=by, note=args.note)
            return res, await engine.continuable(args.saga_id)
        finally:
            await engine.close()

    res, unblocked = run_async(go())
    if args.json:
        print_json(res.to_dict())
    elif res.withdrawn:
        screen().print(
            f"step {markup(args.step_id)} of saga {markup(args.saga_id)}: resolution withdrawn "
            f"by {markup(res.by)}; its manual action is open again"
        )
    elif unblocked:  # issue 26 item 3: a continue hint only when continuing would do something
        print_command(
            screen(),
            f"step {markup(args.step_id)} of saga {markup(args.saga_id)}: handled by "
            f"{markup(res.by)}. Continue the reversal (it would attempt "
            f"{markup(', '.join(unblocked))}) with: "
            f"{markup(command('undo', args.saga_id, '--continue'))}",
        )
    else:
        screen().print(
            f"step {markup(args.step_id)} of saga {markup(args.saga_id)}: handled by "
            f"{markup(res.by)}. No step waited for it: the reversal has nothing to continue."
        )
    return 0


def _audit(args: argparse.Namespace) -> int:
    if args.mcp_config is not None or args.suggest is not None:
        return _audit_mcp(args)
    # issue 26 item 4: the catalogs the operator named or allowed, as undo loads them; never
    # the sandbox's by default (it audited the demo's 34 tools in a user's project, exit 0)
    specs = allowed_specs(args.catalog)
    if not specs:
        raise ConfigError(f"amends audit: {NO_CATALOG}")
    catalogs = {name: load_catalog(spec, args.db) for name, spec in specs.items()}
    implicit = [t.name for c in catalogs.values() for t in c if not t.explicit]
    if args.json:
        print_json(
            [
                {
                    "tool": t.name,
                    "reversibility": t.reversibility.value,
                    "explicit": t.explicit,
                    "description": t.description,
                    "catalog": name,
                }
                for name, catalog in catalogs.items()
                for t in catalog
            ]
        )
    else:
        console = screen()
        for name, catalog in catalogs.items():
            _print_audit(console, name, catalog)
    return 1 if args.strict and implicit else 0


def _print_audit(console: Console, name: str, catalog: Catalog) -> None:
    """One catalog's tools, titled with the catalog's name (and saying so when it is the
    sandbox's simulated vendors, not the user's)."""
    whose = " — the sandbox's simulated vendors, not yours" if name == SANDBOX_REF else ""
    title = f"Catalog {markup(name)}{whose}: {len(catalog)} tools"
    if console.width < _audit_table_width(catalog):  # issue 26 item 5: "irreversibl/e"
        console.print(f"[bold]{title}[/bold]")
        for t in catalog:
            said = (
                t.reversibility.value
                if t.explicit
                else "[red]not declared[/red] — treated as irreversible"
            )
            print_item(console, f"[bold]{markup(t.name)}[/bold] · {said}")
            if t.description:
                print_item(console, markup(t.description), indent=4)
    else:
        table = Table(title=title, header_style="bold")
        for col in ("tool", "reversibility", "declared"):
            table.add_column(col, no_wrap=True)
        table.add_column("description", overflow="fold", ratio=1)
        for t in catalog:
            # issue 26: "not declared" is its own answer, never shown as a declared class
            declared = "yes" if t.explicit else "[red]not declared[/red]"
            cls = t.reversibility.value if t.explicit else "treated as irreversible"
            table.add_row(markup(t.name), cls, declared, markup(t.description))
        console.print(table)
    implicit = [t.name for t in catalog if not t.explicit]
    if implicit:
        console.print(
            f"[red]{len(implicit)} tool(s) not declared — treated as irreversible:[/red] "
            f"{markup(', '.join(implicit))}. Undo can only ask a person to look at what "
            f"they did; declare reversibility=... on each (read_only for a tool that only "
            f"reads)."
        )


def _audit_table_width(catalog: Catalog) -> int:
    """The columns the audit table needs to keep every name and class whole (its borders and
    a 12-column description); narrower, each tool is a line of its own."""
    names = max((len(t.name) for t in catalog), default=4)
    classes = max(
        (len(t.reversibility.value if t.explicit else "treated as irreversible") for t in catalog),
        default=13,
    )
    return names + max(classes, len("reversibility")) + len("not declared") + 13 + 12


def _audit_mcp(args: argparse.Namespace) -> int:
    """``amends audit --mcp-config FILE [--suggest DRAFT]``: the gateway's own audit (issue 14),
    imported only here so the core CLI never needs the MCP SDK."""
    if args.mcp_config is None:
        raise ConfigError(
            f"--suggest {args.suggest!r} writes draft contracts for an MCP gateway's upstream "
            f"tools; name the gateway config too: amends audit --mcp-config gateway.toml "
            f"--suggest {args.suggest}"
        )
    if args.catalog:
        raise ConfigError(
            f"give either --catalog {args.catalog[0]!r} or --mcp-config {args.mcp_config!r}, not "
            f"both; the gateway config names its own contracts"
        )
    from ..integrations.mcp.cli import run_audit

    return run_audit(
        args.mcp_config, suggest_path=args.suggest, as_json=args.json, strict=args.strict
    )
