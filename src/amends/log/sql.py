"""The saga log in SQL, shared by the SQLite and PostgreSQL backends.

Backends supply a :class:`Database` (how to run a function inside one transaction, and how to read);
everything about *what* is written, and the checks that keep the rules across processes, lives here
once. SQL is written with ``?`` placeholders; a backend rewrites them if its driver wants others.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from ..errors import ConfigError, ContractError, LeaseLostError, SagaNotFoundError
from .base import (
    ChainProblem,
    Claim,
    CompensationRecord,
    Event,
    IdemRecord,
    LogHealth,
    Resolution,
    ReversalRecord,
    SagaLog,
    SagaRecord,
    StepFinish,
    StepRecord,
    dumps,
    loads,
)

T = TypeVar("T")

SCHEMA_VERSION = 2

_SAGA_COLS = (
    "saga_id, title, tenant, actor, state, created_at, finished_at, owner, lease_until, meta"
)
_N_SAGA = 10
_STEP_COLS = (
    "saga_id, step_id, seq, tool, args, deps, resources, declared, effective, state, "
    "result, inverse, expectation, residue, acknowledgement, violation, error, "
    "started_at, finished_at"
)
_REV_COLS = (
    "reversal_id, saga_id, state, budget, owner, generation, lease_until, requested_at, "
    "finished_at, calls_spent, tokens_spent, report, continuations"
)
_COMP_COLS = "reversal_id, step_id, state, attempts, detail, data, generation, updated_at"


class Tx(Protocol):
    """A cursor inside one transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; returns its rows (empty for statements without a result)."""

    def rowcount(self) -> int:
        """Rows changed by the last statement."""


class Database(ABC):
    """How a backend runs work: ``write`` inside one durable transaction, ``read`` consistently."""

    @abstractmethod
    async def write(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in a write transaction and commit durably before returning."""

    @abstractmethod
    async def read(self, fn: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    async def close(self) -> None: ...


def _reversal(row: tuple[Any, ...]) -> ReversalRecord:
    return ReversalRecord(
        row[0],
        row[1],
        row[2],
        loads(row[3]),
        row[4],
        int(row[5]),
        row[6],
        row[7],
        row[8],
        int(row[9]),
        int(row[10]),
        loads(row[11]),
        int(row[12] or 0),
    )


def _step(row: tuple[Any, ...]) -> StepRecord:
    return StepRecord(
        saga_id=row[0],
        step_id=row[1],
        seq=int(row[2]),
        tool=row[3],
        args=loads(row[4]),
        deps=tuple(loads(row[5])),
        resources=tuple(loads(row[6])),
        declared=row[7],
        effective=row[8],
        state=row[9],
        result=loads(row[10]),
        inverse=loads(row[11]),
        expectation=loads(row[12]),
        residue=tuple(loads(row[13]) or ()),
        acknowledgement=loads(row[14]),
        violation=row[15],
        error=row[16],
        started_at=row[17],
        finished_at=row[18],
    )


def _saga(
    row: tuple[Any, ...],
    steps: Sequence[StepRecord] = (),
    reversal: ReversalRecord | None = None,
    resolutions: Mapping[str, Resolution] | None = None,
) -> SagaRecord:
    return SagaRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        tuple(steps),
        reversal,
        meta=loads(row[9]) or {},
        resolutions=dict(resolutions or {}),
    )


def chain_hash(
    key: bytes | None,
    prev: str,
    saga_id: str,
    step_id: str | None,
    reversal_id: str | None,
    kind: str,
    at: float,
    data_text: str,
) -> str:
    """The hash of one event, chained to the previous event of its saga (rule 11).

    SHA-256 over the canonical JSON of the event's fields and ``prev`` (the previous event's hash,
    ``""`` for a saga's first event); an HMAC-SHA-256 when the log has a signing key, so that
    someone who can write the file but lacks the key cannot re-forge the chain after an edit.
    ``data_text`` is the stored JSON text itself, so what is hashed is byte for byte what is kept.
    """
    msg = dumps([prev, saga_id, step_id, reversal_id, kind, float(at), data_text]).encode()
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def report_hash(key: bytes | None, report_text: str, head: str) -> str:
    """The hash a stored report carries: over its own text and the history it summarises
    (``head`` is the hash of the last event before ``reversal.done``)."""
    msg = dumps(["report", head, report_text]).encode()
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def _head(tx: Tx, saga_id: str) -> str:
    rows = tx.execute(
        "SELECT hash FROM events WHERE saga_id=? ORDER BY event_id DESC LIMIT 1", (saga_id,)
    )
    return str(rows[0][0] or "") if rows else ""


def _event(
    tx: Tx,
    key: bytes | None,
    saga_id: str,
    kind: str,
    now: float,
    *,
    step_id: str | None = None,
    reversal_id: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> str:
    """Append one event, chained to the saga's previous one; returns its hash."""
    text = dumps(dict(data or {}))
    prev = _head(tx, saga_id)
    digest = chain_hash(key, prev, saga_id, step_id, reversal_id, kind, now, text)
    tx.execute(
        "INSERT INTO events (saga_id, step_id, reversal_id, kind, at, data, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (saga_id, step_id, reversal_id, kind, now, text, prev, digest),
    )
    return digest


def _require_saga(tx: Tx, saga_id: str) -> None:
    if not tx.execute("SELECT 1 FROM sagas WHERE saga_id=?", (saga_id,)):
        raise SagaNotFoundError(
            f"no saga {saga_id!r} in this log; `amends show --db URL` lists the sagas it holds",
            saga_id=saga_id,
        )


def _check_generation(tx: Tx, reversal_id: str, generation: int) -> None:
    rows = tx.execute("SELECT generation FROM reversals WHERE reversal_id = ?", (reversal_id,))
    if not rows or int(rows[0][0]) != generation:
        current = rows[0][0] if rows else None
        raise LeaseLostError(
            f"reversal {reversal_id!r} was taken over by another worker (generation {current}, "
            f"this worker holds {generation}); this worker stops and sends nothing more",
        )


_IDEM_COLS = "tenant, key, request_hash, response, expires_at, created_at"


def _idem(row: tuple[Any, ...]) -> IdemRecord:
    return IdemRecord(row[0], row[1], row[2], loads(row[3]), float(row[4]), float(row[5]))


def _tuples(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in rows]


def _verify_saga(
    key: bytes | None,
    saga_id: str,
    events: Sequence[tuple[Any, ...]],
    reversal: tuple[Any, ...] | None,
) -> list[ChainProblem]:
    """Walk one saga's chain: (event_id, step_id, reversal_id, kind, at, data, prev, hash)."""
    out: list[ChainProblem] = []
    if not events:
        out.append(
            ChainProblem(
                saga_id,
                None,
                "deleted",
                f"saga {saga_id!r} has no history at all; every saga starts with saga.started",
            )
        )
    expected = ""
    seen: dict[str, int] = {}  # hash -> position in ``events``
    for pos, (eid, step, rev, kind, at, data, prev, digest) in enumerate(events):
        prev = prev or ""
        if not digest:
            out.append(
                ChainProblem(
                    saga_id,
                    int(eid),
                    "inserted",
                    f"event {eid} ({kind}) carries no hash: amends did not write it",
                )
            )
            continue
        if chain_hash(key, prev, saga_id, step, rev, kind, at, data) != digest:
            out.append(
                ChainProblem(
                    saga_id,
                    int(eid),
                    "edited",
                    f"event {eid} ({kind}) does not match its hash: it was changed after it was "
                    f"written (or the log's signing key is not the one it was written with)",
                )
            )
        elif prev != expected:
            if prev in seen:  # it links to an earlier event: the ones between are foreign
                for other in events[seen[prev] + 1 : pos]:
                    out.append(
                        ChainProblem(
                            saga_id,
                            int(other[0]),
                            "inserted",
                            f"event {other[0]} ({other[3]}) is outside the hash chain: the event "
                            f"after it links past it",
                        )
                    )
            else:
                out.append(
                    ChainProblem(
                        saga_id,
                        int(eid),
                        "deleted",
                        f"the event(s) just before event {eid} ({kind}) are missing: its chain "
                        f"link points to an event no longer in the log",
                    )
                )
        expected = digest
        seen[digest] = pos
    if reversal is not None and reversal[1] is not None:
        rev_id, report_text, stored = reversal
        done = [e for e in events if e[3] == "reversal.done" and e[2] == rev_id]
        if not done:
            out.append(
                ChainProblem(
                    saga_id,
                    None,
                    "deleted",
                    f"reversal {rev_id} has a stored report but its reversal.done event is "
                    f"missing from the history",
                )
            )
        else:
            last = done[-1]
            claimed = (loads(last[5]) or {}).get("report_hash", stored)
            if stored != report_hash(key, report_text, last[6] or "") or claimed != stored:
                out.append(
                    ChainProblem(
                        saga_id,
                        int(last[0]),
                        "report mismatch",
                        f"the stored report of reversal {rev_id} does not match the hash taken "
                        f"over it and its history when it was written: the report was edited",
                    )
                )
    return out


class SqlSagaLog(SagaLog):
    """:class:`SagaLog` over a :class:`Database`. Subclasses open the database and migrate it."""

    db: Database
    signing_key: bytes | None = None
    """HMAC key of the event hash chain (rule 11); ``None``: plain SHA-256."""

    # --- forward --------------------------------------------------------------------------
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
        meta_text = dumps(dict(meta or {}))  # encode before the transaction: bad JSON fails here

        def fn(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO sagas (saga_id, title, tenant, actor, state, created_at, "
                "owner, lease_until, meta) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (saga_id, title, tenant, actor, now, owner, lease_until, meta_text),
            )
            data: dict[str, Any] = {"title": title, "tenant": tenant, "actor": actor}
            if meta:
                data["meta"] = dict(meta)
            _event(tx, self.signing_key, saga_id, "saga.started", now, data=data)

        await self.db.write(fn)

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
        def fn(tx: Tx) -> bool:
            # Atomic with the intent: once a reversal exists, no new step may start (issue 2 #4).
            undoing = tx.execute("SELECT 1 FROM reversals WHERE saga_id = ?", (saga_id,))
            state = "cancelled" if undoing else "intent"
            tx.execute(
                "INSERT INTO steps (saga_id, step_id, seq, tool, args, deps, resources, declared,"
                " state, residue, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,'[]',?,?)",
                (
                    saga_id,
                    step_id,
                    seq,
                    tool,
                    dumps(dict(args)),
                    dumps(list(deps)),
                    dumps(list(resources)),
                    declared,
                    state,
                    now,
                    now if undoing else None,
                ),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                f"step.{state}",
                now,
                step_id=step_id,
                data={"tool": tool, "args": dict(args), "deps": list(deps)},
            )
            return not undoing

        return await self.db.write(fn)

    async def finish_step(
        self, saga_id: str, step_id: str, finish: StepFinish, *, now: float
    ) -> None:
        def fn(tx: Tx) -> None:
            tx.execute(
                "UPDATE steps SET state=?, effective=?, result=?, inverse=?, expectation=?, "
                "residue=?, acknowledgement=?, violation=?, error=?, finished_at=? "
                "WHERE saga_id=? AND step_id=?",
                (
                    finish.state,
                    finish.effective,
                    dumps(finish.result),
                    None if finish.inverse is None else dumps(finish.inverse),
                    None if finish.expectation is None else dumps(finish.expectation),
                    dumps([dict(r) for r in finish.residue]),
                    None if finish.acknowledgement is None else dumps(finish.acknowledgement),
                    finish.violation,
                    finish.error,
                    now,
                    saga_id,
                    step_id,
                ),
            )
            data: dict[str, Any] = {"effective": finish.effective}
            if finish.inverse is not None:
                data["inverse"] = finish.inverse
            if finish.violation:
                data["violation"] = finish.violation
            if finish.error:
                data["error"] = finish.error
            _event(
                tx,
                self.signing_key,
                saga_id,
                f"step.{finish.state}",
                now,
                step_id=step_id,
                data=data,
            )

        await self.db.write(fn)

    async def finish_saga(self, saga_id: str, state: str, *, now: float) -> None:
        def fn(tx: Tx) -> None:
            tx.execute(
                "UPDATE sagas SET state=?, finished_at=?, lease_until=NULL "
                "WHERE saga_id=? AND state='running'",
                (state, now, saga_id),
            )
            _event(tx, self.signing_key, saga_id, f"saga.{state}", now)

        await self.db.write(fn)

    async def renew_saga_leases(
        self, saga_ids: Sequence[str], owner: str, lease_until: float
    ) -> None:
        def fn(tx: Tx) -> None:
            for saga_id in saga_ids:
                tx.execute(
                    "UPDATE sagas SET lease_until=? WHERE saga_id=? AND owner=? "
                    "AND state='running'",
                    (lease_until, saga_id, owner),
                )

        await self.db.write(fn)

    # --- reversal -------------------------------------------------------------------------
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
        budget_text = dumps(dict(budget))
        return await self.db.write(
            lambda tx: self._claim_tx(
                tx, saga_id, reversal_id, budget_text, owner, lease_until, now
            )
        )

    def _claim_tx(
        self,
        tx: Tx,
        saga_id: str,
        reversal_id: str,
        budget_text: str,
        owner: str,
        lease_until: float,
        now: float,
    ) -> Claim:
        rows = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
        if not rows:
            tx.execute(
                "INSERT INTO reversals (reversal_id, saga_id, state, budget, owner, generation,"
                " lease_until, requested_at) VALUES (?, ?, 'running', ?, ?, 1, ?, ?)",
                (reversal_id, saga_id, budget_text, owner, lease_until, now),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                "reversal.requested",
                now,
                reversal_id=reversal_id,
                data={"budget": loads(budget_text), "owner": owner},
            )
            new = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
            return Claim("new", _reversal(new[0]))
        rev = _reversal(rows[0])
        if rev.state == "done":
            return Claim("done", rev)
        return self._join_or_take_over(tx, rev, owner, lease_until, now)

    def _join_or_take_over(
        self, tx: Tx, rev: ReversalRecord, owner: str, lease_until: float, now: float
    ) -> Claim:
        """A running reversal: join it while its worker's lease holds, else take it over."""
        if rev.owner == owner or rev.lease_until is None or rev.lease_until <= now:
            generation = rev.generation + 1
            tx.execute(
                "UPDATE reversals SET owner=?, generation=?, lease_until=? "
                "WHERE reversal_id=? AND generation=?",
                (owner, generation, lease_until, rev.reversal_id, rev.generation),
            )
            _event(
                tx,
                self.signing_key,
                rev.saga_id,
                "reversal.taken_over",
                now,
                reversal_id=rev.reversal_id,
                data={"owner": owner, "previous_owner": rev.owner, "generation": generation},
            )
            again = tx.execute(
                f"SELECT {_REV_COLS} FROM reversals WHERE reversal_id=?", (rev.reversal_id,)
            )
            return Claim("taken_over", _reversal(again[0]))
        return Claim("running_elsewhere", rev)

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
        budget_text = dumps(dict(budget))
        first_id = reversal_id or f"rev_{time.time_ns():x}{uuid.uuid4().hex[:10]}"

        def fn(tx: Tx) -> Claim:
            _require_saga(tx, saga_id)
            rows = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
            if not rows:
                return self._claim_tx(tx, saga_id, first_id, budget_text, owner, lease_until, now)
            rev = _reversal(rows[0])
            if rev.state != "done":  # rule 6: a run or continuation in progress is joined
                return self._join_or_take_over(tx, rev, owner, lease_until, now)
            if after_continuation is not None and rev.continuations > after_continuation:
                return Claim("done", rev)  # someone continued meanwhile: join, never twice
            generation = rev.generation + 1
            continuations = rev.continuations + 1
            tx.execute(
                "UPDATE reversals SET state='running', budget=?, owner=?, generation=?, "
                "lease_until=?, finished_at=NULL, calls_spent=0, tokens_spent=0, "
                "continuations=? WHERE reversal_id=? AND generation=?",
                (
                    budget_text,
                    owner,
                    generation,
                    lease_until,
                    continuations,
                    rev.reversal_id,
                    rev.generation,
                ),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                "reversal.continued",
                now,
                reversal_id=rev.reversal_id,
                data={
                    "budget": loads(budget_text),
                    "owner": owner,
                    "generation": generation,
                    "continuation": continuations,
                },
            )
            again = tx.execute(
                f"SELECT {_REV_COLS} FROM reversals WHERE reversal_id=?", (rev.reversal_id,)
            )
            return Claim("claimed", _reversal(again[0]))

        return await self.db.write(fn)

    async def renew_reversal_lease(
        self, reversal_id: str, generation: int, lease_until: float
    ) -> None:
        def fn(tx: Tx) -> None:
            _check_generation(tx, reversal_id, generation)
            tx.execute(
                "UPDATE reversals SET lease_until=? WHERE reversal_id=? AND state='running'",
                (lease_until, reversal_id),
            )

        await self.db.write(fn)

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
        def fn(tx: Tx) -> None:
            _check_generation(tx, reversal_id, generation)
            rows = tx.execute("SELECT saga_id FROM reversals WHERE reversal_id=?", (reversal_id,))
            saga_id = rows[0][0]
            tx.execute(
                "INSERT INTO compensations (reversal_id, step_id, state, attempts, detail, data, "
                "generation, updated_at) VALUES (?,?,?,?,?,?,?,?) "
                "ON CONFLICT (reversal_id, step_id) DO UPDATE SET state=excluded.state, "
                "attempts=excluded.attempts, detail=excluded.detail, data=excluded.data, "
                "generation=excluded.generation, updated_at=excluded.updated_at",
                (reversal_id, step_id, state, attempts, detail, dumps(dict(data)), generation, now),
            )
            tx.execute(
                "UPDATE reversals SET calls_spent=?, tokens_spent=? WHERE reversal_id=?",
                (calls_spent, tokens_spent, reversal_id),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                event,
                now,
                step_id=step_id,
                reversal_id=reversal_id,
                data={"state": state, "attempts": attempts, "detail": detail, **dict(data)},
            )

        await self.db.write(fn)

    async def finish_reversal(
        self, reversal_id: str, generation: int, report: Mapping[str, Any], *, now: float
    ) -> None:
        text = dumps(dict(report))

        def fn(tx: Tx) -> None:
            _check_generation(tx, reversal_id, generation)
            rows = tx.execute("SELECT saga_id FROM reversals WHERE reversal_id=?", (reversal_id,))
            saga_id = rows[0][0]
            # rule 11: the stored report carries a hash over itself and the history it sums up
            digest = report_hash(self.signing_key, text, _head(tx, saga_id))
            tx.execute(
                "UPDATE reversals SET state='done', finished_at=?, report=?, report_hash=?, "
                "lease_until=NULL WHERE reversal_id=?",
                (now, text, digest, reversal_id),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                "reversal.done",
                now,
                reversal_id=reversal_id,
                data={"status": report.get("status"), "report_hash": digest},
            )

        await self.db.write(fn)

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
        await self.db.write(
            lambda tx: _event(
                tx,
                self.signing_key,
                saga_id,
                kind,
                now,
                step_id=step_id,
                reversal_id=reversal_id,
                data=data,
            )
        )

    async def resolve_step(
        self, saga_id: str, step_id: str, *, by: str, note: str | None, now: float
    ) -> Resolution:
        if not isinstance(by, str) or not by.strip():
            raise ConfigError(
                f"by={by!r} does not say who handled step {step_id!r}; pass a name or an id, "
                f"e.g. by='alice@example.com'"
            )
        resolution = Resolution(step_id, by, note, now)

        def fn(tx: Tx) -> Resolution:
            _require_saga(tx, saga_id)
            if not tx.execute(
                "SELECT 1 FROM steps WHERE saga_id=? AND step_id=?", (saga_id, step_id)
            ):
                known = [
                    r[0]
                    for r in tx.execute(
                        "SELECT step_id FROM steps WHERE saga_id=? ORDER BY seq", (saga_id,)
                    )
                ]
                raise ContractError(
                    f"saga {saga_id!r} has no step {step_id!r}; its steps are "
                    f"{', '.join(known) or '(none)'} (`amends show {saga_id}` lists them)",
                    saga_id=saga_id,
                    step_id=step_id,
                )
            tx.execute(
                "INSERT INTO resolutions (saga_id, step_id, by_who, note, at) VALUES (?,?,?,?,?) "
                "ON CONFLICT (saga_id, step_id) DO UPDATE SET by_who=excluded.by_who, "
                "note=excluded.note, at=excluded.at",
                (saga_id, step_id, by, note, now),
            )
            _event(
                tx,
                self.signing_key,
                saga_id,
                "step.resolved",
                now,
                step_id=step_id,
                data={"by": by, "note": note},
            )
            return resolution

        return await self.db.write(fn)

    # --- HTTP idempotency keys ------------------------------------------------------------
    async def idem_get(self, tenant: str, key: str, now: float) -> IdemRecord | None:
        def fn(tx: Tx) -> IdemRecord | None:
            rows = tx.execute(
                f"SELECT {_IDEM_COLS} FROM idem_keys WHERE tenant=? AND key=? AND expires_at>?",
                (tenant, key, now),
            )
            return _idem(rows[0]) if rows else None

        return await self.db.read(fn)

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
        at = time.time() if now is None else now
        text = dumps(dict(response))

        def fn(tx: Tx) -> IdemRecord:
            rows = tx.execute(
                f"SELECT {_IDEM_COLS} FROM idem_keys WHERE tenant=? AND key=?", (tenant, key)
            )
            if rows and float(rows[0][4]) > at:
                return _idem(rows[0])  # another request put it first: the caller compares hashes
            tx.execute("DELETE FROM idem_keys WHERE expires_at<=?", (at,))  # keeps the table small
            tx.execute(
                f"INSERT INTO idem_keys ({_IDEM_COLS}) VALUES (?,?,?,?,?,?)",
                (tenant, key, request_hash, text, expires_at, at),
            )
            return IdemRecord(tenant, key, request_hash, loads(text), expires_at, at)

        return await self.db.write(fn)

    # --- integrity ------------------------------------------------------------------------
    async def verify(self, saga_id: str | None = None) -> list[ChainProblem]:
        key = self.signing_key

        def fn(tx: Tx) -> list[ChainProblem]:
            cols = "saga_id, event_id, step_id, reversal_id, kind, at, data, prev_hash, hash"
            if saga_id is not None:
                sagas = [saga_id]
                rows = tx.execute(
                    f"SELECT {cols} FROM events WHERE saga_id=? ORDER BY event_id", (saga_id,)
                )
                revs = tx.execute(
                    "SELECT saga_id, reversal_id, report, report_hash FROM reversals "
                    "WHERE saga_id=?",
                    (saga_id,),
                )
            else:
                sagas = [r[0] for r in tx.execute("SELECT saga_id FROM sagas ORDER BY saga_id")]
                rows = tx.execute(f"SELECT {cols} FROM events ORDER BY saga_id, event_id")
                revs = tx.execute("SELECT saga_id, reversal_id, report, report_hash FROM reversals")
            by_saga: dict[str, list[tuple[Any, ...]]] = {}
            for r in rows:
                by_saga.setdefault(r[0], []).append(r[1:])
            rev_of = {r[0]: r[1:] for r in revs}
            problems: list[ChainProblem] = []
            for sid in sagas:
                problems.extend(_verify_saga(key, sid, by_saga.get(sid, []), rev_of.get(sid)))
            return problems

        return await self.db.read(fn)

    async def health(self, now: float) -> LogHealth:
        def fn(tx: Tx) -> LogHealth:
            return LogHealth(
                in_doubt=_tuples(
                    tx.execute(
                        "SELECT saga_id, step_id, tool FROM steps WHERE state='in_doubt' AND "
                        "saga_id NOT IN (SELECT saga_id FROM reversals WHERE state='done') "
                        "ORDER BY saga_id, seq"
                    )
                ),
                stale_sagas=_tuples(
                    tx.execute(
                        "SELECT saga_id, owner, lease_until FROM sagas WHERE state='running' AND "
                        "(lease_until IS NULL OR lease_until <= ?) ORDER BY saga_id",
                        (now,),
                    )
                ),
                live_sagas=_tuples(
                    tx.execute(
                        "SELECT saga_id, owner, lease_until FROM sagas WHERE state='running' AND "
                        "lease_until > ? ORDER BY saga_id",
                        (now,),
                    )
                ),
                stuck_reversals=_tuples(
                    tx.execute(
                        "SELECT reversal_id, saga_id, owner, generation, lease_until FROM "
                        "reversals WHERE state='running' AND (lease_until IS NULL OR "
                        "lease_until <= ?) ORDER BY requested_at",
                        (now,),
                    )
                ),
                live_reversals=_tuples(
                    tx.execute(
                        "SELECT reversal_id, saga_id, owner, generation, lease_until FROM "
                        "reversals WHERE state='running' AND lease_until > ? "
                        "ORDER BY requested_at",
                        (now,),
                    )
                ),
            )

        return await self.db.read(fn)

    # --- reads ----------------------------------------------------------------------------
    async def get_saga(self, saga_id: str) -> SagaRecord | None:
        def fn(tx: Tx) -> SagaRecord | None:
            rows = tx.execute(f"SELECT {_SAGA_COLS} FROM sagas WHERE saga_id=?", (saga_id,))
            if not rows:
                return None
            steps = [
                _step(r)
                for r in tx.execute(
                    f"SELECT {_STEP_COLS} FROM steps WHERE saga_id=? ORDER BY seq", (saga_id,)
                )
            ]
            rev = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
            res = {
                r[0]: Resolution(r[0], r[1], r[2], r[3])
                for r in tx.execute(
                    "SELECT step_id, by_who, note, at FROM resolutions WHERE saga_id=?", (saga_id,)
                )
            }
            return _saga(rows[0], steps, _reversal(rev[0]) if rev else None, res)

        return await self.db.read(fn)

    async def get_reversal(
        self, *, saga_id: str | None = None, reversal_id: str | None = None
    ) -> ReversalRecord | None:
        def fn(tx: Tx) -> ReversalRecord | None:
            if reversal_id is not None:
                rows = tx.execute(
                    f"SELECT {_REV_COLS} FROM reversals WHERE reversal_id=?", (reversal_id,)
                )
            else:
                rows = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
            return _reversal(rows[0]) if rows else None

        return await self.db.read(fn)

    async def get_compensations(self, reversal_id: str) -> dict[str, CompensationRecord]:
        def fn(tx: Tx) -> dict[str, CompensationRecord]:
            rows = tx.execute(
                f"SELECT {_COMP_COLS} FROM compensations WHERE reversal_id=?", (reversal_id,)
            )
            return {
                r[1]: CompensationRecord(
                    r[0], r[1], r[2], int(r[3]), r[4], loads(r[5]), int(r[6]), r[7]
                )
                for r in rows
            }

        return await self.db.read(fn)

    async def events(self, saga_id: str, *, after: int = 0) -> list[Event]:
        def fn(tx: Tx) -> list[Event]:
            rows = tx.execute(
                "SELECT event_id, saga_id, step_id, reversal_id, kind, at, data "
                "FROM events WHERE saga_id=? AND event_id>? ORDER BY event_id",
                (saga_id, after),
            )
            return [Event(int(r[0]), r[1], r[2], r[3], r[4], r[5], loads(r[6])) for r in rows]

        return await self.db.read(fn)

    async def list_sagas(
        self,
        *,
        tenant: str | None = None,
        state: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[SagaRecord]:
        def fn(tx: Tx) -> list[SagaRecord]:
            where, params = [], []
            for clause, value in (
                ("s.tenant = ?", tenant),
                ("s.state = ?", state),
                ("s.created_at >= ?", since),
                ("s.created_at < ?", until),
            ):
                if value is not None:
                    where.append(clause)
                    params.append(value)
            sql = (
                f"SELECT {', '.join('s.' + c.strip() for c in _SAGA_COLS.split(','))}, "
                f"{', '.join('r.' + c.strip() for c in _REV_COLS.split(','))} "
                "FROM sagas s LEFT JOIN reversals r ON r.saga_id = s.saga_id"
            )
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += " ORDER BY s.created_at DESC, s.saga_id LIMIT ?"
            params.append(limit)
            out = []
            for row in tx.execute(sql, params):
                rev = _reversal(row[_N_SAGA:]) if row[_N_SAGA] is not None else None
                out.append(_saga(row[:_N_SAGA], (), rev))
            return out

        return await self.db.read(fn)

    async def expired_reversals(self, now: float) -> list[ReversalRecord]:
        def fn(tx: Tx) -> list[ReversalRecord]:
            rows = tx.execute(
                f"SELECT {_REV_COLS} FROM reversals WHERE state='running' AND "
                "(lease_until IS NULL OR lease_until <= ?) ORDER BY requested_at",
                (now,),
            )
            return [_reversal(r) for r in rows]

        return await self.db.read(fn)

    async def mark_in_doubt(self, now: float) -> list[tuple[str, str]]:
        def fn(tx: Tx) -> list[tuple[str, str]]:
            rows = tx.execute(
                "SELECT st.saga_id, st.step_id FROM steps st JOIN sagas s ON s.saga_id=st.saga_id "
                "WHERE st.state='intent' AND (s.lease_until IS NULL OR s.lease_until <= ?) "
                "ORDER BY st.saga_id, st.seq",
                (now,),
            )
            found = [(r[0], r[1]) for r in rows]
            for saga_id, step_id in found:
                tx.execute(
                    "UPDATE steps SET state='in_doubt', finished_at=?, error=? "
                    "WHERE saga_id=? AND step_id=? AND state='intent'",
                    (
                        now,
                        "the process running this step stopped before it logged a result",
                        saga_id,
                        step_id,
                    ),
                )
                _event(
                    tx,
                    self.signing_key,
                    saga_id,
                    "step.in_doubt",
                    now,
                    step_id=step_id,
                    data={"reason": "found with intent but no result during recovery"},
                )
            stale = tx.execute(
                "SELECT saga_id FROM sagas WHERE state='running' AND "
                "(lease_until IS NULL OR lease_until <= ?)",
                (now,),
            )
            for (saga_id,) in stale:
                tx.execute(
                    "UPDATE sagas SET state='failed', finished_at=?, lease_until=NULL "
                    "WHERE saga_id=?",
                    (now, saga_id),
                )
                _event(
                    tx,
                    self.signing_key,
                    saga_id,
                    "saga.interrupted",
                    now,
                    data={"in_doubt_steps": [s for g, s in found if g == saga_id]},
                )
            return found

        return await self.db.write(fn)

    async def schema_version(self) -> int:
        def fn(tx: Tx) -> int:
            rows = tx.execute("SELECT value FROM amends_meta WHERE key='schema_version'")
            return int(rows[0][0]) if rows else 0

        return await self.db.read(fn)

    async def close(self) -> None:
        await self.db.close()


def schema_statements(autoincrement_pk: str) -> list[str]:
    """DDL of schema version 1; ``autoincrement_pk`` is the dialect's auto-numbered key column."""
    return [
        "CREATE TABLE IF NOT EXISTS amends_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS sagas (saga_id TEXT PRIMARY KEY, title TEXT NOT NULL, "
        "tenant TEXT, actor TEXT, state TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
        "finished_at DOUBLE PRECISION, owner TEXT, lease_until DOUBLE PRECISION)",
        "CREATE INDEX IF NOT EXISTS sagas_created ON sagas (created_at)",
        "CREATE INDEX IF NOT EXISTS sagas_tenant_created ON sagas (tenant, created_at)",
        "CREATE INDEX IF NOT EXISTS sagas_running ON sagas (lease_until) WHERE state='running'",
        "CREATE TABLE IF NOT EXISTS steps (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, tool TEXT NOT NULL, args TEXT NOT NULL, deps TEXT NOT NULL, "
        "resources TEXT NOT NULL, declared TEXT NOT NULL, effective TEXT, state TEXT NOT NULL, "
        "result TEXT, inverse TEXT, expectation TEXT, residue TEXT NOT NULL, "
        "acknowledgement TEXT, violation TEXT, error TEXT, "
        "started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, "
        "PRIMARY KEY (saga_id, step_id))",
        "CREATE INDEX IF NOT EXISTS steps_intent ON steps (saga_id) WHERE state='intent'",
        "CREATE TABLE IF NOT EXISTS reversals (reversal_id TEXT PRIMARY KEY, "
        "saga_id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, budget TEXT NOT NULL, owner TEXT, "
        "generation INTEGER NOT NULL, lease_until DOUBLE PRECISION, "
        "requested_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, "
        "calls_spent INTEGER NOT NULL DEFAULT 0, tokens_spent INTEGER NOT NULL DEFAULT 0, "
        "report TEXT)",
        "CREATE INDEX IF NOT EXISTS reversals_running ON reversals (lease_until) "
        "WHERE state='running'",
        "CREATE TABLE IF NOT EXISTS compensations (reversal_id TEXT NOT NULL, "
        "step_id TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, detail TEXT, "
        "data TEXT NOT NULL, generation INTEGER NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (reversal_id, step_id))",
        f"CREATE TABLE IF NOT EXISTS events (event_id {autoincrement_pk}, saga_id TEXT NOT NULL, "
        "step_id TEXT, reversal_id TEXT, kind TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, "
        "data TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS events_saga ON events (saga_id, event_id)",
    ]


def schema_v2_statements(autoincrement_pk: str) -> list[str]:
    """DDL bringing version 1 to 2: saga metadata, resolutions, continuations, the event hash
    chain (rule 11) and the HTTP idempotency-key store."""
    del autoincrement_pk
    return [
        "ALTER TABLE sagas ADD COLUMN meta TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE reversals ADD COLUMN continuations INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE reversals ADD COLUMN report_hash TEXT",
        "ALTER TABLE events ADD COLUMN prev_hash TEXT",
        "ALTER TABLE events ADD COLUMN hash TEXT",
        "CREATE TABLE IF NOT EXISTS resolutions (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "by_who TEXT NOT NULL, note TEXT, at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (saga_id, step_id))",
        "CREATE TABLE IF NOT EXISTS idem_keys (tenant TEXT NOT NULL, key TEXT NOT NULL, "
        "request_hash TEXT NOT NULL, response TEXT NOT NULL, "
        "expires_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (tenant, key))",
        "CREATE INDEX IF NOT EXISTS idem_expires ON idem_keys (expires_at)",
    ]


def _chain_existing_events(tx: Tx, key: bytes | None) -> None:
    """Version 2 data step: hash-chain the history written before chaining existed, and give
    each stored report its hash, so ``verify`` covers old sagas too."""
    heads: dict[str, str] = {}
    rows = tx.execute(
        "SELECT event_id, saga_id, step_id, reversal_id, kind, at, data FROM events "
        "ORDER BY saga_id, event_id"
    )
    done_prev: dict[str, str] = {}
    for eid, saga_id, step_id, rev_id, kind, at, data in rows:
        prev = heads.get(saga_id, "")
        digest = chain_hash(key, prev, saga_id, step_id, rev_id, kind, at, data)
        tx.execute("UPDATE events SET prev_hash=?, hash=? WHERE event_id=?", (prev, digest, eid))
        if kind == "reversal.done" and rev_id is not None:
            done_prev[rev_id] = prev
        heads[saga_id] = digest
    for rev_id, report_text in tx.execute(
        "SELECT reversal_id, report FROM reversals WHERE report IS NOT NULL"
    ):
        tx.execute(
            "UPDATE reversals SET report_hash=? WHERE reversal_id=?",
            (report_hash(key, report_text, done_prev.get(rev_id, "")), rev_id),
        )


MIGRATIONS: dict[int, Callable[[str], list[str]]] = {
    1: schema_statements,
    2: schema_v2_statements,
}
"""Schema version -> DDL that brings the previous version to it (append only, never edit)."""

DATA_MIGRATIONS: dict[int, Callable[[Tx, bytes | None], None]] = {2: _chain_existing_events}
"""Schema version -> a data step run after its DDL, in the same transaction."""


def upgrade(tx: Tx, version: int, autoincrement_pk: str, key: bytes | None) -> None:
    """Bring a log at ``version`` to :data:`SCHEMA_VERSION` inside the caller's transaction."""
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in MIGRATIONS[target](autoincrement_pk):
            tx.execute(stmt)
        step = DATA_MIGRATIONS.get(target)
        if step is not None:
            step(tx, key)
        tx.execute(
            "INSERT INTO amends_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value=excluded.value",
            (str(target),),
        )
