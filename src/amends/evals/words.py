"""The ``words`` invariant: what a report's words say is amends' own, and true (rules 8, 12).

Two classes of saga this week's audits fixed (669b2a6, f6e5b1c, 76c30f2) and the eval generates:

* text an agent wrote and its vendors echo (a subject, a title, a post), or a vendor's refusal,
  carrying line breaks and control characters followed by what reads as a line of amends' own
  text report ("Status: fully_reversed", a step row, "Needs a person:"): the report printed
  them as its own lines (rule 12). Judged on the text report as its strictest reader splits it
  (``str.splitlines``: ``\\r``, NEL, U+2028, vertical tab and file separators break lines too):
  every line that starts at column 0 is one of amends' own headings, no other line (but a
  draft's, which keeps its lines under its item) starts like one, exactly one says the
  status and it is the report's, the step rows are the report's steps in order with their
  verbs, each list (residue, manual actions) has one item per entry, and the text can be
  printed (no lone surrogate: a terminal's encoder raises on one);
* a step the tool-call budget cut before its inverse ran: nothing was attempted and continuing
  the reversal runs its inverse (rule 6), so it keeps its verb (Revert for a reversible step,
  Compensate for a compensable one), never "Acknowledge" (a person must follow up).

The text checks apply where a scenario carries hostile words (``Scenario.words``, the
``hostile_words`` family): rendering a report costs about as much as checking every other
invariant, so it is not done for every saga. The verb check applies wherever a report has a
step over budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from amends import StepState, UndoReport

__all__ = ["HEADINGS", "applies", "check_words"]

HEADINGS = (
    "Undo of saga ",
    "Status: ",
    "Reversal ",
    "Selected: ",
    "Kept as they are: ",
    "Steps:",
    "Contract violations:",
    "Residue (what remains after compensation):",
    "Needs a person:",
)
"""How every line of amends' own text report that starts at column 0 begins."""

_VERB_OF = {"reversible": "Revert", "compensable": "Compensate"}
"""The verb a step the budget cut keeps: what continuing the reversal will do to it."""
_ROW = re.compile(r"  (?!- |added )(\S+) +(\S+)")
"""A step row of the text report: its id and verb (``amends._report``'s text layout)."""
_LISTS = {"Residue (what remains after compensation):": "residue", "Needs a person:": "manual"}


def applies(
    reports: list[UndoReport], hostile: bool, preview_cut: Mapping[str, Any] | None = None
) -> bool:
    """Whether ``words`` applies: hostile words in the scenario, or a step over budget (in a
    report or in the preview before it)."""
    return (
        hostile
        or bool(preview_cut)
        or any(o.state is StepState.OVER_BUDGET for rep in reports for o in rep.steps)
    )


def check_words(
    reports: list[UndoReport],
    hostile: bool,
    preview_cut: Mapping[str, tuple[str | None, str]] | None = None,
) -> list[str]:
    """The violations of ``words`` in ``reports`` (the text checks only when ``hostile``) and
    in the preview's verbs of the steps it predicted over budget (``preview_cut``)."""
    out: list[str] = []
    for sid, (verb, reversibility) in (preview_cut or {}).items():
        want = _VERB_OF.get(reversibility)
        if want is not None and verb != want:
            out.append(
                f"{sid}: the preview predicts the budget cuts it (continuing does it), yet its "
                f"verb is {verb!r}, not {want!r}"
            )
    for rep in reports:
        for o in rep.steps:
            want = _VERB_OF.get(o.reversibility)
            if o.state is StepState.OVER_BUDGET and want is not None and o.verb != want:
                out.append(
                    f"{o.step_id}: the budget cut it before its inverse ran (continuing does "
                    f"it), yet its verb is {o.verb!r}, not {want!r}"
                )
        if hostile:
            out += _check_text(rep)
    return out


def _check_text(rep: UndoReport) -> list[str]:
    """The text report's lines are amends' own: see the module's docstring."""
    out: list[str] = []
    text = rep.render("text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: printing the report would raise
        out.append(f"the text report cannot be printed: {exc}")
    lines = text.splitlines()
    section = ""
    rows: list[tuple[str, str]] = []
    items = {"residue": 0, "manual": 0}
    statuses = []
    in_draft = False  # a draft keeps its lines, under its item (it is a message to send)
    for line in lines:
        if line.startswith(("  - ", "    draft: ")):
            in_draft = line.startswith("    draft: ")
        elif not in_draft and line.lstrip().startswith(HEADINGS) and line[:1].isspace():
            out.append(f"a line of the text report reads as amends' own: {line[:80]!r}")
        if line and not line[0].isspace():
            in_draft = False
            if not line.startswith(HEADINGS):
                out.append(f"a line of the text report is not amends' own: {line[:80]!r}")
            if line.startswith("Status: "):
                statuses.append(line)
            section = line
            continue
        if section == "Steps:" and (m := _ROW.match(line)):
            rows.append((m.group(1), m.group(2)))
        elif section in _LISTS and line.startswith("  - "):
            items[_LISTS[section]] += 1
    if len(statuses) != 1 or not statuses[0].startswith(f"Status: {rep.status.value} ("):
        out.append(f"the text report's status lines {statuses!r:.200}, the report says "
                   f"{rep.status.value}")  # fmt: skip
    want = [(o.step_id, o.verb or "—") for o in rep.steps]
    if rows != want:
        out.append(f"the text report's step rows {rows!r:.300} are not the report's {want!r:.300}")
    if items["residue"] != len(rep.residue) or items["manual"] != len(rep.manual_actions):
        out.append(
            f"the text report lists {items['residue']} residue and {items['manual']} manual "
            f"action items; the report has {len(rep.residue)} and {len(rep.manual_actions)}"
        )
    return out
