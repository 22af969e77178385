"""Manual actions in words: what a person must still do for an effect that stands (rule 8).

The report layer (issue 22): the reversal decides a step's state; this module says, for that
state, what stands, who can act and a draft message naming the parties. It never calls a tool and
never writes the log. Every sentence it writes is safe to follow as written: an outcome that is
unknown says to check first, never to repeat something that may already have happened (rule 5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._contracts import Acknowledgement, FollowUp, ManualAction, Residue
from ._describe import people_detail
from ._log.base import StepRecord
from ._report import StepState

__all__ = ["UNKNOWN_FOLLOW_UP", "Wording", "did", "missing_follow_ups"]

UNKNOWN_FOLLOW_UP = (
    "it may have been made before a worker stopped, and its vendor does not honour idempotency "
    "keys, so it was not sent again; whether it was made is unknown"
)
"""Why a follow-up in flight at a crash is not re-sent (rule 5) and is reported unknown."""


def did(tool: str, args: Mapping[str, Any]) -> str:
    """A call as code: ``tool(arg='value', ...)`` (arguments sorted, as logged: redacted)."""
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
    return f"{tool}({shown})"


def parties(step: StepRecord) -> tuple[str, ...]:
    """Who the step's effect touches: its acknowledgement's parties, else its residue's."""
    ack = Acknowledgement.from_dict(step.acknowledgement) if step.acknowledgement else None
    if ack and ack.parties:
        return ack.parties
    found: list[str] = []
    for r in step.residue:
        for party in r.get("parties", ()):
            if party not in found:
                found.append(party)
    return tuple(found)


@dataclass(frozen=True)
class Wording:
    """The words of one saga's manual actions: who asked, and how its steps read.

    ``sentence`` maps a step to the sentence its tool's ``describe=`` gives (issue 17), or
    ``None`` when the tool has no template (the call is then shown as code)."""

    saga_id: str
    """The saga (named in the continue command)."""
    title: str
    """What the agent was asked to do (named in drafts)."""
    actor: str | None
    """Who asked the agent, when known."""
    continue_hint: str | None = None
    """How a person continues a reversal that stopped short, where they undo from (the text
    ``{saga_id}`` is replaced); ``None``: the ``amends undo --continue`` command."""

    def asker(self) -> str:
        """Who asked the agent. An actor ``agent:NAME`` is the agent itself, never labelled
        a person (issue 26): "the person who asked the NAME agent"."""
        if self.actor and self.actor.startswith("agent:"):
            return f"the person who asked the {self.actor.removeprefix('agent:')} agent"
        if self.actor:
            return f"the person who asked the agent ({self.actor})"
        return "the person who asked the agent"

    def manual(
        self,
        step: StepRecord,
        state: StepState,
        detail: str,
        sentence: str | None = None,
        inverse: str | None = None,
    ) -> ManualAction:
        """The manual action of ``step`` left in ``state`` for ``detail``. ``inverse``: the
        inverse in words, when it was sent and its outcome is unknown (``in_doubt``)."""
        shown = repr(sentence) if sentence else did(step.tool, step.args)
        if state is StepState.ACKNOWLEDGED:
            return self._acknowledged(step, shown)
        if state is StepState.IN_DOUBT and inverse is not None:
            what, draft, who = _inverse_in_doubt(self, step, shown, detail, inverse)
        else:
            what, draft, who = _WORDS.get(state, _undo_by_hand)(self, step, shown, detail, state)
        return ManualAction(step.step_id, what, who, parties(step), draft)

    def _acknowledged(self, step: StepRecord, shown: str) -> ManualAction:
        ack = Acknowledgement.from_dict(step.acknowledgement) if step.acknowledgement else None
        if not step.explicit and ack is None:
            return self._undeclared(step, shown)
        # issue 26: the contract violation is an engineer's text (the report's violations); a
        # person reads what it means for them
        what = (ack.what if ack and ack.what else f"{shown} cannot be taken back") + (
            "" if not step.violation else f": {CANNOT_CHECK} (its tool broke its contract)"
        )
        draft = (ack.draft if ack else None) or (
            f"Hello {_to(step)}: an assistant acting for us did {shown} ({self.title!r}), which "
            f"cannot be undone automatically. Please tell us if it affects you, and we will put "
            f"it right by hand."
        )
        return ManualAction(
            step.step_id, what, ack.who if ack else self.asker(), parties(step), draft
        )

    def _undeclared(self, step: StepRecord, shown: str) -> ManualAction:
        """Issue 26: a tool with no declared class is not one declared irreversible. What stands
        is unknown, and the fix is the owner's declaration, so the action goes to them."""
        what = (
            f"{shown} is not declared — treated as irreversible: check whether it changed "
            f"anything, and ask the owner of {step.tool} to declare it (read-only if it only "
            f"reads)"
        )
        draft = (
            f"Hello: an assistant acting for us used {step.tool} ({self.title!r}): {shown}. "
            f"Its reversibility is not declared, so amends could not take it back and treated "
            f"it as irreversible. Please declare it in the catalog: read-only if it only reads; "
            f"otherwise reversible, compensable or irreversible, with how to undo it."
        )
        return ManualAction(
            step.step_id, what, f"the owner of the tool {step.tool}", parties(step), draft
        )

    def follow_ups(self, step: StepRecord, missing: Sequence[tuple[FollowUp, str]]) -> ManualAction:
        """The manual action of a step whose undo succeeded but whose follow-ups are missing
        (rule 7: the state stays what the inverse achieved)."""
        calls = "; ".join(f"{did(fu.tool, fu.args)} ({why})" for fu, why in missing)
        unknown = any(why == UNKNOWN_FOLLOW_UP for _, why in missing)
        what = (
            f"The undo of {step.tool} succeeded, but follow-up(s) it asked for may not have been "
            f"made: {calls}. Check each one and make it by hand if it is missing."
            if unknown
            else f"The undo of {step.tool} succeeded, but follow-up(s) it asked for were not "
            f"made: {calls}. Make them by hand."
        )
        draft = (
            f"Hello {_to(step)}: we undid {did(step.tool, step.args)}, but could not complete "
            f"every follow-up step automatically; we are finishing it by hand."
        )
        return ManualAction(step.step_id, what, self.asker(), parties(step), draft)


def missing_follow_ups(step: StepRecord, missing: Sequence[tuple[FollowUp, str]]) -> list[Residue]:
    """Rule 7: each follow-up that was not made (or may not have been) as residue."""
    return [
        Residue(
            f"follow-up {did(fu.tool, fu.args)} "
            f"{'may not have been made' if why == UNKNOWN_FOLLOW_UP else 'was not made'} ({why})",
            parties(step),
        )
        for fu, why in missing
    ]


def _to(step: StepRecord) -> str:
    found = parties(step)
    return ", ".join(found) if found else "team"


_Words = tuple[str, str, str]


CANNOT_CHECK = "amends cannot check this step safely"
"""What a contract violation means to a person (issue 26): not "drifted", nothing drifted."""


def _cannot_check(w: Wording, step: StepRecord, shown: str) -> _Words:
    return (
        f"Check {shown} by hand and undo it if it should not stand: {CANNOT_CHECK}, so it was "
        f"not undone automatically.",
        f"Hello {_to(step)}: {shown}, done by an assistant acting for us, was not undone "
        f"automatically because we cannot check it safely. Please tell us whether it still "
        f"stands and whether it should be reverted.",
        w.asker(),
    )


def _drifted(w: Wording, step: StepRecord, shown: str, detail: str, _: StepState) -> _Words:
    if step.violation:  # rule 4: no drift check recorded, so none was made: nothing drifted
        return _cannot_check(w, step, shown)
    return (
        f"Review {shown}: {detail}. Decide whether to undo it by hand.",
        f"Hello {_to(step)}: {shown}, done by an assistant acting for us, was not undone "
        f"automatically because it needs review ({detail}). Please check it and tell us whether "
        f"it should be reverted.",
        w.asker(),
    )


def _in_doubt(w: Wording, step: StepRecord, shown: str, detail: str, _: StepState) -> _Words:
    return (
        f"Check whether {shown} took effect, and undo it by hand if it did: {detail}",
        f"Hello {_to(step)}: we cannot tell whether {shown}, asked by an assistant acting for "
        f"us, went through. Please check on your side and, if it did, reverse it.",
        w.asker(),
    )


def _inverse_in_doubt(
    w: Wording, step: StepRecord, shown: str, detail: str, inverse: str
) -> _Words:
    # rule 5: the inverse may have acted; never an instruction that could make a second effect
    return (
        f"Check whether {inverse} happened before acting ({detail}). If it did, nothing is "
        f"left to do for {shown}; only if it did not does {shown} still stand, to be taken back "
        f"by hand.",
        f"Hello {_to(step)}: we tried to take back {shown}, done by an assistant acting for us, "
        f"and cannot tell whether it went through. Please check on your side whether {inverse} "
        f"happened before doing anything.",
        w.asker(),
    )


CONTINUE_HINT = "amends undo {saga_id} --continue --budget-calls N --budget-seconds S"
"""How a person continues a reversal that stopped short, unless the engine says otherwise."""


def _over_budget(w: Wording, step: StepRecord, shown: str, detail: str, _: StepState) -> _Words:
    how = (w.continue_hint or CONTINUE_HINT).replace("{saga_id}", w.saga_id)
    return (
        f"Undo {shown}, which was not attempted ({detail}): continue with a larger budget: "
        f"{how}, or undo it by hand",
        f"Hello {_to(step)}: {shown}, done by an assistant acting for us, has not been undone "
        f"yet. We will undo it shortly; no action is needed from you unless it caused a problem.",
        f"{w.asker()}, or whoever runs amends for this saga",
    )


def _undo_by_hand(w: Wording, step: StepRecord, shown: str, detail: str, st: StepState) -> _Words:
    reason = "its inverse failed" if st is StepState.FAILED else "it was not attempted"
    # issue 26 item 2: said once ("it was not attempted (not attempted: ...)"), and a blocked
    # step's wait in words, not the other step's id and tool
    why = people_detail(st.value, detail, "").removeprefix("not attempted: ")
    return (
        f"Undo {shown} by hand: {reason} ({why})",
        f"Hello {_to(step)}: {shown}, done by an assistant acting for us, could not be undone "
        f"automatically. Please undo it on your side or tell us how to proceed.",
        w.asker(),
    )


_WORDS = {
    StepState.DRIFTED: _drifted,
    StepState.IN_DOUBT: _in_doubt,
    StepState.OVER_BUDGET: _over_budget,
}
