"""The engine: the entry point for sagas (run forward by :mod:`amends.saga`), undo, and recovery.

Undo: one reversal per saga, enforced by
the log across threads and processes (rule 6), then handed to :mod:`amends.reversal`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from .budget import Budget, BudgetMeter
from .calls import RetryPolicy, run
from .contracts import Catalog
from .errors import ConfigError, LeaseLostError, SagaNotFoundError
from .log import SagaLog, open_log
from .log.base import Claim, ReversalRecord, SagaRecord
from .planner import Plan, plan
from .report import StepOutcome, StepState, UndoReport, verb_for
from .reversal import run_plan
from .saga import Ref, Saga, Step, new_id

__all__ = ["Engine", "RecoveryReport", "Ref", "Saga", "Step", "run"]


def _owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`Engine.recover` did."""

    in_doubt: tuple[tuple[str, str], ...]
    """(saga_id, step_id) of forward steps found with intent but no result, now ``in_doubt``."""
    resumed: tuple[UndoReport, ...]
    """Reversals whose worker had died, resumed and finished here."""


class Engine:
    """Runs sagas forward with write-ahead logging and undoes them honestly.

    Args:
        catalog: The tools and their reversibility contracts.
        log: A :class:`SagaLog`, a URL (``sqlite:///path``, ``postgresql://...``) or a path.
            Default ``./amends.db``.
        retry: How transient errors are retried, forward and during undo.
        lease_seconds: How long a worker's claim on a running saga or reversal lasts without a
            heartbeat; after that, another worker may recover it. Default 15s.
        poll_interval: Seconds between looks at the log while waiting for another process.
        planner: Builds the compensation plan from the logged saga and the catalog; default
            :func:`amends.planner.plan`. A seam for tests and the eval suite's deliberately
            broken engines (they rewrite the plan here instead of patching a module).
    """

    def __init__(
        self,
        catalog: Catalog,
        log: SagaLog | str | os.PathLike[str] | None = None,
        *,
        retry: RetryPolicy | None = None,
        lease_seconds: float = 15.0,
        poll_interval: float = 0.02,
        planner: Callable[[SagaRecord, Catalog], Plan] | None = None,
    ) -> None:
        if not isinstance(catalog, Catalog):
            raise ConfigError(f"Engine needs an amends.Catalog, got {catalog!r}")
        if lease_seconds <= 0:
            raise ConfigError(f"lease_seconds must be positive, got {lease_seconds!r}")
        self.catalog = catalog
        self.log = open_log(log)
        self.retry = retry or RetryPolicy()
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = poll_interval
        self.planner: Callable[[SagaRecord, Catalog], Plan] = planner or plan
        """The planner undo and preview use (rule 10: the preview uses the same one)."""
        self.owner = _owner_id()
        self.live_sagas: dict[str, Saga] = {}
        """Sagas this engine is running forward now (undo waits for their steps to settle)."""
        self._reversals: dict[str, concurrent.futures.Future[UndoReport]] = {}
        self._lock = threading.Lock()
        self.progress_hooks: list[Callable[[str, StepOutcome], None]] = []
        """Called with (reversal_id, outcome) as each step of a reversal settles (for SSE)."""

    def saga(
        self,
        title: str,
        *,
        tenant: str | None = None,
        actor: str | None = None,
        saga_id: str | None = None,
    ) -> Saga:
        """A new saga; use it as ``async with engine.saga("Close the ACME deal") as saga``."""
        return Saga(self, title, tenant=tenant, actor=actor, saga_id=saga_id)

    # --- undo -----------------------------------------------------------------------------
    async def preview(self, saga_id: str) -> Plan:
        """The plan undo would follow now, without executing anything.

        Raises:
            SagaNotFoundError: No such saga.
        """
        return self.planner(await self._saga_or_raise(saga_id), self.catalog)

    async def _saga_or_raise(self, saga_id: str) -> SagaRecord:
        if not isinstance(saga_id, str) or not saga_id:
            raise ConfigError(f"saga id must be a non-empty string, got {saga_id!r}")
        saga = await self.log.get_saga(saga_id)
        if saga is None:
            raise SagaNotFoundError(
                f"no saga {saga_id!r} in {self.log.url}; list sagas with "
                f"`amends show --db {self.log.url}`",
                saga_id=saga_id,
            )
        return saga

    async def report(self, saga_id: str) -> UndoReport | None:
        """The report of the saga's reversal if it has finished, else ``None``."""
        rev = await self.log.get_reversal(saga_id=saga_id)
        return UndoReport.from_dict(rev.report) if rev and rev.report else None

    async def undo(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        """Undo a saga: the one reversal of it, started here or joined if already asked for.

        Concurrent and repeated calls — in this process or others sharing the log — all get the
        same report (rule 6). A second caller's ``budget`` is ignored: the reversal keeps its own.

        Raises:
            SagaNotFoundError: No such saga in the log.
            LogError: The log cannot be read or written.
        """
        budget = budget or Budget()
        if not isinstance(budget, Budget):
            raise ConfigError(f"budget must be an amends.Budget, got {budget!r}")
        with self._lock:
            fut = self._reversals.get(saga_id)
            mine = fut is None
            if fut is None:
                fut = concurrent.futures.Future()
                self._reversals[saga_id] = fut
        if not mine:
            return await asyncio.wrap_future(fut)
        try:
            report = await self._undo(saga_id, budget)
        except BaseException as exc:
            fut.set_exception(exc)
            with self._lock:
                self._reversals.pop(saga_id, None)
            raise
        fut.set_result(report)
        with self._lock:
            self._reversals.pop(saga_id, None)
        return report

    def undo_sync(self, saga_id: str, *, budget: Budget | None = None) -> UndoReport:
        """:meth:`undo` for synchronous callers."""
        return run(self.undo(saga_id, budget=budget))

    async def _undo(self, saga_id: str, budget: Budget) -> UndoReport:
        await self._saga_or_raise(saga_id)
        while True:
            claim = await self.log.claim_reversal(
                saga_id,
                reversal_id=new_id("rev"),
                budget=budget.to_dict(),
                owner=self.owner,
                lease_until=time.time() + self.lease_seconds,
                now=time.time(),
            )
            if claim.outcome == "done":
                assert claim.reversal.report is not None
                return UndoReport.from_dict(claim.reversal.report)
            if claim.outcome == "running_elsewhere":
                report = await self._wait_elsewhere(claim.reversal)
                if report is not None:
                    return report
                continue  # its lease expired: take it over
            try:
                return await self._execute(saga_id, claim)
            except LeaseLostError:
                continue  # another worker took over; join it

    async def _wait_elsewhere(self, rev: ReversalRecord) -> UndoReport | None:
        while True:
            await asyncio.sleep(self.poll_interval)
            cur = await self.log.get_reversal(reversal_id=rev.reversal_id)
            assert cur is not None
            if cur.state == "done" and cur.report is not None:
                return UndoReport.from_dict(cur.report)
            if cur.lease_until is None or cur.lease_until <= time.time():
                return None

    async def _execute(self, saga_id: str, claim: Claim) -> UndoReport:
        rev = claim.reversal
        budget = Budget.from_dict(rev.budget)
        meter = BudgetMeter(budget, calls_spent=rev.calls_spent, tokens_spent=rev.tokens_spent)
        stop = asyncio.Event()
        lost: list[LeaseLostError] = []

        async def beat() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), self.lease_seconds / 3)
                except TimeoutError:
                    pass
                if stop.is_set():
                    return
                try:
                    await self.log.renew_reversal_lease(
                        rev.reversal_id, rev.generation, time.time() + self.lease_seconds
                    )
                except LeaseLostError as exc:
                    lost.append(exc)
                    return
                except Exception:
                    continue

        heartbeat = asyncio.create_task(beat())
        try:
            # rule 7: steps still in flight are waited for inside the reversal, each within the
            # seconds budget, while independent steps proceed.
            live = self.live_sagas.get(saga_id)
            called = list(live.steps) if live is not None else []  # asked for before undo
            saga = await self._saga_or_raise(saga_id)
            the_plan = self.planner(saga, self.catalog)

            def progress(outcome: StepOutcome) -> None:
                for hook in self.progress_hooks:
                    hook(rev.reversal_id, outcome)

            outcomes = await run_plan(
                catalog=self.catalog,
                log=self.log,
                saga=saga,
                reversal=rev,
                plan=the_plan,
                retry=self.retry,
                meter=meter,
                on_progress=progress,
                reload=lambda: self._saga_or_raise(saga_id),
                replan=lambda fresh: self.planner(fresh, self.catalog),
                poll_interval=self.poll_interval,
            )
            outcomes += await self._late_steps(saga_id, called, outcomes, meter)
            if lost:
                raise lost[0]
            report = UndoReport(
                saga_id=saga_id,
                reversal_id=rev.reversal_id,
                title=saga.title,
                steps=tuple(outcomes),
                tool_calls=meter.calls,
                tokens=meter.tokens,
                seconds=time.monotonic() - meter.started,
                budget=budget.to_dict(),
                requested_at=rev.requested_at,
                finished_at=time.time(),
            )
            await self.log.finish_reversal(
                rev.reversal_id, rev.generation, report.to_dict(), now=time.time()
            )
            return report
        finally:
            stop.set()
            await heartbeat

    async def _late_steps(
        self, saga_id: str, called: list[Step], outcomes: list[StepOutcome], meter: BudgetMeter
    ) -> list[StepOutcome]:
        """Steps of a saga running here, asked for before undo but still waiting for another
        step when the reversal was claimed: refused by the log (never ran); listed as Cancel."""
        if not called:
            return []
        pending = [s.task for s in called if s.task is not None and not s.task.done()]
        if pending and meter.remaining_seconds() > 0:
            await asyncio.wait(pending, timeout=meter.remaining_seconds())
        saga = await self._saga_or_raise(saga_id)
        seen = {o.step_id for o in outcomes} | {
            s.id for s in called if s.task is None or not s.task.done()
        }
        seen |= {s.step_id for s in saga.steps if s.step_id not in {c.id for c in called}}
        return [
            StepOutcome(
                step_id=s.step_id,
                tool=s.tool,
                verb=verb_for(StepState.CANCELLED),
                state=StepState.CANCELLED,
                detail="undo was asked before this step started, so it never ran",
                reversibility=s.declared,
            )
            for s in saga.steps
            if s.step_id not in seen and s.state == "cancelled"
        ]

    # --- recovery -------------------------------------------------------------------------
    async def recover(self) -> RecoveryReport:
        """After a crash: mark forward steps left with intent but no result ``in_doubt``, and
        resume every reversal whose worker's lease has expired, without re-sending any
        compensation already logged done.
        """
        now = time.time()
        in_doubt = await self.log.mark_in_doubt(now)
        resumed = []
        for rev in await self.log.expired_reversals(now):
            resumed.append(await self.undo(rev.saga_id, budget=Budget.from_dict(rev.budget)))
        return RecoveryReport(tuple(in_doubt), tuple(resumed))

    def recover_sync(self) -> RecoveryReport:
        return run(self.recover())

    async def close(self) -> None:
        await self.log.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
