"""Helpers every command group shares: the ``--db`` argument, opening a log that must exist,
loading the catalog a saga was run with, printing safely.

Nothing outside :mod:`amends.cli` imports from here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from amends import (
    AmendsError,
    Budget,
    Catalog,
    ConfigError,
    LogError,
    SagaLog,
    SagaRecord,
    UndoReport,
    load_toml_catalog,
    open_log,
    tag_catalog,
)

from .._catalog_ref import Loader, choose_catalog, needed_tools
from .._report import state_label
from .._resolution import UNCHECKED
from .._visible import visible
from ._hints import command

Handler = Callable[[argparse.Namespace], int]


def safe(value: Any, *, keep_newlines: bool = False) -> str:
    """``str(value)`` as the terminal may show it (:func:`amends._visible.visible`: every
    character a person cannot see or that moves other text as a visible escape, issue 11 item
    6 and issue 21); ``keep_newlines`` lets a multi-line message keep its line breaks."""
    return visible(str(value), keep="\n" if keep_newlines else "")


def screen(*, stderr: bool = False) -> Console:
    """The console every CLI screen prints on. Emoji codes are off: rich turned a title's
    ``:white_check_mark:`` into a check mark and ``:warning:bob@x.com`` into ``⚠bob@x.com``, so
    what a person read was not what the log holds (issue 21; rule 8). amends writes none."""
    return Console(emoji=False, stderr=stderr)


def markup(value: Any) -> str:
    """:func:`safe`, then escaped for rich markup: for untrusted text inside a rich string."""
    return escape(safe(value))


def add_db_argument(parser: argparse.ArgumentParser, default: str = "amends.db") -> None:
    parser.add_argument(
        "--db",
        default=default,
        help=f"saga log: a path or URL (sqlite:///f.db, postgresql://...); default {default}",
    )


CATALOG_HELP = (
    "a catalog this command may load: MODULE:ATTR (a module of this environment, or of the "
    "current directory) or a .toml file; repeatable. Default: $AMENDS_CATALOGS "
    "(comma-separated) or $AMENDS_CATALOG. A saga's recorded catalog only selects among these: "
    "amends never loads a catalog named in the log"
)


NO_CATALOG = (
    "no catalog was named; pass yours with --catalog MODULE:ATTR (e.g. --catalog "
    "myproj.tools:catalog, run from your project's directory) or --catalog tools.toml, or set "
    "AMENDS_CATALOGS; the demo's tools are --catalog amends.sandbox:demo_catalog. Where a "
    "catalog lives and how amends finds it: docs/your-project.md"
)
"""The refusal when a command needs a catalog and the operator named none (issue 26 item 4)."""


def add_catalog_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", action="append", metavar="REF", help=CATALOG_HELP)


def budget_flag(name: str, flag: str) -> Callable[[str], Any]:
    """An argparse ``type=`` for one budget field: finite, non-negative, within its bound."""

    def parse(text: str) -> Any:
        try:
            value: Any = int(text) if name != "seconds" else float(text)
        except ValueError:
            kind = "a whole number" if name != "seconds" else "a number of seconds"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        try:
            Budget.check_value(name, value, flag=flag)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = flag  # argparse names the flag's type in its messages
    return parse


def open_existing_log(db: str, *, read_only: bool = False) -> SagaLog:
    """The saga log at ``db``, which must already exist (issue 11 item 4: a mistyped ``--db``
    is an error naming the path, never a new empty log).

    Raises:
        LogError: No log there, or the file is not an amends log.
    """
    path = db.removeprefix("sqlite:///")
    if "://" not in path and os.path.isdir(path):
        raise LogError(
            f"--db {path!r} is a directory; give the saga log file, e.g. --db "
            f"{os.path.join(path, 'amends.db')}",
            path=path,
        )
    return open_log(db, must_exist=True, read_only=read_only)


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    # The operator's module may live in the current directory; it comes last on the import path
    # (issue 21 item 2), so a file there can never stand in for a module found elsewhere.
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


def load_catalog(spec: str | None, db: str) -> Catalog:
    """The catalog named by ``MODULE:ATTR`` (a Catalog, or a callable of the db returning one),
    by a ``.toml`` catalog file, or by an MCP gateway's ``.toml`` config (its upstream tools),
    as the operator gave it (never a name read from a log, rule 12). ``MODULE`` is looked up on
    the import path, then in the current directory.

    Default: ``$AMENDS_CATALOG``; never the sandbox's unless named (issue 26 item 4: a command
    run in a user's project must not silently act on, or audit, the demo's tools).

    Raises:
        ConfigError: No catalog named, or the spec is malformed, cannot be imported, or is not
            a catalog.
    """
    spec = spec or os.environ.get("AMENDS_CATALOG")
    if not spec:
        raise ConfigError(NO_CATALOG)
    if spec.endswith(".toml"):
        from ..integrations.mcp.undo_catalog import gateway_catalog_at, is_gateway_config

        if is_gateway_config(spec):  # an MCP gateway's config: its upstream tools (issue 24)
            return gateway_catalog_at(spec)
        return load_toml_catalog(spec)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"--catalog {spec!r} must look like MODULE:ATTR, e.g. myapp.tools:catalog, or be a "
            f".toml file"
        )
    try:
        with _cwd_importable():
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"--catalog {spec!r}: cannot import {module_name!r} ({exc}); check the "
            f"module path, run amends from the directory that holds it, and that it is "
            f"installed in this environment"
        ) from exc
    except Exception as exc:  # the user's module failed while importing: one line, its cause
        raise ConfigError(
            f"--catalog {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}; "
            f"fix that module"
        ) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"--catalog {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not isinstance(obj, Catalog) and callable(obj):
        try:
            obj = obj(db)
        except AmendsError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"--catalog {spec!r}: calling {attr}({db!r}) raised {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(obj, Catalog):
        raise ConfigError(
            f"--catalog {spec!r} is {type(obj).__name__}, not an amends.Catalog "
            f"(or a function of the db path returning one)"
        )
    return tag_catalog(obj, spec)


def recorded_catalog(saga: SagaRecord) -> dict[str, Any]:
    """``meta["catalog"]`` of a saga (empty for sagas logged before catalogs were recorded)."""
    meta = getattr(saga, "meta", None) or {}
    found = meta.get("catalog") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def catalog_name(spec: str) -> str:
    """The name a saga records for the catalog ``spec`` loads: a TOML file by its absolute path
    (what :func:`amends.load_toml_catalog` tags), ``MODULE:ATTR`` as it is."""
    if spec.endswith(".toml"):
        return str(Path(spec).resolve())
    return spec


def allowed_specs(specs: Sequence[str] | None) -> dict[str, str]:
    """The catalogs the operator allows this command to load (issue 21 item 2, rule 12):
    ``--catalog`` (repeatable), else ``$AMENDS_CATALOGS`` (comma-separated) and
    ``$AMENDS_CATALOG``. The name a saga records for each -> the spec as given."""
    given = list(specs or ())
    source = "--catalog"
    if not given:
        given = [s.strip() for s in os.environ.get("AMENDS_CATALOGS", "").split(",") if s.strip()]
        if os.environ.get("AMENDS_CATALOG"):
            given.append(os.environ["AMENDS_CATALOG"])
        source = "$AMENDS_CATALOGS / $AMENDS_CATALOG"
    out: dict[str, str] = {}
    for spec in given:
        if spec.endswith(".toml") and not Path(spec).is_file():
            # bad input: a file the operator named is checked now, not only when a saga's
            # recorded name happens to select it (another allowed catalog hid the typo)
            raise ConfigError(
                f"catalog file {spec!r} does not exist (named by {source}; looked for "
                f"{Path(spec).resolve()}); give the path of a TOML catalog file, or leave it "
                f"out; nothing was done"
            )
        out.setdefault(catalog_name(spec), spec)
    return out


def allowed_catalogs(specs: Sequence[str] | None, db: str) -> dict[str, Loader]:
    """:func:`allowed_specs` as name -> loader; each catalog loads once, when first asked."""
    return {name: _once(spec, db) for name, spec in allowed_specs(specs).items()}


def _once(spec: str, db: str) -> Loader:
    loaded: list[Catalog] = []

    def load() -> Catalog:
        if not loaded:
            loaded.append(load_catalog(spec, db))
        return loaded[0]

    return load


def _warn(text: str) -> None:
    sys.stderr.write(f"amends: warning: {safe(text)}\n")


def catalog_for_saga(
    allowed: dict[str, Loader],
    saga: SagaRecord,
    *,
    continuing: bool = False,
    allow_missing: bool = False,
) -> Catalog:
    """The catalog to undo ``saga`` with: one the operator allowed, selected by what the saga
    recorded (:func:`amends._catalog_ref.choose_catalog`); never the sandbox's for a saga it did
    not make, never anything the log names by itself. A saga whose reversal has finished needs
    no tool (its report is read), so any catalog will do, even none.

    Raises:
        ConfigError: None of the allowed catalogs is the saga's, or the one chosen lacks tools
            the saga's undo needs (the message names them).
    """
    if not allowed and _finished(saga) and not continuing:
        return Catalog()  # undo only joins the finished reversal: no tool is called
    name, catalog = choose_catalog(saga.meta, allowed, saga_id=saga.saga_id, warn=_warn)
    check_tools(catalog, saga, name, continuing=continuing, allow_missing=allow_missing)
    return catalog


def _finished(saga: SagaRecord) -> bool:
    return saga.reversal is not None and saga.reversal.state == "done"


def check_tools(
    catalog: Catalog,
    saga: SagaRecord,
    where: str,
    *,
    continuing: bool = False,
    allow_missing: bool = False,
) -> None:
    """Refuse a catalog that lacks a tool the saga's undo needs (unless ``allow_missing``: the
    missing tools' steps are then left to a person)."""
    if _finished(saga) and not continuing:
        return  # undo only joins the finished reversal: no tool is called
    missing = [t for t in needed_tools(saga.steps) if t not in catalog]
    if missing and allow_missing:
        sys.stderr.write(
            f"amends: warning: catalog {safe(where)} lacks {safe(', '.join(missing))}; the "
            f"steps needing them are left to a person (--allow-missing-tools)\n"
        )
    elif missing:
        raise ConfigError(
            f"saga {saga.saga_id} needs tool(s) {', '.join(missing)}, missing from catalog "
            f"{where}; nothing was done. Pass the catalog that ran the saga with --catalog, or "
            f"undo the rest with --allow-missing-tools (their steps are left to a person)",
            saga_id=saga.saga_id,
        )


STATE_STYLE = {
    "reverted": "green",
    "compensated": "green",
    "cancelled": "green",
    "not_needed": "dim",
    "acknowledged": "red",
    "drifted": "yellow",
    "failed": "red",
    "blocked": "red",
    "over_budget": "yellow",
    "in_doubt": "yellow",
    "not checked": "yellow",
}
"""Colour of each step state; the state is always printed as a word too (issue 17)."""


class StepRows:
    """Steps as one grid (issue 26 item 5): id, verb and state each in a column of its own,
    never broken; the sentence and its details wrap, whole words, inside the last column, never
    back under the id (issue 17: 80 columns)."""

    def __init__(self) -> None:
        self.grid = Table.grid(padding=(0, 1))
        for _ in range(3):  # id, verb, state
            self.grid.add_column(no_wrap=True)
        self.grid.add_column(overflow="fold", ratio=1)  # fold only a word wider than the column

    def add(self, step_id: str, verb: str, state: str, sentence: str, details: list[str]) -> None:
        """One step; ``details`` are rich markup (already escaped), each a line under the
        sentence."""
        colour = STATE_STYLE.get(state, "")
        styled = f"[{colour}]{state}[/]" if colour else markup(state)
        self.grid.add_row(f"[bold]{markup(step_id)}[/bold]", markup(verb), styled, markup(sentence))
        for line in details:
            self.grid.add_row("", "", "", Padding(line, (0, 0, 0, 2)))

    def print(self, console: Console) -> None:
        console.print(Padding(self.grid, (0, 0, 0, 2)))


def print_report(report: UndoReport, console: Console | None = None) -> None:
    """Print an undo report: headline first, then each step as a sentence with its state in
    colour and in words, then residue and manual actions."""
    console = console or screen()
    style = {"fully_reversed": "green", "partially_reversed": "yellow", "cannot_undo": "red"}
    console.print(
        f"[bold]{markup(report.headline)}[/bold] — "
        f"[{style[report.status.value]}]{report.status.value}[/]"
    )
    print_item(
        console,
        f"{markup(report.title or '')} · saga {markup(report.saga_id)} · reversal "
        f"{markup(report.reversal_id)} · {report.tool_calls} tool calls · {report.tokens} tokens"
        f" · {report.seconds:.2f}s"
        + (
            f" · over {len(report.runs)} runs ("
            + " + ".join(str(int(r["tool_calls"])) for r in report.runs)
            + " tool calls)"
            if len(report.runs) > 1
            else ""
        ),
        indent=0,
    )
    console.print("[bold]Steps[/bold]")
    rows = StepRows()
    for s in report.steps:
        details = []
        if s.inverse_description:
            details.append(f"undo: {markup(s.inverse_description)}")
        if not s.detail.startswith(f"{s.state.value} with "):  # the undo line says it
            details.append(markup(s.detail))
        if s.violation:
            details.append(f"[red]contract violation:[/red] {markup(s.violation)}")
        # issue 26 item 2: a step its broken contract left unchecked is "not checked", as the
        # text and HTML reports and the web page say (nothing drifted); --json keeps the state
        rows.add(s.step_id, s.verb or "—", state_label(s), s.sentence, details)
    rows.print(console)
    if report.residue:
        console.print("[bold]Residue[/bold] (what remains after compensation)")
        for r in report.residue:
            print_item(
                console,
                f"• {markup(r.what)} — affects {markup(', '.join(r.parties) or 'no one else')}; "
                f"{markup(r.settles_text)}",
            )
    if report.manual_actions:
        console.print("[bold]Needs a person[/bold]")
        for m in report.manual_actions:
            print_item(console, f"• {markup(f'[{m.step_id}]')} {markup(m.what)}")
            who = f"who: {markup(m.who)}"
            if m.parties:
                who += f"; affected: {markup(', '.join(m.parties))}"
            print_item(console, who, indent=4)
            if m.draft:
                draft = escape(safe(m.draft, keep_newlines=True))  # paragraphs stay
                print_item(console, f"draft: {draft}", indent=4)
            _print_handled(console, report, m.step_id)


def _print_handled(console: Console, report: UndoReport, step_id: str) -> None:
    """A manual action open or handled (who, when, note; the earlier resolutions too), and
    what to run next (issue 23)."""
    res = report.handled(step_id)
    doubt = report.in_doubt.get(step_id)
    if doubt is not None:  # issue 27: a follow-up that may have gone out: check first
        when = dt.datetime.fromtimestamp(float(doubt["at"]), dt.UTC).strftime("%Y-%m-%d %H:%M")
        resolve = command("resolve", report.saga_id, step_id, "--note", "what you found")
        said = f"({markup(doubt['by'])} at {when}Z): {markup(doubt['note'])}"
        print_command(
            console, f"[yellow]in doubt[/yellow] {said}; once checked: {markup(resolve)}", 4
        )
        return
    if res is None:
        resolve = command("resolve", report.saga_id, step_id, "--note", "what you did")
        hint = f"open — when done: {markup(resolve)}"
        step = report.step(step_id)
        if step.state.value == "failed" or (
            step.state.value == "drifted" and step.detail.startswith(UNCHECKED)
        ):  # issue 23: as engine.retry judges it (a drift check that could not run)
            retry = command("undo", report.saga_id, "--retry", step_id)
            hint += f"; once its cause is fixed: {markup(retry)}"
        print_command(console, hint, indent=4)
        return
    for r in [*res.get("earlier", ()), res]:
        when = dt.datetime.fromtimestamp(float(r["at"]), dt.UTC).strftime("%Y-%m-%d %H:%M")
        note = f": {r['note']}" if r.get("note") else ""
        verb = "[yellow]withdrawn[/yellow]" if r.get("withdrawn") else "[green]handled[/green]"
        print_item(console, f"{verb} by {markup(r['by'])} at {when}Z{markup(note)}", indent=4)


def print_command(console: Console, text: str, indent: int = 0) -> None:
    """A line that holds a command to paste (rich markup): never broken by a newline amends
    inserts, whatever the width; the terminal folds it, and a copy of it is one line, so it
    pastes as printed (issue 26 item 3: at 80 columns `--note` and its text landed on the next
    line, and the pasted command ran without them)."""
    console.print(" " * indent + text, soft_wrap=True)


def print_item(console: Console, text: str, indent: int = 2) -> None:
    # issue 17: a long line wraps under its own item, not back at column 0
    console.print(Padding(text, (0, 0, 0, indent), expand=False))


def _standard(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # a legacy log may hold NaN/Infinity: print it as text, not bad JSON
    if isinstance(value, dict):
        return {k: _standard(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_standard(v) for v in value]
    return value


def print_json(data: Any) -> None:
    # JSON escapes control characters itself; the output is always standard JSON.
    sys.stdout.write(json.dumps(_standard(data), indent=2, allow_nan=False) + "\n")


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
