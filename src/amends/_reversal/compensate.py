"""Compensating one step: the drift check, the write-ahead dispatch, the inverse, its follow-ups,
and the crash rules for an inverse that was in flight (rules 4, 5, 7).

Every compensation is logged ``dispatched`` before its inverse is called and with its final state
after; a compensation logged in a final state is never dispatched again (rule 5).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any

from .._calls import idempotency_key
from .._contracts import NOTHING, Call, FollowUp, Residue, same_value
from .._describe import EMPTY
from .._log.base import CompensationRecord
from .._manual import UNKNOWN_FOLLOW_UP
from .._planner import PlannedStep
from .._report import StepOutcome, StepState
from .._resolution import UNCHECKED
from .._secrets import Redaction, masked, redactions_from, under
from .dispatch import Caller, Stop, Unchecked
from .record import Recorder, bounded_residue

__all__ = ["Compensator"]


class Compensator:
    """Runs the inverse of a step whose turn has come (the gate and the window passed)."""

    def __init__(self, caller: Caller, recorder: Recorder) -> None:
        self.caller = caller
        self.recorder = recorder
        self.saga_id = caller.saga.saga_id
        self.lost: dict[str, str] = {}
        """Per step, what lost its call in flight (``CallLost.cause``), for its details."""

    def _lost(self, p: PlannedStep) -> str:
        """What lost the step's call in flight, in words (rule 8): the cause given, or a worker
        that stopped (a crash, found in the log)."""
        return self.lost.get(p.step_id, "a worker stopped")

    async def run(self, p: PlannedStep, prior: CompensationRecord | None) -> StepOutcome:
        """The step's calls (its drift check and first attempt) were set aside in undo order
        before the run began (``BudgetMeter.reserve``, rule 7): a step the budget does not
        cover stops at its first call, over budget, before anything is made."""
        assert p.inverse is not None
        counter = [0]
        key = idempotency_key(self.saga_id, p.step_id, "undo")
        in_flight = prior is not None and prior.state == "dispatched"
        if in_flight and prior is not None and prior.data.get("lost"):
            self.lost.setdefault(p.step_id, str(prior.data["lost"]))  # rule 8: the real cause
        if prior is not None and in_flight and prior.data.get("returned"):
            return await self._after_return(p, prior, key)
        resent = False
        paid_at: int | None = None
        if p.inverse.tool not in self.caller.catalog:
            return await self._no_tool(p, in_flight)
        try:
            if in_flight:
                if await self._landed_before(p, counter):
                    return await self._succeeded(p, counter[0], self.expected(p), landed=True)
                resent = self.caller.idempotent(p.inverse.tool)
            elif p.expectation is not None or self.caller.ports.model is not None:
                await self.check_drift(p)  # issue 29: else it only says "no drift check"
            # rule 7: the call is paid for before the dispatch record is written, so the record
            # carries it and a take-over after a crash counts the call that was in flight.
            self.caller.take_call(p.inverse.tool, counter, p.step_id, "planned")
            paid_at = counter[0]
            await self.recorder.record(
                p, "dispatched", attempts=(prior.attempts if prior else 0),
                detail=f"dispatching {p.inverse.tool}", data={"key": key},
                event="compensation.dispatched",
            )  # fmt: skip
            _, call = await self.caller.call(
                p.inverse.tool, p.inverse.args, phase="compensate", key=key, step_id=p.step_id,
                precondition=p.expectation, counter=counter, prepaid=True,
                at=self.caller.redactions(p.step_id, "inverse", "args"),
            )  # fmt: skip
        except Stop as stop:
            if paid_at is not None and counter[0] == paid_at:
                self.caller.meter.calls -= 1  # paid for, never made (no resolver, unknown tool)
            stop = _after_crash(p, stop, in_flight, resent, self._lost(p))
            if stop.state is StepState.IN_DOUBT and paid_at is not None and not in_flight:
                try:
                    seen = await self._reobserve(p, counter[0], stop.detail)
                except Stop as cut:  # rules 6, 7: no budget left to look; continuable
                    return await self._unlooked(p, stop.detail, cut.detail, counter[0])
                if seen is not None:
                    return seen
                stop = Stop(StepState.IN_DOUBT, f"{stop.detail}; {self._unseen(p)}")
            return await self.recorder.stopped(
                p, stop.state, stop.detail, attempts=counter[0], in_flight=in_flight,
                unchecked=stop.unchecked,
            )  # fmt: skip
        if not call.recorded_follow_ups:  # issue 29: the common inverse asks for none
            residue = list(call.recorded_residue)  # what it observed supersedes the forward's
            if not residue and p.expected_residue:
                residue = self.expected(p)
            return await self._succeeded(p, counter[0], residue)
        return await self._returned(p, call, counter[0], key)

    async def _unlooked(self, p: PlannedStep, cause: str, spent: str, attempts: int) -> StepOutcome:
        """Rules 6, 7, 8: the inverse's outcome is unknown (cut off by the time budget, its
        answer lost) and the budget leaves no call to look with its probes: ``in_doubt``, but
        only for want of budget, so the reversal can be continued (``rechecks``): the
        continuation checks whether it landed before anything is sent again (rule 5), as after
        a crash; ``lost`` names what cut it off, in that continuation's words."""
        assert p.inverse is not None
        detail = (
            f"{cause}; no budget was left to look with its probes ({spent}): continuing with a "
            f"new budget checks whether it took effect before anything is sent again"
        )
        lost = _cut_off(cause)
        self.lost[p.step_id] = lost
        return await self.recorder.stopped(
            p, StepState.IN_DOUBT, detail, attempts=attempts, in_flight=True, lost=lost
        )

    async def _no_tool(self, p: PlannedStep, in_flight: bool) -> StepOutcome:
        """The inverse's tool is not in this catalog (``allow_missing_tools``): not attempted."""
        assert p.inverse is not None
        if in_flight:  # rule 5: the earlier attempt may have landed; nothing can check it
            detail = f"an earlier attempt was in flight at a crash; {_missing(p.inverse.tool)}"
            return await self.recorder.stopped(p, StepState.IN_DOUBT, detail, in_flight=True)
        return await self.recorder.stopped(p, StepState.FAILED, _missing(p.inverse.tool))

    async def _returned(self, p: PlannedStep, call: Call, attempts: int, key: str) -> StepOutcome:
        """The inverse returned: its follow-ups, then the step's outcome."""
        assert p.inverse is not None
        # what the compensation observed supersedes what the forward call expected
        residue = list(call.recorded_residue) or (self.expected(p) if p.expected_residue else [])
        residue = bounded_residue(self.recorder.vault, residue)  # rule 12, before it is logged
        counter = [attempts]
        if call.recorded_follow_ups:
            # rule 5: the inverse has acted; log that (and what it asked for) before the
            # follow-ups run, so a crash among them neither re-sends the inverse nor makes a
            # follow-up twice, and none is forgotten.
            await self.recorder.record(
                p, "dispatched", attempts=counter[0],
                detail=f"{p.inverse.tool} returned; making its follow-up(s)",
                data={
                    "key": key, "returned": True, "residue": [r.to_dict() for r in residue],
                    "follow_ups": [fu.to_dict() for fu in call.recorded_follow_ups],
                },
                event="compensation.dispatched",
            )  # fmt: skip
        more, missing = await self.follow_ups(p, call.recorded_follow_ups, key)
        return await self._succeeded(p, counter[0], residue + more, missing)

    def expected(self, p: PlannedStep) -> list[Residue]:
        """The residue the forward call expected, its settle dates counted from now (the
        compensation's time, by the run's clock: the preview counts them the same way)."""
        if not p.expected_residue:  # issue 29: no clock read, no date, for nothing to count
            return []
        now = datetime.fromtimestamp(self.caller.ports.clock(), UTC)
        return [r.settling_from(now) for r in p.expected_residue]

    def _succeeded(
        self,
        p: PlannedStep,
        attempts: int,
        residue: list[Residue],
        missing: Sequence[tuple[FollowUp, str]] = (),
        *,
        landed: bool = False,
        returned: bool = False,
        after: tuple[str, str] | None = None,
    ) -> Awaitable[StepOutcome]:
        """The step's outcome, recorded when awaited (issue 29: no coroutine of its own)."""
        assert p.inverse is not None
        detail = f"{'reverted' if p.action == 'revert' else 'compensated'} with {p.inverse.tool}"
        if attempts > 1:
            detail += f" after {attempts} attempts"
        if after is not None:  # the answer was lost; the world shows the undo (rule 8)
            detail += f" ({after[0]}, but {after[1]})"
        if returned:
            detail += f" (it had returned before {self._lost(p)}; not sent again)"
        if landed:
            detail += (
                f" (the attempt in flight when {self._lost(p)} had landed, as "
                f"{p.inverse.landed.probe if p.inverse.landed else 'a probe'} shows)"
            )
        if p.inverse.no_drift_check:
            detail += f"; no drift check: {p.inverse.no_drift_check}"
        return self.recorder.succeeded(p, attempts, residue, missing, detail)

    async def _reobserve(self, p: PlannedStep, attempts: int, cause: str) -> StepOutcome | None:
        """Rule 8 for an inverse whose outcome is unknown (its answer was lost, it timed out
        after sending): look with the step's probes. The inverse's landed value shows, or the
        agent's value is gone since the check just before: it took effect. The agent's value
        still shows: it did not, the step is ``failed`` (nothing was undone, so undoing it by
        hand makes no second effect). Anything else: ``None`` (in doubt). Raises ``Stop``
        (over budget) when the budget leaves no call to look."""
        inv = p.inverse
        assert inv is not None
        try:
            if inv.landed is not None and await self.caller.holds(inv.landed, p.step_id, "landed"):
                seen = f"{inv.landed.probe} shows it took effect"
                return await self._succeeded(p, attempts, self.expected(p), after=(cause, seen))
            if p.expectation is None:
                return None
            if await self.caller.holds(p.expectation, p.step_id, "probe"):
                detail = (
                    f"{cause}; {p.expectation.probe} shows the agent's write is still there, so "
                    f"it did not take effect"
                )
                return await self.recorder.stopped(p, StepState.FAILED, detail, attempts=attempts)
            if inv.landed is not None:
                return None  # neither the undo nor the agent's write shows: someone else wrote
            seen = f"{p.expectation.probe} no longer shows the agent's write"
            return await self._succeeded(p, attempts, self.expected(p), after=(cause, seen))
        except Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise  # no budget to look: the caller makes the step continuable
            return None

    @staticmethod
    def _unseen(p: PlannedStep) -> str:
        assert p.inverse is not None
        if p.inverse.landed is None and p.expectation is None:
            return "no probe of the step can tell"
        return "its probes could not tell"

    async def check_drift(self, p: PlannedStep) -> None:
        """Rule 4: re-observe the expectation before dispatching; never overwrite others' writes.

        In a preview (``ports.model``, rule 10) a value that shows a step this one waits for
        wrote it, whose inverse the preview "sent", is what undo will find put back."""
        model = self.caller.ports.model
        found = await self._drift(p)
        if model is not None:
            model.noted(p.step_id, found)

    async def _drift(self, p: PlannedStep) -> str:
        """What the check found (raises ``drifted``, ``over_budget`` when undo must not go on)."""
        exp = p.expectation
        if exp is None:  # the tool said why no check is needed (the planner reviewed the rest)
            reason = p.inverse.no_drift_check if p.inverse else None
            return f"no drift check: {reason}"
        if not self.caller.is_probe(exp):
            await self.caller.observe(exp, p.step_id, "probe")  # raises: cannot check
        try:
            observed = await self.caller.observe(exp, p.step_id, "probe")
        except Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            model = self.caller.ports.model  # rule 10: the probe cannot read it until then
            later = model.restorer(p, exp, NOTHING) if model is not None else None
            if later is not None:
                return (
                    f"{exp.probe} cannot read it now ({stop.detail}), after {later} of this "
                    f"saga; undo reverts {later} first, whose inverse puts {exp.equals!r} back"
                )
            raise Stop(
                StepState.DRIFTED,
                f"{UNCHECKED} ({stop.detail}); not touched, needs review",
                unchecked=True,
            ) from None
        except Unchecked as unchecked:
            return _unchecked(unchecked)
        logged = exp  # as the log keeps it: a secret in it is its marker (rule 11)
        try:
            exp = await self.caller.with_secrets(exp, p.step_id)
        except Unchecked as unchecked:
            return _unchecked(unchecked)
        value = exp.extract(observed)
        if same_value(value, exp.equals):  # rule 4: True is not 1, None is not missing
            return "the world still shows the agent's write"
        model = self.caller.ports.model
        later = model.restorer(p, exp, observed) if model is not None else None
        places = self.caller.secret_places(p.step_id)
        shown = "nothing" if value is NOTHING else _shown(value, places)
        if later is not None:
            return (
                f"the world shows {shown}, written by {later} of this saga; undo reverts {later} "
                f"first, then finds {_value_words(logged.equals)} again"
            )
        wanted = _value_words(logged.equals)
        why = f"someone changed it since the agent acted: expected {wanted}, found {shown}"
        if model is not None:
            model.noted(p.step_id, why)
        raise Stop(StepState.DRIFTED, f"{why}; left as it is")

    async def follow_ups(
        self, p: PlannedStep, follow_ups: list[FollowUp], key: str, *, recovering: bool = False
    ) -> tuple[list[Residue], list[tuple[FollowUp, str]]]:
        """Rule 7: follow-ups (and theirs, breadth first) each spend budget. One that fails or is
        cut off is returned as missing; it never changes what the inverse achieved.

        ``recovering``: a worker stopped while these ran, so any of them may have been made
        already; only those whose vendor honours idempotency keys are sent again (rule 5)."""
        residue: list[Residue] = []
        missing: list[tuple[FollowUp, str]] = []
        if not follow_ups:  # the common inverse asks for none
            return residue, missing
        queue = deque((fu, f"{key}:follow_up:{i}") for i, fu in enumerate(follow_ups))
        while queue:
            fu, fkey = queue.popleft()
            if recovering and not self.caller.idempotent(fu.tool):
                missing.append((fu, UNKNOWN_FOLLOW_UP))
                continue
            try:
                _, fcall = await self.caller.call(
                    fu.tool, fu.args, phase="follow_up", key=fkey, step_id=p.step_id, counter=[0],
                    at=fu.redacted,
                )  # fmt: skip
            except Stop as stop:
                missing.append((fu, stop.detail))
                continue
            residue += fcall.recorded_residue
            queue.extend(
                (sub, f"{fkey}:follow_up:{j}") for j, sub in enumerate(fcall.recorded_follow_ups)
            )
        return residue, missing

    async def _after_return(
        self, p: PlannedStep, prior: CompensationRecord, key: str
    ) -> StepOutcome:
        """Rule 5: a worker stopped after the inverse returned, while its follow-ups ran. The
        inverse is not sent again; each follow-up is re-sent only to a vendor honouring
        idempotency keys, the others are reported unknown (residue and a manual action)."""
        residue = [Residue.from_dict(r) for r in prior.data.get("residue", ())]
        follow = [  # rule 12: the markers amends put there, as the follow-up and the record say
            FollowUp(
                f["tool"],
                dict(f["args"]),
                (
                    *redactions_from(f.get("redacted")),
                    *under(prior.redacted, ("follow_ups", i, "args")),
                ),
            )
            for i, f in enumerate(prior.data.get("follow_ups", ()))
        ]
        more, missing = await self.follow_ups(p, follow, key, recovering=True)
        return await self._succeeded(p, prior.attempts, residue + more, missing, returned=True)

    async def _landed_before(self, p: PlannedStep, counter: list[int]) -> bool:
        """Rule 5: the inverse was in flight at a crash. ``True``: it landed (do not send it
        again); ``False``: safe to send (the vendor dedups the key, or the world shows it did
        not land). Raises ``in_doubt`` when the engine cannot tell."""
        inv = p.inverse
        assert inv is not None
        if self.caller.idempotent(inv.tool):
            return await self._resend_safe(p)
        looked: list[str] = []
        try:
            if inv.landed is not None:
                looked.append(f"{inv.landed.probe} does not show it landed")
                if await self.caller.holds(inv.landed, p.step_id, "landed"):
                    return True
            if p.expectation is not None:
                looked.append(f"{p.expectation.probe} no longer shows the agent's write")
                if await self.caller.holds(p.expectation, p.step_id, "probe"):
                    return False  # the world is as the step left it: the attempt did not land
        except Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            looked.append(f"a probe failed: {stop.detail}")
        seen = "; ".join(looked) if looked else "no probe can tell whether it landed"
        raise Stop(
            StepState.IN_DOUBT,
            f"an earlier attempt of {inv.tool} was in flight when {self._lost(p)}, and its "
            f"vendor does not honour idempotency keys, so it was not sent again; whether it "
            f"took effect is unknown ({seen})",
        )

    async def _resend_safe(self, p: PlannedStep) -> bool:
        """Rule 5 for a vendor honouring keys: a re-send is deduplicated if the first attempt
        landed, so it is safe unless the attempt did not land and someone changed the world
        since (rule 4: the re-send would overwrite them). With a landed probe the engine can
        tell: the world shows neither the agent's write nor the undo -> ``drifted``, not sent.
        Without one it cannot, and re-sends (``call.precondition`` still goes with it)."""
        inv = p.inverse
        assert inv is not None
        if inv.landed is None or p.expectation is None:
            return False
        try:
            if await self.caller.holds(p.expectation, p.step_id, "probe"):
                return False  # as the step left it: the attempt did not land
            if await self.caller.holds(inv.landed, p.step_id, "landed"):
                return False  # it landed: the vendor dedups the replay by its key
        except Stop as stop:
            if stop.state is StepState.OVER_BUDGET:
                raise
            raise Stop(
                StepState.DRIFTED,
                f"an earlier attempt of {inv.tool} was in flight when {self._lost(p)}, and the "
                f"world could not be checked ({stop.detail}); not sent again, needs review",
            ) from None
        raise Stop(
            StepState.DRIFTED,
            f"an earlier attempt of {inv.tool} was in flight when {self._lost(p)}; the world "
            f"shows neither it ({inv.landed.probe} does not show it landed) nor the agent's "
            f"write ({p.expectation.probe}), so someone changed it since; not sent again, "
            f"needs review",
        )


def _cut_off(cause: str) -> str:
    """What cut an inverse off, as "the attempt in flight when ..." finishes it (rule 8)."""
    if cause.startswith("the time budget"):
        return cause.split(" while ", 1)[0] + " while it was running"
    return "its answer was lost and the budget left no call to ask again"


def _missing(tool: str) -> str:
    return (
        f"not attempted: its inverse tool {tool!r} is not in this engine's catalog (renamed or "
        f"removed since the saga ran?); undo it by hand, or bring the tool back and retry this "
        f"step (engine.retry, amends undo SAGA --retry STEP)"
    )


def _unchecked(why: Unchecked) -> str:
    return (
        f"checked at undo time: {why} (a preview never resolves a secret, rule 11); undo "
        f"re-observes it before anything is sent"
    )


def _after_crash(p: PlannedStep, stop: Stop, in_flight: bool, resent: bool, lost: str) -> Stop:
    """What a stop means when an earlier attempt was in flight at a crash (rules 5, 7, 8);
    ``lost``: what lost that attempt."""
    assert p.inverse is not None
    if in_flight and stop.state is StepState.OVER_BUDGET:
        # rule 7: no budget left to check or re-send; the step stays continuable (a
        # continuation treats the earlier attempt as still in flight, rule 5).
        return Stop(
            StepState.OVER_BUDGET,
            f"{stop.detail}; an earlier attempt of {p.inverse.tool} was sent before {lost} and "
            f"may have taken effect: continuing with a new budget checks it before anything is "
            f"sent again",
        )
    if resent and stop.state is not StepState.IN_DOUBT:
        # rule 8: an earlier attempt was sent before a crash; this retry's failure says nothing
        # about whether that attempt took effect.
        return Stop(
            StepState.IN_DOUBT,
            f"an earlier attempt of {p.inverse.tool} was sent before {lost}, and this retry did "
            f"not complete ({stop.detail}); whether the earlier attempt took effect is unknown",
        )
    return stop


def _value_words(value: Any) -> str:
    """A value a drift detail names, for the person who reads it (issue 26 item 2): an empty
    one is "an empty value", never Python's ``None``; anything else as written (quoted text)."""
    return EMPTY if value is None else repr(value)


def _shown(value: object, places: Sequence[Redaction]) -> str:
    """What the world shows, as a drift detail quotes it. Rule 11: where a secret was expected,
    what is there instead is one too (a rotated key), which no vault knows: shown as the
    secret's marker inside a structure, and not at all when the whole value was the secret
    (the marker alone would read as the value expected)."""
    if any(len(r.at) == 1 for r in places):  # ("equals",): the whole value
        return "another value (not shown: the value expected there is a secret)"
    return _value_words(masked(value, under(places, ("equals",))))
