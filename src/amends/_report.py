"""The undo report: the three outcomes, per-step states, residue, manual actions, and renderers.

The report is the truth (rule 8). Its status is *derived* from the per-step states here, in one
place, so that no caller can claim more than the steps show.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from ._budget import BudgetMeter
from ._contracts import ManualAction, Residue
from ._describe import DONE_WORDS, when_words
from ._describe import people_detail as people_detail  # the web page says it as the report
from ._follow_up_state import follow_up_cost, follow_up_standing
from ._log.base import CompensationRecord, Resolution, ReversalRecord, SagaLog, SagaRecord
from ._visible import visible

__all__ = [
    "Outcome",
    "StepOutcome",
    "StepState",
    "UndoReport",
    "build_report",
    "current_report",
    "current_resolutions",
    "verb_for",
]


class Outcome(StrEnum):
    """The outcome of a reversal. Compares equal to its string value."""

    FULLY_REVERSED = "fully_reversed"
    """Every step reverted, cancelled, not needed, or compensated without residue."""
    PARTIALLY_REVERSED = "partially_reversed"
    """Every effect neutralised, but some compensations left residue."""
    CANNOT_UNDO = "cannot_undo"
    """At least one effect still stands; see the manual actions."""


class StepState(StrEnum):
    """What happened to one step during the reversal."""

    REVERTED = "reverted"
    COMPENSATED = "compensated"
    CANCELLED = "cancelled"
    NOT_NEEDED = "not_needed"
    ACKNOWLEDGED = "acknowledged"
    DRIFTED = "drifted"
    FAILED = "failed"
    BLOCKED = "blocked"
    OVER_BUDGET = "over_budget"
    IN_DOUBT = "in_doubt"

    @property
    def neutralised(self) -> bool:
        """True when the step's effect no longer stands (reverted, compensated, cancelled or
        not needed); every other state leaves something for a person (rule 8)."""
        return self in NEUTRALISED


NEUTRALISED = frozenset(
    {StepState.REVERTED, StepState.COMPENSATED, StepState.CANCELLED, StepState.NOT_NEEDED}
)
"""States in which the step's effect no longer stands."""
STANDING = frozenset(StepState) - NEUTRALISED

_VERBS: Mapping[StepState, str | None] = {
    StepState.REVERTED: "Revert",
    StepState.COMPENSATED: "Compensate",
    StepState.CANCELLED: "Cancel",
    StepState.NOT_NEEDED: None,
}


def verb_for(state: StepState, planned: str | None = None) -> str | None:
    """The one verb of a step state (rule 8), whatever the cause: Revert, Compensate, Cancel,
    ``None`` when there was nothing to undo, and Acknowledge for every effect that still stands
    (a person must follow up) -- except a step the budget cut before its inverse ran: nothing
    was attempted and continuing the reversal runs it (rule 6), so it keeps ``planned``, the
    verb of what the plan would do to it (Revert, Compensate)."""
    if state is StepState.OVER_BUDGET and planned is not None:
        return planned
    return _VERBS.get(state, "Acknowledge")


@dataclass(frozen=True)
class StepOutcome:
    """One step in the report."""

    step_id: str
    """The step's id in its saga (``s1``, or the id the agent gave it)."""
    tool: str
    """Catalog name of the tool the step called."""
    verb: str | None
    """Revert / Compensate / Cancel / Acknowledge, or ``None`` when there was nothing to undo."""
    state: StepState
    """What the reversal did to the step (reverted, compensated, drifted, in_doubt, ...)."""
    detail: str
    """What happened, in plain language."""
    reversibility: str = "irreversible"
    """The class undo acted on: the declared one, or ``irreversible`` after a contract
    violation."""
    attempts: int = 0
    """Inverse calls made for this step (retries included)."""
    residue: tuple[Residue, ...] = ()
    """What this step's compensation left behind (notices sent, a refund still settling)."""
    manual_action: ManualAction | None = None
    """What a person must still do for this step, or ``None`` when its effect no longer stands."""
    violation: str | None = None
    """A broken tool contract found when the step ran (rule 2), shown, never hidden."""
    description: str = ""
    """The step in plain language ("Email 'Won' to bob@acme.test"), from the tool's
    ``describe=`` template; empty in reports written before issue 17."""
    inverse_description: str = ""
    """What undo did or would do for it, in plain language ("Refund 50.00 of charge ch_1"); empty
    when the step has no inverse."""
    declared: bool = True
    """Whether the tool's reversibility was declared; ``False``: not declared — treated as
    irreversible (rule 2), and its manual action asks the tool's owner to declare it (issue 26).
    Reports written before issue 26 read as declared."""

    @property
    def sentence(self) -> str:
        """The step as shown on screens: its description, or its tool name."""
        return self.description or self.tool

    @property
    def outcome_text(self) -> str:
        """What happened to the step, as a person reads it (issue 26 item 2): an undone step
        says what undo did, in its inverse's sentence ("Compensated: Refund 2,400.00 USD of
        charge ch_2"), never the tool it called (:attr:`detail`, "compensated with
        payments.refund", is for engineers); any other outcome's :attr:`detail`."""
        return people_detail(self.state.value, self.detail, self.inverse_description)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "verb": self.verb,
            "state": self.state._value_,  # issue 29: not the enum's property (a call)
            "detail": self.detail,
            "reversibility": self.reversibility,
            "attempts": self.attempts,
            "residue": [r.to_dict() for r in self.residue] if self.residue else [],
            "manual_action": self.manual_action.to_dict() if self.manual_action else None,
            "violation": self.violation,
            "description": self.description,
            "inverse_description": self.inverse_description,
            "declared": self.declared,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepOutcome:
        ma = d.get("manual_action")
        return cls(
            d["step_id"],
            d["tool"],
            d.get("verb"),
            StepState(d["state"]),
            d["detail"],
            d.get("reversibility", "irreversible"),
            int(d.get("attempts", 0)),
            tuple(Residue.from_dict(r) for r in d.get("residue", ())),
            ManualAction(
                ma["step_id"], ma["what"], ma["who"], tuple(ma.get("parties", ())), ma.get("draft")
            )
            if ma
            else None,
            d.get("violation"),
            d.get("description", ""),
            d.get("inverse_description", ""),
            d.get("declared", True) is not False,
        )


def derive_status(steps: Sequence[StepOutcome]) -> Outcome:
    """The three outcomes of DESIGN.md, from per-step states alone."""
    if any(s.state in STANDING for s in steps):
        return Outcome.CANNOT_UNDO
    if any(s.residue for s in steps):
        return Outcome.PARTIALLY_REVERSED
    return Outcome.FULLY_REVERSED


@dataclass(frozen=True)
class UndoReport:
    """What the one reversal of a saga did, and what still stands."""

    saga_id: str
    """The saga that was undone."""
    reversal_id: str
    """The same for every request that joined this reversal."""
    title: str
    """What the agent was asked to do (the saga's title)."""
    steps: tuple[StepOutcome, ...]
    """Every step of the saga (of a selection: those it covers), in forward order, with what the
    reversal did to it."""
    tool_calls: int = 0
    """Every call the reversal made: probes, inverses, retries and follow-ups (over all its
    runs: a continuation adds to it)."""
    tokens: int = 0
    """Tokens tools reported with ``call.spend(tokens=...)`` while undoing (over all runs)."""
    seconds: float = 0.0
    """Wall-clock seconds the reversal ran (over all its runs)."""
    budget: Mapping[str, Any] = field(default_factory=dict)
    """The caps the reversal ran under: ``tool_calls``, ``tokens``, ``seconds``."""
    requested_at: float = 0.0
    """When undo was first asked for (Unix time)."""
    finished_at: float = 0.0
    """When the reversal (or its latest continuation) finished (Unix time)."""
    continuations: int = 0
    """How many times the reversal was continued with a new budget (rule 6)."""
    resolutions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """step_id -> who handled its manual action, when and with what note (``engine.resolve``),
    with the earlier resolutions under ``earlier``. The engine's outcome is kept; the manual
    action is shown as handled."""
    runs: tuple[Mapping[str, Any], ...] = ()
    """A continued reversal's runs, each with its own figures, first run first (``run`` 0, then
    each continuation): ``tool_calls``, ``tokens``, ``seconds``, ``finished_at``; the totals
    above add them up. Empty for a reversal that ran once (the totals are its figures)."""
    selection: Mapping[str, Any] | None = None
    """For a reversal asked for part of the saga (issue 27, ``undo(steps=...)``): the steps
    asked for so far (``asked``), every step it covers (``steps``; :attr:`steps` lists only
    these), each step the closure added with the reason (``added``), and the steps kept as they
    are (``kept``: not undone, still undoable later); ``None``: the whole saga."""
    in_doubt: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """step_id -> the follow-up sent for its manual action whose outcome is unknown (issue 27:
    ``by``, ``at``, ``note``): it may have gone out, so the manual action is neither open nor
    handled; a person checks whether it went out before acting, then resolves it."""

    @staticmethod
    def note_for_people(note: str) -> str:
        """A resolution's note as a person reads it: a sent follow-up's note ("follow-up s1+f1
        of reversal rev_…: sent with mail.send (id m_2)") reads "sent the follow-up message"
        (issue 26 item 2; the note itself stays in the JSON); a person's own note as written."""
        return note_for_people(note)

    def with_resolutions(self, resolutions: Mapping[str, Any]) -> UndoReport:
        """This report with the given resolutions (``Resolution`` objects or their dicts)."""
        found = {
            k: dict(v.to_dict() if hasattr(v, "to_dict") else v) for k, v in resolutions.items()
        }
        return dataclasses.replace(self, resolutions=found)

    def handled(self, step_id: str) -> Mapping[str, Any] | None:
        """Who handled ``step_id``'s manual action, when and how; ``None`` while it is open
        (or while a follow-up for it is in doubt: :attr:`in_doubt`)."""
        return self.resolutions.get(step_id)

    @property
    def open_manual_actions(self) -> list[ManualAction]:
        """Manual actions no one has resolved yet, nor sent a follow-up for that went out or
        may have (issue 27: in doubt is not open)."""
        taken = {*self.resolutions, *self.in_doubt}
        return [m for m in self.manual_actions if m.step_id not in taken]

    @property
    def status(self) -> Outcome:
        """``fully_reversed``, ``partially_reversed`` or ``cannot_undo`` (derived from steps)."""
        return derive_status(self.steps)

    @property
    def residue(self) -> list[Residue]:
        return [r for s in self.steps for r in s.residue]

    @property
    def manual_actions(self) -> list[ManualAction]:
        return [s.manual_action for s in self.steps if s.manual_action is not None]

    @property
    def violations(self) -> list[str]:
        return [f"{s.step_id} ({s.tool}): {s.violation}" for s in self.steps if s.violation]

    def step(self, step_id: str) -> StepOutcome:
        for s in self.steps:
            if s.step_id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def headline(self) -> str:
        """The outcome in a product's words, counted honestly (issue 23): "8 of 12 taken back
        (3 compensated, leaving a trace) · 3 handled by a person · 1 needs your attention".

        "Taken back" counts the steps whose effect no longer stands, compensated ones named as
        such (never "undone": a refund is not never having charged); "handled by a person" the
        steps whose effect stands and whose manual action a person resolved; "needs your
        attention" every manual action still open."""
        kept = len(self.selection.get("kept", ())) if self.selection else 0
        # issue 27: a selection never reads as the whole saga undone, nor as nothing to undo
        others = (
            f"{kept} other step{'s' if kept != 1 else ''} kept as "
            f"{'they are' if kept != 1 else 'it is'}"
        )
        acting = [s for s in self.steps if s.state is not StepState.NOT_NEEDED]
        if not acting:
            return "Nothing to take back" + (f" · {others}" if kept else "")
        back = [s for s in acting if s.state in NEUTRALISED]
        comp = [s for s in back if s.state is StepState.COMPENSATED]
        head = f"{len(back)} of {len(acting)} taken back"
        trace = any(s.residue for s in back)
        if comp:
            head += f" ({len(comp)} compensated{', leaving a trace' if trace else ''})"
        elif trace:
            head += " (leaving a trace)"
        parts = [head]
        by = [str(self.resolutions[s.step_id].get("by", "")) for s in acting
              if s.state in STANDING and s.step_id in self.resolutions]  # fmt: skip
        agents = sum(1 for who in by if who.startswith("agent:"))  # issue 27: an agent's
        if len(by) > agents:  # follow-up is not a person's (rule 8)
            parts.append(f"{len(by) - agents} handled by a person")
        if agents:
            parts.append(f"{agents} handled by an agent")
        if doubt := len(self.in_doubt):  # issue 27: a follow-up that may have gone out
            parts.append(f"{doubt} follow-up{'s' if doubt > 1 else ''} in doubt: check whether "
                         f"{'they' if doubt > 1 else 'it'} went out before acting")  # fmt: skip
        attention = len(self.open_manual_actions)
        if attention:
            parts.append(f"{attention} need{'s' if attention == 1 else ''} your attention")
        if kept:
            parts.append(others)
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "saga_id": self.saga_id,
            "reversal_id": self.reversal_id,
            "title": self.title,
            "status": self.status._value_,
            "headline": self.headline,
            "steps": [s.to_dict() for s in self.steps],
            "residue": [r.to_dict() for r in self.residue],
            "manual_actions": [
                {**m.to_dict(), "handled": self.resolutions.get(m.step_id), **self._doubt(m)}
                for m in self.manual_actions
            ],
            "violations": self.violations,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "budget": dict(self.budget),
            "requested_at": self.requested_at,
            "finished_at": self.finished_at,
            "continuations": self.continuations,
            "resolutions": {k: dict(v) for k, v in self.resolutions.items()},
            "runs": [dict(r) for r in self.runs],
            "selection": dict(self.selection) if self.selection is not None else None,
            **(
                {"in_doubt": {k: dict(v) for k, v in self.in_doubt.items()}}
                if self.in_doubt
                else {}
            ),
        }

    def _doubt(self, m: ManualAction) -> dict[str, Any]:
        """A manual action's ``in_doubt`` entry, when a follow-up for it may have gone out (the
        key is absent otherwise: a report without one reads as before)."""
        doubt = self.in_doubt.get(m.step_id)
        return {"in_doubt": dict(doubt)} if doubt is not None else {}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UndoReport:
        return cls(
            d["saga_id"],
            d["reversal_id"],
            d.get("title", ""),
            tuple(StepOutcome.from_dict(s) for s in d["steps"]),
            int(d.get("tool_calls", 0)),
            int(d.get("tokens", 0)),
            float(d.get("seconds", 0.0)),
            dict(d.get("budget", {})),
            float(d.get("requested_at", 0.0)),
            float(d.get("finished_at", 0.0)),
            int(d.get("continuations", 0)),
            {k: dict(v) for k, v in (d.get("resolutions") or {}).items()},
            tuple(dict(r) for r in d.get("runs") or ()),
            dict(d["selection"]) if d.get("selection") is not None else None,
            {k: dict(v) for k, v in (d.get("in_doubt") or {}).items()},
        )

    def to_json(self, **kwargs: Any) -> str:
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    def render(self, fmt: str = "text") -> str:
        """The report as ``"text"`` (plain, for terminals and logs) or ``"html"`` (self-contained).

        Raises:
            ValueError: ``fmt`` is neither.
        """
        if fmt == "text":
            return _render_text(self)
        if fmt == "html":
            return _render_html(self)
        raise ValueError(f"render format {fmt!r} is not known; use 'text' or 'html'")


def build_report(
    saga: SagaRecord,
    reversal: ReversalRecord,
    steps: Sequence[StepOutcome],
    meter: BudgetMeter,
    *,
    finished_at: float,
    resolutions: Mapping[str, Resolution] | None = None,
    selection: Mapping[str, Any] | None = None,
) -> UndoReport:
    """The one place a reversal's report is assembled (issue 22): the local engine and the
    Temporal workflow both call it with what their run did. A continuation's figures add to
    the earlier runs' (the report the reversal held when it was continued), each run's own kept
    in ``runs`` (issue 23: the cost line never restarts at 0)."""
    own = {
        "run": reversal.continuations,
        "tool_calls": meter.calls,
        "tokens": meter.tokens,
        "seconds": round(meter.clock() - meter.started, 3),
        "finished_at": finished_at,
    }
    runs = (*_earlier_runs(reversal), own)
    report = UndoReport(
        saga_id=saga.saga_id,
        reversal_id=reversal.reversal_id,
        title=saga.title,
        steps=tuple(steps),
        tool_calls=sum(int(r["tool_calls"]) for r in runs),
        tokens=sum(int(r["tokens"]) for r in runs),
        seconds=sum(float(r["seconds"]) for r in runs),
        budget=meter.budget.to_dict(),
        requested_at=reversal.requested_at,
        finished_at=finished_at,
        continuations=reversal.continuations,
        runs=runs if len(runs) > 1 else (),  # one run: the totals are its figures
        selection=selection,
    )
    return report.with_resolutions(resolutions) if resolutions else report


def _earlier_runs(reversal: ReversalRecord) -> tuple[Mapping[str, Any], ...]:
    """The runs before this one: none for a first run (or its take-over), else those of the
    report the reversal held when it was continued (one entry of its totals if it predates
    ``runs``)."""
    prior = reversal.report
    if not reversal.continuations or not prior:
        return ()
    runs = prior.get("runs")
    if runs:
        return tuple(dict(r) for r in runs if int(r.get("run", 0)) < reversal.continuations)
    return (
        {
            "run": 0,
            "tool_calls": int(prior.get("tool_calls", 0)),
            "tokens": int(prior.get("tokens", 0)),
            "seconds": float(prior.get("seconds", 0.0)),
            "finished_at": float(prior.get("finished_at", 0.0)),
        },
    )


def current_resolutions(
    resolutions: Mapping[str, Resolution], compensations: Mapping[str, CompensationRecord]
) -> dict[str, Resolution]:
    """The resolutions that still speak for their step's outcome (rule 6, rule 8).

    A person resolves the manual action they saw. If the step was attempted again after that
    (a continuation retried an over-budget or blocked step, and its inverse then failed), the
    resolution predates the outcome: it neither marks the new manual action as handled nor
    unblocks the inverses that wait for the step (rule 3).
    """
    out: dict[str, Resolution] = {}
    for step_id, res in resolutions.items():
        rec = compensations.get(step_id)
        if rec is None or res.at >= rec.updated_at:
            out[step_id] = res
    return out


async def current_report(
    log: SagaLog, report: UndoReport, *, follow_ups: bool = True
) -> UndoReport:
    """``report`` (as stored) with the resolutions that still speak for its steps' outcomes:
    the one way every reader — the engine, the CLI, a Temporal worker — shows manual actions as
    open or handled (rule 6; rule 8: a stale resolution never marks a newer failure handled),
    and with the cost of the follow-ups sent in the reversal (issue 27). ``follow_ups=False``:
    without that cost, for a report about to be stored (each reader adds it, once)."""
    saga = await log.get_saga(report.saga_id)
    if saga is None:
        return report
    spent = follow_ups and _spent_after(report, saga.reversal)
    if not saga.resolutions and not spent:  # none now (a withdrawn one is no longer handled)
        return report.with_resolutions({}) if report.resolutions else report
    comps = await log.get_compensations(report.reversal_id)
    report = with_follow_up_cost(report, comps) if follow_ups else report
    found: dict[str, Any] = current_resolutions(saga.resolutions, comps)
    if not follow_ups:
        return report.with_resolutions(found)
    # issue 27: a follow-up sent, or that may have gone out, is never shown open (rule 8)
    standing = await follow_up_standing(log, saga.saga_id, comps, found)
    found.update({k: v for k, v in standing.items() if not v.get("in_doubt")})
    doubt = {k: {n: v[n] for n in ("by", "at", "note")} for k, v in standing.items()
             if v.get("in_doubt")}  # fmt: skip
    return dataclasses.replace(report.with_resolutions(found), in_doubt=doubt)


def _spent_after(report: UndoReport, rev: ReversalRecord | None) -> bool:
    """Whether the reversal may hold follow-ups the stored report cannot count (issue 27): it
    spent more than its latest run's report says (sent after it finished), or it was continued
    (sent before a continuation, whose run starts its own count)."""
    if rev is None or rev.reversal_id != report.reversal_id:
        return False
    if report.continuations:
        return True
    last = report.runs[-1] if report.runs else {"tool_calls": report.tool_calls,
                                                  "tokens": report.tokens}  # fmt: skip
    return (rev.calls_spent, rev.tokens_spent) != (int(last["tool_calls"]), int(last["tokens"]))


def with_follow_up_cost(report: UndoReport, comps: Mapping[str, CompensationRecord]) -> UndoReport:
    """``report`` with the cost of the follow-ups sent after it (issue 27, rule 7): every call
    the reversal made counts in ``tool_calls``, follow-ups included, and the tokens an agent
    spent on them in ``tokens``."""
    calls, tokens = follow_up_cost(comps)
    if not calls and not tokens:
        return report
    return dataclasses.replace(
        report, tool_calls=report.tool_calls + calls, tokens=report.tokens + tokens
    )


_FOLLOW_UP_NOTE = re.compile(r"follow-up \S+ of reversal \S+: sent\b.*", re.DOTALL)


def note_for_people(note: str) -> str:
    """A resolution's note as a person reads it (issue 26 item 2): the note a sent follow-up
    writes ("follow-up s1+f1 of reversal rev_…: sent with mail.send (id m_2)", for engineers and
    the JSON) reads "sent the follow-up message"; a person's own note as they wrote it."""
    return "sent the follow-up message" if _FOLLOW_UP_NOTE.fullmatch(note) else note


def _handled_text(res: Mapping[str, Any] | None, *, people: bool = False) -> str:
    """A manual action's resolution in words, with the earlier ones (never erased, issue 23)."""
    if res is None:
        return "open"
    earlier = "; ".join(_one_resolution(e, people) for e in res.get("earlier") or ())
    return _one_resolution(res, people) + (f" (earlier: {earlier})" if earlier else "")


def _html_handled(r: UndoReport, step_id: str, e: Any) -> str:
    """A manual action's state on the standalone page: in doubt, handled, or open."""
    if step_id in r.in_doubt:
        return f"<p>{e(_in_doubt_text(r.in_doubt[step_id], people=True))}</p>"
    if r.resolutions:
        return f"<p>{e(_handled_text(r.handled(step_id), people=True))}</p>"
    return ""


def _in_doubt_text(doubt: Mapping[str, Any], *, people: bool = False) -> str:
    """A follow-up that may have gone out (issue 27): not open, not handled."""
    at = datetime.fromtimestamp(float(doubt["at"]), UTC)
    when = when_words(at.isoformat()) if people else at.strftime("%Y-%m-%d %H:%M UTC")
    return f"in doubt ({doubt['by']} at {when}): {doubt['note']}"


def _one_resolution(res: Mapping[str, Any], people: bool = False) -> str:
    at = datetime.fromtimestamp(float(res["at"]), UTC)
    # people read "3 Dec 2026 18:05 UTC" (issue 26: no raw ISO dates); engineers the ISO form
    when = when_words(at.isoformat()) if people else at.strftime("%Y-%m-%d %H:%M UTC")
    verb = "withdrawn" if res.get("withdrawn") else "handled"
    note = res.get("note")
    if note and people:
        note = note_for_people(note)
    return f"{verb} by {res['by']} at {when}" + (f": {note}" if note else "")


def _runs_text(r: UndoReport) -> str:
    """The runs of a continued reversal: " over 2 runs (8 + 4 tool calls)"."""
    if len(r.runs) < 2:
        return ""
    calls = " + ".join(str(int(x["tool_calls"])) for x in r.runs)
    return f" over {len(r.runs)} runs ({calls} tool calls)"


def _verb(s: StepOutcome) -> str:
    return s.verb or "—"


def _wrapped(text: str, indent: int = 7, first: str | None = None, nl: bool = False) -> list[str]:
    """``text`` wrapped at 80 columns under ``first`` (else ``indent`` spaces), words never
    broken (issue 17); control characters and, unless ``nl`` (a draft), line breaks escaped
    (rule 12: a vendor's words stay inside their item, never a line of the report's own)."""
    out: list[str] = []
    for i, line in enumerate(visible(text, keep="\t\n" if nl else "").split("\n")):
        lead = (" " * indent if first is None else first) if i == 0 else " " * indent
        out += textwrap.wrap(
            line,
            80,
            initial_indent=lead,
            subsequent_indent=" " * indent,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [lead.rstrip()]
    return out


def _selection_text(r: UndoReport) -> list[str]:
    """Issue 27: what a selective undo was asked, what its closure added and why, what it kept."""
    sel = r.selection
    if not sel:
        return []
    out = _wrapped(
        f"Selected: {', '.join(sel.get('asked', ()))} (only these and what depends on them)", 2, ""
    )
    for a in sel.get("added", ()):
        out += _wrapped(f"added {a['step_id']}: {a['reason']}", 4, "  ")
    kept = sel.get("kept", ())
    out += _wrapped(f"Kept as they are: {', '.join(kept) if kept else 'none'}", 2, "")
    return out


def _render_text(r: UndoReport) -> str:
    out = [
        *_wrapped(f"Undo of saga {r.saga_id}" + (f" — {r.title}" if r.title else ""), 2, ""),
        *_wrapped(f"Status: {r.status.value} ({r.headline})", 2, ""),
        *_wrapped(
            f"Reversal {r.reversal_id}: {r.tool_calls} tool calls, {r.tokens} tokens, "
            f"{r.seconds:.2f}s" + _runs_text(r),
            2,
            "",
        ),
        *_selection_text(r),
        "",
        "Steps:",
    ]
    # issue 17: a sentence per step, then what happened wrapped under it (80 columns; ids whole)
    for s in r.steps:
        shown = "not checked" if state_label(s) == "not checked" else s.state.value
        row = f"  {s.step_id:<4} {_verb(s):<11} {shown:<12} "
        out += _wrapped(s.sentence, min(len(row), 33), row)
        if s.inverse_description:
            out += _wrapped(f"undo: {s.inverse_description}")
        out += _wrapped(s.detail)
    if r.violations:
        out += ["", "Contract violations:"]
        for v in r.violations:
            out += _wrapped(v, 4, "  - ")
    if r.residue:
        out += ["", "Residue (what remains after compensation):"]
        for res in r.residue:
            who = ", ".join(res.parties) or "no one else"
            out += _wrapped(f"{res.what} — affects {who}; {res.settles_text}", 4, "  - ")
    if r.manual_actions:
        out += ["", "Needs a person:"]
        for m in r.manual_actions:
            out += _wrapped(f"[{m.step_id}] {m.what}", 4, "  - ")
            out += _wrapped(
                f"who: {m.who}" + (f"; affected: {', '.join(m.parties)}" if m.parties else ""), 4
            )
            if m.draft:
                out += _wrapped(f"draft: {m.draft}", 4, nl=True)  # under its item
            if m.step_id in r.in_doubt:
                out += _wrapped(_in_doubt_text(r.in_doubt[m.step_id]), 4)
            elif r.resolutions:
                out += _wrapped(_handled_text(r.handled(m.step_id)), 4)
    return "\n".join(out) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;padding:1rem;
color:#1a1a1a;background:#fff;line-height:1.45;max-width:60rem}
h1{font-size:1.35rem;margin:.2rem 0} h2{font-size:1.1rem;margin-top:1.4rem}
.status{display:inline-block;padding:.2rem .6rem;border-radius:.3rem;font-weight:600}
.fully_reversed{background:#d8f3dc;color:#0b4619}.partially_reversed{background:#fff3bf;color:#5c4400}
.cannot_undo{background:#ffe3e3;color:#7d1010}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .5rem;
border-bottom:1px solid #ccc;vertical-align:top}
.state{font-weight:600}
pre.draft{white-space:pre-wrap;background:#f4f4f4;padding:.5rem;border-radius:.3rem}
@media (max-width:40rem){table,thead,tbody,tr,td,th{display:block}thead{display:none}
td{border:none;padding:.15rem 0}tr{border-bottom:1px solid #ccc;padding:.4rem 0}}
"""


_STATUS_WORDS = {
    Outcome.FULLY_REVERSED: "Fully reversed",
    Outcome.PARTIALLY_REVERSED: "Partially reversed — residue remains",
    Outcome.CANNOT_UNDO: "Cannot undo everything — a person must follow up",
}


def state_label(s: StepOutcome) -> str:
    """A step's state in a person's words (issue 26): a step left for review because its tool
    recorded no drift check is "not checked", not "drifted" (nothing drifted); the report's JSON
    keeps the state itself."""
    if s.state is StepState.DRIFTED and s.violation:
        return "not checked"
    return s.state.value.replace("_", " ")


def _when_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "—"


def _render_html(r: UndoReport) -> str:
    """The standalone report for people (issue 26 items 2 and 7): what a person must do first,
    then what remains, then the steps in sentences; ids, tools, figures and contract violations
    in a details fold for engineers."""

    def e(text: str) -> str:
        return html.escape(visible(text, keep="\t\n"))

    manual = "".join(
        f"<li><p><strong>{e(m.what)}</strong></p><p>Who can act: {e(m.who)}"
        + (f"; affected: {e(', '.join(m.parties))}" if m.parties else "")
        + "</p>"
        + (f"<p>Draft message:</p><pre class='draft'>{e(m.draft)}</pre>" if m.draft else "")
        + _html_handled(r, m.step_id, e)
        + "</li>"
        for m in r.manual_actions
    )
    residue = "".join(
        f"<li>{e(x.what)} — affects {e(', '.join(x.parties) or 'no one else')}; "
        f"{e(x.settles_text)}</li>"
        for x in r.residue
    )
    rows = "".join(
        f"<tr><td>{e(s.sentence)}</td><td>{e(_verb(s))}</td>"
        f"<td class='state'>{e(state_label(s))}</td>"
        f"<td>{e(s.outcome_text)}"
        + (
            f"<br>Undo: {e(s.inverse_description)}"
            if s.inverse_description and s.state.value not in DONE_WORDS
            else ""
        )
        + "</td></tr>"
        for s in r.steps
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Undo report — {e(r.title or r.saga_id)}</title><style>{_CSS}</style></head>"
        f"<body><main><h1>{e(r.headline)}</h1>"
        f"<p><span class='status {e(r.status.value)}'>{e(_STATUS_WORDS[r.status])}</span>"
        + (f" {e(r.title)}" if r.title else "")
        + "</p>"
        + (f"<h2>Needs a person</h2><ul>{manual}</ul>" if manual else "")
        + (f"<h2>What remains</h2><ul>{residue}</ul>" if residue else "")
        + "<h2>Steps</h2><table><thead><tr><th scope='col'>What the agent did</th>"
        "<th scope='col'>Verb</th><th scope='col'>State</th><th scope='col'>Detail</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>" + _engineer_fold(r, e) + "</main></body></html>\n"
    )


def _engineer_fold(r: UndoReport, e: Any) -> str:
    """Ids, tools, figures, times and contract violations: for engineers, folded (issue 26)."""
    steps = "".join(
        f"<li><code>{e(s.step_id)}</code> <code>{e(s.tool)}</code> {e(s.state.value)}"
        + ("" if s.declared else " (not declared — treated as irreversible)")
        + (f": {e(s.detail)}" if s.state.value in DONE_WORDS else "")
        + "</li>"
        for s in r.steps
    )
    violations = "".join(f"<li>{e(v)}</li>" for v in r.violations)
    notes = "".join(
        f"<li><code>{e(k)}</code> {e(str(v.get('by')))}: {e(str(v.get('note') or ''))}</li>"
        for k, v in r.resolutions.items()
    )
    return (
        "<details><summary>Details for engineers</summary>"
        f"<p>Saga <code>{e(r.saga_id)}</code> · reversal <code>{e(r.reversal_id)}</code>: "
        f"{r.tool_calls} tool calls, {r.tokens} tokens, {r.seconds:.2f}s{e(_runs_text(r))}. "
        f"Asked {_when_utc(r.requested_at)}, finished {_when_utc(r.finished_at)}.</p>"
        f"<ul>{steps}</ul>"
        + (f"<p>Contract violations:</p><ul>{violations}</ul>" if violations else "")
        + (f"<p>Resolutions:</p><ul>{notes}</ul>" if notes else "")
        + "</details>"
    )
