"""A step's outcome: the finish record its call makes (rules 2, 4 and 9), and that record's write
handed to the log without the step waiting for it (issue 29), which earlier step keeps a step
from running at all, and how the end of a step's task wakes what waits for it (``await step``,
``saga.gather``) without a loop callback per step (issue 29).

The forward side (:mod:`amends._saga`) decides when an outcome must be durable (rule 1: before
anything uses it); this module never waits for a write itself and never touches a saga.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from ._calls import ran
from ._contracts import _JSON_SCALARS as _SCALARS
from ._contracts import Call, Catalog, Inverse, Reversibility, ToolSpec, inverse_dict, json_copy
from ._errors import ContractError, PermanentError, StepFailedError, ToolError, TransientError
from ._jsondata import MAX_DEPTH, as_repr
from ._log.base import StepFinish

__all__ = [
    "Refused",
    "StepView",
    "Waiter",
    "as_steps",
    "blocker",
    "ended_failed",
    "failure",
    "finish_done",
    "finish_failed",
    "first_failure",
    "has_failed",
    "jsonable",
    "observe",
    "retrieve",
    "step_ended",
    "unrecorded",
    "until_done",
    "with_resources",
    "write_error",
]

T = TypeVar("T")


class Refused(Exception):
    """The vendor refused the forward call (PermanentError, or transient errors to the end)."""


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


class StepView(Protocol):
    """What the finish record needs of a step (:class:`amends.Step` has it)."""

    @property
    def tool(self) -> str: ...

    @property
    def spec(self) -> ToolSpec: ...

    @property
    def undo_after(self) -> Sequence[_HasId]: ...


class Waiter(Protocol):
    """What :func:`blocker` reads of a step (:class:`amends.Step` has it)."""

    @property
    def state(self) -> str: ...

    @property
    def deps(self) -> Sequence[Waiter]: ...

    @property
    def direct(self) -> int: ...


def with_resources(
    deps: list[T], resources: Sequence[str], latest: dict[str, T]
) -> tuple[list[T], int]:
    """A new step's dependencies: ``deps`` (named in ``after=`` or used by its arguments), then
    the latest earlier step of each resource it shares, each step once, in that order; and how
    many of them are direct (the rest it waits for only because they share a resource)."""
    direct = len(set(deps)) if len(deps) > 1 else len(deps)
    for r in resources:
        prev = latest.get(r)
        if prev is not None:
            deps.append(prev)
    return (list(dict.fromkeys(deps)) if len(deps) > 1 else deps), direct


def blocker(step: Waiter) -> Waiter | None:
    """The earlier step that keeps ``step`` from running, or ``None``: it may run.

    A step named in ``after=`` or whose result the arguments use must have ended ``done``. A
    step waited for only because it shares a resource blocks only when it may have changed the
    resource: one that the vendor refused (``failed``: nothing happened, rule 9) or that never
    ran (``skipped``, itself over such steps only) does not, so an agent's retry of a refused
    call runs; one ``in_doubt`` (the world is unknown) or cancelled still does, and so does one
    that failed for the agent after recording its inverse (the effect stands: logged done).
    """
    deps = step.deps
    for i, d in enumerate(deps):
        if d.state != "done" and (i < step.direct or not _no_effect(d)):
            return d
    return None


def _no_effect(step: Waiter) -> bool:
    """Whether ``step`` had no effect and none of the steps it waited for may have had one."""
    if step.state == "failed":  # the vendor refused it; it ran only after its waits were clear
        # unless it raised after recording its inverse: logged done, the effect stands (rule 9)
        return getattr(getattr(step, "_error", None), "state", "failed") != "done"
    return step.state == "skipped" and all(d.state == "done" or _no_effect(d) for d in step.deps)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data, or ``{"repr": ...}`` when it is not JSON."""
    if type(value) in _SCALARS:  # issue 29: a plain result is its own copy, no call
        return value
    try:
        return json_copy(value)  # issue 12: plain JSON data is copied, not encoded and decoded
    except (TypeError, ValueError):
        try:
            return {"repr": repr(value)}
        except (ValueError, RecursionError):  # an int too long to print inside an object
            return as_repr(value, "not JSON data")
    except RecursionError:  # issue 21: nested deeper than Python's stack
        return as_repr(value, f"nested deeper than {MAX_DEPTH} levels")


def until_done(fut: asyncio.Future[Any]) -> Awaitable[None]:
    """A future done when ``fut`` is. Issue 29: a step hands its outcome record to the log and
    does not wait for it; whatever uses the outcome waits with this (rule 1). Cancelling the
    wait does not cancel ``fut`` (unlike awaiting ``fut`` itself), and ``fut``'s exception is
    not raised here."""
    waiter: asyncio.Future[None] = fut.get_loop().create_future()

    def wake(_: asyncio.Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    fut.add_done_callback(wake)
    waiter.add_done_callback(lambda _: fut.remove_done_callback(wake))
    return waiter


def write_error(fut: asyncio.Future[Any]) -> BaseException | None:
    """Why the done write ``fut`` failed, or ``None`` when it is durable."""
    return asyncio.CancelledError() if fut.cancelled() else fut.exception()


def failure(catalog: Catalog, step: StepView, calls: list[Call], exc: Exception) -> StepFinish:
    """Rule 9: only the vendor's refusal means no effect; anything else is in doubt."""
    if isinstance(exc, Refused):
        return finish_failed(catalog, step, calls, "failed", str(exc))
    if isinstance(exc, TypeError) and not ran(step.spec.fn, exc):
        # the arguments did not bind: Python refused the call before any line of the tool
        # ran, so nothing happened (rule 9 is about calls that began)
        return StepFinish(
            "failed",
            error=f"{step.tool} was not called: its arguments do not fit its signature "
            f"({exc}); nothing happened. Fix the arguments given to saga.call({step.tool!r}, ...)",
        )
    if isinstance(exc, TimeoutError) and step.spec.timeout is not None:
        return finish_failed(
            catalog,
            step,
            calls,
            "in_doubt",
            f"{step.tool} timed out after {step.spec.timeout:g} s; whether it took effect is "
            f"unknown",
        )
    if isinstance(exc, ContractError):  # the tool misused Call (e.g. a non-JSON inverse)
        return finish_failed(
            catalog,
            step,
            calls,
            "in_doubt",
            f"contract violation inside {step.tool}: {exc}; whether it took effect is unknown",
            violation=str(exc),
        )
    if isinstance(exc, ToolError) and not isinstance(exc, TransientError | PermanentError):
        # A ToolError that is neither a refusal nor transient says, in the words of the tool's
        # users, that the outcome is unknown (the MCP gateway's UpstreamError, issue 24 item
        # 11): no advice meant for Python tool authors is added.
        return finish_failed(catalog, step, calls, "in_doubt", str(exc))
    return finish_failed(
        catalog,
        step,
        calls,
        "in_doubt",
        f"{step.tool} raised {type(exc).__name__}: {exc}; only amends.PermanentError or "
        f"amends.TransientError say the vendor refused, so whether it took effect is unknown",
    )


class _Recorded(Protocol):
    """What :func:`unrecorded` reads of a step (:class:`amends.Step`)."""

    id: str
    tool: str
    task: asyncio.Task[None] | None
    _written: asyncio.Future[None] | None
    _observed: bool


def unrecorded(saga_id: str, steps: Iterable[_Recorded]) -> tuple[bool, StepFailedError | None]:
    """Rule 1 at a saga's end: the first step whose intent or outcome the log refused (a
    database error while recording): (whether any was refused, the error the saga's block raises
    for one the agent has not seen, else ``None``). Never swallowed: the saga is failed."""
    refused = False
    for s in steps:
        w, task = s._written, s.task
        exc = w.exception() if w is not None and w.done() and not w.cancelled() else None
        what = "its outcome (the call ran: undo treats the step as in doubt)"
        if exc is None and task is not None and task.done() and not task.cancelled():
            exc, what = task.exception(), "the step"
        if exc is not None and not isinstance(exc, StepFailedError):
            refused = True
            if s._observed:  # the agent awaited it and got its error there
                continue
            error = StepFailedError(
                f"step {s.id} ({s.tool}): the log did not record {what}: {exc}; the saga "
                f"failed. Check the saga log, then run `amends show {saga_id}`",
                state="in_doubt",
                saga_id=saga_id,
                step_id=s.id,
                tool=s.tool,
            )
            error.__cause__ = exc
            return True, error
    return refused, None


def ended_failed(steps: Iterable[Any]) -> bool:
    """Whether a step of a saga ended failed or in doubt (``Step.state``, its property read
    only when it may change)."""
    for s in steps:
        if (s._state if s._written is None else s.state) in ("failed", "in_doubt"):
            return True
    return False


def as_steps(given: Any) -> list[Any]:
    """``after=`` / ``undo_after=`` as a list: one step, several (any iterable), or ``None``.
    A Step is not iterable (its ``[...]`` makes references, which never end)."""
    if type(given) is tuple or type(given) is list:  # the common case, no ABC check
        return list(given)
    if given is None:
        return []
    if isinstance(given, Iterable) and not isinstance(given, str | bytes | Mapping):
        return list(given)
    return [given]


def finish_failed(
    catalog: Catalog,
    step: StepView,
    calls: list[Call],
    state: str,
    error: str,
    *,
    violation: str | None = None,
) -> StepFinish:
    """A failed call; if it recorded an inverse first, the effect happened (rule 9)."""
    call = calls[-1] if calls else None
    if call is not None and isinstance(call.recorded_inverse, Inverse):
        done = finish_done(catalog, step.spec.reversibility, step, call, None)
        why = (
            f"{error} — but it recorded its inverse first, so the effect happened; undo "
            f"compensates it"
        )
        return dataclasses.replace(done, error=why, violation=done.violation or violation)
    return StepFinish(state, error=error, violation=violation)


def _contract_file(catalog: Catalog, tool: str) -> str | None:
    """The contract file that declares ``tool`` (``None``: a Python tool): a violation's words
    fit who wrote the contract. Asked only once a violation is found (the hot path never)."""
    return catalog.get(tool).contract_file if tool in catalog else None


def _contract_violation(
    catalog: Catalog, declared: Reversibility, step: StepView, call: Call
) -> tuple[str | None, bool]:
    """Rules 2 and 4: (violation, whether the inverse may still be used after review)."""
    inv = call.recorded_inverse
    if declared not in (Reversibility.REVERSIBLE, Reversibility.COMPENSABLE):
        return None, False
    # rule 2: no inverse recorded -> logged and reported as irreversible.
    if not isinstance(inv, Inverse):
        source = _contract_file(catalog, step.tool)
        fix = (
            f"fix the inverse of tool {step.tool!r} in {source} (the manual action says why "
            f'it could not be filled in) or declare it reversibility = "irreversible" there'
            if source
            else "call call.inverse(...) or register it as 'irreversible'"
        )
        return f"tool {step.tool!r} is {declared.value!r} but recorded no inverse; {fix}", False
    if inv.tool not in catalog:
        source = _contract_file(catalog, step.tool)
        fix = (
            f"add {inv.tool!r} to the catalog or name a tool it has in the inverse of "
            f"{step.tool!r} in {source}"
            if source
            else "register it or record an inverse the catalog has"
        )
        return (
            f"tool {step.tool!r} recorded inverse {inv.tool!r} which is not in the catalog; {fix}"
        ), False
    if catalog.get(inv.tool).reversibility is Reversibility.READ_ONLY:
        # rule 2: a probe has no effect, so it can never take the step back; undo calling it
        # would report "reverted" while the effect stands.
        return (
            f"tool {step.tool!r} recorded inverse {inv.tool!r}, which is a read_only tool and "
            f"changes nothing; record an inverse that undoes the effect, or register "
            f"{step.tool!r} as 'irreversible'"
        ), False
    for what, exp in (("expectation", call.recorded_expectation), ("landed", call.recorded_landed)):
        if exp is not None and (
            exp.probe not in catalog
            or catalog.get(exp.probe).reversibility is not Reversibility.READ_ONLY
        ):
            return (
                f"tool {step.tool!r} recorded {what} probe {exp.probe!r}, which is not a "
                f"read_only tool of the catalog; drift could not be checked"
            ), False
    if call.recorded_expectation is None and call.recorded_no_drift_check is None:
        # rule 4: no drift check means no blind overwrite; the inverse is kept for a person
        # to review, never dispatched.
        source = _contract_file(catalog, step.tool)
        fix = (
            f'give tool {step.tool!r} an expect table or no_drift_check = "why" in {source}'
            if source
            else "call call.expect(...) or call.no_drift_check(reason=...)"
        )
        return (
            f"tool {step.tool!r} is {declared.value!r} but recorded no expectation and gave no "
            f"reason why none is needed; {fix} so undo never overwrites a change made since"
        ), True
    return None, True


def finish_done(
    catalog: Catalog, declared: Reversibility, step: StepView, call: Call, result: Any
) -> StepFinish:
    violation, keep = _contract_violation(catalog, declared, step, call)
    effective = declared if violation is None or keep else Reversibility.IRREVERSIBLE
    inv = call.recorded_inverse
    undo_after = step.undo_after
    residue = call.recorded_residue
    inverse = None
    if isinstance(inv, Inverse):
        # the inverse as recorded, with what the call and the step add to it, as
        # Inverse.to_dict() gives it (issue 12: built directly, not through dataclasses.replace
        # and a second Inverse; test_a_step_logs_every_field_of_its_inverse pins the fields)
        inverse = inverse_dict(
            inv.tool,
            inv.args,
            inv.deadline,
            call.recorded_landed,
            call.recorded_no_drift_check,
            [s.id for s in undo_after] if undo_after else [],
        )
    return StepFinish(
        "done",
        effective=effective._value_,  # issue 29: no enum property call
        result=jsonable(result),
        inverse=inverse,
        expectation=None
        if call.recorded_expectation is None
        else call.recorded_expectation.to_dict(),
        residue=[r.to_dict() for r in residue] if residue else [],
        acknowledgement=None
        if call.recorded_acknowledgement is None
        else call.recorded_acknowledgement.to_dict(),
        violation=violation,
    )


# --- waiting for steps: ``await step`` and ``saga.gather`` (issue 29) ------------------------


class _Ending(Protocol):
    """What the end of a step's task reads and clears (:class:`amends.Step`)."""

    task: asyncio.Task[None] | None
    _waiter: Any
    _error: StepFailedError | None
    _observed: bool


def has_failed(step: _Ending, task: asyncio.Task[None]) -> bool:
    """Whether the step of ``task`` ended and failed (cancelled, raised, or logged an error)."""
    return task.done() and (
        task.cancelled() or task.exception() is not None or step._error is not None
    )


def observe(step: _Ending, task: asyncio.Task[None]) -> None:
    if not task.cancelled():  # as Step._wait: a cancelled step was not seen by the agent
        step._observed = True


def retrieve(task: asyncio.Task[None]) -> None:
    """Take ``task``'s error (now or once it ends), so it is not reported unretrieved."""
    if not task.done():
        task.add_done_callback(retrieve)
    elif not task.cancelled():
        task.exception()


class _Gathering:
    """One ``saga.gather`` waiting for the steps still running: each step's task tells it as
    its last act (:func:`step_ended`), so no done callback is scheduled per step (issue 29: a
    loop callback per step of a fan-out); a task that ends without running its code (cancelled
    before it started) tells it from the task's done callback, which the step's end removes."""

    __slots__ = ("by_task", "left", "pending", "woke")

    def __init__(self, woke: asyncio.Future[Any], pending: list[tuple[Any, Any]]) -> None:
        self.woke = woke
        self.left = len(pending)
        self.pending = pending
        self.by_task: dict[Any, Any] | None = None

    def ended(self, step: Any, failed: bool) -> None:
        self.left -= 1
        woke = self.woke
        if woke.done():
            return
        if failed:
            woke.set_result(step)
        elif self.left == 0:
            woke.set_result(None)

    def task_done(self, task: asyncio.Task[None]) -> None:
        if self.by_task is None:  # only a task whose code never ran gets here
            self.by_task = {t: s for s, t in self.pending}
        step = self.by_task[task]
        if step._waiter is self:
            step._waiter = None
        self.ended(step, has_failed(step, task))


def step_ended(step: _Ending, exc: BaseException | None) -> None:
    """The last act of a step's task, which ends with ``exc`` (``None``: returned): wake what
    waits for it (:attr:`amends.Step._waiter`) and take off the done callback that would have
    told it (the task ran its code, so its end need not: no loop callback for it). An ``await
    step`` is woken as the shield woke it: cancelled with the task, with its error, or with
    ``None``; a ``saga.gather`` is told whether the step failed."""
    waiter, task = step._waiter, step.task
    if type(waiter) is _Gathering:
        step._waiter = None
        if task is not None:
            task.remove_done_callback(waiter.task_done)  # equal to the one added
        waiter.left -= 1  # waiter.ended(...), without the call
        woke = waiter.woke
        if woke.done():
            return
        if exc is not None or step._error is not None:
            woke.set_result(step)
        elif waiter.left == 0:
            woke.set_result(None)
        return
    if not waiter.done():
        if exc is None:
            waiter.set_result(None)
        elif isinstance(exc, asyncio.CancelledError):
            waiter.cancel()
        else:
            waiter.set_exception(exc)
    if task is not None:
        task.remove_done_callback(waiter.cancel)


async def first_failure(pending: list[tuple[Any, asyncio.Task[None]]], direct: bool) -> Any:
    """Wait until every step in ``pending`` finished (``None``) or one failed (that step).

    ``direct``: each step's task ends right after its :func:`step_ended` (no span wraps it),
    so a step not already waited for by another gather is told by its task's last act."""
    woke: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    gathering = _Gathering(woke, pending)
    on_done = gathering.task_done  # one bound method for every task, not stored: no cycle
    callbacks = []
    for s, t in pending:
        if direct and s._waiter is None:
            s._waiter = gathering
            t.add_done_callback(on_done)
        else:  # an await or another gather holds the step's slot, or a span runs after its end
            cb = functools.partial(_finished, gathering, s)
            t.add_done_callback(cb)
            callbacks.append((t, cb))
    try:
        return await woke
    finally:
        if gathering.left:  # cancelled, or a step failed first: the rest need not tell
            for s, t in pending:
                if s._waiter is gathering:
                    s._waiter = None
                    t.remove_done_callback(on_done)
        for t, cb in callbacks:
            t.remove_done_callback(cb)


def _finished(gathering: _Gathering, step: _Ending, task: asyncio.Task[None]) -> None:
    gathering.ended(step, has_failed(step, task))
