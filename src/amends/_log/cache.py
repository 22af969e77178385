"""What a log object already decoded and verified of a saga, keyed by the exact rows (issue 29).

A saga is read again and again by the same log object (the engine's read, the claim's read, the
preview's, ``verify`` before each undo and report), and each read used to decode every step and
recompute every record's chain hash. This cache keeps, per saga, the rows a read decoded or
verified and what came of them. A later read still runs its SQL and compares the rows it gets
with the kept ones: only rows equal in every column (id, body, ``prev_hash``, ``hash``) count as
already done, so an edited, deleted or inserted row (another writer, another process, someone
with the log file) is decoded and verified again, and rule 12's tamper evidence is unchanged.
The comparison is of Python tuples in C; the work saved is JSON decoding and SHA-256.

What it hands back is shared between reads: records are frozen dataclasses, and amends copies
what it changes (a secret given back is put into a deep copy, :mod:`amends._secrets`).

An in-memory log also reads less (:meth:`SagaCache.steps`): where the log can prove that nothing
but its own SQL changed the database since a saga's rows were folded (``untouched``, the mark
rule 12's check skips by), and the log's own SQL only ever appends records, the rows folded then
are still the saga's first rows, and a read fetches only the records after the last of them. Any
other change (a raw statement, an edit of an old record, a rolled-back write) moves the mark, and
the next read fetches every row again and compares them, as above.

The only SQL this module runs is that read of a saga's step records (:meth:`SagaCache.steps`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from .base import Resolution, StepRecord
from .database import Tx
from .records import fold_steps

__all__ = ["SagaCache"]

Rows = Sequence[tuple[Any, ...]]
Folded = tuple[tuple[StepRecord, ...], dict[str, Resolution]]

_STEP_ROWS = (
    "SELECT rec_id, step_id, reversal_id, kind, phase, at, body FROM records "
    "WHERE saga_id=? AND phase IN ('i','f','r')"
)
_ALL_STEPS = _STEP_ROWS + " ORDER BY rec_id"
"""A saga's step records, as :func:`~amends._log.records.fold_steps` takes them."""
_STEPS_AFTER = _STEP_ROWS + " AND rec_id>? ORDER BY rec_id"
"""Those after a given record (issue 29: the rows a read folded before are not fetched again)."""


class SagaCache:
    """Per log object: decoded steps and verified chains of recently read sagas, by rows."""

    LIMIT = 256
    """Sagas kept per kind; the least recently stored goes first (a long-lived server reads
    many sagas, each only around its undo)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # file logs read on worker threads
        self._folded: dict[str, tuple[list[tuple[Any, ...]], Folded, object | None]] = {}
        self._verified: dict[str, list[tuple[Any, ...]]] = {}
        self._marks: dict[str, object] = {}
        self.untouched: Callable[[], object | None] | None = None
        """The log's :meth:`~amends._log.database.Database.untouched`, for :meth:`steps`: set
        by a log whose mark can prove that nothing but its own SQL changed the database (an
        in-memory SQLite log); ``None``: every read fetches all of a saga's step records."""

    def steps(self, tx: Tx, saga_id: str) -> Folded:
        """The saga's steps and resolutions, read in ``tx`` (issue 29): with the log's mark
        (``untouched``, taken in this read) unchanged since this saga's rows were last folded,
        only its step records after the last of those rows are fetched; else all of them,
        compared with the rows folded last time (:meth:`fold`)."""
        mark = None if self.untouched is None else self.untouched()
        if mark is not None:
            kept = self._folded.get(saga_id)
            if kept is not None and kept[2] == mark:
                rows = kept[0]
                new = tx.execute(_STEPS_AFTER, (saga_id, rows[-1][0] if rows else 0))
                if not new:
                    steps, resolutions = kept[1]
                    return steps, dict(resolutions)
                return self.fold(saga_id, rows + new, mark)
        return self.fold(saga_id, tx.execute(_ALL_STEPS, (saga_id,)), mark)

    def fold(self, saga_id: str, rows: Rows, mark: object | None = None) -> Folded:
        """The saga's steps and resolutions from its step records (``rows``, as
        :func:`~amends._log.records.fold_steps` takes them): decoded again only when the rows
        differ from the ones decoded last time. ``mark``: the log's mark when ``rows`` were
        read (:meth:`steps`)."""
        kept = self._folded.get(saga_id)
        if kept is not None and kept[0] == rows:
            steps, resolutions = kept[1]
            if mark is not None and kept[2] != mark:  # no mark: the kept one still holds
                self._store(self._folded, saga_id, (kept[0], kept[1], mark))
            return steps, dict(resolutions)
        steps, resolutions = fold_steps(saga_id, rows)
        self._store(self._folded, saga_id, (list(rows), (steps, dict(resolutions)), mark))
        return steps, resolutions

    def verified(self, saga_id: str, records: Rows) -> int:
        """How many of ``records`` (from the first) equal, column for column, records whose
        chain a past read verified intact: those need no hash computed again."""
        kept = self._verified.get(saga_id)
        if not kept or len(kept) > len(records):
            return 0
        n = len(kept)
        if records[n - 1] != kept[n - 1] or list(records[:n]) != kept:
            return 0
        return n

    def keep_verified(self, saga_id: str, records: Rows, mark: object | None = None) -> None:
        """``records`` (the saga's whole history) verified intact: rule 12 found nothing;
        ``mark`` is the log's :meth:`~amends._log.database.Database.untouched` then."""
        self._store(self._verified, saga_id, list(records))
        if mark is None:
            self.drop_mark(saga_id)
        else:
            self._store(self._marks, saga_id, mark)

    def drop_mark(self, saga_id: str) -> None:
        """The saga's next check runs in full (it found a problem, or the log has no mark)."""
        with self._lock:
            self._marks.pop(saga_id, None)

    def untouched_since(self, saga_id: str, mark: object) -> bool:
        """The saga was found intact when the log's mark was ``mark``: with the mark unchanged,
        nothing but the log's own SQL changed the database since (issue 29)."""
        return self._marks.get(saga_id) == mark

    def _store(self, where: dict[str, Any], saga_id: str, value: Any) -> None:
        with self._lock:
            where.pop(saga_id, None)
            where[saga_id] = value
            while len(where) > self.LIMIT:
                del where[next(iter(where))]
