"""The naive baseline: a text-editor undo stack.

Each executed action is pushed with an inverse closure; undo pops them in reverse time order and
runs each one: no drift check, no idempotency key, no dependency order, no budget, errors swallowed,
and the report says "Undone" for every step. The suite runs it on the same sagas as amends and
measures how often that claim is silently wrong.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from amends import Call, Catalog, SagaRecord, StepOutcome, StepState, UndoReport

from .._calls import invoke

__all__ = ["NaiveUndoStack"]

_KEYS = itertools.count(1)
"""A fresh number for every call the stack makes: a key no vendor has seen, so none replays
(a uuid4 per call cost ~20 Python calls for the same property, issue 29)."""


@dataclass
class _Entry:
    step_id: str
    tool: str
    undo: Callable[[], Awaitable[Any]] | None
    """The inverse closure; ``None`` for a read (nothing to push)."""


@dataclass
class NaiveUndoStack:
    """An undo stack built from a saga's executed actions, as a text editor keeps one."""

    catalog: Catalog
    saga_id: str
    title: str
    entries: list[_Entry] = field(default_factory=list)
    calls: int = 0

    @classmethod
    def from_saga(cls, catalog: Catalog, saga: SagaRecord) -> NaiveUndoStack:
        """Push every action that ran, in time order, with the inverse captured when it ran."""
        stack = cls(catalog, saga.saga_id, saga.title)
        for s in sorted(saga.steps, key=lambda s: s.seq):
            if s.state != "done":
                continue
            inv = s.inverse
            spec = catalog.get(s.tool)
            if spec.reversibility.value == "read_only":
                stack.entries.append(_Entry(s.step_id, s.tool, None))
            elif inv is None:  # irreversible: the editor pushes a no-op "undo"
                stack.entries.append(_Entry(s.step_id, s.tool, _noop))
            else:
                stack.entries.append(
                    _Entry(s.step_id, s.tool, stack._closure(s.step_id, inv["tool"], inv["args"]))
                )
        return stack

    def _closure(
        self, step_id: str, tool: str, args: dict[str, Any]
    ) -> Callable[[], Awaitable[Any]]:
        fn = self.catalog.get(tool).fn

        async def run() -> Any:
            self.calls += 1
            call = Call(
                saga_id=self.saga_id,
                step_id=step_id,
                tool=tool,
                phase="compensate",
                idempotency_key=f"naive:{next(_KEYS)}",  # no stable key: no idempotency
            )
            return await invoke(fn, call, args, None)  # no timeout either

        return run

    async def undo(self) -> UndoReport:
        """Pop and run every inverse in reverse time order; report every step "Undone"."""
        started = time.monotonic()
        calls_before = self.calls
        outcomes: list[StepOutcome] = []
        todo = list(self.entries)  # the stack as this request loaded it
        await asyncio.sleep(0)  # loading it is I/O: concurrent requests load the same stack
        for e in reversed(todo):
            if e.undo is None:
                outcomes.append(StepOutcome(e.step_id, e.tool, None, StepState.NOT_NEEDED, "read"))
                continue
            try:
                await e.undo()
            except Exception:  # a text-editor stack shrugs and moves on
                pass
            outcomes.append(StepOutcome(e.step_id, e.tool, "Revert", StepState.REVERTED, "Undone"))
        self.entries.clear()  # popped: the stack is empty once undo has run
        return UndoReport(
            saga_id=self.saga_id,
            reversal_id=f"naive_{next(_KEYS)}",
            title=self.title,
            steps=tuple(reversed(outcomes)),
            tool_calls=self.calls - calls_before,
            seconds=time.monotonic() - started,
        )


async def _noop() -> None:
    return None
