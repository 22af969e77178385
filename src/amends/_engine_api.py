"""Types and checks of the engine's API that need no engine: the budget check, the worker's
owner id, what recovery did, and the protocol of a runner that runs reversals elsewhere."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._budget import Budget
from ._catalog_ref import needed_tools
from ._contracts import Catalog
from ._errors import ConfigError, ContractError, HistoryAlteredError, LeaseLostError
from ._log import SagaLog
from ._log.base import ReversalRecord, SagaRecord
from ._report import UndoReport

__all__ = [
    "Heartbeat",
    "RecoveryReport",
    "ReversalRunner",
    "beat",
    "check_budget",
    "check_catalog",
    "check_history",
    "owner_id",
]


def check_budget(budget: Budget | None) -> Budget:
    budget = budget or Budget()
    if not isinstance(budget, Budget):
        raise ConfigError(
            f"budget must be an amends.Budget, got {budget!r}; e.g. "
            f"amends.Budget(tool_calls=50, tokens=10_000, seconds=30)"
        )
    return budget


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`Engine.recover` did."""

    in_doubt: tuple[tuple[str, str], ...]
    """(saga_id, step_id) of forward steps found with intent but no result, now ``in_doubt``."""
    resumed: tuple[UndoReport, ...]
    """Reversals whose worker had died, resumed and finished here."""
    failed: tuple[tuple[str, str], ...] = ()
    """(saga_id, why) of reversals that could not be resumed here (e.g. a catalog lacking their
    tools); the others were resumed all the same."""
    resolved: tuple[tuple[str, str], ...] = ()
    """(saga_id, step_id) of manual actions whose follow-up was logged sent but whose
    resolution its process stopped before writing (issue 27), written now by the sender."""


class ReversalRunner(Protocol):
    """Runs a saga's reversal outside this process, e.g.
    :class:`amends.integrations.temporal.TemporalRunner` (issue 16). It must keep rule 6 (one
    reversal per saga, every caller gets its report) and record the reversal in the engine's log.
    """

    # ``engine`` is the amends.Engine that asks (typed Any: this module sits below _engine,
    # which imports it; issue 22: no import cycle, type-only ones included)
    async def undo(
        self, engine: Any, saga_id: str, budget: Budget, *, steps: Sequence[str] | None = None
    ) -> UndoReport:
        """:meth:`Engine.undo` there. ``steps`` (issue 27): undo only these steps and what
        depends on them (the engine checked them against the saga; ``None``: the whole saga;
        the engine passes it only for a selection). Every step is compensated at most once,
        whatever selections are asked, in any order or at once."""
        ...

    async def resume(self, engine: Any, saga_id: str, budget: Budget) -> UndoReport:
        """:meth:`Engine.resume` there: continue the reversal, joining one in progress."""
        ...


async def check_history(log: SagaLog, saga_id: str) -> None:
    """Rule 12: never act on, nor report, a saga whose tamper-evident history does not
    verify (a truncated tail would make undo send a refund again).

    Raises:
        HistoryAlteredError: The saga's history was altered.
    """
    problems = await log.verify(saga_id)
    if problems:
        raise HistoryAlteredError(
            f"this saga's history was altered: saga {saga_id!r}: {problems[0].detail}"
            + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else "")
            + f"; amends will not act on it. Run `amends doctor --verify --db "
            f"{log.url}` and restore the log from a backup",
            problems=tuple(problems),
            saga_id=saga_id,
        )


def missing_tools(catalog: Catalog, saga: SagaRecord) -> list[str]:
    """The tools the saga's undo needs that ``catalog`` does not have."""
    return [t for t in needed_tools(saga.steps) if t not in catalog]


def check_catalog(catalog: Catalog, saga: SagaRecord) -> None:
    """Refuse to run a reversal with a catalog that lacks tools the saga's undo needs: the
    wrong catalog would fail those steps, and rule 6 would then return that report forever."""
    missing = missing_tools(catalog, saga)
    if missing:
        raise ContractError(
            f"saga {saga.saga_id!r} needs tools this engine's catalog does not have: "
            f"{', '.join(missing)}; undo it with the catalog that ran it"
            + (
                f" ({saga.meta['catalog'].get('ref')})"
                if isinstance(saga.meta.get("catalog"), dict) and saga.meta["catalog"].get("ref")
                else ""
            )
            + ", or undo the rest with allow_missing_tools=True (amends undo "
            "--allow-missing-tools): the steps needing those tools are left to a person",
            saga_id=saga.saga_id,
        )


class Heartbeat:
    """Renews a running reversal's lease every third of its length (rule 6: a live run is not
    taken over) until :meth:`close`; a lost lease is kept in ``lost``.

    Issue 29: the wait for the first renewal is one timer, and the renewing task
    (:func:`beat`) starts only when it fires: a run that ends sooner (most do) makes no task, no
    event wait and no ``wait_for`` task of its own."""

    def __init__(self, log: SagaLog, rev: ReversalRecord, lease_seconds: float) -> None:
        self.lost: list[LeaseLostError] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(
            lease_seconds / 3, self._start, log, rev, lease_seconds
        )

    def _start(self, log: SagaLog, rev: ReversalRecord, lease_seconds: float) -> None:
        self._task = asyncio.create_task(beat(log, rev, lease_seconds, self._stop, self.lost))

    async def close(self) -> None:
        """Stop renewing (the run is over), and wait for a renewal under way."""
        self._stop.set()
        self._timer.cancel()
        if self._task is not None:
            await self._task


async def beat(
    log: SagaLog,
    rev: ReversalRecord,
    lease_seconds: float,
    stop: asyncio.Event,
    lost: list[LeaseLostError],
) -> None:
    """Renew the reversal's lease now, then every third of the lease, until ``stop``; a lost
    lease is put in ``lost``. :class:`Heartbeat` starts it once the first third has passed."""
    while not stop.is_set():
        try:
            await log.renew_reversal_lease(
                rev.reversal_id, rev.generation, time.time() + lease_seconds
            )
        except LeaseLostError as exc:
            lost.append(exc)
            return
        except Exception:  # a missed heartbeat only shortens the lease; the next retries
            pass
        try:
            await asyncio.wait_for(stop.wait(), lease_seconds / 3)
        except TimeoutError:
            pass
