"""The engine's follow-up methods (issue 27): a person sends a manual action's draft
(:mod:`.follow_ups`), an agent proposes follow-ups under a cap (:mod:`.agentic`).

``amends.Engine`` inherits :class:`FollowUpMethods`; they live here, beside what they run, so the
engine module stays within its size.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .._calls import RetryPolicy, run
from .._contracts import Catalog
from .._log.base import CompensationRecord, Resolution, SagaLog, SagaRecord
from .._report import current_resolutions
from .._resolution import check_who_and_note
from .agentic import Approve, FollowUpAgent
from .follow_ups import (
    FollowUpSender,
    SentFollowUp,
    follow_ups_of,
    lost_resolutions,
    resolve_lost_sends,
    write_resolutions,
)

__all__ = ["FollowUpMethods"]


class FollowUpMethods:
    """The engine's follow-up methods (``amends.Engine`` inherits them; kept here, beside what
    they run, so the engine module stays one screenful per responsibility)."""

    log: SagaLog
    catalog: Catalog
    retry_policy: RetryPolicy

    async def _saga_or_raise(self, saga_id: str) -> SagaRecord:
        raise NotImplementedError  # the engine's

    async def _check_history(self, saga_id: str) -> None:
        raise NotImplementedError  # the engine's

    async def send_follow_up(
        self, saga_id: str, step_id: str, *, tool: str, args: Mapping[str, Any], by: str
    ) -> SentFollowUp:
        """Send a manual action's draft (as the person edited it) through a catalog tool, as a
        follow-up of the saga's reversal (docs/follow-ups.md): logged write-ahead, paid from
        the reversal's budget (the seconds budget bounds the send), irreversible with its own
        residue. Sent, it resolves the manual action (``by``, with a note naming what was
        sent). Not sent (``state == "failed"``), the manual action stays open; its outcome
        unknown (``in_doubt``), it is never sent again: a person checks and resolves it.

        Args:
            saga_id: The saga.
            step_id: The step whose manual action the follow-up handles.
            tool: The catalog tool to send it with (``"mail.send"``).
            args: Its arguments, the text as the person confirmed it.
            by: Who sends it: the identity the application authenticated.

        Raises:
            ConfigError: ``by`` is empty or ``args`` is not a mapping.
            ContractError: No such tool in the catalog, or no such step in the saga.
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was sent.
            SagaStateError: Nothing to send for (no finished reversal, the effect no longer
                stands, already handled, an earlier send in doubt, the budget spent, another
                request sending it now); nothing was sent.
        """
        by, _ = check_who_and_note(by, "follow-up", "send_follow_up")
        saga = await self._saga_or_raise(saga_id)
        await self._check_history(saga_id)
        return await FollowUpSender(self.log, self.catalog, self.retry_policy).send(
            saga, step_id, tool, args, by
        )

    def send_follow_up_sync(
        self, saga_id: str, step_id: str, *, tool: str, args: Mapping[str, Any], by: str
    ) -> SentFollowUp:
        """:meth:`send_follow_up` for synchronous callers."""
        return run(self.send_follow_up(saga_id, step_id, tool=tool, args=args, by=by))

    async def follow_ups(self, saga_id: str) -> list[SentFollowUp]:
        """The follow-ups people sent (or tried to) in the saga's reversal, by step.

        Raises:
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12): what it records is
                not shown as if it were the record.
        """
        saga = await self._saga_or_raise(saga_id)
        await self._check_history(saga_id)
        if saga.reversal is None:
            return []
        return follow_ups_of(saga_id, await self.log.get_compensations(saga.reversal.reversal_id))

    async def _converged(self, saga: SagaRecord) -> SagaRecord:
        """``saga``, its history checked (rule 12), after writing the resolution of each
        follow-up logged sent whose process stopped before writing it (issue 27): a
        continuation's runner then sees the manual action handled, as every report shows it,
        and what every report shows handled can be withdrawn."""
        await self._check_history(saga.saga_id)
        rev = saga.reversal
        if rev is None:
            return saga
        lost = await lost_resolutions(
            self.log, saga, await self.log.get_compensations(rev.reversal_id)
        )
        await write_resolutions(self.log, saga.saga_id, lost)
        return await self._saga_or_raise(saga.saga_id) if lost else saga

    async def _resolutions_now(
        self, saga: SagaRecord, comps: dict[str, CompensationRecord]
    ) -> dict[str, Resolution]:
        """The current resolutions (:func:`current_resolutions`) with those of follow-ups
        logged sent whose process stopped before writing them (issue 27), as reports show.
        ``comps``: the records of the saga's reversal."""
        return {
            **current_resolutions(saga.resolutions, comps),
            **await lost_resolutions(self.log, saga, comps),
        }

    async def _resolve_lost_sends(self) -> list[tuple[str, str]]:
        """``recover``'s part: the resolutions of follow-ups sent whose process stopped before
        writing them (:func:`.follow_ups.resolve_lost_sends`)."""
        return await resolve_lost_sends(self.log)

    def follow_up_agent(
        self,
        saga_id: str,
        *,
        by: str,
        allow: Collection[str] = (),
        approve: Approve | None = None,
        seconds: float | None = None,
    ) -> FollowUpAgent:
        """A capped follow-up tool set for an agent handling the saga's open manual actions
        (issue 27, docs/follow-ups.md): each call it proposes passes the approval gate (a tool in
        ``allow``, the operator's policy, or ``approve``, a person's answer), then is sent as a
        follow-up of the reversal, inside its budget; when the budget (calls, tokens, seconds)
        is spent, the engine stops the agent and ``FollowUpAgent.left`` lists what is left.

        Args:
            saga_id: The saga whose reversal the agent finishes.
            by: The agent's identity (recorded on each follow-up).
            allow: Tools the agent may call without asking a person.
            approve: Shows a proposal to a person; returns (or resolves to) whether they
                approved. ``None``: proposals outside ``allow`` are refused.
            seconds: The session's time cap (default: the reversal budget's seconds).

        Raises:
            ConfigError: ``by`` is empty.
        """
        by, _ = check_who_and_note(by, "agent", "follow_up_agent")
        sender = FollowUpSender(self.log, self.catalog, self.retry_policy)
        return FollowUpAgent(
            sender, lambda: self._saga_or_raise(saga_id), saga_id, by,
            allow=allow, approve=approve, seconds=seconds,
        )  # fmt: skip
