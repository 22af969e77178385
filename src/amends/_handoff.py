"""Continuing a paused saga in another process: an approval answered hours later, through
another request served by another worker (``Saga.pause`` there, ``engine.continue_saga`` here).

The continued saga is the same saga: its steps are read back from the log (so new steps are
numbered after them and may depend on them), one process at a time holds it (the log's
conditional claim: two processes continuing one pause, one wins and the other is told), and a
saga being undone takes no new step (rule 6: nothing reaches a vendor after an undo began).
Never runs a step it reads back: those are done (or failed) already, in another process.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from ._contracts import Catalog, Reversibility, ToolSpec
from ._engine_api import check_history
from ._errors import ConfigError, SagaClosedError, SagaNotFoundError, SagaStateError
from ._log import SagaLog
from ._log.base import SagaRecord
from ._log.handoff import PAUSED, handoff_log
from ._saga import Saga, SagaHost, Step
from ._telemetry import saga_trace

__all__ = ["ContinuedSaga", "HandoffMethods"]


class HandoffMethods:
    """``Engine.continue_saga`` (``amends.Engine`` inherits it)."""

    log: SagaLog

    def continue_saga(self, saga_id: str) -> Saga:
        """A saga another process paused (:meth:`amends.Saga.pause`), to continue here: use it
        as ``async with engine.continue_saga(saga_id) as saga``. Its steps so far are read back;
        new ones are numbered after them and may depend on them (``after=``), and undo takes
        back the steps of every process that held it.

        Raises (on entering ``async with``; nothing is written then):
            SagaNotFoundError: No such saga in this log.
            SagaClosedError: The saga is being undone or was undone: it takes no new step.
            SagaStateError: It is not paused: another process continued it first (one process
                holds a saga at a time) or it runs elsewhere, or it is closed (its run ended,
                or ``amends recover`` closed it).
            HistoryAlteredError: Its history does not verify (rule 12).
            ConfigError: ``saga_id`` is not a saga id, or the log cannot hand sagas over.
        """
        if not isinstance(saga_id, str) or not saga_id:
            raise ConfigError(f"saga id must be a non-empty string, got {saga_id!r}")
        handoff_log(self.log)
        return ContinuedSaga(self, saga_id)  # type: ignore[arg-type]


class ContinuedSaga(Saga):
    """A saga continued from a pause: entering it claims it in the log instead of creating it."""

    def __init__(self, engine: SagaHost, saga_id: str) -> None:
        super().__init__(engine, "(continued)", tenant=None, actor=None, saga_id=saga_id)

    async def __aenter__(self) -> Saga:
        e = self.engine
        log = handoff_log(e.log)
        await check_history(e.log, self.id)  # never act on a history that does not verify
        now = time.time()
        taken = await log.continue_saga(
            self.id, e.owner, lease_until=now + e.lease_seconds, now=now
        )
        if taken is None:
            raise refusal(await e.log.get_saga(self.id), self.id, e.log.url)
        record, self.context = taken
        self.title, self.tenant, self.actor = record.title, record.tenant, record.actor
        read_back(self, record, e.catalog)
        self.trace = saga_trace(self.id, self.tenant)
        return self._held()


def read_back(saga: Saga, record: SagaRecord, catalog: Catalog) -> None:
    """The steps the saga's earlier holders ran, as finished handles (never run again)."""
    loop = asyncio.get_running_loop()
    for r in sorted(record.steps, key=lambda s: s.seq):
        spec = (
            catalog.get(r.tool)
            if r.tool in catalog
            else ToolSpec(
                name=r.tool, fn=_never, reversibility=Reversibility.IRREVERSIBLE, explicit=False
            )
        )
        deps = [saga._by_id[d] for d in r.deps if d in saga._by_id]
        step = Step(saga, r.step_id, r.seq, r.tool, dict(r.args), deps, list(r.resources), spec)
        step.state = step._outcome = r.state
        step._result = r.result
        step._observed = True  # its outcome was seen where it ran
        step.has_refs = False
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        step.task = done  # type: ignore[assignment]
        for res in r.resources:
            saga._last_by_resource[res] = step
        saga.steps.append(step)
        saga._by_id[r.step_id] = step


def _never(*_: Any, **__: Any) -> Any:  # pragma: no cover - a read-back step never runs
    raise AssertionError("a step read back from the log is never run again")


def refusal(saga: SagaRecord | None, saga_id: str, url: str) -> Exception:
    """Why a saga cannot be continued here, and what to do."""
    if saga is None:
        return SagaNotFoundError(
            f"no saga {saga_id!r} in {url}, so it cannot be continued here and nothing was "
            f"called: continue it with an engine on the log that recorded it (list this log's "
            f"sagas with `amends show --db {url}`)",
            saga_id=saga_id,
        )
    if saga.reversal is not None:
        at = datetime.datetime.fromtimestamp(saga.reversal.requested_at, datetime.UTC)
        return SagaClosedError(
            f"saga {saga_id!r} is being undone (undo asked at {at:%Y-%m-%d %H:%M:%S} UTC): a "
            f"saga being undone takes no new step, so the call is not made; ask the user "
            f"before acting again (a new request is a new saga)",
            saga_id=saga_id,
        )
    if saga.state != "running":
        return SagaStateError(
            f"saga {saga_id!r} is closed ({saga.state}): its run ended, or `amends recover` "
            f"closed it, before it was continued; nothing was added. `amends show {saga_id}` "
            f"shows what it did; a new saga takes the request up again",
            saga_id=saga_id,
        )
    held = "" if saga.owner == PAUSED else f" ({saga.owner})"
    return SagaStateError(
        f"saga {saga_id!r} is not paused: another process{held} holds it (it continued it "
        f"first, or runs it still), and one process adds steps at a time; nothing was added "
        f"here. Answer in that process, or wait until it pauses the saga again",
        saga_id=saga_id,
    )
