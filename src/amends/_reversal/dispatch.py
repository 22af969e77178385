"""One call of a reversal, with its retries, its budget and its meaning (rules 5, 7, 8, 11).

:class:`Caller` makes every call a run makes: probes, inverses, follow-ups. It spends the budget
(rule 7), gives redacted secrets back to the call and keeps them out of what it yields (rule 11),
retries transient refusals by the one retry decision (``RetryPolicy.next_wait``), and says what
a call that did not succeed means for its step (:class:`Stop`, naming the real cause, rule 8).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any, cast

from .._budget import BudgetMeter
from .._calls import RetryPolicy, idempotency_key, invoke, ran
from .._contracts import Call, Expectation, Reversibility, ToolSpec
from .._errors import (
    AmendsError,
    ContractError,
    PermanentError,
    PreconditionFailed,
    TransientError,
)
from .._jsondata import bounded
from .._log.base import SagaRecord, StepRecord
from .._native import python_class
from .._report import StepState
from .._secrets import PathPart, Redaction, Vault, scrub_record, under
from .ports import BaseDispatcher, LocalDispatcher, ReversalPorts

__all__ = ["CallLost", "Caller", "Stop", "Unchecked"]

_EXPECTATION_AT = {"probe": ("expectation",), "landed": ("inverse", "landed")}
"""Where in a step's logged record the expectation a probe of each kind checks is (rule 12:
its secrets are given back only where amends recorded a marker there)."""


@python_class
class _TimedOutAfter(TimeoutError):
    """A call that ran out of time after the attempt before it could not reach its server: the
    report names that cause too (rule 8), not only the budget (an upstream that died and starts
    slowly is "could not reach", never a change someone made)."""

    def __init__(self, earlier: Exception) -> None:
        super().__init__(str(earlier))
        self.earlier = earlier


def _not_called(spec: ToolSpec, exc: Exception) -> None:
    """Raise :class:`Stop` (``failed``) when Python refused the arguments of a call made in
    this process before any line of the tool ran: nothing happened, never "its answer was
    lost" (rule 9 is about calls that began; the forward side says the same)."""
    if isinstance(exc, TypeError) and not ran(spec.fn, exc):
        raise Stop(
            StepState.FAILED,
            f"{spec.name} was not called: its arguments do not fit its signature ({exc}); "
            f"nothing happened",
        ) from None


def _lost_answer(exc: Exception) -> bool:
    """Whether ``exc`` leaves a call's outcome unknown: any exception but amends' own (a
    vendor's refusal, a precondition, a nested engine's error are answers)."""
    return not isinstance(exc, AmendsError)


class CallLost(BaseException):
    """A tool call's maker lost it (the worker making it died): whether it landed is unknown.

    Raised by a dispatcher whose calls are made elsewhere (a Temporal activity). A
    BaseException, so that "any other exception is a failed call" does not swallow it: the runner
    re-reads the reversal's compensation records and runs the step again through the crash
    rules, exactly as after a crash of the local engine (rule 5). Every attempt spends budget,
    so this ends (rule 7). ``cause`` says what lost it, as the report words it (rule 8, issue
    23: "the Temporal server was unreachable" is not "a worker stopped")."""

    def __init__(self, message: str = "", *, cause: str = "a worker stopped") -> None:
        super().__init__(message)
        self.cause = cause


class Unchecked(BaseException):
    """A simulated run (the preview) cannot make this probe: it needs a secret, and a preview
    never resolves one (rule 11). What it would have found is checked at undo time.

    A BaseException, so that no "a call that raised" rule takes it for the probe failing."""


class Stop(Exception):
    """The call could not be completed; carries the step state and a plain-language detail."""

    def __init__(self, state: StepState, detail: str, *, unchecked: bool = False) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail
        self.unchecked = unchecked
        """The drift check could not run (its probe raised): nothing was observed and nothing
        sent, so a retry may check again (issue 23; never set for drift amends saw)."""


class Caller:
    """The calls of one reversal run."""

    def __init__(
        self,
        ports: ReversalPorts,
        saga: SagaRecord,
        meter: BudgetMeter,
        retry: RetryPolicy,
        rng: random.Random,
        vault: Vault,
        waiters: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.ports = ports
        self.catalog = ports.catalog
        self.saga = saga
        self.meter = meter
        self.retry = retry
        self.rng = rng
        self.vault = vault
        self.waiters = waiters or {}
        """Per step, the steps that wait for it, last in undo order first: a retry may borrow
        what they set aside (if this step fails, they never run)."""
        self._steps: dict[str, StepRecord] | None = None
        dispatcher: Any = type(ports.dispatcher)
        self._plain_arguments = dispatcher.arguments is BaseDispatcher.arguments
        self._local_calls = dispatcher.call is LocalDispatcher.call
        """The dispatcher calls tools in this process as :class:`LocalDispatcher` does."""
        """The dispatcher resolves arguments as every runner does
        (:func:`~amends._secrets.resolve_call_args`): with no recorded position, a copy."""

    def redactions(self, step_id: str, *prefix: PathPart) -> tuple[Redaction, ...]:
        """Where amends put a marker inside the value at ``prefix`` of step ``step_id``'s logged
        record (e.g. ``"inverse", "args"``), relative to that value; the step found by id
        (issue 29: not by a scan of the saga's steps per call, twice per compensation or more)."""
        steps = self._steps
        if steps is None:
            steps = self._steps = {}
            for s in self.saga.steps:
                steps.setdefault(s.step_id, s)  # the first step of an id, as a scan finds it
        step = steps.get(step_id)
        return () if step is None or not step.redacted else under(step.redacted, prefix)

    async def call(
        self,
        tool: str,
        args: Any,
        *,
        phase: Any,
        key: str,
        step_id: str,
        precondition: Expectation | None = None,
        counter: list[int],
        prepaid: bool = False,
        at: tuple[Redaction, ...] = (),
    ) -> tuple[Any, Call]:
        """Rule 11: give redacted secrets back to this call, and keep them out of what it yields.

        Rule 12: only the markers amends recorded at ``at`` (positions in ``args``) are
        resolved, by the tool's resolver (or the forward tool's); any other marker-looking text
        is data. A detail, residue or follow-up the call produces is scrubbed of the values.
        ``prepaid``: the first attempt's call was taken from the budget already (the
        compensation's dispatch record carries it, so a take-over counts it).
        """
        vault = self.vault
        if not at and self._plain_arguments:  # issue 29: nothing to resolve, as it would say
            real = dict(args)
        else:
            try:
                real = await self.ports.dispatcher.arguments(
                    self.catalog, self.saga, tool, step_id, args, vault, at=at
                )
            except ContractError as exc:
                raise Stop(StepState.FAILED, f"{tool} was not called: {exc}") from None
        try:
            result, call = await self._attempts(
                tool, real, phase, key, step_id, precondition, counter, prepaid, at
            )
        except Stop as stop:
            # rule 11, then rule 12: scrubbed of secrets first, then bounded (a cut through a
            # secret would leave part of it unmatched); a manual action quotes this detail
            raise Stop(stop.state, bounded(vault.scrub(stop.detail))) from None
        if vault:
            call.recorded_residue = [scrub_record(vault, r) for r in call.recorded_residue]
        return result, call

    async def _attempts(
        self,
        tool: str,
        args: Any,
        phase: Any,
        key: str,
        step_id: str,
        precondition: Expectation | None,
        counter: list[int],
        prepaid: bool,
        at: tuple[Redaction, ...] = (),
    ) -> tuple[Any, Call]:
        spec = self._spec(tool)
        attempt = 0
        lost: Exception | None = None  # the last attempt's answer was lost (rule 5)
        lost_reach: Exception | None = None  # the last attempt failed transiently
        while True:
            attempt += 1
            if not (prepaid and attempt == 1):
                self._pay(tool, counter, step_id, phase, attempt, lost)
            counter[0] += 1
            call = Call(
                saga_id=self.saga.saga_id,
                step_id=step_id,
                tool=tool,
                phase=phase,
                idempotency_key=key,
                attempt=attempt,
                precondition=precondition,
            )
            call.redact = self.vault.scrub  # rule 11: a tool cutting its vendor's words
            remaining = self.meter.remaining_seconds()
            timeout = remaining if spec.timeout is None else min(spec.timeout, remaining)
            try:
                if self._local_calls:  # issue 29: what LocalDispatcher.call does, without its frame
                    result = await invoke(spec.fn, call, args, max(timeout, 0.001))
                else:
                    result = await self.ports.dispatcher.call(
                        spec, call, args, max(timeout, 0.001), at=at
                    )
            except Exception as exc:
                self.meter.tokens += call.tokens
                if self._local_calls:
                    _not_called(spec, exc)
                if isinstance(exc, TimeoutError) and isinstance(lost_reach, TransientError):
                    exc = _TimedOutAfter(lost_reach)  # rule 8: say why it never got through
                try:
                    wait = self._retry_wait(tool, exc, attempt, timeout, spec.timeout, phase)
                except Stop as stop:
                    raise _after_lost(tool, lost, stop) from None
                lost = exc if _lost_answer(exc) else lost  # it may have landed: it stays so
                lost_reach = exc if isinstance(exc, TransientError) else None
                await asyncio.sleep(wait)
                continue
            self.meter.tokens += call.tokens
            return result, call

    def _spec(self, tool: str) -> ToolSpec:
        if tool not in self.catalog:  # rule 7: an unknown tool fails this call only
            raise Stop(
                StepState.FAILED,
                f"{tool} was not called: no tool of that name is in the catalog; register it "
                f"or fix the name the tool recorded",
            )
        return self.catalog.get(tool)

    def take_call(self, tool: str, counter: list[int], step_id: str, kind: str = "") -> None:
        """Spend one call of the budget on ``tool``, or stop the step (rule 7).

        ``kind``: ``planned`` (a step's check or first attempt: paid by what the step set aside),
        ``follow_up`` (only what nobody set aside), else a retry (which may borrow)."""
        if kind == "follow_up":
            why = self.meter.take_call()
        else:
            borrow = () if kind == "planned" else self.waiters.get(step_id, ())
            why = self.meter.take_call(step_id, planned=kind == "planned", borrow=borrow)
        if why is None:
            return
        # rule 7: a call the budget cut never reached the vendor; what came before it (if
        # anything) was refused for now, so the step is over budget, never failed, and a
        # continuation tries it again (rule 8: the cause, and no attempt counted that was none)
        if counter[0] == 0:
            raise Stop(StepState.OVER_BUDGET, f"{why} before {tool} could run{self.meter.after}")
        raise Stop(
            StepState.OVER_BUDGET,
            f"{why} before {tool} could be tried again (after {counter[0]} attempt(s) the vendor "
            f"refused for now){self.meter.after}",
        )

    def _pay(
        self,
        tool: str,
        counter: list[int],
        step_id: str,
        phase: Any,
        attempt: int,
        lost: Exception | None,
    ) -> None:
        """Spend the budget for one attempt (:meth:`take_call`); after a lost answer, a budget
        that leaves no call to ask again leaves the outcome unknown (rule 5)."""
        kind = "follow_up" if phase == "follow_up" else "planned" if attempt == 1 else ""
        try:
            self.take_call(tool, counter, step_id, kind)
        except Stop as stop:
            if lost is None:
                raise
            # rule 8: the cap alone; the vendor refused nothing, its answer was lost
            spent = stop.detail.partition(f" before {tool} could")[0]
            raise Stop(
                StepState.IN_DOUBT,
                f"{tool} raised {type(lost).__name__}: {lost} (its answer was lost) and "
                f"the budget leaves no call to ask again ({spent}); whether it "
                f"took effect is unknown",
            ) from None

    def _retry_wait(
        self,
        tool: str,
        exc: Exception,
        attempt: int,
        timeout: float,
        own: float | None,
        phase: str = "",
    ) -> float:
        """What a failed call means (raises :class:`Stop`), or how long to wait before the next
        try: the one retry decision, ``RetryPolicy.next_wait``, as on the forward side."""
        if isinstance(exc, TransientError):
            after = cast(Any, exc).retry_after  # untyped: a vendor may put anything there
            return self._again(tool, exc, attempt, after, StepState.FAILED)
        # rule 8: a read-only probe has no effect to be unsure of; what it lacks is the value
        unknown = "no value was read" if phase == "probe" else "whether it took effect is unknown"
        if isinstance(exc, TimeoutError):
            cause = (
                f"{tool} timed out after {timeout:.2f} s"
                if own is not None and own <= timeout
                else f"the time budget of {self.meter.budget.seconds:g} s ran out while {tool} "
                f"was running (after {timeout:.2f} s)"
            )
            if isinstance(exc, _TimedOutAfter):
                cause += f", tried again after: {exc.earlier}"
            raise Stop(StepState.IN_DOUBT, f"{cause}; {unknown}") from None
        if isinstance(exc, PreconditionFailed):
            raise Stop(
                StepState.DRIFTED,
                f"the vendor refused the write because the world changed since the agent "
                f"acted: {exc}",
            ) from exc
        if isinstance(exc, PermanentError):
            raise Stop(StepState.FAILED, f"{tool} failed permanently: {exc}") from exc
        if _lost_answer(exc) and phase != "probe" and self.idempotent(tool):
            # rule 5: the answer was lost, and the vendor dedups this key: sending it again is
            # no second effect, and brings the answer (and the follow-ups it asks for)
            return self._again(tool, exc, attempt, None, StepState.IN_DOUBT)
        if not _lost_answer(exc):
            # amends' own errors are this call failing: a LeaseLostError from a nested engine is
            # never this reversal's lease lost (rule 7: no take-over loop, no budget reset)
            raise Stop(StepState.FAILED, f"{tool} raised {type(exc).__name__}: {exc}") from exc
        # Any other exception (an answer lost, a 5xx after acting) leaves the outcome unknown
        # (DESIGN.md): the vendor may have acted. The compensation re-observes it (rule 8).
        raise Stop(
            StepState.IN_DOUBT, f"{tool} raised {type(exc).__name__}: {exc}; {unknown}"
        ) from exc

    def _again(
        self, tool: str, exc: Exception, attempt: int, after: object, gave_up: StepState
    ) -> float:
        """Seconds to wait before trying ``tool`` again, or :class:`Stop` when the retry policy
        (``gave_up``) or the time budget (over budget: continuable) says no more."""
        wait = self.retry.next_wait(attempt, after, self.rng)
        if wait is None:
            if gave_up is StepState.IN_DOUBT:
                raise Stop(
                    gave_up,
                    f"{tool} raised {type(exc).__name__}: {exc} (its answer was lost "
                    f"{attempt} time(s)); whether it took effect is unknown",
                ) from exc
            raise Stop(gave_up, self.retry.gave_up(tool, attempt, exc)) from exc
        if wait >= self.meter.remaining_seconds():
            room = f"the time budget of {self.meter.budget.seconds:g} s leaves no room to"
            if gave_up is StepState.IN_DOUBT:
                raise Stop(
                    gave_up,
                    f"{tool} raised {type(exc).__name__}: {exc} (its answer was lost) and {room} "
                    f"ask again; whether it took effect is unknown",
                ) from exc
            raise Stop(
                StepState.OVER_BUDGET, f"{tool} failed transiently ({exc}) and {room} try it again"
            ) from exc
        return wait

    # --- probes (rule 4) -------------------------------------------------------------------
    def is_probe(self, exp: Expectation) -> bool:
        return (
            exp.probe in self.catalog
            and self.catalog.get(exp.probe).reversibility is Reversibility.READ_ONLY
        )

    def idempotent(self, tool: str) -> bool:
        return tool in self.catalog and self.catalog.get(tool).idempotent

    async def observe(self, exp: Expectation, step_id: str, kind: str) -> Any:
        """Run the read-only probe of ``exp`` (spends budget); what it returned."""
        if not self.is_probe(exp):
            raise Stop(
                StepState.DRIFTED,
                f"cannot check the world: probe {exp.probe!r} is "
                f"{'not in the catalog' if exp.probe not in self.catalog else 'not read_only'}; "
                f"not touched",
            )
        observed, _ = await self.call(
            exp.probe,
            exp.args,
            phase="probe",
            key=idempotency_key(self.saga.saga_id, step_id, "probe")
            + ("" if kind == "probe" else f":{kind}"),
            step_id=step_id,
            counter=[0],
            at=self.redactions(step_id, *_EXPECTATION_AT[kind], "args"),
        )
        return observed

    async def holds(self, exp: Expectation, step_id: str, kind: str) -> bool:
        """Whether the world shows ``exp``. A probe that errors raises: never a match (rule 4)."""
        observed = await self.observe(exp, step_id, kind)
        return (await self.with_secrets(exp, step_id, kind)).holds(observed)

    def secret_places(self, step_id: str, kind: str = "probe") -> tuple[Redaction, ...]:
        """Where amends put a marker in the expected value of step ``step_id``'s expectation
        (paths from the expectation: ``("equals", ...)``)."""
        return tuple(
            r for r in self.redactions(step_id, *_EXPECTATION_AT[kind]) if r.at[:1] == ("equals",)
        )

    async def with_secrets(
        self, exp: Expectation, step_id: str, kind: str = "probe"
    ) -> Expectation:
        """``exp`` with the secrets its expected value held resolved again (rule 11 redacted
        them in the log; compared with the marker, the world would never match), at the
        positions amends recorded (rule 12)."""
        at = self.secret_places(step_id, kind)
        if not at:
            return exp
        if self.ports.model is not None:  # a preview never resolves a secret (rule 11)
            raise Unchecked(f"the value {exp.probe} must show holds a secret")
        try:
            got = await self.ports.dispatcher.arguments(
                self.catalog, self.saga, exp.probe, step_id, {"equals": exp.equals}, self.vault,
                at=at,
            )  # fmt: skip
        except ContractError as exc:
            raise Stop(
                StepState.DRIFTED,
                f"cannot check the world: its expected value holds a "
                f"secret that could not be resolved ({exc}); not touched",
            ) from None
        return dataclasses.replace(exp, equals=got["equals"])


def _after_lost(tool: str, lost: Exception | None, stop: Stop) -> Stop:
    """Rules 5 and 8: once an attempt's answer was lost (it may have landed), a later attempt
    refused (failed permanently, or by the vendor's compare-and-set) does not show that nothing
    was undone: the outcome is unknown, and the compensation re-observes it."""
    if lost is None or stop.state not in (StepState.FAILED, StepState.DRIFTED):
        return stop
    return Stop(
        StepState.IN_DOUBT,
        f"{tool} raised {type(lost).__name__}: {lost} (its answer was lost), and the attempt "
        f"sent again was refused ({stop.detail}); whether the first took effect is unknown",
    )
