"""The ports of a reversal run: what the runner talks to, as one typed record (issue 22).

A runner is the same code wherever it runs; only its edges differ. The local engine writes to its
:class:`~amends.SagaLog` and calls tools in this process; a Temporal workflow writes through
activities and calls tools through a batch activity; the preview (rule 10) writes nothing and
dispatches nothing but read-only probes. Each supplies its edges here, as temporalio's
``ExecuteActivityInput`` supplies an activity's: fields can be added without breaking callers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._calls import invoke
from .._contracts import Call, Expectation, ToolSpec
from .._log.base import CompensationRecord, CompensationWrite, SagaRecord
from .._planner import Plan, PlannedStep, ToolDirectory
from .._report import StepOutcome
from .._secrets import Redaction, Vault, resolve_call_args

__all__ = [
    "LOCAL",
    "BaseDispatcher",
    "CompensationLog",
    "Dispatcher",
    "InFlightWait",
    "LocalDispatcher",
    "ReversalPorts",
    "WorldModel",
]


class CompensationLog(Protocol):
    """What a reversal run reads and writes of the log: its compensation events (rule 5:
    ``dispatched`` before an inverse is sent, the final state after), fenced by generation.
    :class:`amends.SagaLog` is one."""

    async def record_compensation(self, write: CompensationWrite, /) -> None: ...

    async def get_compensations(self, reversal_id: str, /) -> dict[str, CompensationRecord]: ...


class Dispatcher(Protocol):
    """How the run's calls reach their tools.

    ``arguments`` gives one call's arguments back their redacted secrets (rule 11), only at the
    positions ``at`` where amends recorded a marker (rule 12), or raises
    :class:`amends.ContractError`; ``call`` makes one attempt, bounded by ``timeout`` seconds
    where the dispatcher bounds calls itself (a Temporal activity bounds them on the worker),
    and is told the same positions (a dispatcher that resolves secrets where the call is made
    resolves them there, and only there)."""

    async def arguments(
        self,
        catalog: ToolDirectory,
        saga: SagaRecord,
        tool: str,
        step_id: str,
        args: Mapping[str, Any],
        vault: Vault,
        *,
        at: Sequence[Redaction] = (),
    ) -> dict[str, Any]: ...

    async def call(
        self,
        spec: ToolSpec,
        call: Call,
        args: Mapping[str, Any],
        timeout: float,
        *,
        at: Sequence[Redaction] = (),
    ) -> Any: ...


class WorldModel(Protocol):
    """What a simulated run (the preview, rule 10) knows that the world does not show yet: the
    inverses it did not send. ``None`` in a real run: the world itself answers."""

    def restorer(self, p: PlannedStep, exp: Expectation, observed: Any) -> str | None:
        """The step ``p`` waits for whose (simulated) inverse will put back what ``exp``
        expects, because what ``observed`` shows is that step's own write; ``None`` if none."""
        ...

    def noted(self, step_id: str, check: str) -> None:
        """What re-observing the step's expectation found, in plain language."""
        ...


class BaseDispatcher:
    """A dispatcher's arguments, as every runner resolves them: the catalog's resolvers give
    redacted secrets back (:func:`~amends._secrets.resolve_call_args`; a catalog whose resolvers
    answer with the marker keeps them redacted: the Temporal workflow, the preview)."""

    async def arguments(
        self,
        catalog: ToolDirectory,
        saga: SagaRecord,
        tool: str,
        step_id: str,
        args: Mapping[str, Any],
        vault: Vault,
        *,
        at: Sequence[Redaction] = (),
    ) -> dict[str, Any]:
        return await resolve_call_args(catalog, saga, tool, step_id, args, vault, at=at)


class LocalDispatcher(BaseDispatcher):
    """Calls tools in this process, each bounded by its timeout (and what the budget leaves)."""

    async def call(
        self,
        spec: ToolSpec,
        call: Call,
        args: Mapping[str, Any],
        timeout: float,
        *,
        at: Sequence[Redaction] = (),
    ) -> Any:
        return await invoke(spec.fn, call, args, timeout)  # ``args`` are resolved already


LOCAL = LocalDispatcher()
"""The dispatcher of the local engine."""


@dataclass(frozen=True)
class InFlightWait:
    """How a run waits for a step still in flight (rule 7: within the seconds budget)."""

    reload: Callable[[], Awaitable[SagaRecord]]
    """Reads the saga again."""
    replan: Callable[[SagaRecord], Plan]
    """Plans a re-read saga with the same planner (a step that finished while we waited)."""
    poll_interval: float = 0.02
    """Seconds between looks at the log."""


@dataclass(frozen=True)
class ReversalPorts:
    """The edges of one reversal run."""

    log: CompensationLog
    """Where the run's compensation events go (and are read again after a lost call)."""
    catalog: ToolDirectory
    """The tools the run may call and plan with (``amends.Catalog``)."""
    clock: Callable[[], float] = time.time
    """Seconds since the epoch, for undo windows and the log's timestamps (Temporal: workflow
    time, deterministic on replay)."""
    dispatcher: Dispatcher = field(default=LOCAL)
    """How calls reach their tools."""
    progress: Callable[[StepOutcome], None] | None = None
    """Called with each step's outcome as it settles."""
    watch_step: Callable[[PlannedStep, Awaitable[StepOutcome]], Awaitable[StepOutcome]] = field(
        default=lambda p, settle: settle
    )
    """Wraps each step's settling (issue 28: the step's span); by default, nothing."""
    model: WorldModel | None = None
    """The simulated world of a preview; ``None`` in a real run."""
    run_inline: bool = False
    """Issue 29: run the steps in one task, each up to its first wait, and give each step
    still to start a task of its own only once one waits (the preview, and the local engine on
    a log that commits each write at once: with tools that answer at once, no task per step).
    ``False``: a task per step from the start (a file log or PostgreSQL, whose writes of steps
    started together meet in one group commit; a Temporal workflow, whose calls of one
    activation join one batch activity)."""
    describe: Callable[[str], tuple[str, str]] | None = None
    """Issue 29: a step's sentences and its inverse's by its id (the engine's, over the saga
    the run plans from, as :func:`~amends._reversal.runner.sentences` gives them): the run's
    outcomes are built described, not copied once more to describe them. ``None``: built
    without (the caller describes them, as the preview and a Temporal workflow do)."""
