"""A reversal's steps run without a task each, in the order their tasks would run them (issue 29).

A run gives every planned step a task so that independent branches proceed in parallel (rule 3).
On an in-memory log with tools that answer at once, no step ever waits for anything but another
step, and the eval's ~36 tasks per saga (with their loop passes) did what a plain loop does. (A
file log keeps a task per step from the start: it commits a write at once when nothing else is
ready to run, so steps started one by one would each commit alone, never in one group commit.)
:func:`lead` runs the steps in one task as the event loop would run their tasks: each started in
the plan's order, a step that waits for a step not settled yet parked, and taken up again once
that step settles, after every step already due (the loop runs callbacks in the order they were
scheduled). The first time a step waits for anything else (the log's writer thread, a vendor, a
sleep), every step not settled gets a task of its own at once, as it would have had from the start,
and the waiting step goes on in the lead task: its call's timeout (``asyncio.timeout`` cancels the
task that armed it) was armed there, so rule 7's seconds still cut a stalled inverse off. Each
step runs in its own copy of the context, as in a task of its own.

Never: a step moved to another task after it began a call (its timeout would cancel the wrong
task), or a step run before the steps it waits for settled (rule 3: the gate still decides).
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["cancelled", "lead"]

_START = object()
"""What a step not started yet "waits for"."""

_Entry = tuple[Coroutine[Any, Any, None], contextvars.Context, Any, "asyncio.Future[Any]"]
"""A step run by hand: its coroutine, its context, what it waits for, its own future."""


class _Step(Protocol):
    @property
    def step_id(self) -> str: ...


async def lead(
    steps: Sequence[_Step],
    one: Callable[[Any], Coroutine[Any, Any, None]],
    futures: Mapping[str, asyncio.Future[Any]],
    ended: asyncio.Future[None],
    tasks: list[asyncio.Task[None]],
) -> None:
    """Run ``one(p)`` for each of ``steps`` (the plan's order) in this task while none waits
    for anything but a step's future in ``futures``; then every step not settled in a task of
    its own (appended to ``tasks``), and the one that waits here. A step's error is the run's
    (``ended``): the steps not started are dropped, those parked cancelled."""
    ready: deque[_Entry] = deque(
        (one(p), contextvars.copy_context(), _START, futures[p.step_id]) for p in steps
    )
    known = {id(f) for f in futures.values()}
    parked: dict[int, list[_Entry]] = {}
    try:
        while ready:
            coro, ctx, waiting, own = ready.popleft()
            try:
                waiting = ctx.run(coro.send, None)
            except StopIteration:
                ready.extend(parked.pop(id(own), ()))  # the steps it gated, now due
                continue
            if id(waiting) in known:  # a step's future, not settled (the gate, rule 3)
                waiting._asyncio_future_blocking = False  # taken, as a task takes it
                parked.setdefault(id(waiting), []).append((coro, ctx, waiting, own))
                continue
            # it waits for the world: every other step gets its task; this one goes on here
            _as_tasks(tasks, ready, parked)
            await _resumed(coro, ctx, waiting)
            return
        _as_tasks(tasks, ready, parked)  # none is left parked: the plan has no cycle
    except BaseException as exc:
        if not ended.done():
            ended.set_exception(exc)  # ``one`` gave a step's error already; this is the lead's
        _drop(ready, parked)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise


def _as_tasks(
    tasks: list[asyncio.Task[None]], ready: deque[_Entry], parked: dict[int, list[_Entry]]
) -> None:
    """Every step not settled in a task of its own, in the order the loop would take them up:
    those due, then those parked (each waits for its step's future again in its task)."""
    for entries in (ready, *parked.values()):
        for coro, ctx, waiting, _ in entries:
            tasks.append(asyncio.create_task(_in_task(coro, ctx, waiting)))
    ready.clear()
    parked.clear()


def _drop(ready: deque[_Entry], parked: dict[int, list[_Entry]]) -> None:
    """The run failed: a step not started never runs; a started one is cancelled where it
    waits, as its task would be."""
    for entries in (ready, *parked.values()):
        for coro, ctx, waiting, _ in entries:
            if waiting is _START:
                coro.close()
                continue
            try:
                ctx.run(coro.throw, asyncio.CancelledError())
            except BaseException:  # the step settled its future as cancelled
                pass
            coro.close()


async def cancelled(
    tasks: list[asyncio.Task[None]], futures: Mapping[str, asyncio.Future[Any]]
) -> None:
    """A run that failed (or was cancelled): cancel its steps' tasks and wait for them; the
    steps' errors are the run's one error, which the caller raises."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for f in futures.values():
        if f.done() and not f.cancelled():
            f.exception()  # mark retrieved


async def _in_task(coro: Coroutine[Any, Any, None], ctx: contextvars.Context, waiting: Any) -> None:
    """:func:`_resumed` as a task's coroutine: since Python 3.12 a task takes only a native
    coroutine, not a generator-based one (``asyncio.iscoroutine`` is false for a generator),
    and ``create_task`` of ``_resumed`` itself raised TypeError, so an undo whose steps had to
    leave the lead task raised instead of reporting."""
    await _resumed(coro, ctx, waiting, taken=True)


@types.coroutine
def _resumed(
    coro: Coroutine[Any, Any, None], ctx: contextvars.Context, waiting: Any, taken: bool = False
) -> Generator[Any, Any, None]:
    """``await coro`` (run by hand in ``ctx``) from where it waits for ``waiting``, or from its
    start: every step in ``ctx``, a cancellation (its timeout's) thrown in where it waits.
    ``taken``: ``waiting`` is a step's future :func:`lead` took (or ``_START``)."""
    if taken and waiting is not _START and not waiting.done():
        waiting._asyncio_future_blocking = True  # yielded again, now to this task
    elif taken:  # not started, or its step settled: it goes on at once
        try:
            waiting = ctx.run(coro.send, None)
        except StopIteration:
            return
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            ctx.run(coro.close)
            raise
        except BaseException as exc:
            try:
                waiting = ctx.run(coro.throw, exc)
            except StopIteration:
                return
        else:
            try:
                waiting = ctx.run(coro.send, sent)
            except StopIteration:
                return
