"""What a follow-up the log holds says about its manual action when no resolution does (issue 27,
rule 8: the report is exact).

A follow-up's send writes three records in turn: its claim (``dispatched``), its outcome
(``sent``, ``failed``, ``in_doubt``) and, sent, the manual action's resolution. A process that
stops between them leaves the manual action without a resolution although a message went out
(``sent``), or may have (``dispatched``, ``in_doubt``). Read as "open", a person would send a
second apology by hand. Every reader of the report (:func:`amends._report.current_report`)
shows such a manual action as handled by the sender (the resolution its send writes) or as in
doubt (check whether it went out before acting); ``recover`` writes the missing resolution of a
``sent`` one.

It must never: show a manual action open while a follow-up for it is recorded sent or may have
gone out, nor override a person's own later word (a resolution or a withdrawal written after the
follow-up stands).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._log.base import CompensationRecord, Event, SagaLog

__all__ = [
    "FOLLOW_UP_KEY",
    "follow_up_cost",
    "follow_up_standing",
    "resolved_since",
    "sent_note",
]

FOLLOW_UP_KEY = re.compile(r"^(?P<step>.+)\+f(?P<n>[0-9]+)$")
"""A follow-up's key in a reversal's history: ``s3+f1``, the first follow-up of step ``s3``."""

_MAY_HAVE_GONE = ("sent", "dispatched", "in_doubt")


def follow_up_cost(comps: Mapping[str, CompensationRecord]) -> tuple[int, int]:
    """The tool calls and tokens the reversal's follow-ups spent (issue 27, rule 7)."""
    calls = tokens = 0
    for key, rec in comps.items():
        if FOLLOW_UP_KEY.match(key) and "tool" in rec.data:
            calls += int(rec.data.get("calls", 1))  # written before the cost was kept: one call
            tokens += int(rec.data.get("tokens", 0))
    return calls, tokens


def sent_note(key: str, reversal_id: str, detail: str) -> str:
    """The note of the resolution a sent follow-up writes (the one place it is worded)."""
    return f"follow-up {key} of reversal {reversal_id}: {detail}"


def resolved_since(events: Iterable[Event], step_id: str, at: float) -> bool:
    """Whether a resolution of ``step_id`` (or its withdrawal) was written at or after ``at``,
    a follow-up's time: a person's word that came after the follow-up, which stands over it."""
    return any(e.kind == "step.resolved" and e.step_id == step_id and e.at >= at for e in events)


def _latest(
    comps: Mapping[str, CompensationRecord], current: Mapping[str, Any]
) -> dict[str, tuple[str, CompensationRecord]]:
    """Per step no current resolution covers: its latest follow-up that went out or may have,
    unless the step itself was attempted again after it (its outcome is newer)."""
    found: dict[str, tuple[str, CompensationRecord]] = {}
    for key, rec in comps.items():
        m = FOLLOW_UP_KEY.match(key)
        if m is None or "tool" not in rec.data or rec.state not in _MAY_HAVE_GONE:
            continue
        step = m["step"]
        own = comps.get(step)
        if step in current or (own is not None and own.updated_at > rec.updated_at):
            continue
        if step not in found or int(found[step][0].rsplit("+f", 1)[1]) < int(m["n"]):
            found[step] = (key, rec)
    return found


async def follow_up_standing(
    log: SagaLog,
    saga_id: str,
    comps: Mapping[str, CompensationRecord],
    current: Mapping[str, Any],
) -> dict[str, dict[str, Any]]:
    """Per step whose manual action ``current`` (its current resolutions) leaves open but a
    follow-up went out for (or may have): the resolution its send writes (``sent``), or an
    ``in_doubt`` entry (check whether it went out before acting), as a report's resolutions
    hold them (:func:`amends._report.current_report` keeps the latter apart from the
    resolutions: in doubt is neither open nor handled). A step a person resolved after the
    follow-up (then withdrew) is theirs: open."""
    found = _latest(comps, current)
    if not found:
        return {}
    events = await log.events(saga_id)
    out: dict[str, dict[str, Any]] = {}
    for step, (key, rec) in found.items():
        if resolved_since(events, step, rec.updated_at):
            continue  # a person's later word (a withdrawal): the manual action is open again
        by = str(rec.data.get("by") or "someone")
        if rec.state == "sent":
            note = sent_note(key, rec.reversal_id, rec.detail or f"sent with {rec.data['tool']}")
            out[step] = {"step_id": step, "by": by, "note": note, "at": rec.updated_at}
            continue
        note = sent_note(
            key, rec.reversal_id,
            f"in doubt: {rec.data['tool']} may have gone out; check with the recipients before "
            f"acting, then resolve the manual action by hand",
        )  # fmt: skip
        out[step] = {"step_id": step, "by": by, "note": note, "at": rec.updated_at,
                     "in_doubt": True}  # fmt: skip
    return out
