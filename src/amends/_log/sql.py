"""The saga log in SQL, shared by the SQLite and PostgreSQL backends.

Backends supply a :class:`Database` (how to run a function inside one transaction, and how to read);
everything about *what* is written, and the checks that keep the rules across processes, lives here
once. SQL is written with ``?`` placeholders; a backend rewrites them if its driver wants others.

Schema v3 (issue 12): a step write is one append-only record (one encoded blob) plus at most one
read (the saga's reversal and chain head, in one statement); a compensation event likewise. The
reversal row is written only when a reversal is claimed, continued, taken over or finished.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from .._errors import (
    ConfigError,
    ContractError,
    SagaNotFoundError,
)
from .._native import mypyc_attr
from . import leases
from .admin import AdminQueries
from .base import (
    Claim,
    CompensationRecord,
    CompensationWrite,
    Event,
    Resolution,
    ReversalRecord,
    SagaLog,
    SagaRecord,
    StepFinish,
    StepIntent,
)
from .cache import SagaCache
from .database import INSERT_FORWARD, INSERT_RECORD, Database, Tx
from .handoff import NOT_PAUSED, HandoffQueries
from .integrity import head_of, shard_and_text, shard_step
from .records import (
    COMPENSATION,
    FINISH,
    INTENT,
    RESOLVED,
    chain_hash,
    compensation_text,
    dumps,
    event_data,
    finish_text,
    fold_compensations,
    loads,
    report_hash,
)
from .rows import N_SAGA as _N_SAGA
from .rows import REV_COLS as _REV_COLS
from .rows import SAGA_COLS as _SAGA_COLS
from .rows import Selection as _Selection
from .rows import budget_text as _budget_text
from .rows import listed_reversal as _listed
from .rows import listed_saga as _listed_saga
from .rows import rev_select as _rev
from .rows import reversal_of as _reversal
from .rows import saga_of as _saga
from .schema import MIGRATIONS, SCHEMA_VERSION, upgrade
from .spend_sql import first_write, spend_text
from .tally import MOD, TALLY, TALLY_UPSERT
from .texts import step_intent_text
from .unreadable import readable

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Database", "SqlSagaLog", "Tx", "upgrade", "write_heads"]

T = TypeVar("T")

_REC_COLS = "rec_id, step_id, reversal_id, kind, phase, at, body"
_RECOVERY_ERROR = "the process running this step stopped before it logged a result"


_NO_REVERSAL = "\x00no-reversal:"
"""Prefix of a ``tx.cache`` key: this transaction has seen that the saga has no reversal."""


def _head(tx: Tx, saga_id: str) -> str:
    cached = tx.cache.get(saga_id)
    if cached is not None:
        return cached
    rows = tx.execute(
        "SELECT hash FROM records WHERE saga_id=? ORDER BY rec_id DESC LIMIT 1", (saga_id,)
    )
    return str(rows[0][0] or "") if rows else ""


def _append(
    tx: Tx,
    key: bytes | None,
    saga_id: str,
    kind: str,
    now: float,
    text: str,
    *,
    phase: str = "",
    step_id: str | None = None,
    reversal_id: str | None = None,
    prev: str | None = None,
) -> str:
    """Append one record, chained to the saga's previous one (rule 11); returns its hash.

    A write whose one change is this append, its last statement, says so to the database
    (``one_change=True``: issue 29, an in-memory log then runs it without BEGIN and COMMIT)."""
    if prev is None:  # the transaction's cache first, without _head's call (issue 29)
        prev = tx.cache.get(saga_id)
        if prev is None:
            prev = _head(tx, saga_id)
    hashed = f"{kind}#{phase}" if phase else kind  # hkind(kind, phase), without the call
    digest = chain_hash(key, prev, saga_id, step_id, reversal_id, hashed, now, text, True)
    if reversal_id is None:  # issue 29: no None bound (see INSERT_FORWARD)
        tx.execute(INSERT_FORWARD, (saga_id, step_id, kind, phase, now, text, prev, digest))
    else:
        tx.execute(
            INSERT_RECORD, (saga_id, step_id, reversal_id, kind, phase, now, text, prev, digest)
        )  # rule 12: and counted log-wide (amends._log.tally.TALLY_UPSERT), inline (issue 29)
        shard = tx.shard or 0
        if (acc := tx.cache.get(TALLY + str(shard))) is None:
            row = tx.execute("SELECT acc FROM log_tally WHERE shard=?", (shard,))
            acc = str(row[0][0]) if row else ""
        msg = f"tally:{len(saga_id)}:{saga_id}:{digest}".encode()
        term = hmac.new(key, msg, hashlib.sha256) if key else hashlib.sha256(msg)
        acc = f"{(int(acc or '0', 16) + int(term.hexdigest(), 16)) % MOD:064x}"
        tx.execute(TALLY_UPSERT, (shard, acc))
        tx.cache[TALLY + str(shard)] = acc
    tx.cache[saga_id] = digest
    tx.appended_to(saga_id)  # its head is written at commit (rule 12)
    return digest


def write_heads(tx: Tx, key: bytes | None, saga_ids: Sequence[str]) -> None:
    """Rule 12: set the head of each saga this transaction appended to (``sagas.head``, bound
    to its last record's hash), in saga order. Backends call it just before ``COMMIT``; the
    last hash comes from the transaction's cache, or is read again after a savepoint rollback
    emptied it."""
    if len(saga_ids) == 1 and saga_ids[0] in tx.cache:  # issue 29: one saga, its head known
        last = {saga_ids[0]: tx.cache[saga_ids[0]]}
    elif missing := [s for s in saga_ids if s not in tx.cache]:
        last = {s: tx.cache[s] for s in saga_ids if s in tx.cache}
        marks = ",".join("?" * len(missing))
        for sid, digest in tx.execute(
            "SELECT saga_id, hash FROM records WHERE rec_id IN (SELECT max(rec_id) FROM records "
            f"WHERE saga_id IN ({marks}) GROUP BY saga_id)",
            missing,
        ):
            last[sid] = str(digest or "")
    else:
        last = {s: tx.cache[s] for s in saga_ids}
    for sid in sorted(last) if len(last) > 1 else last:
        tx.execute("UPDATE sagas SET head=? WHERE saga_id=?", (head_of(key, sid, last[sid]), sid))


def _read_saga(tx: Tx, saga_id: str, cache: SagaCache) -> SagaRecord | None:
    """The saga with its steps, resolutions and reversal, or ``None`` (steps decoded by
    ``cache``: only when their records changed, issue 29)."""
    rows = tx.execute(f"SELECT {_SAGA_COLS}, {tx.now_sql} FROM sagas WHERE saga_id=?", (saga_id,))
    if not rows:
        return None
    steps, resolutions = cache.steps(tx, saga_id)  # only the new records, when it can (issue 29)
    rev = tx.execute(f"{_rev(tx)} WHERE r.saga_id=?", (saga_id,))
    return _saga(
        rows[0], steps, _reversal(rev[0]) if rev else None, resolutions, db_now=rows[0][_N_SAGA]
    )


def _require_saga(tx: Tx, saga_id: str) -> None:
    if not tx.execute("SELECT 1 FROM sagas WHERE saga_id=?", (saga_id,)):
        raise SagaNotFoundError(
            f"no saga {saga_id!r} in this log; `amends show --db URL` lists the sagas it holds",
            saga_id=saga_id,
        )


_FENCE = "\x00fence:"
"""Prefix of a ``tx.cache`` key: the generation this transaction checked for a reversal, with
its run and saga (``generation:continuations:saga_id``)."""


def _unfence(tx: Tx, reversal_id: str) -> None:
    """The reversal's generation or run changes in this transaction: check it again."""
    tx.cache.pop(_FENCE + reversal_id, None)


def _fenced(tx: Tx, reversal_id: str, generation: int) -> tuple[str, int, str | None]:
    """Check the lease generation; returns (saga_id, continuations, chain head or None) read in
    one statement (issue 12: at most ~2 statements per compensation event).

    Once per transaction and reversal: the compensation records of one group commit (100
    compensations dispatched together) share the first write's check. The transaction holds
    the write lock (SQLite) or its read stands for the rest (PostgreSQL: its snapshot, and its
    claim on the saga row at COMMIT fails it if a take-over committed since), and a take-over
    or continuation written in the same transaction forgets it (:func:`_unfence`)."""
    seen = tx.cache.get(_FENCE + reversal_id)
    if seen is not None:
        gen, seen_run, seen_saga = seen.split(":", 2)
        seen_head = tx.cache.get(seen_saga)
        if int(gen) == generation and seen_head is not None:
            return seen_saga, int(seen_run), seen_head
    rows = tx.execute(  # and the sum of the writer's tally row (rule 12), in the same trip
        "SELECT r.generation, r.saga_id, r.continuations, (SELECT hash FROM records WHERE "
        "saga_id = r.saga_id ORDER BY rec_id DESC LIMIT 1), (SELECT acc FROM log_tally WHERE "
        "shard = ?) FROM reversals r WHERE r.reversal_id = ?",
        (tx.shard or 0, reversal_id),
    )
    if not rows or int(rows[0][0]) != generation:
        raise leases.lost(reversal_id, rows[0][0] if rows else None, generation)
    saga_id = str(rows[0][1])
    head = tx.cache.get(saga_id, str(rows[0][3] or ""))
    run = int(rows[0][2] or 0)
    tx.cache.setdefault(TALLY + str(tx.shard or 0), str(rows[0][4] or ""))
    tx.cache[_FENCE + reversal_id] = f"{generation}:{run}:{saga_id}"
    return saga_id, run, head


@mypyc_attr(allow_interpreted_subclasses=True)  # PostgresLog, applications (_native)
class SqlSagaLog(AdminQueries, HandoffQueries, SagaLog):
    """:class:`SagaLog` over a :class:`Database`. Subclasses open the database and migrate it."""

    db: Database
    signing_key: bytes | None = None
    """HMAC key of the record hash chain (rule 11); ``None``: plain SHA-256."""

    @property
    def commits_each_write(self) -> bool:
        """Whether every write commits at once, never waiting for others to join its commit (an
        in-memory SQLite log). Else a reversal gives its steps tasks from the start, so their
        writes meet in one group commit (issue 29, ``ReversalPorts.run_inline``)."""
        return bool(getattr(self.db, "memory", False))

    def append_saga_event(self, tx: Tx, saga_id: str, kind: str, now: float, text: str) -> None:
        _append(tx, self.signing_key, saga_id, kind, now, text)

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
        data: dict[str, Any] = {"title": title, "tenant": tenant, "actor": actor}
        if meta:
            data["meta"] = dict(meta)
        text = dumps(data)
        key = self.signing_key

        def fn(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO sagas (saga_id, title, tenant, actor, state, created_at, owner, "
                f"lease_until, meta) VALUES (?, ?, ?, ?, 'running', ?, ?, {leases.as_db(tx)}, ?)",
                (saga_id, title, tenant, actor, now, owner, *leases.db(lease_until), meta_text),
            )
            # rule 12: the saga joins a shard of the log's heads, so deleting it is visible
            shard, started = shard_and_text(tx.shard, saga_id, data, text)
            digest = _append(tx, key, saga_id, "saga.started", now, started, prev="")
            row = tx.execute("SELECT n, head FROM log_heads WHERE shard=?", (shard,))
            n, prev = (int(row[0][0]), str(row[0][1])) if row else (0, "")
            tx.execute(
                "UPDATE log_heads SET n=?, head=? WHERE shard=?",
                (n + 1, shard_step(key, shard, prev, digest), shard),
            )

        await self.db.write(fn, len(text) + len(meta_text))

    async def begin_step(self, intent: StepIntent) -> bool:
        saga_id, step_id, now = intent.saga_id, intent.step_id, intent.now
        text = step_intent_text(intent)  # rule 1: the whole intent, encoded once (issue 21)
        key = self.signing_key

        def fn(tx: Tx) -> bool:
            if _NO_REVERSAL + saga_id in tx.cache:
                # issue 12: an earlier write of this transaction saw no reversal, and this
                # transaction holds the write lock (SQLite) or its read already stands for the
                # check (PostgreSQL: snapshot, claim at COMMIT); a claim between drops the mark
                _append(tx, key, saga_id, "step.intent", now, text, phase=INTENT, step_id=step_id)
                return True
            # Atomic with the intent: once a reversal exists, no new step may start (issue 2 #4).
            row = tx.execute(
                "SELECT (SELECT 1 FROM reversals WHERE saga_id=?), (SELECT hash FROM records "
                "WHERE saga_id=? ORDER BY rec_id DESC LIMIT 1)",
                (saga_id, saga_id),
            )[0]
            undoing = row[0] is not None
            kind = "step.cancelled" if undoing else "step.intent"
            prev = tx.cache.get(saga_id, str(row[1] or ""))
            _append(tx, key, saga_id, kind, now, text, phase=INTENT, step_id=step_id, prev=prev)
            if not undoing:
                tx.cache[_NO_REVERSAL + saga_id] = ""
            return not undoing

        return await self.db.write(fn, len(text), one_change=True)

    def finish_step(
        self, saga_id: str, step_id: str, finish: StepFinish, *, now: float
    ) -> Awaitable[None]:
        text = finish_text(finish)  # issue 29: encoded once, when its size was checked
        kind = f"step.{finish.state}"
        key = self.signing_key

        def fn(tx: Tx) -> None:
            _append(tx, key, saga_id, kind, now, text, phase=FINISH, step_id=step_id)

        # issue 29: the writer's own future, handed over when called (the step does not wait)
        return self.db.write(fn, len(text), one_change=True)

    async def finish_saga(self, saga_id: str, state: str, *, now: float) -> None:
        key = self.signing_key

        def fn(tx: Tx) -> None:
            tx.execute(
                "UPDATE sagas SET state=?, finished_at=?, lease_until=NULL "
                "WHERE saga_id=? AND state='running'",
                (state, now, saga_id),
            )
            _append(tx, key, saga_id, f"saga.{state}", now, "{}")

        await self.db.write(fn)

    async def renew_saga_leases(
        self, saga_ids: Sequence[str], owner: str, lease_until: float
    ) -> None:
        def fn(tx: Tx) -> None:
            for saga_id in saga_ids:
                tx.execute(
                    f"UPDATE sagas SET lease_until={leases.as_db(tx)} WHERE saga_id=? AND owner=? "
                    "AND state='running'",
                    (*leases.db(lease_until), saga_id, owner),
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
        check: Callable[[SagaRecord | None], None] | None = None,
        selection: Sequence[str] | None = None,
    ) -> Claim:
        budget_text = _budget_text(budget, selection)

        def fn(tx: Tx) -> Claim:
            if check is None:
                return self._claim_tx(
                    tx, saga_id, reversal_id, budget_text, owner, lease_until, now
                )
            # issue 12: the saga is read once per undo, here, consistent with the claim (a step
            # written after it is refused); the check raising rolls the claim back
            saga = _read_saga(tx, saga_id, self.reads)
            check(saga)
            assert saga is not None  # check refuses a missing saga
            claim = self._claim_tx(tx, saga_id, reversal_id, budget_text, owner, lease_until, now)
            return dataclasses.replace(
                claim, saga=dataclasses.replace(saga, reversal=claim.reversal)
            )

        return await self.checked_write(saga_id, fn)  # rule 12: the log's tally first

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
        rows = tx.execute(f"{_rev(tx)} WHERE r.saga_id=?", (saga_id,))
        if not rows:
            tx.cache.pop(_NO_REVERSAL + saga_id, None)  # steps written after this are refused
            tx.execute(
                "INSERT INTO reversals (reversal_id, saga_id, state, budget, owner, generation,"
                f" lease_until, requested_at) VALUES (?, ?, 'running', ?, ?, 1, {leases.as_db(tx)},"
                " ?)",
                (reversal_id, saga_id, budget_text, owner, *leases.db(lease_until), now),
            )
            text = dumps({"budget": loads(budget_text), "owner": owner})
            _append(
                tx,
                self.signing_key,
                saga_id,
                "reversal.requested",
                now,
                text,
                reversal_id=reversal_id,
            )
            new = tx.execute(f"{_rev(tx)} WHERE r.saga_id=?", (saga_id,))
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
            _unfence(tx, rev.reversal_id)
            tx.execute(
                f"UPDATE reversals SET owner=?, generation=?, lease_until={leases.as_db(tx)} "
                "WHERE reversal_id=? AND generation=?",
                (owner, generation, *leases.db(lease_until), rev.reversal_id, rev.generation),
            )
            text = dumps({"owner": owner, "previous_owner": rev.owner, "generation": generation})
            _append(
                tx,
                self.signing_key,
                rev.saga_id,
                "reversal.taken_over",
                now,
                text,
                reversal_id=rev.reversal_id,
            )
            again = tx.execute(f"{_rev(tx)} WHERE r.reversal_id=?", (rev.reversal_id,))
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
        selection: _Selection = "keep",
    ) -> Claim:
        first_id = reversal_id or f"rev_{time.time_ns():x}{uuid.uuid4().hex[:10]}"

        def fn(tx: Tx) -> Claim:
            _require_saga(tx, saga_id)
            rows = tx.execute(f"{_rev(tx)} WHERE r.saga_id=?", (saga_id,))
            rev = _reversal(rows[0]) if rows else None
            text = _budget_text(budget, selection, rev)
            if rev is None:
                return self._claim_tx(tx, saga_id, first_id, text, owner, lease_until, now)
            if rev.state != "done":  # rule 6: a run or continuation in progress is joined
                return self._join_or_take_over(tx, rev, owner, lease_until, now)
            if after_continuation is not None and rev.continuations > after_continuation:
                return Claim("done", rev)  # someone continued meanwhile: join, never twice
            return self._reopen(tx, rev, text, owner, lease_until, now)

        return await self.checked_write(saga_id, fn)  # rule 12: the log's tally first

    def _reopen(
        self,
        tx: Tx,
        rev: ReversalRecord,
        budget_text: str,
        owner: str,
        lease_until: float,
        now: float,
    ) -> Claim:
        """Reopen a finished reversal for a continuation (rule 6): running again, generation and
        continuations + 1; calls and tokens spent restart at 0 (the compensation records of the
        new run carry ``run=continuations``)."""
        generation = rev.generation + 1
        continuations = rev.continuations + 1
        _unfence(tx, rev.reversal_id)
        tx.execute(
            "UPDATE reversals SET state='running', budget=?, owner=?, generation=?, "
            f"lease_until={leases.as_db(tx)}, finished_at=NULL, continuations=? "
            "WHERE reversal_id=? AND generation=?",
            (budget_text, owner, generation, *leases.db(lease_until), continuations,
             rev.reversal_id, rev.generation),
        )  # fmt: skip
        text = dumps(
            {
                "budget": loads(budget_text),
                "owner": owner,
                "generation": generation,
                "continuation": continuations,
            }
        )
        _append(
            tx, self.signing_key, rev.saga_id, "reversal.continued", now, text,
            reversal_id=rev.reversal_id,
        )  # fmt: skip
        again = tx.execute(f"{_rev(tx)} WHERE r.reversal_id=?", (rev.reversal_id,))
        return Claim("claimed", _reversal(again[0]))

    async def renew_reversal_lease(
        self, reversal_id: str, generation: int, lease_until: float
    ) -> None:
        def fn(tx: Tx) -> None:
            tx.execute(
                f"UPDATE reversals SET lease_until={leases.as_db(tx)} WHERE reversal_id=? AND "
                "generation=? AND state='running'",
                (*leases.db(lease_until), reversal_id, generation),
            )
            if tx.rowcount() == 0:
                rows = tx.execute(
                    "SELECT generation FROM reversals WHERE reversal_id=?", (reversal_id,)
                )
                if not rows or int(rows[0][0]) != generation:
                    raise leases.lost(reversal_id, rows[0][0] if rows else None, generation)

        await self.db.write(fn)

    async def record_compensation(self, write: CompensationWrite) -> None:
        reversal_id, generation = write.reversal_id, write.generation
        step_id, event, now = write.step_id, write.event, write.now
        text = compensation_text(write)  # encoded once; ``run`` spliced in for continuations
        key = self.signing_key

        def fn(tx: Tx) -> None:
            saga_id, run, head = _fenced(tx, reversal_id, generation)
            if write.first:
                first_write(tx, reversal_id, step_id)
            body = text if write.spend is None else spend_text(tx, write, run, saga_id)  # issue 27
            stored = body if not run else f'{body[:-1]},"run":{run}}}'
            _append(
                tx,
                key,
                saga_id,
                event,
                now,
                stored,
                phase=COMPENSATION,
                step_id=step_id,
                reversal_id=reversal_id,
                prev=head,
            )

        await self.db.write(fn, len(text))  # two changes: the record and its tally

    async def finish_reversal(
        self, reversal_id: str, generation: int, report: Mapping[str, Any], *, now: float
    ) -> None:
        text = dumps(dict(report))
        key = self.signing_key

        def fn(tx: Tx) -> None:
            saga_id, _run, head = _fenced(tx, reversal_id, generation)
            # rule 11: the stored report carries a hash over itself and the history it sums up
            digest = report_hash(key, text, head or "")
            tx.execute(
                "UPDATE reversals SET state='done', finished_at=?, report=?, report_hash=?, "
                "lease_until=NULL WHERE reversal_id=?",
                (now, text, digest, reversal_id),
            )
            data = dumps({"status": report.get("status"), "report_hash": digest})
            _append(
                tx,
                key,
                saga_id,
                "reversal.done",
                now,
                data,
                reversal_id=reversal_id,
                prev=head,
            )

        await self.db.write(fn, len(text))

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
        text = dumps(dict(data or {}))
        key = self.signing_key
        await self.db.write(
            lambda tx: _append(
                tx, key, saga_id, kind, now, text, step_id=step_id, reversal_id=reversal_id
            ),
            len(text),
            one_change=reversal_id is None,  # a reversal's record is tallied too (rule 12)
        )

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
        if not isinstance(by, str) or not by.strip():
            raise ConfigError(
                f"by={by!r} does not say who handled step {step_id!r}; pass a name or an id, "
                f"e.g. by='alice@example.com'"
            )
        resolution = Resolution(step_id, by, note, now, withdrawn)
        body: dict[str, Any] = {"by": by, "note": note}
        if withdrawn:
            body["withdrawn"] = True
        text = dumps(body)
        key = self.signing_key

        def fn(tx: Tx) -> Resolution:
            _require_saga(tx, saga_id)
            known = [
                r[0]
                for r in tx.execute(
                    "SELECT step_id FROM records WHERE saga_id=? AND phase='i' ORDER BY rec_id",
                    (saga_id,),
                )
            ]
            if step_id not in known:
                raise ContractError(
                    f"saga {saga_id!r} has no step {step_id!r}; its steps are "
                    f"{', '.join(known) or '(none)'} (`amends show {saga_id}` lists them)",
                    saga_id=saga_id,
                    step_id=step_id,
                )
            _append(tx, key, saga_id, "step.resolved", now, text, phase=RESOLVED, step_id=step_id)
            return resolution

        return await self.db.write(fn, len(text), one_change=True)

    # --- reads ----------------------------------------------------------------------------
    async def get_saga(self, saga_id: str) -> SagaRecord | None:
        read = self.db.read(lambda tx: _read_saga(tx, saga_id, self.reads))
        return await readable(saga_id, read, self.url)  # rule 12: an unreadable record

    async def get_reversal(
        self, *, saga_id: str | None = None, reversal_id: str | None = None
    ) -> ReversalRecord | None:
        def fn(tx: Tx) -> ReversalRecord | None:
            if reversal_id is not None:
                rows = tx.execute(f"{_rev(tx)} WHERE r.reversal_id=?", (reversal_id,))
            else:
                rows = tx.execute(f"{_rev(tx)} WHERE r.saga_id=?", (saga_id,))
            return _reversal(rows[0]) if rows else None

        return await readable(saga_id, self.db.read(fn), self.url)

    async def get_compensations(self, reversal_id: str) -> dict[str, CompensationRecord]:
        def fn(tx: Tx) -> dict[str, CompensationRecord]:
            rows = tx.execute(
                f"SELECT {_REC_COLS} FROM records WHERE reversal_id=? AND phase='c' "
                "ORDER BY rec_id",
                (reversal_id,),
            )
            return fold_compensations(reversal_id, rows)

        return await readable(None, self.db.read(fn), self.url)

    async def events(self, saga_id: str, *, after: int = 0) -> list[Event]:
        def fn(tx: Tx) -> list[Event]:
            rows = tx.execute(
                f"SELECT {_REC_COLS} FROM records WHERE saga_id=? AND rec_id>? ORDER BY rec_id",
                (saga_id, after),
            )
            return [
                Event(int(r[0]), saga_id, r[1], r[2], r[3], r[5], event_data(r[3], r[4], r[6]))
                for r in rows
            ]

        return await readable(saga_id, self.db.read(fn), self.url)

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
                f"{_REV_COLS.format(now=tx.now_sql)} FROM sagas s LEFT JOIN reversals r "
                "ON r.saga_id = s.saga_id"
            )
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += " ORDER BY s.created_at DESC, s.saga_id LIMIT ?"
            params.append(limit)
            out = []
            for row in tx.execute(sql, params):
                rev = _listed(row[_N_SAGA:]) if row[_N_SAGA] is not None else None
                out.append(_listed_saga(row[:_N_SAGA], rev, row[-1]))
            return out

        return await readable(None, self.db.read(fn), self.url)

    async def expired_reversals(self, now: float) -> list[ReversalRecord]:
        def fn(tx: Tx) -> list[ReversalRecord]:
            rows = tx.execute(
                f"{_rev(tx)} WHERE r.state='running' AND "
                f"(r.lease_until IS NULL OR r.lease_until <= {leases.as_db(tx)}) "
                "ORDER BY r.requested_at",
                leases.db(now),
            )
            return [_listed(r) for r in rows]  # one altered reversal stops no other's recovery

        return await self.db.read(fn)

    async def mark_in_doubt(self, now: float) -> list[tuple[str, str]]:
        key = self.signing_key
        body = dumps(
            {
                "state": "in_doubt",
                "error": _RECOVERY_ERROR,
                "reason": "found with intent but no result during recovery",
            }
        )

        def fn(tx: Tx) -> list[tuple[str, str]]:
            stale = [
                r[0]
                for r in tx.execute(
                    f"SELECT saga_id FROM sagas WHERE state='running' AND {NOT_PAUSED} AND "
                    f"(lease_until IS NULL OR lease_until <= {leases.as_db(tx)}) ORDER BY saga_id",
                    leases.db(now),
                )
            ]
            found: list[tuple[str, str]] = []
            for saga_id in stale:
                open_steps: dict[str, int] = {}
                for step_id, phase, kind, text in tx.execute(
                    "SELECT step_id, phase, kind, body FROM records WHERE saga_id=? AND "
                    "phase IN ('i','f') ORDER BY rec_id",
                    (saga_id,),
                ):
                    if phase == INTENT and kind == "step.intent":
                        open_steps[step_id] = int(loads(text)["seq"])
                    else:
                        open_steps.pop(step_id, None)
                doubtful = sorted(open_steps, key=open_steps.__getitem__)
                for step_id in doubtful:
                    _append(
                        tx,
                        key,
                        saga_id,
                        "step.in_doubt",
                        now,
                        body,
                        phase=FINISH,
                        step_id=step_id,
                    )
                found.extend((saga_id, s) for s in doubtful)
                tx.execute(
                    "UPDATE sagas SET state='failed', finished_at=?, lease_until=NULL "
                    "WHERE saga_id=?",
                    (now, saga_id),
                )
                _append(
                    tx,
                    key,
                    saga_id,
                    "saga.interrupted",
                    now,
                    dumps({"in_doubt_steps": doubtful}),
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
