"""The saga log in SQL, shared by the SQLite and PostgreSQL backends.

Backends supply a :class:`Database` (how to run a function inside one transaction, and how to read);
everything about *what* is written, and the checks that keep the rules across processes, lives here
once. SQL is written with ``?`` placeholders; a backend rewrites them if its driver wants others.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from ..errors import LeaseLostError
from .base import (
    Claim,
    CompensationRecord,
    Event,
    ReversalRecord,
    SagaLog,
    SagaRecord,
    StepFinish,
    StepRecord,
    dumps,
    loads,
)

T = TypeVar("T")

SCHEMA_VERSION = 1

_SAGA_COLS = "saga_id, title, tenant, actor, state, created_at, finished_at, owner, lease_until"
_STEP_COLS = (
    "saga_id, step_id, seq, tool, args, deps, resources, declared, effective, state, "
    "result, inverse, expectation, residue, acknowledgement, violation, error, "
    "started_at, finished_at"
)
_REV_COLS = (
    "reversal_id, saga_id, state, budget, owner, generation, lease_until, requested_at, "
    "finished_at, calls_spent, tokens_spent, report"
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
    row: tuple[Any, ...], steps: Sequence[StepRecord] = (), reversal: ReversalRecord | None = None
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
    )


def _event(
    tx: Tx,
    saga_id: str,
    kind: str,
    now: float,
    *,
    step_id: str | None = None,
    reversal_id: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> None:
    tx.execute(
        "INSERT INTO events (saga_id, step_id, reversal_id, kind, at, data) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (saga_id, step_id, reversal_id, kind, now, dumps(dict(data or {}))),
    )


def _check_generation(tx: Tx, reversal_id: str, generation: int) -> None:
    rows = tx.execute("SELECT generation FROM reversals WHERE reversal_id = ?", (reversal_id,))
    if not rows or int(rows[0][0]) != generation:
        current = rows[0][0] if rows else None
        raise LeaseLostError(
            f"reversal {reversal_id!r} was taken over by another worker (generation {current}, "
            f"this worker holds {generation}); this worker stops and sends nothing more",
        )


class SqlSagaLog(SagaLog):
    """:class:`SagaLog` over a :class:`Database`. Subclasses open the database and migrate it."""

    db: Database

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
    ) -> None:
        def fn(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO sagas (saga_id, title, tenant, actor, state, created_at, "
                "owner, lease_until) VALUES (?, ?, ?, ?, 'running', ?, ?, ?)",
                (saga_id, title, tenant, actor, now, owner, lease_until),
            )
            _event(
                tx,
                saga_id,
                "saga.started",
                now,
                data={"title": title, "tenant": tenant, "actor": actor},
            )

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
            _event(tx, saga_id, f"step.{finish.state}", now, step_id=step_id, data=data)

        await self.db.write(fn)

    async def finish_saga(self, saga_id: str, state: str, *, now: float) -> None:
        def fn(tx: Tx) -> None:
            tx.execute(
                "UPDATE sagas SET state=?, finished_at=?, lease_until=NULL "
                "WHERE saga_id=? AND state='running'",
                (state, now, saga_id),
            )
            _event(tx, saga_id, f"saga.{state}", now)

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
        def fn(tx: Tx) -> Claim:
            rows = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
            if not rows:
                tx.execute(
                    "INSERT INTO reversals (reversal_id, saga_id, state, budget, owner, generation,"
                    " lease_until, requested_at) VALUES (?, ?, 'running', ?, ?, 1, ?, ?)",
                    (reversal_id, saga_id, dumps(dict(budget)), owner, lease_until, now),
                )
                _event(
                    tx,
                    saga_id,
                    "reversal.requested",
                    now,
                    reversal_id=reversal_id,
                    data={"budget": dict(budget), "owner": owner},
                )
                new = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
                return Claim("new", _reversal(new[0]))
            rev = _reversal(rows[0])
            if rev.state == "done":
                return Claim("done", rev)
            if rev.owner == owner or rev.lease_until is None or rev.lease_until <= now:
                generation = rev.generation + 1
                tx.execute(
                    "UPDATE reversals SET owner=?, generation=?, lease_until=? "
                    "WHERE reversal_id=? AND generation=?",
                    (owner, generation, lease_until, rev.reversal_id, rev.generation),
                )
                _event(
                    tx,
                    saga_id,
                    "reversal.taken_over",
                    now,
                    reversal_id=rev.reversal_id,
                    data={"owner": owner, "previous_owner": rev.owner, "generation": generation},
                )
                again = tx.execute(f"SELECT {_REV_COLS} FROM reversals WHERE saga_id=?", (saga_id,))
                return Claim("taken_over", _reversal(again[0]))
            return Claim("running_elsewhere", rev)

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
        def fn(tx: Tx) -> None:
            _check_generation(tx, reversal_id, generation)
            rows = tx.execute("SELECT saga_id FROM reversals WHERE reversal_id=?", (reversal_id,))
            tx.execute(
                "UPDATE reversals SET state='done', finished_at=?, report=?, "
                "lease_until=NULL WHERE reversal_id=?",
                (now, dumps(dict(report)), reversal_id),
            )
            _event(
                tx,
                rows[0][0],
                "reversal.done",
                now,
                reversal_id=reversal_id,
                data={"status": report.get("status")},
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
                tx, saga_id, kind, now, step_id=step_id, reversal_id=reversal_id, data=data
            )
        )

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
            return _saga(rows[0], steps, _reversal(rev[0]) if rev else None)

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
                rev = _reversal(row[9:]) if row[9] is not None else None
                out.append(_saga(row[:9], (), rev))
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


MIGRATIONS: dict[int, Callable[[str], list[str]]] = {1: schema_statements}
"""Schema version -> DDL that brings the previous version to it (append only, never edit)."""
