"""Requests of one engine for the same reversal share one run (rule 6).

An engine may be asked to undo (or continue) a saga by many callers at once, from one event
loop or several threads' loops. :class:`Joins` gives them one run and one answer, and lets one
request at a time claim a saga's reversal; it knows nothing of sagas beyond their keys.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["Joins"]

T = TypeVar("T")


class Joins:
    """Shared runs by key, and one claim at a time per key; safe across threads' event loops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, concurrent.futures.Future[Any]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        """Runs in progress (kept referenced until they finish)."""
        self._claiming: dict[str, concurrent.futures.Future[None]] = {}

    async def shared(self, key: str, start: Callable[[], Awaitable[T]]) -> T:
        """The run of ``key`` in progress, joined, or one started with ``start``.

        The run belongs to every request, not to the one that started it: a caller that is
        cancelled (an HTTP client that hung up) stops waiting, while the run goes on to its
        answer and the other callers still get it."""
        with self._lock:
            fut = self._runs.get(key)
            mine = fut is None
            if fut is None:
                fut = concurrent.futures.Future()
                self._runs[key] = fut
        if mine:
            run_task = asyncio.ensure_future(start())
            self._tasks.add(run_task)

            def settle(task: asyncio.Future[T], fut: Any = fut) -> None:
                self._tasks.discard(task)
                with self._lock:
                    self._runs.pop(key, None)
                if task.cancelled():
                    fut.set_exception(asyncio.CancelledError())
                elif task.exception() is not None:
                    fut.set_exception(task.exception())
                else:
                    fut.set_result(task.result())

            run_task.add_done_callback(settle)
        # shield: one waiter's cancellation must not cancel the shared future for the others
        return await asyncio.shield(asyncio.wrap_future(fut))

    async def alone(self, key: str, body: Callable[[], Awaitable[T]]) -> T:
        """``body`` once no other request of ``key`` is inside its own ``alone``."""
        while True:
            with self._lock:
                running = self._claiming.get(key)
                if running is None:
                    slot: concurrent.futures.Future[None] = concurrent.futures.Future()
                    self._claiming[key] = slot
            if running is not None:
                await asyncio.wrap_future(running)
                continue
            try:
                return await body()
            finally:
                with self._lock:
                    self._claiming.pop(key, None)
                slot.set_result(None)
