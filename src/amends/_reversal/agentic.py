"""Agentic compensation, capped (issue 27 part 3): an agent handles a reversal's open manual
actions, each call it makes a follow-up of the reversal, behind the approval gate and inside the
reversal's budget.

An agent proposes follow-ups; each proposal passes the gate first — a tool the operator's policy
allows (``allow``), else a person's answer (``approve``), else it is refused — and is then sent
as :meth:`FollowUpSender.send` sends a person's (write-ahead, one tool call of the reversal's
budget, the tokens the agent spent on it counted too). When the budget is spent (calls, tokens,
or the session's seconds), the engine stops the agent: that proposal and every later one are
``not_done``, never called, and :attr:`FollowUpAgent.left` lists them with the manual actions
still open. Never more calls than the cap (rule 7: the budget bounds the cascade).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._contracts import ManualAction
from .._errors import ConfigError, ContractError, SagaStateError
from .._report import UndoReport, current_report
from .follow_ups import FollowUpSender, SentFollowUp

__all__ = ["FollowUpAgent", "FollowUpOutcome", "FollowUpProposal"]

ProposalState = Literal["sent", "failed", "in_doubt", "refused", "not_done"]


@dataclass(frozen=True)
class FollowUpProposal:
    """A follow-up an agent proposes for a manual action."""

    step_id: str
    """The step whose manual action it handles."""
    tool: str
    """The catalog tool to call."""
    args: Mapping[str, Any] = field(default_factory=dict)
    """Its arguments."""
    tokens: int = 0
    """Tokens the agent spent producing it (counted in the reversal's budget): a whole number,
    0 or more."""

    def __post_init__(self) -> None:
        # rule 7: an agent's word on its own cost is checked as call.spend checks a tool's:
        # a negative count gave budget back, NaN made the reversal's record unreadable
        t = self.tokens
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise ConfigError(
                f"FollowUpProposal(tokens=...) takes a whole number of tokens, 0 or more, got "
                f"{t!r:.60} for the follow-up of step {self.step_id!r:.60}; pass what producing "
                f"it cost, e.g. tokens=120"
            )


@dataclass(frozen=True)
class FollowUpOutcome:
    """What became of one proposal: ``sent``, ``failed`` / ``in_doubt`` (sent, not done or
    perhaps done), ``refused`` (by a person, or no policy allows it), or ``not_done`` (the budget
    stopped the agent, or the manual action no longer needs it)."""

    proposal: FollowUpProposal
    """The proposal."""
    state: ProposalState
    """What became of it."""
    detail: str
    """Why, in words."""
    follow_up: SentFollowUp | None = None
    """The follow-up it made, when it made one."""

    def to_dict(self) -> dict[str, Any]:
        """This outcome as JSON-ready data."""
        p = self.proposal
        return {
            "step_id": p.step_id,
            "tool": p.tool,
            "state": self.state,
            "detail": self.detail,
            "tokens": p.tokens,
            "follow_up": self.follow_up.to_dict() if self.follow_up is not None else None,
        }


Approve = Callable[[FollowUpProposal], bool | Awaitable[bool]]
"""The approval gate: shows a proposal to a person, returns whether they approved it."""


class FollowUpAgent:
    """The follow-up tool set of one agent session over a reversal (``engine.follow_up_agent``).

    Args:
        sender: Sends each approved follow-up as part of the reversal.
        load: Reads the saga (and its reversal) again.
        saga_id: The saga whose reversal the agent finishes.
        by: The agent's identity (recorded on each follow-up and resolution).
        allow: Tools the operator's policy lets the agent call without asking a person.
        approve: Asks a person about any other proposal; ``None``: they are refused.
        seconds: The session's own time cap (default: the reversal budget's seconds).
    """

    def __init__(
        self,
        sender: FollowUpSender,
        load: Callable[[], Awaitable[Any]],
        saga_id: str,
        by: str,
        *,
        allow: Collection[str] = (),
        approve: Approve | None = None,
        seconds: float | None = None,
    ) -> None:
        self.sender, self.load, self.saga_id, self.by = sender, load, saga_id, by
        self.allow = frozenset(allow)
        self.approve = approve
        self.seconds = seconds
        self.started = time.monotonic()
        self.outcomes: list[FollowUpOutcome] = []
        """Every proposal, in order, with what became of it."""
        self.stopped: str | None = None
        """Why the engine stopped the agent (its budget spent), or ``None``."""

    async def open_actions(self) -> list[ManualAction]:
        """The reversal's manual actions nobody has handled yet, nor sent a follow-up for that
        may have gone out (issue 27: never proposed again; :meth:`in_doubt` lists those)."""
        report = await self._report()
        return list(report.open_manual_actions) if report is not None else []

    async def in_doubt(self) -> list[ManualAction]:
        """The manual actions a follow-up may have gone out for (its outcome unknown): a
        person checks whether it went out before acting; never sent again (rule 5)."""
        report = await self._report()
        if report is None:
            return []
        return [m for m in report.manual_actions if m.step_id in report.in_doubt]

    async def _report(self) -> UndoReport | None:
        rev = (await self.load()).reversal
        if rev is None or rev.report is None:
            return None
        return await current_report(self.sender.log, UndoReport.from_dict(rev.report))

    @property
    def left(self) -> list[FollowUpOutcome]:
        """Proposals not sent, in order: ``not_done`` (the budget stopped the agent, or the
        manual action no longer needs it), ``refused``, ``failed`` (not made: the manual
        action stays open) and ``in_doubt`` (it may have been made: a person checks before
        acting, never repeats it). Every proposal is sent or listed here (issue 27)."""
        return [o for o in self.outcomes if o.state != "sent"]

    async def propose(self, proposal: FollowUpProposal) -> FollowUpOutcome:
        """Pass ``proposal`` through the gate and the budget, then send it (see the module).

        Raises:
            ConfigError: ``proposal`` is not a :class:`FollowUpProposal`.
        """
        if not isinstance(proposal, FollowUpProposal):
            raise ConfigError(f"propose() takes an amends FollowUpProposal, got {proposal!r:.120}")
        outcome = await self._decide(proposal)
        self.outcomes.append(outcome)
        return outcome

    async def _decide(self, p: FollowUpProposal) -> FollowUpOutcome:
        if self.stopped is not None:
            return FollowUpOutcome(p, "not_done", f"not attempted: {self.stopped}")
        saga = await self.load()
        if (late := self._late(saga)) is not None:
            return self._stop(p, late)
        if p.tool not in self.allow:
            why = await self._asked(p)
            if why is not None:
                return FollowUpOutcome(p, "refused", why)
            # rule 7: a person who answers after the session's time is spent does not
            # stretch it (the send went out past the cap)
            if (late := self._late(saga)) is not None:
                return self._stop(p, f"{late} (while a person was asked)")
        try:
            sent = await self.sender.send(saga, p.step_id, p.tool, p.args, self.by,
                                          tokens=p.tokens)  # fmt: skip
        except SagaStateError as exc:
            if "budget is spent" in str(exc):
                return self._stop(p, str(exc).split(": the follow-up", 1)[0])
            return FollowUpOutcome(p, "not_done", f"not attempted: {exc}")
        except (ContractError, ConfigError) as exc:
            return FollowUpOutcome(p, "not_done", f"not attempted: {exc}")
        state: ProposalState = sent.state  # type: ignore[assignment]
        return FollowUpOutcome(p, state, sent.detail, sent)

    def _late(self, saga: Any) -> str | None:
        """Why the session's time is spent (its own cap, else the reversal budget's), or
        ``None``."""
        budget_s = saga.reversal.budget.get("seconds") if saga.reversal else None
        cap = self.seconds if self.seconds is not None else budget_s
        if cap is not None and time.monotonic() - self.started >= float(cap):
            return f"the time budget of {float(cap):g} s is spent"
        return None

    async def _asked(self, p: FollowUpProposal) -> str | None:
        """The approval gate: ``None`` when a person approved, else why it was refused."""
        if self.approve is None:
            return (
                f"refused: {p.tool} is not allowed by the operator's policy and no person was asked"
            )
        answer = self.approve(p)
        if inspect.isawaitable(answer):
            answer = await answer
        return None if answer is True else "refused by a person"

    def _stop(self, p: FollowUpProposal, why: str) -> FollowUpOutcome:
        """Rule 7: the engine stops the agent; this and every later proposal are not done."""
        self.stopped = f"{why}; the engine stopped the agent"
        return FollowUpOutcome(p, "not_done", f"not attempted: {self.stopped}")
