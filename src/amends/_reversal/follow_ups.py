"""Follow-ups a person sends (issue 27 part 2): a manual action's draft, sent through a tool.

A follow-up is part of the saga's reversal, never a new saga: it is logged write-ahead in the
reversal's history under its own key (``s3+f1``: the first follow-up of step ``s3``'s manual
action), spends the reversal's budget through the one call path of a run (:class:`Caller`:
retries, secrets, what a failure means), is irreversible, and — sent — resolves the manual
action with a reference to what was sent. A send that fails leaves the manual action open; one
whose outcome is unknown (its answer lost, its process stopped) is ``in_doubt`` and is never sent
again by the engine (rule 5): a person checks and resolves it by hand.

It must never: send without a logged claim first, send a manual action twice, or report a send
it cannot vouch for as ``sent``.
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._budget import Budget, BudgetMeter
from .._calls import RetryPolicy, idempotency_key
from .._contracts import Catalog, Residue
from .._errors import ConfigError, ContractError, LeaseLostError, SagaStateError
from .._follow_up_state import FOLLOW_UP_KEY, follow_up_standing, resolved_since, sent_note
from .._jsondata import bounded
from .._log.base import (
    CompensationRecord,
    CompensationWrite,
    Resolution,
    ReversalRecord,
    SagaLog,
    SagaRecord,
)
from .._log.spend import FollowUpSpend
from .._manual import did
from .._observe import CompensationLog, observed
from .._report import UndoReport, current_resolutions
from .._resolution import resolvable
from .._secrets import Redaction, Vault, redact_args
from .._telemetry import span
from .dispatch import Caller, Stop
from .ports import ReversalPorts
from .record import bounded_residue

__all__ = [
    "FollowUpSender",
    "SentFollowUp",
    "follow_ups_of",
    "lost_resolutions",
    "resolve_lost_sends",
    "write_resolutions",
]

_OPEN = ("dispatched", "in_doubt")
"""States of a send that may have gone out: the manual action is never sent again (rule 5)."""


@dataclass(frozen=True)
class SentFollowUp:
    """One follow-up a person sent (or tried to) for a manual action (``engine.send_follow_up``)."""

    follow_up_id: str
    """Its key in the reversal's history, e.g. ``s3+f1`` (the first one for step ``s3``)."""
    saga_id: str
    """The saga whose reversal it belongs to."""
    reversal_id: str
    """The reversal it belongs to (a follow-up is part of the reversal, not a new saga)."""
    step_id: str
    """The step whose manual action it handles."""
    tool: str
    """The catalog tool it was sent through."""
    args: Mapping[str, Any]
    """The arguments it was sent with, as logged (sensitive ones redacted, rule 11)."""
    state: str
    """``sent``; ``failed`` (not sent: the manual action stays open); ``in_doubt`` (it may
    have gone out: check before doing anything, never send it again)."""
    detail: str
    """What happened, in words."""
    by: str
    """Who sent it (the authenticated identity)."""
    parties: tuple[str, ...] = ()
    """Who the manual action names as affected (shown to the sender before confirming)."""
    reference: str | None = None
    """What the tool returned to identify what was sent (a message id), if anything."""
    residue: tuple[Residue, ...] = ()
    """What stays after it (a sent message stays sent): its own residue."""
    at: float = 0.0
    """When it was last written (epoch seconds)."""

    def to_dict(self) -> dict[str, Any]:
        """This follow-up as JSON-ready data."""
        return {
            "follow_up_id": self.follow_up_id,
            "saga_id": self.saga_id,
            "reversal_id": self.reversal_id,
            "step_id": self.step_id,
            "tool": self.tool,
            "args": dict(self.args),
            "state": self.state,
            "detail": self.detail,
            "by": self.by,
            "parties": list(self.parties),
            "reference": self.reference,
            "residue": [r.to_dict() for r in self.residue],
            "at": self.at,
        }


def follow_ups_of(saga_id: str, comps: Mapping[str, CompensationRecord]) -> list[SentFollowUp]:
    """The follow-ups people sent in a reversal, from its records, oldest key first."""
    out = []
    for key, rec in comps.items():
        m = FOLLOW_UP_KEY.match(key)
        if m is None or "tool" not in rec.data:
            continue
        d = rec.data
        state = "in_doubt" if rec.state == "dispatched" else rec.state
        detail = rec.detail or ""
        if rec.state == "dispatched":  # rule 5: it may be in flight, or its process stopped
            # rule 8: the log cannot tell a send on its way from one whose process died, so
            # the words claim neither
            detail = (
                f"{d['tool']} was being sent by {d.get('by') or 'someone'} and no outcome is "
                f"recorded yet: it is being sent now, or its process stopped while sending it; "
                f"it may have gone out: check with the recipients, then resolve the manual "
                f"action by hand"
            )
        out.append(
            _made(saga_id, rec.reversal_id, key, m["step"], d, state, detail, rec.updated_at)
        )
    return sorted(out, key=lambda f: (f.step_id, int(f.follow_up_id.rsplit("+f", 1)[1])))


async def lost_resolutions(
    log: SagaLog, saga: SagaRecord, comps: Mapping[str, CompensationRecord]
) -> dict[str, Resolution]:
    """Per step: the resolution a follow-up logged ``sent`` writes, lost with its process
    (issue 27); none for one in doubt (nothing the engine cannot vouch for). ``comps``: the
    records of the saga's reversal."""
    current = current_resolutions(saga.resolutions, comps)
    standing = await follow_up_standing(log, saga.saga_id, comps, current)
    return {
        k: Resolution(k, v["by"], v["note"], v["at"])
        for k, v in standing.items()
        if not v.get("in_doubt")
    }


async def write_resolutions(log: SagaLog, saga_id: str, lost: Mapping[str, Resolution]) -> None:
    """Write ``lost`` (:func:`lost_resolutions`): the log converges to what each send would
    have written."""
    for step_id, res in sorted(lost.items()):
        await log.resolve_step(saga_id, step_id, by=res.by, note=res.note, now=time.time())


async def resolve_lost_sends(log: SagaLog) -> list[tuple[str, str]]:
    """``recover``'s part (issue 27): write the resolution of every follow-up logged ``sent``
    whose process stopped before writing it (the log converges to what the send would have
    written). One in doubt is left as it is: nothing the engine cannot vouch for is written.
    A saga whose history does not verify is left untouched (rule 12). Returns (saga_id,
    step_id) of each resolution written."""
    out = []
    # a SQL log names the reversals with follow-ups in one query; any other log is read
    # reversal by reversal (a log of 2,000 undone sagas: 0.69 s of recover when each saga was
    # read, 0.32 s reading each reversal's records)
    listed = getattr(log, "follow_up_reversals", None)
    wanted = await listed() if listed is not None else None
    for head in await log.reversal_heads():
        if head.state != "done" or (wanted is not None and head.reversal_id not in wanted):
            continue
        comps = await log.get_compensations(head.reversal_id)
        if not any(FOLLOW_UP_KEY.match(k) for k in comps):
            continue
        saga = await log.get_saga(head.saga_id)
        if saga is None or saga.reversal is None or saga.reversal.reversal_id != head.reversal_id:
            continue
        lost = await lost_resolutions(log, saga, comps)
        if not lost or await log.verify(saga.saga_id):
            continue
        await write_resolutions(log, saga.saga_id, lost)
        out += [(saga.saga_id, step_id) for step_id in sorted(lost)]
    return out


class FollowUpSender:
    """Sends one manual action's follow-up as part of the saga's reversal."""

    def __init__(self, log: SagaLog, catalog: Catalog, retry: RetryPolicy) -> None:
        self.log = log
        self.catalog = catalog
        self.retry = retry

    async def send(
        self,
        saga: SagaRecord,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        by: str,
        *,
        tokens: int = 0,
    ) -> SentFollowUp:
        """Check, claim (write-ahead), send, record, resolve. See ``Engine.send_follow_up``.
        ``tokens``: what an agent spent producing this follow-up (counted in the budget).

        Traced as an ``amends.send_follow_up`` span (its tool call's ``amends.follow_up`` a
        child) linked to the saga's span, as a run of the reversal is: a follow-up sent later,
        in another process, is found from the saga's trace (issue 28)."""
        attrs = {"amends.saga_id": saga.saga_id, "amends.step_id": step_id, "amends.tool": tool}
        with span("amends.send_follow_up", attrs) as s:
            s.link(saga.meta.get("trace"))
            sent = await self._send(saga, step_id, tool, args, by, tokens)
            s.set({"amends.reversal_id": sent.reversal_id, "amends.state": sent.state})
            if sent.state != "sent":
                s.fail(sent.state)
            return sent

    async def _send(
        self,
        saga: SagaRecord,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        by: str,
        tokens: int,
    ) -> SentFollowUp:
        self._check_tool(tool, args)
        rev, comps = await self._finished(saga, step_id)
        earlier = [f for f in follow_ups_of(saga.saga_id, comps) if f.step_id == step_id]
        await self._settled(saga, step_id, earlier, comps)
        _check_signature(tool, self.catalog.get(tool).fn, args)  # before anything is written
        assert rev.report is not None
        report = UndoReport.from_dict(rev.report)
        action = next((m for m in report.manual_actions if m.step_id == step_id), None)
        caller = self._caller(saga, rev, step_id, tool, tokens)
        key = f"{step_id}+f{len(earlier) + 1}"
        logged, redacted = redact_args(self.catalog.get(tool).sensitive, dict(args), caller.vault)
        parties = action.parties if action is not None else ()
        data: dict[str, Any] = {"tool": tool, "args": logged, "by": by, "parties": list(parties)}
        write = _Writer(observed(self.log), rev, key, caller.meter)  # issue 28: a JSON line each
        await write("dispatched", data, f"sending {tool} for {step_id}'s manual action",
                    first=True, redacted=tuple(redacted))  # fmt: skip
        try:
            result, call = await caller.call(
                tool, dict(args), phase="follow_up", step_id=step_id, counter=[0],
                key=f"{idempotency_key(saga.saga_id, step_id, 'undo')}:sent:{key}", prepaid=True,
            )  # fmt: skip
        except Stop as stop:
            state, detail = _unsent(stop)
            await write(state, data, detail)
            return _made(
                saga.saga_id, rev.reversal_id, key, step_id, data, state, detail, time.time()
            )
        ref = _reference(result)
        reached = tuple(caller.vault.scrub(list(_reached(call)))) or tuple(parties)  # rule 11
        # rule 12: its words bounded as an inverse's are (a 5 MB body, a vendor's long answer,
        # thousands of recipients were each written whole into the log and every listing)
        residue = bounded_residue(caller.vault, [
            Residue(f"follow-up sent (it stays sent): {did(tool, logged)}", reached),
            *call.recorded_residue,
        ])  # fmt: skip
        data.update(reference=ref, residue=[r.to_dict() for r in residue])
        # rule 8: a person who sent it elsewhere than the manual action named is not shown
        # as having written to the affected parties
        to = f" to {', '.join(residue[0].parties)}" if set(reached) != set(parties) else ""
        detail = bounded(f"sent with {tool}{to}" + (f" ({ref})" if ref else ""))
        await write("sent", data, detail)
        await self._resolve(saga, step_id, key, rev.reversal_id, detail, by)
        return _made(saga.saga_id, rev.reversal_id, key, step_id, data, "sent", detail, time.time())

    async def _finished(
        self, saga: SagaRecord, step_id: str
    ) -> tuple[ReversalRecord, dict[str, CompensationRecord]]:
        """The saga's finished reversal and its records; raises unless ``step_id``'s effect
        still stands there (rule 8: only then is there a manual action to send for)."""
        rev = saga.reversal
        if rev is None or rev.state != "done" or rev.report is None:
            raise SagaStateError(
                f"saga {saga.saga_id!r} has no finished reversal, so no manual action to send "
                f"a follow-up for; {'undo it first' if rev is None else 'wait for it to finish'}",
                saga_id=saga.saga_id,
                step_id=step_id,
            )
        comps = await self.log.get_compensations(rev.reversal_id)
        resolvable(saga, comps, step_id)
        return rev, comps

    def _caller(
        self, saga: SagaRecord, rev: ReversalRecord, step_id: str, tool: str, tokens: int = 0
    ) -> Caller:
        """The run's one call path, metered from what the reversal spent (rule 7), with the
        send paid for before anything is written (nothing is, when the budget is spent)."""
        meter = BudgetMeter(
            Budget.from_dict(rev.budget),
            calls_spent=rev.calls_spent,
            tokens_spent=rev.tokens_spent + tokens,
        )
        if tokens and meter.tokens > meter.budget.tokens:  # rule 7: tokens <= the cap
            raise SagaStateError(
                f"the reversal's budget is spent (token budget of {meter.budget.tokens} would be "
                f"passed: {rev.tokens_spent} spent, {tokens} more asked): the follow-up was not "
                f"sent",
                saga_id=saga.saga_id,
                step_id=step_id,
            )
        caller = Caller(
            ReversalPorts(self.log, self.catalog), saga, meter, self.retry,
            random.Random(f"{rev.reversal_id}:{step_id}"), Vault(),
        )  # fmt: skip
        try:
            caller.take_call(tool, [0], step_id, "follow_up")
        except Stop as stop:
            raise SagaStateError(
                f"the reversal's budget is spent ({stop.detail}): the follow-up was not sent; "
                f"continue the reversal with a new budget (amends undo {saga.saga_id} "
                f"--continue --budget-calls N), or send it by hand and resolve the manual "
                f"action (amends resolve {saga.saga_id} {step_id} --note ...)",
                saga_id=saga.saga_id,
                step_id=step_id,
            ) from None
        return caller

    def _check_tool(self, tool: object, args: object) -> None:
        if not isinstance(tool, str) or tool not in self.catalog:
            raise ContractError(
                f"no tool {tool!r} in the catalog to send the follow-up with; name a catalog "
                f"tool that sends a message, e.g. 'mail.send'",
                tool=tool if isinstance(tool, str) else None,
            )
        if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
            raise ConfigError(
                f"the follow-up's arguments must be a mapping of names to values, got "
                f"{args!r:.120}; e.g. {{'to': 'bob@example.com', 'body': '...'}}"
            )

    async def _settled(
        self,
        saga: SagaRecord,
        step_id: str,
        earlier: list[SentFollowUp],
        comps: Mapping[str, CompensationRecord],
    ) -> None:
        """Refuse a send the manual action's history rules out (a sent follow-up whose
        resolution was lost, its process stopped in between, is resolved now)."""
        current = current_resolutions(saga.resolutions, comps).get(step_id)
        if current is not None and not current.withdrawn:
            raise SagaStateError(
                f"step {step_id!r}'s manual action was handled by {current.by} "
                f"({current.note}); withdraw that resolution first if it was not handled",
                saga_id=saga.saga_id,
                step_id=step_id,
            )
        for f in earlier:
            if f.state in _OPEN:  # rule 5: never a second message the engine cannot rule out
                raise SagaStateError(
                    f"follow-up {f.follow_up_id} of step {step_id!r} ({f.tool}) is in doubt: "
                    f"{f.detail}. Not sent again",
                    saga_id=saga.saga_id,
                    step_id=step_id,
                )
        last = earlier[-1] if earlier else None
        if last is not None and last.state == "sent" and (current is None or current.at < last.at):
            if await self._withdrawn_since(saga.saga_id, step_id, last.at, comps):
                return  # a person withdrew the resolution it wrote: open again, may be sent
            # sent, and its resolution not written yet (its process stopped in between, or it
            # is being written now): written here if missing, and this request refused
            await self._resolve(saga, step_id, last.follow_up_id, last.reversal_id, last.detail,
                                last.by)  # fmt: skip
            raise SagaStateError(
                f"follow-up {last.follow_up_id} of step {step_id!r} was sent already by "
                f"{last.by} ({last.detail}); the manual action is handled",
                saga_id=saga.saga_id,
                step_id=step_id,
            )

    async def _withdrawn_since(
        self,
        saga_id: str,
        step_id: str,
        sent_at: float,
        comps: Mapping[str, CompensationRecord],
    ) -> bool:
        """Whether a person withdrew the resolution of ``step_id`` written after the follow-up
        sent at ``sent_at`` (the manual action is open again), so it was not lost to a stopped
        process — and is never written again over that person's withdrawal.

        The caller's copy of the saga was read before its records: the resolution the sending
        request writes right after its send may have landed in between (two processes sending
        one manual action: the later one read "sent, not resolved", then found the resolution
        and took it for a withdrawn one, and sent it a second time). So the saga is read again
        after the events: a resolution written since the send is withdrawn only if it is not
        the current one now."""
        if not resolved_since(await self.log.events(saga_id), step_id, sent_at):
            return False
        now = await self.log.get_saga(saga_id)
        current = current_resolutions(now.resolutions, comps).get(step_id) if now else None
        return current is None or current.withdrawn

    async def _resolve(
        self, saga: SagaRecord, step_id: str, key: str, rev_id: str, detail: str, by: str
    ) -> None:
        note = sent_note(key, rev_id, detail)
        now = await self.log.get_saga(saga.saga_id)
        res = now.resolutions.get(step_id) if now is not None else None
        if res is not None and not res.withdrawn and (res.by, res.note) == (by, note):
            return  # written already (a racing request found the send before its resolution)
        await self.log.resolve_step(saga.saga_id, step_id, by=by, note=note, now=time.time())


class _Writer:
    """Writes one follow-up's records (fenced by the reversal's generation, rule 6)."""

    def __init__(
        self, log: CompensationLog, rev: ReversalRecord, key: str, meter: BudgetMeter
    ) -> None:
        self.log, self.rev, self.key, self.meter = log, rev, key, meter
        self.written = (0, 0)  # (calls, tokens) of its own cost its records added so far

    async def __call__(
        self,
        state: str,
        data: Mapping[str, Any],
        detail: str,
        *,
        first: bool = False,
        redacted: tuple[Redaction, ...] = (),
    ) -> None:
        rev, meter = self.rev, self.meter
        # its own cost, kept with it: the report counts it (issue 27: follow-ups are calls
        # of the reversal), whatever runs or continuations come after
        own = (meter.calls - rev.calls_spent, meter.tokens - rev.tokens_spent)
        data = {**data, "calls": own[0], "tokens": own[1]}
        # rule 7: what it adds, summed with the reversal's latest spend by the log in the
        # write's transaction (capped at the claim): follow-ups sent at once, without a lease,
        # never overwrite each other's spend nor both take the budget's last call
        caps = (meter.budget.tool_calls, meter.budget.tokens) if first else (None, None)
        spend = FollowUpSpend(own[0] - self.written[0], own[1] - self.written[1], *caps)
        try:
            await self.log.record_compensation(
                CompensationWrite(
                    rev.reversal_id, rev.generation, self.key, state=state, attempts=1,
                    detail=detail, data=data, calls_spent=meter.calls, tokens_spent=meter.tokens,
                    event=f"follow_up.{state}", now=time.time(), redacted=redacted, first=first,
                    spend=spend,
                )
            )  # fmt: skip
            self.written = own
        except LeaseLostError:
            raise SagaStateError(
                f"a continuation of reversal {rev.reversal_id} started meanwhile; "
                + ("nothing was sent: send the follow-up once it finished" if first else
                   f"{self.key} was recorded as far as it got (`amends follow-up list`)"),
                saga_id=rev.saga_id,
            ) from None  # fmt: skip


def _unsent(stop: Stop) -> tuple[str, str]:
    """A send that did not complete: ``in_doubt`` when it may have gone out (rule 9: the
    vendor may have acted), else ``failed`` (not sent: the manual action stays open)."""
    if stop.state.value == "in_doubt":
        return "in_doubt", (
            f"{stop.detail}; it may have gone out: check with the recipients before doing "
            f"anything, never send it again"
        )
    return "failed", f"not sent: {stop.detail}; the manual action stays open"


def _made(
    saga_id: str,
    rev_id: str,
    key: str,
    step_id: str,
    data: Mapping[str, Any],
    state: str,
    detail: str,
    at: float,
) -> SentFollowUp:
    """The follow-up a record's ``data`` describes."""
    return SentFollowUp(
        follow_up_id=key,
        saga_id=saga_id,
        reversal_id=rev_id,
        step_id=step_id,
        tool=str(data["tool"]),
        args=dict(data.get("args") or {}),
        state=state,
        detail=detail,
        by=str(data.get("by", "")),
        parties=tuple(data.get("parties") or ()),
        reference=data.get("reference"),
        residue=tuple(Residue.from_dict(r) for r in data.get("residue") or ()),
        at=at,
    )


def _reached(call: Any) -> tuple[str, ...]:
    """Who the send reached, as the tool itself declared it in this call (its
    acknowledgement's parties, else its residue's): the recipients a person typed, which may
    differ from the ones the manual action names."""
    ack = call.recorded_acknowledgement
    if ack is not None and ack.parties:
        return tuple(ack.parties)
    return tuple(dict.fromkeys(p for r in call.recorded_residue for p in r.parties))


def _reference(result: Any) -> str | None:
    """What identifies what was sent: the result's id (``message_id``, ``id``), if any."""
    if isinstance(result, Mapping):
        for k in ("message_id", "id", "ref", "reference"):
            if isinstance(result.get(k), str | int):
                return f"{k} {result[k]}"
    return None


def _check_signature(tool: str, fn: Any, args: Mapping[str, Any]) -> None:
    """A follow-up whose arguments the tool cannot take is refused before anything is written
    (a person's typo, ``body`` for ``text``): sent, Python would refuse the call, and an answer
    taken for lost would leave the manual action in doubt for good (rule 5)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a callable amends cannot read: the call itself decides
        return
    try:
        signature.bind(None, **args)
    except TypeError as exc:
        params = list(signature.parameters.values())[1:]
        named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        takes = {p.name for p in named}
        unknown = [repr(k) for k in args if k not in takes]
        missing = [repr(p.name) for p in named if p.default is p.empty and p.name not in args]
        why = (
            " and ".join(
                part
                for part in (
                    f"does not take {', '.join(unknown)}" if unknown else "",
                    f"needs {', '.join(missing)}" if missing else "",
                )
                if part
            )
            or f"cannot take these arguments ({exc})"
        )
        raise ConfigError(
            f"tool {tool!r} {why}; it takes {', '.join(p.name for p in named) or 'no arguments'}"
            f": the follow-up was not sent"
        ) from None
