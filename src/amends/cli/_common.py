"""Helpers every command group shares: the ``--db`` argument, loading a catalog, printing.

Nothing outside :mod:`amends.cli` imports from here.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..contracts import Catalog
from ..errors import ConfigError
from ..report import UndoReport
from ..toml_catalog import load_toml_catalog

Handler = Callable[[argparse.Namespace], int]


def add_db_argument(parser: argparse.ArgumentParser, default: str = "amends.db") -> None:
    parser.add_argument(
        "--db",
        default=default,
        help=f"saga log: a path or URL (sqlite:///f.db, postgresql://...); default {default}",
    )


def load_catalog(spec: str | None, db: str) -> Catalog:
    """The catalog named by ``MODULE:ATTR`` (a Catalog, or a callable of the db returning one)
    or by a ``.toml`` catalog file.

    Default: ``$AMENDS_CATALOG``, else the sandbox's ``amends.sandbox:demo_catalog``.

    Raises:
        ConfigError: The spec is malformed, cannot be imported, or is not a catalog.
    """
    spec = spec or os.environ.get("AMENDS_CATALOG") or "amends.sandbox:demo_catalog"
    if spec.endswith(".toml"):
        return load_toml_catalog(spec)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"--catalog {spec!r} must look like MODULE:ATTR, e.g. myapp.tools:catalog"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"--catalog {spec!r}: cannot import {module_name!r} ({exc}); check the "
            f"module path and that it is installed in this environment"
        ) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"--catalog {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not isinstance(obj, Catalog) and callable(obj):
        obj = obj(db)
    if not isinstance(obj, Catalog):
        raise ConfigError(
            f"--catalog {spec!r} is {type(obj).__name__}, not an amends.Catalog "
            f"(or a function of the db path returning one)"
        )
    return obj


def print_report(report: UndoReport, console: Console | None = None) -> None:
    """Print an undo report with rich: headline, steps, residue, manual actions."""
    console = console or Console()
    style = {"fully_reversed": "green", "partially_reversed": "yellow", "cannot_undo": "red"}
    console.print(
        f"[bold]{escape(report.title or report.saga_id)}[/bold]  "
        f"[{style[report.status.value]}]{report.status.value}[/] — "
        f"{escape(report.headline)}"
    )
    console.print(
        f"saga {report.saga_id} · reversal {report.reversal_id} · "
        f"{report.tool_calls} tool calls · {report.tokens} tokens · "
        f"{report.seconds:.2f}s"
    )
    table = Table(show_lines=False, header_style="bold")
    for col in ("step", "tool", "verb", "state", "detail"):
        table.add_column(col, overflow="fold")
    for s in report.steps:
        table.add_row(
            s.step_id,
            s.tool,
            s.verb or "—",
            s.state.value,
            escape(s.detail + (f" [contract violation: {s.violation}]" if s.violation else "")),
        )
    console.print(table)
    if report.residue:
        console.print("[bold]Residue[/bold] (what remains after compensation)")
        for r in report.residue:
            when = f"settles {r.settles_at}" if r.settles_at else "does not settle"
            console.print(
                f"  • {escape(r.what)} — affects "
                f"{escape(', '.join(r.parties) or 'no one else')}; {when}"
            )
    if report.manual_actions:
        console.print("[bold]Needs a person[/bold]")
        for m in report.manual_actions:
            console.print(f"  • {escape(f'[{m.step_id}]')} {escape(m.what)}")
            console.print(
                f"    who: {escape(m.who)}"
                + (f"; affected: {escape(', '.join(m.parties))}" if m.parties else "")
            )
            if m.draft:
                console.print(f"    draft: {escape(m.draft)}")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
