"""``amends show``, ``amends undo`` and ``amends audit``."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..budget import Budget
from ..engine import Engine
from ..errors import SagaNotFoundError
from ..log import open_log
from ..log.base import SagaLog
from ..report import Outcome
from ._common import add_db_argument, load_catalog, print_json, print_report, run_async

__all__ = ["register"]


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def register(sub: Any) -> None:
    show = sub.add_parser(
        "show",
        help="print a saga, its steps, its reversal and its history; without SAGA_ID, list sagas",
    )
    show.add_argument("saga_id", nargs="?", help="saga to show (omit to list recent sagas)")
    add_db_argument(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--tenant", help="only this tenant's sagas (listing)")
    show.add_argument("--limit", type=int, default=50, help="most sagas to list (default 50)")
    show.set_defaults(handler=_show)

    undo = sub.add_parser(
        "undo",
        help="undo a saga (joins its reversal if one exists); exits 0 "
        "when every effect was neutralised, 1 when some still stand",
    )
    undo.add_argument("saga_id")
    add_db_argument(undo)
    undo.add_argument(
        "--catalog",
        help="MODULE:ATTR of the catalog (default $AMENDS_CATALOG or amends.sandbox:demo_catalog)",
    )
    undo.add_argument(
        "--budget-calls",
        type=int,
        default=Budget.tool_calls,
        metavar="N",
        help=f"most tool calls (default {Budget.tool_calls})",
    )
    undo.add_argument(
        "--budget-tokens",
        type=int,
        default=Budget.tokens,
        metavar="N",
        help=f"most tokens (default {Budget.tokens})",
    )
    undo.add_argument(
        "--budget-seconds",
        type=float,
        default=Budget.seconds,
        metavar="S",
        help=f"most seconds (default {Budget.seconds:g})",
    )
    undo.add_argument("--json", action="store_true", help="print the report's to_dict() as JSON")
    undo.set_defaults(handler=_undo)

    audit = sub.add_parser(
        "audit",
        help="list every catalog tool with its reversibility; flag "
        "tools that are irreversible only by default",
    )
    audit.add_argument("--catalog", help="MODULE:ATTR of the catalog")
    add_db_argument(audit)
    audit.add_argument(
        "--strict", action="store_true", help="exit 1 if any tool has no explicit reversibility"
    )
    audit.add_argument("--json", action="store_true", help="print JSON")
    audit.set_defaults(handler=_audit)


async def _read_saga(log: SagaLog, saga_id: str) -> tuple[Any, Any]:
    try:
        saga = await log.get_saga(saga_id)
        if saga is None:
            raise SagaNotFoundError(
                f"no saga {saga_id!r} in {log.url}; run `amends show --db {log.url}` to list sagas",
                saga_id=saga_id,
            )
        return saga, await log.events(saga_id)
    finally:
        await log.close()


def _show(args: argparse.Namespace) -> int:
    console = Console()
    if args.saga_id is None:
        return _list(args, console)
    saga, events = run_async(_read_saga(open_log(args.db), args.saga_id))
    if args.json:
        print_json(
            {
                "saga_id": saga.saga_id,
                "title": saga.title,
                "tenant": saga.tenant,
                "actor": saga.actor,
                "state": saga.state,
                "created_at": saga.created_at,
                "steps": [
                    {
                        "step_id": s.step_id,
                        "tool": s.tool,
                        "args": s.args,
                        "deps": list(s.deps),
                        "declared": s.declared,
                        "effective": s.effective,
                        "state": s.state,
                        "inverse": s.inverse,
                        "expectation": s.expectation,
                        "violation": s.violation,
                        "error": s.error,
                    }
                    for s in saga.steps
                ],
                "reversal": None
                if saga.reversal is None
                else {
                    "reversal_id": saga.reversal.reversal_id,
                    "state": saga.reversal.state,
                    "report": saga.reversal.report,
                },
                "history": [
                    {
                        "event_id": e.event_id,
                        "at": e.at,
                        "kind": e.kind,
                        "step_id": e.step_id,
                        "data": e.data,
                    }
                    for e in events
                ],
            }
        )
        return 0
    console.print(
        f"[bold]{escape(saga.title)}[/bold]  saga {saga.saga_id} · {saga.state} · "
        f"tenant {saga.tenant or '—'} · actor {saga.actor or '—'} · "
        f"{_when(saga.created_at)}"
    )
    steps = Table(title="Steps", header_style="bold")
    for col in ("step", "tool", "class", "state", "after", "inverse"):
        steps.add_column(col, overflow="fold")
    for s in saga.steps:
        cls = s.effective or s.declared
        if s.violation:
            cls += " (contract violation)"
        inverse = f"{s.inverse['tool']}({s.inverse['args']})" if s.inverse else "—"
        steps.add_row(s.step_id, s.tool, cls, s.state, ", ".join(s.deps) or "—", escape(inverse))
    console.print(steps)
    if saga.reversal is not None:
        console.print(f"Reversal {saga.reversal.reversal_id}: {saga.reversal.state}")
    history = Table(title="History (append-only)", header_style="bold")
    for col in ("#", "at", "event", "step", "data"):
        history.add_column(col, overflow="fold")
    for e in events:
        history.add_row(
            str(e.event_id),
            _when(e.at),
            e.kind,
            e.step_id or "",
            escape(str(e.data)) if e.data else "",
        )
    console.print(history)
    return 0


def _list(args: argparse.Namespace, console: Console) -> int:
    async def go() -> Any:
        log = open_log(args.db)
        try:
            return await log.list_sagas(tenant=args.tenant, limit=args.limit)
        finally:
            await log.close()

    sagas = run_async(go())
    if args.json:
        print_json(
            [
                {
                    "saga_id": s.saga_id,
                    "title": s.title,
                    "tenant": s.tenant,
                    "state": s.state,
                    "created_at": s.created_at,
                    "reversal": s.reversal.state if s.reversal else None,
                }
                for s in sagas
            ]
        )
        return 0
    table = Table(title=f"Sagas in {args.db}", header_style="bold")
    for col in ("saga", "title", "tenant", "state", "undo", "created"):
        table.add_column(col, overflow="fold")
    for s in sagas:
        undo = (
            "—"
            if s.reversal is None
            else ((s.reversal.report or {}).get("status", s.reversal.state))
        )
        table.add_row(
            s.saga_id, escape(s.title), s.tenant or "—", s.state, undo, _when(s.created_at)
        )
    console.print(table)
    return 0


def _undo(args: argparse.Namespace) -> int:
    budget = Budget(
        tool_calls=args.budget_calls, tokens=args.budget_tokens, seconds=args.budget_seconds
    )

    async def go() -> Any:
        log = open_log(args.db)
        engine = Engine(load_catalog(args.catalog, args.db), log=log)
        try:
            return await engine.undo(args.saga_id, budget=budget)
        finally:
            await engine.close()

    report = run_async(go())
    if args.json:
        print_json(report.to_dict())
    else:
        print_report(report)
    return 1 if report.status == Outcome.CANNOT_UNDO else 0


def _audit(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog, args.db)
    implicit = [t.name for t in catalog if not t.explicit]
    if args.json:
        print_json(
            [
                {
                    "tool": t.name,
                    "reversibility": t.reversibility.value,
                    "explicit": t.explicit,
                    "description": t.description,
                }
                for t in catalog
            ]
        )
    else:
        console = Console()
        table = Table(title=f"Catalog: {len(catalog)} tools", header_style="bold")
        for col in ("tool", "reversibility", "declared", "description"):
            table.add_column(col, overflow="fold")
        for t in catalog:
            declared = "yes" if t.explicit else "[red]no — irreversible by default[/red]"
            table.add_row(t.name, t.reversibility.value, declared, escape(t.description))
        console.print(table)
        if implicit:
            console.print(
                f"[red]{len(implicit)} tool(s) declare no reversibility and are "
                f"treated as irreversible:[/red] {', '.join(implicit)}. Declare "
                f"reversibility=... on each."
            )
    return 1 if args.strict and implicit else 0
