"""Operator-facing queries of the SQL log: HTTP idempotency keys, the hash-chain check and the
health scan behind ``amends doctor`` (issue 9: all SQL lives in ``amends._log``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .._errors import HistoryAlteredError
from . import leases
from .base import ChainProblem, IdemRecord, LogHealth, ReversalHead
from .cache import SagaCache
from .database import Database, Tx
from .handoff import NOT_PAUSED
from .integrity import verify_rows, verify_shards
from .records import dumps, loads, verify_saga
from .tally import (
    TallySeen,
    anchor_last,
    anchor_problems,
    anchor_text,
    stored_tally,
    tally_of,
    tally_problems,
)
from .unreadable import UNREADABLE, unreadable_problem

__all__ = ["AdminQueries"]

T = TypeVar("T")

_IDEM_COLS = "tenant, key, request_hash, response, expires_at, created_at"


def _intent_summary(text: str) -> tuple[int, str]:
    """(seq, tool) of an intent record; a damaged record must not stop ``doctor`` (it reports
    the damage through ``verify``)."""
    try:
        body = loads(text)
        return int(body.get("seq", 0)), str(body.get("tool", "?"))
    except (ValueError, TypeError, AttributeError):
        return 0, "?"


def _idem(row: Sequence[Any]) -> IdemRecord:
    return IdemRecord(row[0], row[1], row[2], loads(row[3]), float(row[4]), float(row[5]))


class AdminQueries:
    """Mixed into :class:`~amends._log.sql.SqlSagaLog`: needs its ``db`` and ``signing_key``."""

    db: Database
    signing_key: bytes | None

    @functools.cached_property
    def reads(self) -> SagaCache:
        """What this log object already decoded and verified of each saga it read (issue 29)."""
        return SagaCache()

    @functools.cached_property
    def tally_seen(self) -> TallySeen:
        """What this log object last found of the log's tally of reversal records."""
        return TallySeen()

    async def undo_problems(self, saga_id: str) -> list[ChainProblem]:
        """What the check before an undo of ``saga_id`` would find (rule 12: the log's tally
        of reversal records, the saga's shard), read without writing: ``amends show`` says it."""
        key, seen = self.signing_key, self.tally_seen

        def fn(tx: Tx) -> list[ChainProblem]:
            try:
                seen.check(tx, key, saga_id)
            except HistoryAlteredError as exc:
                return list(exc.problems)
            return []

        return await self.db.read(fn)

    async def checked_write(self, saga_id: str, fn: Callable[[Tx], T]) -> T:
        """``fn`` in a write transaction after the check of rule 12 that comes before claiming,
        taking over or continuing a reversal of ``saga_id``: the log's tally of reversal
        records and the saga's shard (:class:`~amends._log.tally.TallySeen`); what the check
        found is kept once the transaction committed.

        Raises:
            HistoryAlteredError: The tally or the saga's shard does not verify; nothing was
                written.
        """
        seen: list[Any] = []

        def checked(tx: Tx) -> T:
            seen[:] = [self.tally_seen.check(tx, self.signing_key, saga_id)]
            return fn(tx)

        out = await self.db.write(checked)
        self.tally_seen.keep(seen[0] if seen else None)
        return out

    # --- metrics (issue 28) ---------------------------------------------------------------
    async def reversal_heads(self) -> list[ReversalHead]:
        """Every reversal, its saga's tenant and the id of the saga's latest record."""

        def fn(tx: Tx) -> list[ReversalHead]:
            rows = tx.execute(
                "SELECT r.reversal_id, r.saga_id, s.tenant, r.state, "
                "(SELECT max(x.rec_id) FROM records x WHERE x.saga_id = r.saga_id) "
                "FROM reversals r JOIN sagas s ON s.saga_id = r.saga_id"
            )
            return [ReversalHead(r[0], r[1], r[2], r[3], int(r[4] or 0)) for r in rows]

        return await self.db.read(fn)

    async def follow_up_reversals(self) -> set[str]:
        """The reversals that hold a follow-up's record (issue 27: what ``recover`` looks at for
        a send whose resolution was never written), in one query: a follow-up's key is
        ``<step>+f<n>`` (``_follow_up_state.FOLLOW_UP_KEY``)."""

        def fn(tx: Tx) -> set[str]:
            rows = tx.execute(
                "SELECT DISTINCT reversal_id FROM records WHERE phase='c' AND step_id LIKE ?",
                ("%+f%",),
            )
            return {str(r[0]) for r in rows}

        return await self.db.read(fn)

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
        keep: int | None = None,
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
            if keep is not None:  # issue 21.14: a tenant's keys are capped, oldest out first
                (count,) = tx.execute("SELECT count(*) FROM idem_keys WHERE tenant=?", (tenant,))[0]
                if int(count) > max(1, keep):
                    tx.execute(
                        "DELETE FROM idem_keys WHERE tenant=? AND key IN (SELECT key FROM "
                        "idem_keys WHERE tenant=? ORDER BY created_at, key LIMIT ?)",
                        (tenant, tenant, int(count) - max(1, keep)),
                    )
            return IdemRecord(tenant, key, request_hash, loads(text), expires_at, at)

        return await self.db.write(fn, len(text))

    # --- integrity ------------------------------------------------------------------------
    async def verify(self, saga_id: str | None = None) -> list[ChainProblem]:
        key = self.signing_key
        reads = self.reads
        if saga_id is None:
            return await self.db.read(lambda tx: _verify_tx(tx, key, None, reads))
        untouched = self.db.untouched  # taken inside the read, as it runs (issue 29)
        return await self.db.read(lambda tx: _verify_one(tx, key, saga_id, reads, untouched()))

    async def anchor(self, check: str | None = None) -> tuple[str, list[ChainProblem]]:
        """Rule 12: the log's anchor now (``amends doctor --verify`` prints it; keep it outside
        the log's host), and, given an earlier anchor ``check``, what the log's records up to
        it say: a log restored from an older copy no longer holds what the anchor covers.

        Raises:
            ConfigError: ``check`` is not an anchor amends printed (nothing was read).
        """
        key = self.signing_key
        upto = None if check is None else anchor_last(check)

        def fn(tx: Tx) -> tuple[str, list[ChainProblem]]:
            last = int(tx.execute("SELECT max(rec_id) FROM records")[0][0] or 0)
            now = anchor_text(key, last, _records_upto(tx, last))
            if check is None or upto is None:
                return now, []
            found = None if upto > last else anchor_text(key, upto, _records_upto(tx, upto))
            return now, anchor_problems(check, found, last)

        return await self.db.read(fn)

    async def health(self, now: float) -> LogHealth:
        def fn(tx: Tx) -> LogHealth:
            rows = tx.execute(
                "SELECT d.saga_id, d.step_id, i.body FROM records d JOIN records i "
                "ON i.saga_id = d.saga_id AND i.step_id = d.step_id AND i.phase = 'i' "
                "WHERE d.kind = 'step.in_doubt' AND d.saga_id NOT IN "
                "(SELECT saga_id FROM reversals WHERE state = 'done') AND NOT EXISTS "
                "(SELECT 1 FROM records l WHERE l.saga_id = d.saga_id AND l.step_id = d.step_id "
                "AND l.phase = 'f' AND l.rec_id > d.rec_id)"
            )
            found = {(r[0], r[1]): _intent_summary(r[2]) for r in rows}
            in_doubt = [
                (s, st, tool)
                for (s, st), (_seq, tool) in sorted(
                    found.items(), key=lambda kv: (kv[0][0], kv[1][0])
                )
            ]
            at = leases.as_db(tx)  # issue 21.11: judged by the database's clock
            local = leases.local
            sagas = tx.execute(
                f"SELECT saga_id, owner, lease_until, {tx.now_sql}, "
                f"((lease_until IS NULL OR lease_until <= {at}) AND {NOT_PAUSED}) FROM sagas "
                "WHERE state='running' ORDER BY saga_id",  # a paused saga is live, not stale
                leases.db(now),
            )
            revs = tx.execute(
                f"SELECT reversal_id, saga_id, owner, generation, lease_until, {tx.now_sql}, "
                f"(lease_until IS NULL OR lease_until <= {at}) FROM reversals "
                "WHERE state='running' ORDER BY requested_at",
                leases.db(now),
            )
            return LogHealth(
                in_doubt=in_doubt,
                stale_sagas=[(r[0], r[1], local(r[2], r[3])) for r in sagas if r[4]],
                live_sagas=[(r[0], r[1], local(r[2], r[3]) or 0.0) for r in sagas if not r[4]],
                stuck_reversals=[(*r[:4], local(r[4], r[5])) for r in revs if r[6]],
                live_reversals=[(*r[:4], local(r[4], r[5]) or 0.0) for r in revs if not r[6]],
            )

        return await self.db.read(fn)


_REC = "rec_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash"
_SAGA = "title, tenant, actor, state, created_at, finished_at, meta, head, owner"
_REV = "reversal_id, report, report_hash, state, budget, generation, requested_at, continuations"


def _records_upto(tx: Tx, last: int) -> list[tuple[str, str | None]]:
    return [
        (str(r[0]), r[1])
        for r in tx.execute(
            "SELECT saga_id, hash FROM records WHERE rec_id<=? ORDER BY rec_id", (last,)
        )
    ]


def _verify_tx(
    tx: Tx, key: bytes | None, saga_id: str | None, reads: SagaCache
) -> list[ChainProblem]:
    """Every check of rule 12 in one read transaction: each saga's chain and stored report,
    its row, head and reversal row against its records, and (for the whole log) the shards
    that make a deleted saga visible.

    One saga's check (before each undo and report) skips recomputing the hashes of the
    records ``reads`` saw intact, unchanged in every column (issue 29); the rest is checked
    in full each time: the new records' chain, the head, the rows, the report."""
    if saga_id is not None:
        return _verify_one(tx, key, saga_id, reads)
    rows = tx.execute(f"SELECT saga_id, {_REC} FROM records ORDER BY saga_id, rec_id")
    saga_rows = {r[0]: tuple(r[1:]) for r in tx.execute(f"SELECT saga_id, {_SAGA} FROM sagas")}
    revs = {r[0]: tuple(r[1:]) for r in tx.execute(f"SELECT saga_id, {_REV} FROM reversals")}
    by_saga: dict[str, list[tuple[Any, ...]]] = {}
    for r in rows:
        by_saga.setdefault(r[0], []).append(tuple(r[1:]))
    problems: list[ChainProblem] = []
    for sid in sorted(set(saga_rows) | set(by_saga)):
        records = by_saga.get(sid, [])
        problems += _saga_problems(key, sid, records, saga_rows.get(sid), revs.get(sid))
    started = tx.execute(
        "SELECT saga_id, hash, body FROM records WHERE kind='saga.started' ORDER BY rec_id"
    )
    heads = {int(r[0]): (int(r[1]), str(r[2])) for r in tx.execute(
        "SELECT shard, n, head FROM log_heads")}  # fmt: skip
    problems.extend(verify_shards(key, [(r[0], r[1], r[2]) for r in started], heads))
    since, stored = stored_tally(tx.execute("SELECT shard, n, acc FROM log_tally"))
    found = tally_of(key, ((str(r[0]), r[9]) for r in rows if r[3] is not None and r[1] > since))
    problems.extend(tally_problems(found, stored))
    return problems


def _verify_one(
    tx: Tx, key: bytes | None, saga_id: str, reads: SagaCache, mark: object | None = None
) -> list[ChainProblem]:
    """:func:`_verify_tx` for one saga: its rows read as they are checked (no saga id column
    to split them by, issue 29), the records found intact kept in ``reads``.

    ``mark`` (:meth:`Database.untouched`, issue 29): equal to the mark of this saga's last
    check that found it intact, nothing but the log's own SQL changed the database since, and
    the check is skipped: no SELECT, no comparison."""
    if mark is not None and reads.untouched_since(saga_id, mark):
        return []
    records = tx.execute(f"SELECT {_REC} FROM records WHERE saga_id=? ORDER BY rec_id", (saga_id,))
    saga_row = tx.execute(f"SELECT {_SAGA} FROM sagas WHERE saga_id=?", (saga_id,))
    rev = tx.execute(f"SELECT {_REV} FROM reversals WHERE saga_id=?", (saga_id,))
    problems = _saga_problems(
        key,
        saga_id,
        records,
        saga_row[0] if saga_row else None,
        rev[0] if rev else None,
        reads.verified(saga_id, records),
    )
    if records and not problems:
        reads.keep_verified(saga_id, records, mark)
    elif problems:
        reads.drop_mark(saga_id)  # checked in full until found intact again
    return problems


def _saga_problems(
    key: bytes | None,
    sid: str,
    records: list[tuple[Any, ...]],
    saga_row: tuple[Any, ...] | None,
    rev: tuple[Any, ...] | None,
    done: int = 0,
) -> list[ChainProblem]:
    """One saga's chain, report, row, head and reversal row (``done``: how many leading
    records an earlier check found intact, :meth:`SagaCache.verified`). A record whose text
    cannot be read is reported as edited, never raised (rule 12: ``doctor --verify`` must
    report a forged record, not crash on it)."""
    try:
        return _checked(key, sid, records, saga_row, rev, done)
    except UNREADABLE as exc:
        return [unreadable_problem(sid, exc)]


def _checked(
    key: bytes | None,
    sid: str,
    records: list[tuple[Any, ...]],
    saga_row: tuple[Any, ...] | None,
    rev: tuple[Any, ...] | None,
    done: int,
) -> list[ChainProblem]:
    """:func:`_saga_problems`, raising what decoding a record of the wrong shape raises."""
    chain = verify_saga(key, sid, records, rev[:3] if rev else None, verified=done)
    if saga_row is None and not records:
        chain = []  # no such saga at all
    last = records[-1][0] if records else None
    rows_found = verify_rows(
        key,
        sid,
        records,
        saga_row,
        (rev[0], *rev[3:]) if rev else None,
        last_edited=any(p.event_id == last and p.what == "edited" for p in chain),
    )
    seen = {(p.event_id, p.what) for p in chain}
    return chain + [p for p in rows_found if (p.event_id, p.what) not in seen]
