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
    "ChainProblem",
    "Claim",
    "CompensationRecord",
    "Event",
    "IdemRecord",
    "LogHealth",
    "Resolution",
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
class Resolution:
    """A person's note that they handled a step's manual action (``engine.resolve``)."""

    step_id: str
    """The step whose manual action was handled."""
    by: str
    """Who handled it (a name or an id), as given to ``resolve``."""
    note: str | None
    """What they did or checked, in their words; ``None`` when they gave no note."""
    at: float
    """When it was recorded (epoch seconds)."""

    def to_dict(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "by": self.by, "note": self.note, "at": self.at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolution:
        return cls(str(data["step_id"]), str(data["by"]), data.get("note"), float(data["at"]))


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
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free JSON metadata given to ``create_saga`` (issue 11 keeps the catalog reference here)."""
    resolutions: Mapping[str, Resolution] = field(default_factory=dict)
    """step_id -> the latest :class:`Resolution` recorded for it (filled by ``get_saga``)."""


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
    """Calls and tokens spent by the current run (reset to 0 by a continuation)."""
    report: dict[str, Any] | None
    continuations: int = 0
    """How many times the reversal was continued after it finished (rule 6)."""


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

    outcome: Literal["new", "taken_over", "done", "running_elsewhere", "claimed"]
    """``claimed``: :meth:`SagaLog.continue_reversal` reopened a finished reversal for this
    worker."""
    reversal: ReversalRecord


@dataclass(frozen=True)
class IdemRecord:
    """A stored response of the HTTP API for one idempotency key (issue 13.7)."""

    tenant: str
    key: str
    request_hash: str
    """Hash of the request first sent with this key; a different request with the same key is
    a client error, not a replay."""
    response: Mapping[str, Any]
    expires_at: float
    created_at: float


@dataclass(frozen=True)
class ChainProblem:
    """One place where the tamper-evident history does not add up (rule 11)."""

    saga_id: str
    event_id: int | None
    """The event where the chain breaks (``None`` for a problem of the saga as a whole)."""
    what: Literal["edited", "inserted", "deleted", "report mismatch"]
    detail: str = ""
    """A sentence for the operator: what was expected and what was found."""


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


@dataclass(frozen=True)
class LogHealth:
    """What ``amends doctor`` looks at, read in one consistent snapshot of the log."""

    in_doubt: list[tuple[str, str, str]]
    """(saga_id, step_id, tool) of in-doubt steps of sagas not yet undone."""
    stale_sagas: list[tuple[str, str | None, float | None]]
    """(saga_id, owner, lease_until) of running sagas whose worker stopped renewing."""
    live_sagas: list[tuple[str, str | None, float]]
    stuck_reversals: list[tuple[str, str, str | None, int, float | None]]
    """(reversal_id, saga_id, owner, generation, lease_until) of reversals whose lease expired."""
    live_reversals: list[tuple[str, str, str | None, int, float]]


class SagaLog(ABC):
    """A durable saga log. Implementations: :class:`amends.SqliteLog`, :class:`amends.PostgresLog`.

    Every method is a coroutine; implementations run blocking I/O off the event loop. Writes that
    depend on a reversal lease take its ``generation`` and raise :class:`amends.LeaseLostError` when
    another worker has taken the reversal over (fencing).
    """

    url: str
    read_only: bool = False
    """``True`` when opened with ``read_only=True``: every write raises LogReadOnlyError."""

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
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Create a running saga (``meta``: free JSON metadata, kept on :class:`SagaRecord`)."""

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
    async def continue_reversal(
        self,
        saga_id: str,
        *,
        budget: Mapping[str, Any],
        owner: str,
        lease_until: float,
        now: float,
        after_continuation: int | None = None,
        reversal_id: str | None = None,
    ) -> Claim:
        """Reopen the saga's finished reversal for a continuation with a new budget (rule 6).

        Outcomes: ``claimed`` (reopened: running, generation + 1, ``continuations`` + 1, calls and
        tokens spent reset to 0); ``running_elsewhere`` (the first run or a continuation still
        holds a live lease: join it); ``done`` (``after_continuation`` was given and someone else
        has continued since: join that, never continue twice); ``taken_over`` (a running reversal
        whose lease expired). Without any reversal yet, this is :meth:`claim_reversal` (with
        ``reversal_id`` or a fresh id).

        Raises:
            SagaNotFoundError: No saga ``saga_id`` in this log.
        """

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

    @abstractmethod
    async def resolve_step(
        self, saga_id: str, step_id: str, *, by: str, note: str | None, now: float
    ) -> Resolution:
        """Record that a person handled ``step_id``'s manual action; event ``step.resolved``.

        Raises:
            SagaNotFoundError: No saga ``saga_id`` in this log.
            ContractError: The saga has no step ``step_id``.
        """

    # --- HTTP idempotency keys (issue 13.7) -----------------------------------------------
    @abstractmethod
    async def idem_get(self, tenant: str, key: str, now: float) -> IdemRecord | None:
        """The unexpired record stored for ``(tenant, key)``, or ``None``."""

    @abstractmethod
    async def idem_put(
        self,
        tenant: str,
        key: str,
        request_hash: str,
        response: Mapping[str, Any],
        expires_at: float,
        *,
        now: float | None = None,
    ) -> IdemRecord:
        """Store a response for ``(tenant, key)`` unless an unexpired one exists.

        Returns the stored record: this one, or the one another process put first (the caller
        compares ``request_hash``).
        """

    # --- integrity (rule 11) --------------------------------------------------------------
    @abstractmethod
    async def verify(self, saga_id: str | None = None) -> list[ChainProblem]:
        """Check the hash chain of one saga's history (or every saga's) and each stored report.

        Returns every problem found (empty when the history is intact).
        """

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
    async def health(self, now: float) -> LogHealth:
        """In-doubt steps, stale sagas, stuck and live reversals at ``now`` (for ``doctor``)."""

    @abstractmethod
    async def schema_version(self) -> int: ...

    @abstractmethod
    async def close(self) -> None: ...
