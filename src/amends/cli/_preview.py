"""What undo would do, as ``amends undo --dry-run`` and ``amends show`` before undo print it
(issue 17, issue 26 item 6): always from ``engine.preview``, the undo's own evaluation (rule 10).

Nothing outside :mod:`amends.cli` imports from here.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from amends import SagaRecord

from ._common import StepRows, markup, print_command, print_item, screen
from ._hints import command

__all__ = ["preview_details", "print_planned", "print_preview"]


def print_planned(
    console: Console, saga: SagaRecord, preview: dict[str, Any], checked: str
) -> None:
    """A saga not undone yet: each step's sentence with what undo would do to it (the
    preview's verb and predicted state, rule 10) and the counts, in the saga's own order."""
    console.print(
        f"[bold]Steps[/bold] — what undo would do now (checked {markup(checked)}; "
        f"probes only, nothing else dispatched)"
    )
    planned = {p["step_id"]: p for p in preview.get("steps", [])}
    rows = StepRows()
    for s in saga.steps:
        p = planned.get(s.step_id)
        if p is None:  # not in the plan: undo leaves it as it is
            rows.add(s.step_id, "—", s.state, s.tool, [])
            continue
        verb = "Review" if p.get("needs_review") else (p.get("verb") or "—")
        text = p.get("description") or s.tool
        rows.add(s.step_id, verb, p.get("predicted") or "", text, preview_details(p))
    rows.print(console)
    # Preview.would: the one count of what undo would do (the web list says it too)
    console.print(f"[bold]Undo would:[/bold] {markup(preview['would'])}")
    dry, undo = command("undo", saga.saga_id, "--dry-run"), command("undo", saga.saga_id)
    # one command a line: at 80 columns each stays whole, and pastes as printed (issue 26 item 3)
    print_command(console, f"In detail: {markup(dry)}")
    print_command(console, f"Undo it: {markup(undo)}")


_GROUPS = (
    ("Will be reverted", ("Revert", "Cancel")),
    ("Will be compensated (leaves residue)", ("Compensate",)),
    ("Needs a person", ("Acknowledge",)),
    ("Not in this budget (continuing the undo does it)", ("budget",)),
    ("Nothing to undo", (None,)),
)


def _group_of(s: dict[str, Any]) -> str | None:
    """The group of a preview step: its verb, "Acknowledge" for a review, "budget" for a step
    the budget cuts before its inverse runs (rule 6: continuing runs it; no person's work)."""
    if s.get("needs_review"):
        return "Acknowledge"
    if s.get("predicted") == "over_budget" and s.get("action") in ("revert", "compensate"):
        return "budget"
    verb = s.get("verb")
    return None if verb is None else str(verb)


def print_preview(data: dict[str, Any], checked: str) -> None:
    """The honest preview (rule 10), grouped as the web page groups it (issue 17)."""
    console = screen()
    console.print(
        "[bold]What undo would do now[/bold] (undo simulated in its own order: every "
        "expectation re-checked by its probe; nothing else was dispatched, no secret read)"
    )
    print_item(
        console,
        f"saga {markup(data.get('saga_id', ''))} · checked {markup(checked)}",
        indent=0,
    )
    steps = data.get("steps", [])
    for title, verbs in _GROUPS:
        group = [s for s in steps if _group_of(s) in verbs]
        if not group:
            continue
        console.print(f"[bold]{title}[/bold] ({len(group)})")
        rows = StepRows()
        for s in group:
            verb = "Review" if s.get("needs_review") else (s.get("verb") or "—")
            sent = s.get("description") or s["tool"]
            rows.add(s["step_id"], verb, "", sent, preview_details(s))
        rows.print(console)
    budget = data.get("budget") or {}
    if budget:
        print_item(
            console,
            f"predicted: {data.get('tool_calls', 0)} of {budget.get('tool_calls')} tool calls; "
            f"{data.get('retry_reserve', 0)} left for retries and follow-ups",
            indent=0,
        )
    for w in data.get("undo_windows", []):
        print_item(
            console,
            f"undo window of step {markup(w['step_id'])} closes at {markup(w['closes_at'])}",
            indent=0,
        )
    review = data.get("needs_review") or []
    if review:
        console.print(
            f"[yellow]{len(review)} step(s) need a person's review before undo:[/yellow] "
            f"{markup(', '.join(review))}"
        )


def preview_details(s: dict[str, Any]) -> list[str]:
    """A previewed step's lines under its sentence (rich markup): its undo, why, residue."""
    details = []
    if s.get("inverse_description"):
        details.append(f"undo: {markup(s['inverse_description'])}")
    why = f"needs review: {s.get('check')}" if s.get("needs_review") else s.get("reason")
    if s.get("predicted") in ("blocked", "over_budget", "failed"):
        why = f"will be {s['predicted'].replace('_', ' ')}: {s.get('detail')}"
    if why:
        details.append(markup(why))
    for r in s.get("expected_residue") or []:
        details.append(f"leaves: {markup(r.get('what', ''))}")
    return details
