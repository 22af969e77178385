"""The saga log interface: what every backend stores and how the engine asks for it.

The log is the only shared state between processes. Every rule that spans a crash or a second
process (write-ahead, one reversal per saga, never re-sending a compensation logged done, lease
fencing) is enforced here, inside a database transaction, never in process memory.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Claim",
    "CompensationRecord",
    "Event",
    "ReversalRecord",
    "SagaLog",
    "SagaRecord",
    "StepRecord",
]

# Forward step states as logged. "intent" means the tool may be running (or its process died).
StepLogState = Literal["intent", "done", "failed", "in_doubt", "cancelled", "skipped"]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class StepRecord:
    """One forward step as the log holds it."""

    saga_id: str
    step_id: str
    seq: int
    tool: str
    args: dict[str, Any]
    deps: tuple[str, ...]
    resources: tuple[str, ...]
    declared: str
    """Reversibility the catalog declared when the step ran."""
    effective: str | None
    """Reversibility the engine will act on (irreversible after a contract violation)."""
    state: str
    result: Any = None
    inverse: dict[str, Any] | None = None
    expectation: dict[str, Any] | None = None
    residue: tuple[dict[str, Any], ...] = ()
    acknowledgement: dict[str, Any] | None = None
    violation: str | None = None
    error: str | None = None
    started_at: float = 0.0
    finished_at: float | None = None


@dataclass(frozen=True)
class SagaRecord:
    saga_id: str
    title: str
    tenant: str | None
    actor: str | None
    state: str
    """``running``, ``completed`` or ``failed`` (forward execution)."""
    created_at: float
    finished_at: float | None
    owner: str | None
    lease_until: float | None
    steps: tuple[StepRecord, ...] = ()
    reversal: ReversalRecord | None = None


@dataclass(frozen=True)
class ReversalRecord:
    reversal_id: str
    saga_id: str
    state: str
    """``running`` or ``done``."""
    budget: dict[str, Any]
    owner: str | None
    generation: int
    lease_until: float | None
    requested_at: float
    finished_at: float | None
    calls_spent: int
    tokens_spent: int
    report: dict[str, Any] | None


@dataclass(frozen=True)
class CompensationRecord:
    reversal_id: str
    step_id: str
    state: str
    """``dispatched`` while the inverse may be in flight, else the step's final state."""
    attempts: int
    detail: str | None
    data: dict[str, Any]
    generation: int
    updated_at: float


@dataclass(frozen=True)
class Event:
    """One append-only history row (``amends show`` prints these)."""

    event_id: int
    saga_id: str
    step_id: str | None
    reversal_id: str | None
    kind: str
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class Claim:
    """What :meth:`SagaLog.claim_reversal` found or did."""

    outcome: Literal["new", "taken_over", "done", "running_elsewhere"]
    reversal: ReversalRecord


@dataclass(frozen=True)
class StepFinish:
    """What a forward step records when its tool returns (rule 1: durable before moving on)."""

    state: str
    effective: str | None = None
    result: Any = None
    inverse: dict[str, Any] | None = None
    expectation: dict[str, Any] | None = None
    residue: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    acknowledgement: dict[str, Any] | None = None
    violation: str | None = None
    error: str | None = None


class SagaLog(ABC):
    """A durable saga log. Implementations: :class:`amends.SqliteLog`, :class:`amends.PostgresLog`.

    Every method is a coroutine; implementations run blocking I/O off the event loop. Writes that
    depend on a reversal lease take its ``generation`` and raise :class:`amends.LeaseLostError` when
    another worker has taken the reversal over (fencing).
    """

    url: str

    # --- forward --------------------------------------------------------------------------
    @abstractmethod
    async def create_saga(
        self,
        saga_id: str,
        title: str,
        *,
        tenant: str | None,
        actor: str | None,
        owner: str,
        lease_until: float,
        now: float,
    ) -> None: ...

    @abstractmethod
    async def begin_step(
        self,
        saga_id: str,
        step_id: str,
        *,
        seq: int,
        tool: str,
        args: Mapping[str, Any],
        deps: Sequence[str],
        resources: Sequence[str],
        declared: str,
        now: float,
    ) -> bool:
        """Write a step's intent, unless a reversal of the saga exists.

        Returns ``True`` when the intent is durable (the tool may now run); ``False`` when a
        reversal already exists, in which case the step is logged ``cancelled`` instead.
        """

    @abstractmethod
    async def finish_step(
        self, saga_id: str, step_id: str, finish: StepFinish, *, now: float
    ) -> None: ...

    @abstractmethod
    async def finish_saga(self, saga_id: str, state: str, *, now: float) -> None: ...

    @abstractmethod
    async def renew_saga_leases(
        self, saga_ids: Sequence[str], owner: str, lease_until: float
    ) -> None: ...

    # --- reversal -------------------------------------------------------------------------
    @abstractmethod
    async def claim_reversal(
        self,
        saga_id: str,
        *,
        reversal_id: str,
        budget: Mapping[str, Any],
        owner: str,
        lease_until: float,
        now: float,
    ) -> Claim:
        """Create the saga's one reversal, join it, or take it over once its lease has expired."""

    @abstractmethod
    async def renew_reversal_lease(
        self, reversal_id: str, generation: int, lease_until: float
    ) -> None:
        """Raises LeaseLostError if another worker took the reversal over."""

    @abstractmethod
    async def record_compensation(
        self,
        reversal_id: str,
        generation: int,
        step_id: str,
        *,
        state: str,
        attempts: int,
        detail: str | None,
        data: Mapping[str, Any],
        calls_spent: int,
        tokens_spent: int,
        event: str,
        now: float,
    ) -> None:
        """Upsert one step's compensation state and append its event (fenced by generation)."""

    @abstractmethod
    async def finish_reversal(
        self, reversal_id: str, generation: int, report: Mapping[str, Any], *, now: float
    ) -> None: ...

    @abstractmethod
    async def append_event(
        self,
        saga_id: str,
        kind: str,
        *,
        step_id: str | None = None,
        reversal_id: str | None = None,
        data: Mapping[str, Any] | None = None,
        now: float,
    ) -> None: ...

    # --- reads ----------------------------------------------------------------------------
    @abstractmethod
    async def get_saga(self, saga_id: str) -> SagaRecord | None: ...

    @abstractmethod
    async def get_reversal(
        self, *, saga_id: str | None = None, reversal_id: str | None = None
    ) -> ReversalRecord | None: ...

    @abstractmethod
    async def get_compensations(self, reversal_id: str) -> dict[str, CompensationRecord]: ...

    @abstractmethod
    async def events(self, saga_id: str, *, after: int = 0) -> list[Event]: ...

    @abstractmethod
    async def list_sagas(
        self,
        *,
        tenant: str | None = None,
        state: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[SagaRecord]:
        """Sagas newest first, without their steps (``reversal`` is filled in)."""

    @abstractmethod
    async def expired_reversals(self, now: float) -> list[ReversalRecord]:
        """Running reversals whose worker's lease has expired (for recovery)."""

    @abstractmethod
    async def mark_in_doubt(self, now: float) -> list[tuple[str, str]]:
        """Mark ``intent`` steps of sagas whose lease expired ``in_doubt``; returns (saga, step)."""

    @abstractmethod
    async def schema_version(self) -> int: ...

    @abstractmethod
    async def close(self) -> None: ...
