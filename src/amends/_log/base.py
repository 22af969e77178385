"""The saga log interface: what every backend stores and how the engine asks for it.

The log is the only shared state between processes. Every rule that spans a crash or a second
process (write-ahead, one reversal per saga, never re-sending a compensation logged done, lease
fencing) is enforced here, inside a database transaction, never in process memory.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from .._errors import ConfigError
from .._secrets import Redaction, redactions_from
from .spend import FollowUpSpend

__all__ = [
    "ChainProblem",
    "Claim",
    "CompensationRecord",
    "CompensationWrite",
    "Event",
    "IdemRecord",
    "LogHealth",
    "Resolution",
    "ReversalHead",
    "ReversalRecord",
    "SagaLog",
    "SagaRecord",
    "StepIntent",
    "StepRecord",
]

# Forward step states as logged. "intent" means the tool may be running (or its process died).
StepLogState = Literal["intent", "done", "failed", "in_doubt", "cancelled", "skipped"]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# --- records as JSON (issue 9.7) ----------------------------------------------------------------
# One place says how a record looks as JSON: every field under its own name, tuples as lists,
# nested records by their own to_dict. The CLI, the server and the Temporal payloads build on it.


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data (a copy): records by ``to_dict``, tuples as lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def _record_dict(record: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(record, f.name)) for f in fields(record)}


def _record_kwargs(
    cls: type[Any], data: Any, convert: Mapping[str, Callable[[Any], Any]]
) -> dict[str, Any]:
    """Constructor arguments for ``cls`` from ``data`` (what ``cls.to_dict`` returned).

    Keys that are no field of ``cls`` (a view's extras, a newer writer's field) are ignored; a
    missing field with a default takes it; ``convert`` turns JSON lists back into tuples and
    nested dicts back into records (``None`` stays ``None``).
    """
    name = cls.__name__
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{name}.from_dict needs a mapping, got {type(data).__name__} {data!r:.80}; "
            f"pass what {name}.to_dict() returned"
        )
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in data:
            value = data[f.name]
            conv = convert.get(f.name)
            out[f.name] = conv(value) if conv is not None and value is not None else value
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(
                f"{name}.from_dict: {dict(data)!r:.120} has no {f.name!r}; "
                f"pass what {name}.to_dict() returned"
            )
    return out


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _dicts(value: Any) -> tuple[dict[str, Any], ...]:
    return tuple(dict(v) for v in value)


@dataclass(frozen=True)
class StepRecord:
    """One forward step as the log holds it (secrets already redacted, rule 11)."""

    saga_id: str
    """The saga this step belongs to."""
    step_id: str
    """The step's id, unique within its saga (``step_id=`` when given, else generated)."""
    seq: int
    """Order of the call within the saga: 1 for the agent's first call, then 2, 3, ..."""
    tool: str
    """Catalog name of the tool that was called, e.g. ``"crm.create_note"``."""
    args: dict[str, Any]
    """Arguments the tool was called with; a sensitive one shows as ``"[redacted:<name>]"``."""
    deps: tuple[str, ...]
    """Ids of the steps this one waited for (``after=``); undo reverses this one before them."""
    resources: tuple[str, ...]
    """What the step touches (the tool's ``resources=``); steps sharing one are undone newest
    first."""
    declared: str
    """Reversibility the catalog declared when the step ran."""
    effective: str | None
    """Reversibility the engine will act on (irreversible after a contract violation); ``None``
    until the step finishes."""
    state: str
    """Forward state: ``intent`` (the tool may be running, or its process died), ``done``,
    ``failed``, ``in_doubt`` (nobody knows whether it took effect), ``cancelled`` (never ran:
    undo had begun) or ``skipped`` (never ran: a step it waits for failed)."""
    result: Any = None
    """What the tool returned, as JSON with secrets scrubbed; ``None`` when it returned nothing."""
    inverse: dict[str, Any] | None = None
    """The inverse the tool recorded (the call undo will send), or ``None`` when it recorded
    none."""
    expectation: dict[str, Any] | None = None
    """What undo must still observe before it reverses the step (drift check), or ``None``."""
    residue: tuple[dict[str, Any], ...] = ()
    """Effects the tool said no inverse can take back (an email read, a fee charged)."""
    acknowledgement: dict[str, Any] | None = None
    """For an irreversible step: who must follow up and what to tell them (``call.acknowledge``);
    ``None`` otherwise."""
    violation: str | None = None
    """How the tool broke its contract (e.g. declared reversible but recorded no inverse), or
    ``None``."""
    error: str | None = None
    """Why the step failed, is in doubt or never ran, or ``None``."""
    started_at: float = 0.0
    """When the step's intent was logged (epoch seconds)."""
    finished_at: float | None = None
    """When the step's outcome was logged (epoch seconds); ``None`` while the tool may run."""
    redacted: tuple[Redaction, ...] = ()
    """Every place where amends put a secret's marker when it logged this step (rule 12), its
    path starting with the field (``("inverse", "args", "card_number")``): undo gives a secret
    back only there; marker-looking text elsewhere is data."""
    explicit: bool = True
    """Whether the catalog declared the tool's reversibility when the step ran; ``False``: not
    declared, so treated as irreversible (rule 2) and reported as such (issue 26)."""

    def to_dict(self) -> dict[str, Any]:
        """This step as JSON-ready data: every field by name, tuples as lists."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepRecord:
        """The step :meth:`to_dict` describes (other keys are ignored).

        Raises:
            ConfigError: ``data`` is no mapping or lacks a field without a default.
        """
        conv = {"deps": _strs, "resources": _strs, "residue": _dicts, "redacted": redactions_from}
        return cls(**_record_kwargs(cls, data, conv))


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
    withdrawn: bool = False
    """``True``: this record withdrew the step's resolution (``engine.withdraw_resolution``):
    the manual action is open again."""
    earlier: tuple[Resolution, ...] = ()
    """The step's earlier resolutions and withdrawals, oldest first: a later one never erases
    them (issue 23)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step_id": self.step_id,
            "by": self.by,
            "note": self.note,
            "at": self.at,
        }
        if self.withdrawn:
            out["withdrawn"] = True
        if self.earlier:
            out["earlier"] = [r.to_dict() for r in self.earlier]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolution:
        return cls(
            str(data["step_id"]),
            str(data["by"]),
            data.get("note"),
            float(data["at"]),
            bool(data.get("withdrawn", False)),
            tuple(Resolution.from_dict(r) for r in data.get("earlier") or ()),
        )


@dataclass(frozen=True)
class SagaRecord:
    """One saga as the log holds it: its steps, its one reversal and the people's resolutions."""

    saga_id: str
    """The saga's id (``saga.id``), the handle for ``amends show`` and ``engine.undo``."""
    title: str
    """What the agent was doing, as given to ``engine.saga(title)``."""
    tenant: str | None
    """The tenant the saga belongs to (who may see and undo it), or ``None``."""
    actor: str | None
    """Who or what ran the saga (an agent or user id), or ``None``."""
    state: str
    """``running``, ``completed`` or ``failed`` (forward execution)."""
    created_at: float
    """When the saga started (epoch seconds)."""
    finished_at: float | None
    """When forward execution ended (epoch seconds); ``None`` while it runs."""
    owner: str | None
    """The worker running the saga forward (``host:pid:id``), or ``None``."""
    lease_until: float | None
    """Until when that worker holds the saga (epoch seconds); past it, recovery marks its
    ``intent`` steps in doubt."""
    steps: tuple[StepRecord, ...] = ()
    """The steps in call order (empty in ``list_sagas``, which reads no steps)."""
    reversal: ReversalRecord | None = None
    """The saga's one reversal (rule 6), or ``None`` when nobody asked for undo yet."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free JSON metadata given to ``create_saga`` (issue 11 keeps the catalog reference here)."""
    resolutions: Mapping[str, Resolution] = field(default_factory=dict)
    """step_id -> the latest :class:`Resolution` recorded for it (filled by ``get_saga``)."""

    def to_dict(self) -> dict[str, Any]:
        """This saga as JSON-ready data: every field by name, steps, reversal and resolutions
        by their own ``to_dict``."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SagaRecord:
        """The saga :meth:`to_dict` describes (other keys, e.g. a view's extras, are ignored).

        Raises:
            ConfigError: ``data`` (or a step, reversal or resolution in it) is no mapping or
                lacks a field without a default.
        """
        conv: dict[str, Callable[[Any], Any]] = {
            "steps": lambda v: tuple(StepRecord.from_dict(s) for s in v),
            "reversal": ReversalRecord.from_dict,
            "meta": dict,
            "resolutions": lambda v: {k: Resolution.from_dict(r) for k, r in v.items()},
        }
        return cls(**_record_kwargs(cls, data, conv))


@dataclass(frozen=True)
class ReversalRecord:
    """A saga's one reversal (rule 6): who runs it, what it may spend, and its report."""

    reversal_id: str
    """The reversal's id; every request to undo the saga joins this one."""
    saga_id: str
    """The saga being undone."""
    state: str
    """``running`` or ``done``."""
    budget: dict[str, Any]
    """What the current run may spend (``tool_calls``, ``tokens``, ``seconds``)."""
    owner: str | None
    """The worker running the reversal (``host:pid:id``), or ``None``."""
    generation: int
    """Bumped each time a worker takes the reversal over; a write from an older generation is
    refused (fencing)."""
    lease_until: float | None
    """Until when ``owner`` holds the reversal (epoch seconds); past it, another worker may take
    over."""
    requested_at: float
    """When undo was first asked for (epoch seconds)."""
    finished_at: float | None
    """When the reversal (or its latest continuation) finished; ``None`` while running."""
    calls_spent: int
    """Tool calls spent by the current run (reset to 0 by a continuation)."""
    tokens_spent: int
    """Tokens spent by the current run (reset to 0 by a continuation)."""
    report: dict[str, Any] | None
    """The :class:`amends.UndoReport` as a dict once done (``UndoReport.from_dict`` reads it);
    ``None`` before."""
    continuations: int = 0
    """How many times the reversal was continued after it finished (rule 6)."""
    selection: tuple[str, ...] | None = None
    """The steps a person asked to undo when the reversal was asked for only part of the saga
    (issue 27: ``engine.undo(saga_id, steps=[...])``, every selection so far): the reversal
    covers them and the steps that depend on them; ``None``: the whole saga."""

    def to_dict(self) -> dict[str, Any]:
        """This reversal as JSON-ready data: every field by name."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReversalRecord:
        """The reversal :meth:`to_dict` describes (other keys are ignored).

        Raises:
            ConfigError: ``data`` is no mapping or lacks a field without a default.
        """
        return cls(**_record_kwargs(cls, data, {}))


@dataclass(frozen=True)
class ReversalHead:
    """A reversal as an index lists it (issue 28: what a metrics reader checks for changes)."""

    reversal_id: str
    """The reversal."""
    saga_id: str
    """The saga it undoes."""
    tenant: str | None
    """The saga's tenant."""
    state: str
    """``running`` or ``done``."""
    head: int
    """The id of the saga's latest history record: it moves whenever anything is added (a
    continuation, a resolution), so an unchanged head means an unchanged report."""


@dataclass(frozen=True)
class CompensationRecord:
    """How far the reversal got with one step (write-ahead: logged before and after the inverse)."""

    reversal_id: str
    """The reversal this belongs to."""
    step_id: str
    """The step being reversed."""
    state: str
    """``dispatched`` while the inverse may be in flight, else the step's final state."""
    attempts: int
    """How many times the inverse (or compensation) was sent so far."""
    detail: str | None
    """A sentence on what happened, as the report shows it, or ``None``."""
    data: dict[str, Any]
    """What a takeover needs: the idempotency key sent, residue, follow-ups, manual action."""
    generation: int
    """The reversal generation that wrote this (fencing)."""
    updated_at: float
    """When it was last written (epoch seconds)."""
    redacted: tuple[Redaction, ...] = ()
    """Where amends put a secret's marker in ``data`` when it logged it (rule 12), paths
    relative to ``data`` (``("follow_ups", 0, "args", "card_number")``)."""

    def to_dict(self) -> dict[str, Any]:
        """This compensation as JSON-ready data: every field by name."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompensationRecord:
        """The compensation :meth:`to_dict` describes (other keys are ignored).

        Raises:
            ConfigError: ``data`` is no mapping or lacks a field without a default.
        """
        return cls(**_record_kwargs(cls, data, {"redacted": redactions_from}))


@dataclass(frozen=True)
class Event:
    """One append-only history row (``amends show`` prints these)."""

    event_id: int
    """Position in the log's history (increasing; ``events(after=...)`` pages by it)."""
    saga_id: str
    """The saga the event belongs to."""
    step_id: str | None
    """The step it is about, or ``None`` for the saga as a whole."""
    reversal_id: str | None
    """The reversal that wrote it, or ``None`` for a forward event."""
    kind: str
    """What happened, e.g. ``step.done``, ``compensation.reverted``, ``undo.asked``."""
    at: float
    """When it happened (epoch seconds)."""
    data: dict[str, Any]
    """Details of the event (secrets scrubbed, rule 11)."""

    def to_dict(self) -> dict[str, Any]:
        """This event as JSON-ready data: every field by name."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """The event :meth:`to_dict` describes (other keys are ignored).

        Raises:
            ConfigError: ``data`` is no mapping or lacks a field without a default.
        """
        return cls(**_record_kwargs(cls, data, {"data": dict}))


@dataclass(frozen=True)
class Claim:
    """What :meth:`SagaLog.claim_reversal` found or did."""

    outcome: Literal["new", "taken_over", "done", "running_elsewhere", "claimed"]
    """``claimed``: :meth:`SagaLog.continue_reversal` reopened a finished reversal for this
    worker."""
    reversal: ReversalRecord
    """The saga's one reversal, as the claim left it."""
    saga: SagaRecord | None = None
    """The saga with its steps, read in the claim's own transaction when the claim was asked to
    check it (``claim_reversal(check=...)``), its ``reversal`` being this claim's: what the plan
    needs, so undo reads the saga once (issue 12). ``None`` otherwise."""


@dataclass(frozen=True)
class IdemRecord:
    """A stored response of the HTTP API for one idempotency key (issue 13.7)."""

    tenant: str
    """The tenant the key belongs to (keys of different tenants never collide)."""
    key: str
    """The client's ``Idempotency-Key`` header."""
    request_hash: str
    """Hash of the request first sent with this key; a different request with the same key is
    a client error, not a replay."""
    response: Mapping[str, Any]
    """The response first given for this key, replayed to a retry of the same request."""
    expires_at: float
    """When the key may be forgotten (epoch seconds)."""
    created_at: float
    """When the response was stored (epoch seconds)."""


@dataclass(frozen=True)
class ChainProblem:
    """One place where the tamper-evident history does not add up (rule 11)."""

    saga_id: str
    """The saga whose history does not add up."""
    event_id: int | None
    """The event where the chain breaks (``None`` for a problem of the saga as a whole)."""
    what: Literal["edited", "inserted", "deleted", "report mismatch"]
    """The kind of tampering the check found."""
    detail: str = ""
    """A sentence for the operator: what was expected and what was found."""

    def to_dict(self) -> dict[str, Any]:
        """This problem as JSON-ready data: every field by name."""
        return _record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChainProblem:
        """The problem :meth:`to_dict` describes (other keys are ignored).

        Raises:
            ConfigError: ``data`` is no mapping or lacks a field without a default.
        """
        return cls(**_record_kwargs(cls, data, {}))


@dataclass(frozen=True)
class StepFinish:
    """What a forward step records when its tool returns (rule 1: durable before moving on)."""

    state: str
    """The forward state the step ends in: ``done``, ``failed`` or ``in_doubt``."""
    effective: str | None = None
    """The class undo acts on (irreversible after a contract violation); ``None``: declared."""
    result: Any = None
    """What the tool returned (secrets redacted, capped in size)."""
    inverse: dict[str, Any] | None = None
    """The inverse the tool recorded (:class:`amends.Inverse` as data); ``None``: none."""
    expectation: dict[str, Any] | None = None
    """The expectation the tool recorded (:class:`amends.Expectation` as data); ``None``: none."""
    residue: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """Residue a compensation is known to leave (:class:`amends.Residue` as data)."""
    acknowledgement: dict[str, Any] | None = None
    """Who must follow up an irreversible step, and the draft (``call.acknowledge``)."""
    violation: str | None = None
    """The contract violation the step committed, in words (rule 2, rule 4); ``None``: none."""
    error: str | None = None
    """Why the tool failed or is in doubt, in words; ``None`` when it returned."""
    redacted: tuple[Redaction, ...] = ()
    """Where amends put a secret's marker in the fields above (rule 12; ``scrub_record``)."""


@dataclass(frozen=True)
class StepIntent:
    """What a forward step records before its tool is called (rule 1: write-ahead): one record
    per event (issue 22), so the log interface can grow without breaking its callers."""

    saga_id: str
    """The saga the step belongs to."""
    step_id: str
    """The step's id, unique within its saga."""
    seq: int
    """Order of the call within the saga (1 for the agent's first call)."""
    tool: str
    """Catalog name of the tool about to be called."""
    args: Mapping[str, Any]
    """The arguments as they may be logged (sensitive ones already redacted, rule 11)."""
    deps: Sequence[str]
    """Ids of the steps this one waited for."""
    resources: Sequence[str]
    """What the step touches (the tool's ``resources=``)."""
    declared: str
    """Reversibility the catalog declares for the tool."""
    now: float
    """When the intent is written (epoch seconds)."""
    redacted: tuple[Redaction, ...] = ()
    """Where amends put a secret's marker in ``args`` (rule 12), paths relative to them."""
    explicit: bool = True
    """Whether the catalog declared that class; ``False``: not declared, treated as irreversible."""


@dataclass(frozen=True)
class CompensationWrite:
    """One event of a step's compensation inside a reversal, as the reversal writes it (rule 5:
    ``dispatched`` before the inverse is called, the final state after). One record per event
    (issue 22): the log, the SQL log and the Temporal workflow pass this, not twelve values."""

    reversal_id: str
    """The reversal writing it."""
    generation: int
    """The lease generation the writer holds; a write from an older one is refused (fencing)."""
    step_id: str
    """The step being reversed."""
    state: str
    """``dispatched`` while the inverse may be in flight, else the step's state (``reverted``,
    ``failed``, ...)."""
    attempts: int
    """How many times the inverse was sent so far."""
    detail: str | None
    """A sentence on what happened, as the report shows it."""
    data: Mapping[str, Any]
    """What a take-over needs: the key sent, residue, follow-ups, manual action."""
    calls_spent: int
    """Tool calls the current run of the reversal has spent so far."""
    tokens_spent: int
    """Tokens the current run has spent so far."""
    event: str
    """The history's name for the event, e.g. ``compensation.reverted``."""
    now: float
    """When it is written (epoch seconds)."""
    redacted: tuple[Redaction, ...] = ()
    """Where amends put a secret's marker in ``data`` (rule 12), paths relative to it."""
    first: bool = False
    """Write only if the reversal has no record under ``step_id`` (else SagaStateError, nothing
    written): a follow-up's claim (issue 27), so two senders racing never both send it."""
    spend: FollowUpSpend | None = None
    """A follow-up's cost, summed in the write's transaction (then ``*_spent`` are ignored)."""


@dataclass(frozen=True)
class LogHealth:
    """What ``amends doctor`` looks at, read in one consistent snapshot of the log."""

    in_doubt: list[tuple[str, str, str]]
    """(saga_id, step_id, tool) of in-doubt steps of sagas not yet undone."""
    stale_sagas: list[tuple[str, str | None, float | None]]
    """(saga_id, owner, lease_until) of running sagas whose worker stopped renewing."""
    live_sagas: list[tuple[str, str | None, float]]
    """(saga_id, owner, lease_until) of running sagas whose worker still renews its lease."""
    stuck_reversals: list[tuple[str, str, str | None, int, float | None]]
    """(reversal_id, saga_id, owner, generation, lease_until) of reversals whose lease expired."""
    live_reversals: list[tuple[str, str, str | None, int, float]]
    """(reversal_id, saga_id, owner, generation, lease_until) of reversals running now."""


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
    async def begin_step(self, intent: StepIntent) -> bool:
        """Write a step's intent, unless a reversal of the saga exists.

        Returns ``True`` when the intent is durable (the tool may now run); ``False`` when a
        reversal already exists, in which case the step is logged ``cancelled`` instead."""

    @abstractmethod
    def finish_step(
        self, saga_id: str, step_id: str, finish: StepFinish, *, now: float
    ) -> Awaitable[None]:
        """Record what a step's tool did, before the saga moves on (rule 1): handed to the log
        when called, durable once the returned awaitable is done (issue 29)."""

    @abstractmethod
    async def finish_saga(self, saga_id: str, state: str, *, now: float) -> None:
        """Close a saga (``state``: ``completed`` or ``failed``); no step can be added after."""

    @abstractmethod
    async def renew_saga_leases(
        self, saga_ids: Sequence[str], owner: str, lease_until: float
    ) -> None:
        """Extend ``owner``'s running sagas' leases (one that runs out is a crashed worker's)."""

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
        check: Callable[[SagaRecord | None], None] | None = None,
        selection: Sequence[str] | None = None,
    ) -> Claim:
        """Create the saga's one reversal, join it, or take it over once its lease has expired.

        ``check``: called with the saga as this transaction reads it (``None``: no such saga)
        before anything is written; what it raises aborts the claim (nothing written) and
        reaches the caller. The claim then carries that saga (:attr:`Claim.saga`).
        ``selection``: a new reversal covers only these steps and their dependents
        (:attr:`ReversalRecord.selection`, issue 27); ``None``: the whole saga."""

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
        selection: Sequence[str] | None | Literal["keep"] = "keep",
    ) -> Claim:
        """Reopen the saga's finished reversal for a continuation with a new budget (rule 6).

        ``selection``: what the reopened reversal covers from now on (issue 27: a wider
        selection, or ``None``: the whole saga); ``"keep"`` (default): what it covered.

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
    async def record_compensation(self, write: CompensationWrite) -> None:
        """Upsert one step's compensation state and append its event (fenced by generation)."""

    @abstractmethod
    async def finish_reversal(
        self, reversal_id: str, generation: int, report: Mapping[str, Any], *, now: float
    ) -> None:
        """Store the reversal's report (``UndoReport.to_dict()``) and mark it finished (rule 6).

        Raises:
            LeaseLostError: Another worker took the reversal over (``generation`` is stale)."""

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
    ) -> None:
        """Append one event to the saga's tamper-evident history (rule 11)."""

    @abstractmethod
    async def resolve_step(
        self,
        saga_id: str,
        step_id: str,
        *,
        by: str,
        note: str | None,
        now: float,
        withdrawn: bool = False,
    ) -> Resolution:
        """Record that a person handled ``step_id``'s manual action (or, ``withdrawn``, that
        they withdrew that); event ``step.resolved``. Earlier records stay (issue 23).

        Raises:
            SagaNotFoundError: No saga ``saga_id`` in this log.
            ContractError: The saga has no step ``step_id``."""

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
        keep: int | None = None,
    ) -> IdemRecord:
        """Store a response for ``(tenant, key)`` unless an unexpired one exists.

        Expired keys are deleted; with ``keep``, the tenant's oldest keys beyond its ``keep``
        newest are too, so one tenant cannot grow the table without bound (issue 21.14).

        Returns the stored record: this one, or the one another process put first (the caller
        compares ``request_hash``)."""

    # --- integrity (rule 11) --------------------------------------------------------------
    @abstractmethod
    async def verify(self, saga_id: str | None = None) -> list[ChainProblem]:
        """Check the hash chain of one saga's history (or every saga's) and each stored report.

        Returns every problem found (empty when the history is intact)."""

    # --- reads ----------------------------------------------------------------------------
    @abstractmethod
    async def get_saga(self, saga_id: str) -> SagaRecord | None:
        """The saga with its steps, resolutions and reversal; ``None``: no such saga."""

    @abstractmethod
    async def get_reversal(
        self, *, saga_id: str | None = None, reversal_id: str | None = None
    ) -> ReversalRecord | None:
        """The reversal of a saga (by ``saga_id``) or by its own id; ``None``: none yet."""

    @abstractmethod
    async def get_compensations(self, reversal_id: str) -> dict[str, CompensationRecord]:
        """Step id -> what the reversal has recorded for that step's compensation so far."""

    @abstractmethod
    async def events(self, saga_id: str, *, after: int = 0) -> list[Event]:
        """The saga's history in order, from the event after ``after`` (an ``event_id``)."""

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

    async def reversal_heads(self) -> list[ReversalHead]:
        """Every reversal with its saga's tenant and history head (issue 28: ``/metrics`` reads
        only the reports whose head moved). The SQL log answers in one query; this default
        reads each saga's history."""
        out = []
        for saga in await self.list_sagas(limit=2**62):
            rev = saga.reversal
            if rev is not None:
                events = await self.events(saga.saga_id)
                head = events[-1].event_id if events else 0
                out.append(
                    ReversalHead(rev.reversal_id, saga.saga_id, saga.tenant, rev.state, head)
                )
        return out

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
    async def schema_version(self) -> int:
        """The version of the log's schema (``amends doctor`` compares it with this amends')."""

    async def storage_problems(self) -> list[str]:
        """What the database itself finds damaged in the log's storage (issue 21 item 12):
        SQLite's ``PRAGMA quick_check``, a full read of every table on PostgreSQL. One sentence
        per problem; empty when the storage is sound (or the backend cannot tell)."""
        return []

    @abstractmethod
    async def close(self) -> None:
        """Release the log's connections; the object is unusable afterwards."""
