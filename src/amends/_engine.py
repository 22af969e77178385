"""The engine: the entry point for sagas (run forward by :mod:`amends._saga`), undo, and recovery.

Undo: one reversal per saga, enforced by the log across threads and processes (rule 6), then
handed to :mod:`amends._reversal`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ._budget import Budget, BudgetMeter
from ._calls import RetryPolicy, run
from ._contracts import Catalog
from ._engine_api import (
    Heartbeat,
    RecoveryReport,
    ReversalRunner,
    check_budget,
    check_catalog,
    check_history,
    missing_tools,
    owner_id,
)
from ._errors import AmendsError, ConfigError, LeaseLostError, SagaNotFoundError, SagaStateError
from ._handoff import HandoffMethods
from ._joins import Joins
from ._log import SagaLog, open_log
from ._log.base import (
    Claim,
    CompensationWrite,
    Resolution,
    ReversalRecord,
    SagaRecord,
    StepRecord,
)
from ._log.records import MAX_RESULT_BYTES
from ._native import python_class
from ._observe import ReversalObserver, observed, remote_reversal
from ._planner import Plan, Preview, PreviewStep, plan
from ._report import (
    StepOutcome,
    UndoReport,
    build_report,
    current_report,
    current_resolutions,
)
from ._resolution import RETRY, check_who_and_note, continuable_now, resolvable, retryable
from ._reversal import InFlightWait, ReversalPorts, RunInput, described, run_plan, sentences
from ._reversal.follow_up_methods import FollowUpMethods
from ._reversal.late import late_cancelled
from ._reversal.preview import PreviewInput, simulate
from ._saga import Ref, Saga, Step, new_id
from ._selection import Want, restrict, select, selection_of, widen

_Described = TypeVar("_Described", StepOutcome, PreviewStep)

__all__ = ["Engine", "RecoveryReport", "Ref", "Saga", "Step", "run"]


@python_class  # its base is interpreted; applications may subclass it (_native)
class Engine(FollowUpMethods, HandoffMethods):
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
            :func:`amends._planner.plan`. A seam for tests and the eval suite's deliberately
            broken engines (they rewrite the plan here instead of patching a module).
        runner: Where reversals run; default here, in this process. A
            :class:`amends.integrations.temporal.TemporalRunner` runs them as Temporal
            workflows (the log stays the system of record; ``resume`` continues there too).
        continue_hint: How a person continues a reversal that stopped short (budget spent), in
            the words of the place they undo from, shown in the manual action of each step
            not attempted; the text ``{saga_id}`` in it is replaced by the saga's id. Default:
            the ``amends undo --continue`` command; the MCP gateway says ``amends_undo
            {"continue": true}`` (issue 24 item 7).
        max_result_bytes: The most bytes (as JSON) of a step's result the log stores; a larger
            result is stored as a summary (its size, a SHA-256, its start) and the step stays
            done. Default 1 MiB; ``None``: no cap.

    Raises:
        ConfigError: An argument is not valid (the message names it).
    """

    _meter_type: Callable[..., BudgetMeter] = BudgetMeter  # a seam: TemporalRunner's no-worker run

    def __init__(
        self,
        catalog: Catalog,
        log: SagaLog | str | os.PathLike[str] | None = None,
        *,
        retry: RetryPolicy | None = None,
        lease_seconds: float = 15.0,
        poll_interval: float = 0.02,
        planner: Callable[[SagaRecord, Catalog], Plan] | None = None,
        runner: ReversalRunner | None = None,
        continue_hint: str | None = None,
        max_result_bytes: int | None = MAX_RESULT_BYTES,
    ) -> None:
        if not isinstance(catalog, Catalog):
            raise ConfigError(f"Engine needs an amends.Catalog, got {catalog!r}")
        if lease_seconds <= 0:
            raise ConfigError(f"lease_seconds must be positive, got {lease_seconds!r}")
        if max_result_bytes is not None and (
            isinstance(max_result_bytes, bool)
            or not isinstance(max_result_bytes, int)
            or max_result_bytes < 1
        ):
            raise ConfigError(
                f"max_result_bytes must be a positive number of bytes or None (no cap), got "
                f"{max_result_bytes!r}; e.g. max_result_bytes=1_048_576"
            )
        self.max_result_bytes = max_result_bytes
        """The most bytes of a step's result the log stores (issue 21.13); ``None``: no cap."""
        self.catalog = catalog
        self.log = open_log(log)
        self.retry_policy = retry or RetryPolicy()
        """How transient errors are retried, forward and during undo (``Engine(retry=...)``)."""
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = poll_interval
        self.planner: Callable[[SagaRecord, Catalog], Plan] = planner or plan
        self.runner = runner
        """Where :meth:`undo` runs a reversal (``None``: here)."""
        self.continue_hint = continue_hint
        """The planner undo and preview use (rule 10: the preview uses the same one)."""
        self.owner = owner_id()
        self.live_sagas: dict[str, Saga] = {}
        """Sagas this engine is running forward now (undo waits for their steps to settle)."""
        self._joins = Joins()
        """Requests of this engine sharing a reversal's run, one claiming it at a time."""
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
    async def preview(
        self,
        saga_id: str,
        *,
        budget: Budget | None = None,
        steps: Sequence[str] | None = None,
        since: str | None = None,
    ) -> Preview:
        """What undo would do now, honestly (rule 10): the reversal's own run, simulated — the
        same plan, the same per-step decision (drift check, gate, undo window, budget) in the
        same undo order — with every expectation re-observed by its read-only probe and nothing
        else dispatched, no secret resolved, nothing written. Each step carries the state undo
        is predicted to report (``PreviewStep.predicted``); with the world unchanged in between,
        undo reports exactly those. A saga whose reversal ran already is previewed as its
        continuation (``resume``) would take it up. With a catalog that lacks tools the saga's
        undo needs, ``Preview.missing_tools`` names them: undo refuses unless asked with
        ``allow_missing_tools=True``, whose undo the predicted states are.

        Args:
            saga_id: The saga.
            budget: The budget to predict for (default ``Budget()``, undo's default).
            steps: Preview a selective undo (:meth:`undo`'s ``steps=``): only the steps it
                covers, with what its closure adds and why (``Preview.selection``).
            since: Likewise for :meth:`undo`'s ``since=``.

        Raises:
            SagaNotFoundError: No such saga.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            ConfigError: ``budget`` is not an ``amends.Budget``, or the selection is malformed.
            ContractError: The selection names a step the saga does not have.
        """
        budget = check_budget(budget)
        saga = await self._saga_or_raise(saga_id)
        asked = select(saga, steps, since, running_here=saga_id in self.live_sagas)
        await self._check_history(saga_id)
        rev = saga.reversal
        comps = await self.log.get_compensations(rev.reversal_id) if rev else {}
        # issue 27: undo's run would cover what the reversal covered and this request
        scope = widen(rev.selection, asked) if rev else asked
        chosen = selection_of(saga, scope) if scope is not None else None
        the_plan = restrict(self.planner(saga, self.catalog), chosen.steps if chosen else None)
        got = await simulate(
            PreviewInput(self.catalog, saga, the_plan, budget, self.retry_policy, comps)
        )
        index = {s.step_id: s for s in saga.steps}
        described = tuple(self._described(saga, p, index) for p in got.steps)
        return dataclasses.replace(
            got,
            steps=described,
            selection=chosen.to_dict() if chosen else None,
            missing_tools=tuple(missing_tools(self.catalog, saga)),  # rule 10: undo refuses
        )

    def preview_sync(
        self,
        saga_id: str,
        *,
        budget: Budget | None = None,
        steps: Sequence[str] | None = None,
        since: str | None = None,
    ) -> Preview:
        """:meth:`preview` for synchronous callers."""
        return run(self.preview(saga_id, budget=budget, steps=steps, since=since))

    def _described(
        self, saga: SagaRecord, item: _Described, index: dict[str, StepRecord] | None = None
    ) -> _Described:
        """Issue 17: ``item`` with its step and inverse in plain language, from the catalog's
        ``describe=`` templates and the logged (redacted, rule 11) arguments. ``index``: the
        saga's steps by id, built once per undo (issue 12: no per-step scan of the saga)."""
        if index is not None:
            step = index.get(item.step_id)
        else:
            step = next((s for s in saga.steps if s.step_id == item.step_id), None)
        return described(self.catalog, step, item)

    async def _saga_or_raise(self, saga_id: str) -> SagaRecord:
        if not isinstance(saga_id, str) or not saga_id:
            raise ConfigError(f"saga id must be a non-empty string, got {saga_id!r}")
        saga = await self.log.get_saga(saga_id)
        if saga is None:
            raise self._not_found(saga_id)
        return saga

    async def _check_history(self, saga_id: str) -> None:
        """Rule 12 (:func:`check_history`).

        Raises:
            HistoryAlteredError: The saga's history was altered.
        """
        await check_history(self.log, saga_id)

    def _not_found(self, saga_id: str) -> SagaNotFoundError:
        return SagaNotFoundError(
            f"no saga {saga_id!r} in {self.log.url}; list sagas with "
            f"`amends show --db {self.log.url}`",
            saga_id=saga_id,
        )

    async def report(self, saga_id: str) -> UndoReport | None:
        """The report of the saga's reversal if it has finished, else ``None``; manual actions
        a person has resolved since are shown as handled (who, when, note).

        Raises:
            HistoryAlteredError: The saga's history was altered (rule 12): no report is shown.
        """
        await self._check_history(saga_id)
        rev = await self.log.get_reversal(saga_id=saga_id)
        if not (rev and rev.report):
            return None
        return await self._current(UndoReport.from_dict(rev.report))

    async def _current(self, report: UndoReport) -> UndoReport:
        """``report`` with the saga's latest resolutions (rule 6: the engine's outcome is kept)."""
        return await current_report(self.log, report)

    async def undo(
        self,
        saga_id: str,
        *,
        budget: Budget | None = None,
        allow_missing_tools: bool = False,
        steps: Sequence[str] | None = None,
        since: str | None = None,
    ) -> UndoReport:
        """Undo a saga: the one reversal of it, started here or joined if already asked for.

        Concurrent and repeated calls — in this process or others sharing the log — all get the
        same report (rule 6). A second caller's ``budget`` is ignored: the reversal keeps its own;
        continue a reversal that stopped short with :meth:`resume`.

        Args:
            saga_id: The saga.
            budget: Caps on the reversal (default ``Budget()``).
            allow_missing_tools: Undo with a catalog that lacks some of the saga's tools (an
                upgrade renamed them): the other steps are undone, each step whose inverse tool
                is missing is reported ``failed`` (not attempted) for a person, and can be
                retried (:meth:`retry`) once the tool is back. Default: refuse.
            steps: Undo only these steps and every step that depends on them (issue 27: used
                their outputs, ran ``after=`` them, touched their resources later; what their
                inverses wait for), nothing else (``UndoReport.selection``: what was added and
                why, what was kept). A later undo of more extends the same reversal.
            since: Undo every step after this one (a checkpoint), as ``steps=``.

        Raises:
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            ContractError: The catalog lacks tools the saga's undo needs (and
                ``allow_missing_tools`` is not set), or ``steps``/``since`` names a step the
                saga does not have.
            ConfigError: ``steps`` is empty or malformed, both ``steps`` and ``since`` are
                given, or ``since`` is the last step (nothing is written).
            LogError: The log cannot be read or written.
        """
        budget = check_budget(budget)
        allow = bool(allow_missing_tools)
        if steps is None and since is None:
            return await self._joined(f"undo:{saga_id}", lambda: self._undo(saga_id, budget, allow))
        saga = await self._saga_or_raise(saga_id)
        here = saga_id in self.live_sagas  # issue 27: only the run itself, while it runs
        want = Want(saga, select(saga, steps, since, running_here=here), budget, allow)
        key = f"undo:{saga_id}:{','.join(want.asked or ())}"  # rule 6: one run per selection
        return await self._joined(key, lambda: self._undo(saga_id, budget, allow, want))

    def undo_sync(
        self,
        saga_id: str,
        *,
        budget: Budget | None = None,
        allow_missing_tools: bool = False,
        steps: Sequence[str] | None = None,
        since: str | None = None,
    ) -> UndoReport:
        """:meth:`undo` for synchronous callers."""
        return run(
            self.undo(
                saga_id,
                budget=budget,
                allow_missing_tools=allow_missing_tools,
                steps=steps,
                since=since,
            )
        )

    async def resume(
        self, saga_id: str, *, budget: Budget | None = None, allow_missing_tools: bool = False
    ) -> UndoReport:
        """Continue the saga's reversal with a new budget (rule 6).

        The continuation belongs to the same reversal (same ``reversal_id``) and attempts only
        what was not attempted (over budget), is now unblocked (a step it waited for was undone,
        or a person resolved it with :meth:`resolve`), or was asked to be retried
        (:meth:`retry`); a compensation logged done is never sent again. Its cost figures add
        to the reversal's (``UndoReport.runs`` keeps each run's own). Concurrent requests, here
        or in other processes, join one continuation. Without a reversal yet: :meth:`undo`.

        Raises:
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            SagaStateError: The reversal finished with nothing left to attempt.
            ContractError: The catalog lacks tools the saga's undo needs.
            LogError: The log cannot be read or written.
        """
        budget = check_budget(budget)
        saga = await self._saga_or_raise(saga_id)
        if not allow_missing_tools:
            check_catalog(self.catalog, saga)
        saga = await self._converged(saga)  # rule 12 checked; issue 27: a lost resolution
        await self._check_continuable(saga)
        seen = saga.reversal.continuations if saga.reversal else None  # rule 6: as judged
        return await self._continue(saga_id, budget, seen)

    async def _continue(self, saga_id: str, budget: Budget, seen: int | None) -> UndoReport:
        """Claim a continuation, or join the one someone started after ``seen`` continuations
        (rule 6: concurrent requests, here or elsewhere, join one)."""
        if self.runner is not None:  # issue 16: continued where reversals run (rule 6)
            with remote_reversal(saga_id, await self.log.get_saga(saga_id)) as done:  # issue 28
                return await self._current(done(await self.runner.resume(self, saga_id, budget)))

        async def claim() -> Claim:
            return await self.log.continue_reversal(
                saga_id,
                budget=budget.to_dict(),
                owner=self.owner,
                lease_until=time.time() + self.lease_seconds,
                now=time.time(),
                after_continuation=seen,
                reversal_id=new_id("rev"),
            )

        return await self._joined(f"resume:{saga_id}", lambda: self._claimed(saga_id, claim))

    def resume_sync(
        self, saga_id: str, *, budget: Budget | None = None, allow_missing_tools: bool = False
    ) -> UndoReport:
        """:meth:`resume` for synchronous callers."""
        return run(self.resume(saga_id, budget=budget, allow_missing_tools=allow_missing_tools))

    async def continuable(self, saga_id: str) -> list[str]:
        """The steps a continuation (:meth:`resume`) of the saga's finished reversal would
        attempt now: over budget, blocked (perhaps unblocked since), asked to be retried, or
        whose follow-ups wait for a new budget (issue 27); empty when there is nothing to
        continue (or no finished reversal).

        Raises:
            SagaNotFoundError: No such saga in the log.
        """
        return await self._continuable(await self._saga_or_raise(saga_id))

    async def _continuable(self, saga: SagaRecord) -> list[str]:  # rule 6: of this snapshot
        rev = saga.reversal
        if rev is None or rev.state != "done":
            return []
        comps = await self.log.get_compensations(rev.reversal_id)
        plan = self.planner(saga, self.catalog).steps
        return continuable_now(rev, plan, comps, await self._resolutions_now(saga, comps))

    async def _check_continuable(self, saga: SagaRecord) -> None:
        """Rule 6: a finished reversal continues only if a continuation would attempt something
        (judged on the snapshot ``saga``: read again, a continuation begun meanwhile is none)."""
        rev = saga.reversal
        if rev is None or rev.state != "done" or await self._continuable(saga):
            return
        raise SagaStateError(
            f"nothing to continue: saga {saga.saga_id}'s reversal {rev.reversal_id} finished "
            f"with no step over budget, none blocked by a step undone or resolved since, none "
            f"asked to be retried; a failed step can be retried once its cause is fixed (amends "
            f"undo {saga.saga_id} --retry STEP), or resolved by a person",
            saga_id=saga.saga_id,
        )

    async def retry(
        self,
        saga_id: str,
        step_ids: Sequence[str],
        *,
        budget: Budget | None = None,
        by: str | None = None,
        allow_missing_tools: bool = False,
    ) -> UndoReport:
        """Try failed compensations again, after a person fixed their cause (a vendor API key
        renewed, a tool brought back): a continuation of the same reversal (rule 6) in which
        each of ``step_ids`` goes through the drift check again and, if the world is still as
        the agent left it, its inverse is sent; the steps it gated follow. Only ``failed``
        steps are retried (their inverse verifiably did not take effect), never one a person
        resolved. Concurrent requests join one continuation.

        Args:
            saga_id: The saga.
            step_ids: The failed steps to try again.
            budget: Caps on the continuation (default ``Budget()``).
            by: Who asked (kept in the history).
            allow_missing_tools: As for :meth:`undo` (a step whose tool is still missing fails
                again, not attempted).

        Raises:
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            ContractError: The saga has no such step.
            SagaStateError: A step is not failed, or was resolved; or no reversal finished.
            LogError: The log cannot be read or written.
        """
        budget = check_budget(budget)
        saga = await self._saga_or_raise(saga_id)
        await self._check_history(saga_id)
        rev = saga.reversal
        comps = await self.log.get_compensations(rev.reversal_id) if rev else {}
        steps = retryable(saga, comps, step_ids)
        assert rev is not None
        if not allow_missing_tools:
            check_catalog(self.catalog, saga)  # before anything is written
        log = observed(self.log)  # issue 28: a retry asked is a reversal event's JSON line
        try:
            for step_id in steps if rev.state == "done" else ():  # else: joins the run (rule 6)
                await log.record_compensation(
                    CompensationWrite(
                        rev.reversal_id, rev.generation, step_id, state=RETRY,
                        attempts=comps[step_id].attempts if step_id in comps else 0,
                        detail=f"retry asked{f' by {by}' if by else ''}", data={"by": by},
                        calls_spent=0, tokens_spent=0, event="compensation.retry_asked",
                        now=time.time(),
                    )
                )  # fmt: skip
        except LeaseLostError:
            pass  # a continuation started meanwhile (another retry): join it, never run twice
        return await self._continue(saga_id, budget, rev.continuations)

    def retry_sync(
        self,
        saga_id: str,
        step_ids: Sequence[str],
        *,
        budget: Budget | None = None,
        by: str | None = None,
        allow_missing_tools: bool = False,
    ) -> UndoReport:
        """:meth:`retry` for synchronous callers."""
        return run(
            self.retry(
                saga_id, step_ids, budget=budget, by=by, allow_missing_tools=allow_missing_tools
            )
        )

    async def resolve(
        self, saga_id: str, step_id: str, *, by: str, note: str | None = None
    ) -> Resolution:
        """Record that a person handled a step's manual action (sent the draft, checked that an
        in-doubt charge did not go through). It applies only to a step whose effect still
        stands (rule 8), needs a note, and records ``by`` — the identity the application
        authenticated (the HTTP API passes its token's subject, the CLI the OS user). A second
        resolution never erases the first (both stay in the history); the same one sent again
        writes nothing. The report keeps the engine's outcome and lists the manual action as
        handled (who, when, note); :meth:`resume` unblocks the steps that waited for this one
        (rule 6) and leaves this one to the person until :meth:`withdraw_resolution`.

        Raises:
            ConfigError: ``by`` or ``note`` is empty.
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            ContractError: The saga has no step ``step_id``.
            SagaStateError: The step's effect no longer stands (or it has no outcome yet).
        """
        by, text = check_who_and_note(by, note)
        saga = await self._saga_or_raise(saga_id)
        await self._check_history(saga_id)
        rev = saga.reversal
        resolvable(saga, await self.log.get_compensations(rev.reversal_id) if rev else {}, step_id)
        same = saga.resolutions.get(step_id)
        if same is not None and (same.by, same.note) == (by, text):
            return same  # a retried request: nothing new to record
        res = await self.log.resolve_step(saga_id, step_id, by=by, note=text, now=time.time())
        now = await self._saga_or_raise(saga_id)  # with the earlier ones it never erases
        return now.resolutions.get(step_id, res)

    def resolve_sync(
        self, saga_id: str, step_id: str, *, by: str, note: str | None = None
    ) -> Resolution:
        """:meth:`resolve` for synchronous callers."""
        return run(self.resolve(saga_id, step_id, by=by, note=note))

    async def withdraw_resolution(
        self, saga_id: str, step_id: str, *, by: str, note: str
    ) -> Resolution:
        """Withdraw the step's resolution (it was not handled after all): its manual action is
        open again and the steps waiting for it are blocked again. The withdrawal is recorded
        (who, when, why) after the resolution, which stays in the history.

        Raises:
            ConfigError: ``by`` or ``note`` is empty.
            SagaNotFoundError: No such saga in the log.
            HistoryAlteredError: The saga's history was altered (rule 12); nothing was done.
            ContractError: The saga has no step ``step_id``.
            SagaStateError: The step has no resolution to withdraw.
        """
        by, text = check_who_and_note(by, note, "withdraw_resolution")
        saga = await self._converged(await self._saga_or_raise(saga_id))  # issue 27
        if step_id not in saga.resolutions:
            raise SagaStateError(
                f"step {step_id!r} of saga {saga_id!r} has no resolution to withdraw",
                saga_id=saga_id,
                step_id=step_id,
            )
        prior = saga.resolutions[step_id]
        res = await self.log.resolve_step(
            saga_id, step_id, by=by, note=text, now=time.time(), withdrawn=True
        )
        return dataclasses.replace(res, earlier=(*prior.earlier, prior))

    def withdraw_resolution_sync(
        self, saga_id: str, step_id: str, *, by: str, note: str
    ) -> Resolution:
        """:meth:`withdraw_resolution` for synchronous callers."""
        return run(self.withdraw_resolution(saga_id, step_id, by=by, note=note))

    async def _joined(self, key: str, start: Callable[[], Awaitable[UndoReport]]) -> UndoReport:
        """Requests of this engine for the same reversal (or continuation) share one run, which
        belongs to every request (rule 6): a cancelled caller (an HTTP client that hung up)
        stops waiting while the run goes on to its report for the others."""
        return await self._joins.shared(key, start)

    async def _undo(
        self, saga_id: str, budget: Budget, allow: bool = False, want: Want | None = None
    ) -> UndoReport:
        if isinstance(saga_id, str) and saga_id:
            await self._check_history(saga_id)
        if self.runner is not None:  # issue 16: e.g. a Temporal workflow, one per saga (rule 6)
            saga = await self._saga_or_raise(saga_id)
            self._check_claimable(saga_id, saga, allow=allow)
            asked = {} if want is None else {"steps": want.asked}  # issue 27: the selection
            with remote_reversal(saga_id, saga) as done:  # issue 28: the workers' spans' parent
                report = await self.runner.undo(self, saga_id, budget, **asked)
                return await self._current(done(report))
        self._check_claimable(saga_id, None, id_only=True)

        async def claim() -> Claim:
            # issue 12: the claim reads the saga in its own transaction and checks it there
            # (nothing is written when the check refuses); the run plans from that read
            return await self.log.claim_reversal(
                saga_id,
                reversal_id=new_id("rev"),
                budget=budget.to_dict(),
                owner=self.owner,
                lease_until=time.time() + self.lease_seconds,
                now=time.time(),
                check=lambda saga: self._check_claimable(saga_id, saga, allow=allow),
                selection=want.asked if want else None,
            )

        return await self._claimed(saga_id, claim, want or Want(None, None, budget, allow))

    def _check_claimable(
        self, saga_id: str, saga: SagaRecord | None, *, id_only: bool = False, allow: bool = False
    ) -> None:
        """What undo checks before it claims: a valid id, an existing saga, and (unless its
        reversal has finished: a report needs no tool to be read) a catalog with the tools.

        Raises:
            ConfigError: ``saga_id`` is not a non-empty string.
            SagaNotFoundError: No such saga.
            ContractError: The catalog lacks tools the saga's undo needs.
        """
        if not isinstance(saga_id, str) or not saga_id:
            raise ConfigError(f"saga id must be a non-empty string, got {saga_id!r}")
        if id_only:
            return
        if saga is None:
            raise self._not_found(saga_id)
        if not allow and (saga.reversal is None or saga.reversal.state != "done"):
            check_catalog(self.catalog, saga)

    async def _claimed(
        self, saga_id: str, claim: Callable[[], Awaitable[Claim]], want: Want | None = None
    ) -> UndoReport:
        """Rule 6: run the claimed reversal, or join the one running or finished elsewhere.

        One request of this engine at a time claims a saga's reversal: the log lets an owner
        take over its own running reversal (it restarted), so an undo and a resume of the same
        engine racing would otherwise fence each other mid-run, and the fenced run's inverse
        would land while the report said ``over_budget``. A later request waits for the one
        running here, then claims (an undo then gets its report; a resume continues it).

        ``want``: what an undo asked for (issue 27); a reversal not covering it is extended by
        a continuation once its run is over (rule 5: nothing logged done is sent again)."""
        return await self._joins.alone(saga_id, lambda: self._claimed_once(saga_id, claim, want))

    async def _claimed_once(
        self, saga_id: str, claim: Callable[[], Awaitable[Claim]], want: Want | None
    ) -> UndoReport:
        while True:
            got = await claim()
            report = await self._settled(saga_id, got)
            if report is None:
                continue  # its lease expired, or another worker took ours over: join it
            if want is None or want.covered_by(got.reversal):
                return report
            claim = self._widening(saga_id, got.reversal, want)

    async def _settled(self, saga_id: str, got: Claim) -> UndoReport | None:
        """The report of the run ``got`` found or started: the finished one, the one running
        elsewhere once done, or this worker's; ``None`` to claim again."""
        if got.outcome == "done":
            assert got.reversal.report is not None
            return await self._current(UndoReport.from_dict(got.reversal.report))
        if got.outcome == "running_elsewhere":
            report = await self._wait_elsewhere(got.reversal)
            return await self._current(report) if report is not None else None
        try:
            with ReversalObserver(saga_id, got.reversal).running() as obs:  # issue 28
                return obs.finished(await self._execute(saga_id, got, obs))
        except LeaseLostError:
            return None

    def _widening(
        self, saga_id: str, rev: ReversalRecord, want: Want
    ) -> Callable[[], Awaitable[Claim]]:
        """Issue 27: the claim that extends ``rev`` to cover ``want`` too: a continuation of
        the one reversal (rule 6); if another caller continued it first, that one is joined and
        coverage checked again."""
        if not want.allow and want.saga is not None:
            check_catalog(self.catalog, want.saga)  # before anything is written

        async def claim() -> Claim:
            return await self.log.continue_reversal(
                saga_id,
                budget=want.budget.to_dict(),
                owner=self.owner,
                lease_until=time.time() + self.lease_seconds,
                now=time.time(),
                after_continuation=rev.continuations,
                reversal_id=new_id("rev"),
                selection=widen(rev.selection, want.asked),
            )

        return claim

    async def _wait_elsewhere(self, rev: ReversalRecord) -> UndoReport | None:
        while True:
            await asyncio.sleep(self.poll_interval)
            cur = await self.log.get_reversal(reversal_id=rev.reversal_id)
            assert cur is not None
            if cur.state == "done" and cur.report is not None:
                return UndoReport.from_dict(cur.report)
            if cur.lease_until is None or cur.lease_until <= time.time():
                return None

    async def _execute(self, saga_id: str, claim: Claim, obs: ReversalObserver) -> UndoReport:
        rev = claim.reversal
        budget = Budget.from_dict(rev.budget)
        # a take-over keeps what the reversal spent; only a continuation resets it (rule 7)
        meter = self._meter_type(budget, calls_spent=rev.calls_spent, tokens_spent=rev.tokens_spent)
        heartbeat = Heartbeat(self.log, rev, self.lease_seconds)
        try:
            saga, outcomes = await self._run(saga_id, rev, meter, claim, obs)
            if heartbeat.lost:
                raise heartbeat.lost[0]
            comps = await self.log.get_compensations(rev.reversal_id) if saga.resolutions else {}
            report = build_report(
                saga,
                rev,
                outcomes,
                meter,
                finished_at=time.time(),
                # issue 12: nobody resolved anything, nothing to read
                resolutions=current_resolutions(saga.resolutions, comps),
                selection=(
                    selection_of(saga, rev.selection).to_dict()
                    if rev.selection is not None
                    else None
                ),
            )
            await self.log.finish_reversal(
                rev.reversal_id, rev.generation, report.to_dict(), now=time.time()
            )
            return report
        finally:
            await heartbeat.close()

    async def _run(
        self,
        saga_id: str,
        rev: ReversalRecord,
        meter: BudgetMeter,
        claim: Claim,
        obs: ReversalObserver,
    ) -> tuple[SagaRecord, list[StepOutcome]]:
        """Plan the saga and run it; steps in flight are waited for inside the reversal, each in
        the seconds budget, as independent ones proceed (rule 7); the claim's saga if read (#12)."""
        live = self.live_sagas.get(saga_id)
        called = list(live.steps) if live is not None else []  # asked for before undo
        saga = claim.saga if claim.saga is not None else await self._saga_or_raise(saga_id)
        index = {s.step_id: s for s in saga.steps}
        scope = selection_of(saga, rev.selection).steps if rev.selection is not None else None

        def progress(outcome: StepOutcome) -> None:  # built described (ports' describe)
            for hook in self.progress_hooks:
                hook(rev.reversal_id, outcome)

        outcomes = await run_plan(
            RunInput(
                ReversalPorts(
                    obs.log(self.log, saga),
                    self.catalog,
                    progress=progress,
                    watch_step=obs.watch_step,
                    run_inline=getattr(self.log, "commits_each_write", False),
                    describe=lambda step_id: sentences(self.catalog, index.get(step_id)),
                ),
                saga,
                rev,
                restrict(self.planner(saga, self.catalog), scope),  # issue 27
                meter,
                self.retry_policy,
                fresh=claim.outcome == "new",  # created by this claim: no compensation yet
                waiting=InFlightWait(
                    lambda: self._saga_or_raise(saga_id),
                    lambda fresh: restrict(self.planner(fresh, self.catalog), scope),
                    self.poll_interval,
                ),
                continue_hint=self.continue_hint,
            )
        )
        late = await late_cancelled(lambda: self._saga_or_raise(saga_id), called, outcomes, meter)
        outcomes += [
            self._described(saga, o, index) for o in late if scope is None or o.step_id in scope
        ]
        return saga, outcomes

    # --- recovery -------------------------------------------------------------------------
    async def recover(self, *, resume: bool = True) -> RecoveryReport:
        """After a crash: mark forward steps left with intent but no result ``in_doubt``,
        resume every reversal whose worker's lease has expired (``resume=False``: not these;
        ``amends recover`` resumes each with its own catalog), without re-sending any
        compensation already logged done, and write the resolution of every follow-up logged
        sent whose process stopped before writing it (issue 27).
        """
        in_doubt = await self.log.mark_in_doubt(now := time.time())
        resumed, failed = [], []
        for rev in await self.log.expired_reversals(now) if resume else ():
            try:  # one reversal that cannot be resumed must not stop the others
                resumed.append(
                    await self.undo(
                        rev.saga_id, budget=Budget.from_dict(rev.budget), steps=rev.selection
                    )
                )
            except AmendsError as exc:
                failed.append((rev.saga_id, str(exc)))
        lost = await self._resolve_lost_sends()  # issue 27: a sent follow-up's resolution
        return RecoveryReport(tuple(in_doubt), tuple(resumed), tuple(failed), tuple(lost))

    def recover_sync(self) -> RecoveryReport:
        return run(self.recover())

    async def close(self) -> None:
        await self.log.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
