"""``amends demo``: the twelve-call scene, drift, two Undo clicks, and the naive stack beside it;
then a second request undone only in part: "take back the charge, keep the meeting" (issue 27)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from amends import ConfigError

from ..sandbox.demo import DEMO_TITLE, SELECTIVE_TITLE, DemoResult, run_demo
from ._common import print_item, print_report, screen
from ._hints import command

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``demo`` subcommand to the ``amends`` CLI."""
    from ._common import add_db_argument

    demo = sub.add_parser(
        "demo",
        help=f"run the sandbox scene ('{DEMO_TITLE}': 12 tool calls, a human edit, two "
        f"concurrent Undo clicks) and show the honest report beside a naive undo stack; then "
        f"'{SELECTIVE_TITLE}' with only its charge undone, the meeting kept",
    )
    add_db_argument(demo, default=".amends-demo.db")
    demo.add_argument(
        "--html",
        default="amends-demo-report.html",
        metavar="PATH",
        help="write the report as a self-contained HTML file (default amends-demo-report.html)",
    )
    demo.add_argument("--json", action="store_true", help="print the result as JSON")
    demo.add_argument("--seed", type=int, default=0, help="seed of the sandbox world (default 0)")
    demo.add_argument(
        "--serve",
        action="store_true",
        help="after the scene, serve the report on a web page (needs amends[server])",
    )
    demo.add_argument("--host", default="127.0.0.1", help="--serve: address (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8765, help="--serve: port (default 8765)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from ._common import print_json

    result = run_demo(args.db, seed=args.seed)
    html_path = Path(args.html)
    try:
        _write_private(html_path, result.report.render("html"))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the HTML report to {str(html_path)!r}: {exc}; pass --html with a "
            f"writable path"
        ) from exc
    if args.json:
        print_json({**result.to_dict(), "html": str(html_path)})
    else:
        print_demo(result, html=str(html_path))
    if args.serve:
        return _serve(result, args)
    return 0


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, like the log (issue 21.16: the
    report names what the agent touched); a file left 0644 by an older run is made 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def _serve(result: DemoResult, args: argparse.Namespace) -> int:
    """Hand the result to the web server area: ``amends.server.demo.serve_demo``."""
    try:
        from ..server.demo import serve_demo  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ConfigError(
            f"amends demo --serve needs the web server ({exc}); install it with "
            f"pip install 'amends[server]'"
        ) from exc
    code: int = serve_demo(result, db=args.db, host=args.host, port=args.port)
    return code


def print_demo(
    result: DemoResult, *, html: str | None = None, console: Console | None = None
) -> None:
    """Print the demo with rich: the amends report, then the naive stack's claims and damage,
    then the selective undo of the second request."""

    console = console or screen()
    console.rule(f"[bold]amends[/bold]: the user clicked Undo on '{escape(DEMO_TITLE)}' (twice)")
    print_report(result.report, console)
    same = result.report.reversal_id == result.second_report.reversal_id
    console.print(
        f"Both Undo clicks joined reversal {result.report.reversal_id}: "
        + ("[green]one reversal, one report[/]" if same else "[red]two reversals![/]")
    )
    console.rule("[bold]A naive undo stack[/bold] on a copy of the same world")
    table = Table(header_style="bold")
    table.add_column("step")
    table.add_column("tool")
    table.add_column("claimed")
    for c in result.naive_claims:
        table.add_row(c["step_id"], c["tool"], f"[green]{c['claim']}[/]")
    console.print(table)
    console.print(
        f"It said: [green]Undone {len(result.naive_claims)} of {len(result.naive_claims)}[/]"
    )
    console.print("[bold]What the world shows after it[/bold]")
    for line in result.naive_damage:
        console.print(f"  [red]•[/] {escape(line)}")
    console.rule()
    console.print(
        f"saga log: {escape(result.db)}  world: {escape(str(result.world_path))}"
        + (f"  HTML report: {escape(html)}" if html else "")
    )
    if result.sent is not None:  # issue 27: one draft sent by a person, a follow-up
        console.print(
            f"A person sent the buyer's draft, edited: {escape(result.sent.follow_up_id)} "
            f"({escape(result.sent.state)}, {escape(result.sent.detail)}); that manual action "
            f"is handled"
        )
    # issue 26 item 3: runnable as printed, even when `amends` is not on PATH (after make demo)
    # one line whatever the width, so that a copy of it pastes as one command
    inspect = escape(command("show", result.saga_id, db=result.db))
    console.print(f"Inspect it: {inspect}", soft_wrap=True)
    print_selective(result, console)


# Why the closure of a selection added a step (amends._selection.Added.why), in words for a
# person who reads the steps' sentences rather than their ids; {0} is the step it depends on.
_WHY = {
    "output": "it used the result of “{0}”",
    "resource": "it changed the same record after “{0}”",
    "after": "it was declared to run after “{0}”",
    "undo_after": "the undo of “{0}” must wait for its undo",
}


def print_selective(result: DemoResult, console: Console) -> None:
    """Issue 27: the second request, undone only in part. The preview names what the closure
    adds and why before anything is undone; then the report, and what the world shows."""
    preview, report = result.selective_preview, result.selective
    if preview is None or report is None or preview.selection is None:
        return
    console.rule(f"[bold]A second request[/bold]: '{escape(SELECTIVE_TITLE)}'")
    console.print(
        "The agent booked a meeting, charged the card for it and recorded the charge in the "
        "CRM. A person asks: take back the charge, keep the meeting."
    )
    said = {p.step_id: p.description or p.step.tool for p in preview.steps}
    console.print("[bold]The preview[/bold], before anything is undone, says what that covers:")
    for step_id in preview.selection.get("asked", ()):
        print_item(console, escape(f"• “{said[step_id]}” is undone: the person asked for it"))
    for a in preview.selection.get("added", ()):
        why = _WHY.get(a["why"], "it depends on “{0}”").format(said[a["because_of"]])
        print_item(console, escape(f"• “{said[a['step_id']]}” is undone too: {why}"))
    kept = len(preview.selection.get("kept", ()))
    if kept == 1:
        print_item(console, "• 1 other step of the request stays as it is")
    else:
        print_item(console, f"• {kept} other steps of the request stay as they are")
    console.print("[bold]Undo only the charge[/bold]")
    print_report(report, console)
    console.print("[bold]What the world shows now[/bold]")
    for line in result.selective_outcome:
        print_item(console, f"[green]•[/] {escape(line)}")
    # issue 26 item 3: runs as printed; the sandbox catalog is named (rule 12: the operator's)
    later = command(
        "undo", result.selective_saga_id, "--catalog", "amends.sandbox:demo_catalog",
        db=result.db,
    )  # fmt: skip
    console.print(
        f"Undo the rest later (the charge is not refunded twice): {escape(later)}", soft_wrap=True
    )
