"""Invoking a tool: the one retry policy, the one idempotency-key format, timeouts, and the
current call.

Shared by the forward side (:mod:`amends._saga`), the reversal (:mod:`amends._reversal`) and the
TOML catalog, so that "how a tool is called" is decided in one place. It never logs anything and
never decides what a failure *means* for a step: that is the caller's rule to apply.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import math
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from inspect import CO_COROUTINE
from types import FunctionType
from typing import Any, Literal, TypeVar

from ._arguments import call_arguments
from ._contracts import Call
from ._telemetry import call_span

__all__ = [
    "RetryPolicy",
    "call_arguments",
    "current_call",
    "idempotency_key",
    "invoke",
    "ran",
    "run",
]

T = TypeVar("T")

KeyKind = Literal["forward", "undo", "probe", "before"]

_CURRENT: contextvars.ContextVar[Call | None] = contextvars.ContextVar(
    "amends_current_call", default=None
)


def current_call() -> Call | None:
    """The :class:`Call` of the tool the engine is running in this task, or ``None``.

    Lets tool code that a framework calls (a LangChain tool, a Temporal activity) record its
    inverse and expectation without taking ``call`` as a parameter::

        call = amends.current_call()
        if call is not None:
            call.inverse("crm.update_field", record_id=rid, field=f, value=before)
    """
    return _CURRENT.get()


def idempotency_key(saga_id: str, step_id: str, kind: KeyKind = "forward") -> str:
    """The one idempotency-key format (rule 5): stable per saga, step and kind of call.

    ``forward`` is the step's own call; ``undo`` its compensation (the same across retries, crashes
    and processes); ``probe`` its drift check; ``before`` a read made just before the forward call.
    Follow-ups append ``:follow_up:<n>`` to the ``undo`` key.
    """
    base = f"amends:{saga_id}:{step_id}"
    return base if kind == "forward" else f"{base}:{kind}"


@dataclass(frozen=True)
class RetryPolicy:
    """How transient errors are retried (within the budget), forward and during undo."""

    max_attempts: int = 5
    """Tries per call, the first included. Default 5."""
    initial_backoff: float = 0.05
    """Seconds before the first retry. Default 0.05s."""
    multiplier: float = 2.0
    """Backoff growth per retry. Default 2."""
    max_backoff: float = 2.0
    """Longest wait between tries. Default 2s."""
    jitter: float = 0.5
    """Fraction of each wait drawn at random, so retries of parallel branches spread out."""
    max_retry_after: float = 30.0
    """Longest wait a vendor may ask for (``TransientError(retry_after=...)``); a longer one
    ends the tries, so an agent is never parked for an hour by one reply. Default 30s."""

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1 - self.jitter) + base * self.jitter * rng.random()

    def next_wait(self, attempt: int, retry_after: object, rng: random.Random) -> float | None:
        """The one retry decision, forward and in reverse: seconds to wait before the next try
        after a transient failure of attempt ``attempt``, or ``None`` when tries are used up.
        A vendor's ``retry_after`` wins over the backoff (any object: a vendor's error may carry
        anything there, and a compiled build checks a declared ``float`` at the call)."""
        if attempt >= self.max_attempts:
            return None
        if (
            not isinstance(retry_after, int | float)
            or isinstance(retry_after, bool)
            or not math.isfinite(retry_after)
            or retry_after < 0
        ):
            # a hint that is no duration (NaN sleeps forever, a str raises) is ignored
            return self.backoff(attempt, rng)
        if retry_after > self.max_retry_after:
            return None  # rule 7: no unbounded wait; the caller reports the refusal
        return float(retry_after)

    def gave_up(self, tool: str, attempt: int, exc: Exception) -> str:
        """Why the tries of ``tool`` ended after a transient failure (rule 8: the real cause)."""
        wait = getattr(exc, "retry_after", None)
        if (
            isinstance(wait, int | float)
            and not isinstance(wait, bool)
            and math.isfinite(wait)
            and wait > self.max_retry_after
            and attempt < self.max_attempts
        ):
            return (
                f"{tool} failed transiently ({exc}) and asked to be retried after {wait:g} s, "
                f"longer than the retry policy waits (max_retry_after={self.max_retry_after:g} "
                f"s); not retried"
            )
        return f"{tool} kept failing transiently after {attempt} attempts: {exc}"


async def invoke(
    fn: Callable[..., Any], call: Call, args: Mapping[str, Any], timeout: float | None
) -> Any:
    """Call a tool function (async or sync) with ``call`` and keyword arguments.

    ``call`` is the :func:`current_call` while the function runs (for a sync function, in its
    worker thread too).
    """
    token = _CURRENT.set(call)
    # issue 28: one span per call when tracing is on (ids and names only, rule 11)
    span = call_span(call.phase, call.tool, call.saga_id, call.step_id, call.attempt)
    try:
        with span:
            if not _is_async(fn):
                if timeout is None:
                    return await _in_thread(fn, call, args)
                async with asyncio.timeout(timeout):  # no extra task, unlike wait_for
                    return await _in_thread(fn, call, args)
            coro = fn(call, **args)
            if timeout is None:
                return await coro
            # issue 29: a tool that answers without suspending (a cache, a sandbox vendor)
            # needs no timer: its first step runs before one is armed, and only a call that
            # waits is awaited under the timeout (a timer per call cost ~3 % of the eval's CPU)
            deadline = asyncio.get_running_loop().time() + timeout  # counted from the start
            try:
                waiting = coro.send(None)
            except StopIteration as done:
                return done.value
            async with asyncio.timeout_at(deadline):
                return await _Resumed(coro, waiting)
    finally:
        _CURRENT.reset(token)


class _Resumed:
    """A coroutine whose first step already ran (it yielded ``waiting``), awaited from there:
    ``yield from`` by hand, so a cancellation (the timeout's) reaches it where it waits."""

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting = self._coro, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # CancelledError from the task: the coroutine decides
                try:
                    waiting = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _is_async(fn: Callable[..., Any]) -> bool:
    """``inspect.iscoroutinefunction(fn)``; for a plain ``async def`` function (the common
    tool) read from its code flags without inspect's unwrapping (issue 12: the hot path)."""
    if type(fn) is FunctionType and fn.__code__.co_flags & CO_COROUTINE:
        return True
    return inspect.iscoroutinefunction(fn)


def _in_thread(fn: Callable[..., Any], call: Call, args: Mapping[str, Any]) -> Awaitable[Any]:
    """Run a plain ``def`` tool in its own daemon thread.

    Not the loop's default executor: ``asyncio.run`` waits for that executor's threads when it
    shuts down, so a tool stuck in a thread would hold ``undo_sync`` past its time budget (rule 7).
    A daemon thread is abandoned when the call times out or is cancelled; its late result is
    dropped. The thread runs in a copy of the context, so :func:`current_call` works there.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():  # timed out or cancelled meanwhile
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def work() -> None:
        try:
            outcome = (True, ctx.run(fn, call, **args))
        except BaseException as exc:  # handed to the awaiting task, which decides (rule 9)
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    threading.Thread(target=work, name=f"amends-tool:{call.tool}", daemon=True).start()
    return fut


def run(awaitable: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running event loop.

    ``amends.run(engine.undo(saga_id))`` or ``amends.run(main)``.
    """

    async def main() -> T:
        return await (awaitable() if callable(awaitable) else awaitable)

    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # run outside the handler: the tools must not see its error as their context
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop is running in this thread
        return pool.submit(asyncio.run, main()).result()


def ran(fn: Any, exc: BaseException) -> bool:
    """Whether ``exc``'s traceback passes through the tool function ``fn`` itself (its own code
    ran). A tool whose code cannot be told (a callable object, a partial) counts as run. A
    ``TypeError`` that did not is Python refusing the arguments: the tool was not called (rule
    9 is about calls that began), on the forward side and the undo side alike."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False
