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

This module runs no SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .base import Resolution, StepRecord
from .records import fold_steps

__all__ = ["SagaCache"]

Rows = Sequence[tuple[Any, ...]]
Folded = tuple[tuple[StepRecord, ...], dict[str, Resolution]]


class SagaCache:
    """Per log object: decoded steps and verified chains of recently read sagas, by rows."""

    LIMIT = 256
    """Sagas kept per kind; the least recently stored goes first (a long-lived server reads
    many sagas, each only around its undo)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # file logs read on worker threads
        self._folded: dict[str, tuple[list[tuple[Any, ...]], Folded]] = {}
        self._verified: dict[str, list[tuple[Any, ...]]] = {}
        self._marks: dict[str, object] = {}

    def fold(self, saga_id: str, rows: Rows) -> Folded:
        """The saga's steps and resolutions from its step records (``rows``, as
        :func:`~amends._log.records.fold_steps` takes them): decoded again only when the rows
        differ from the ones decoded last time."""
        kept = self._folded.get(saga_id)
        if kept is not None and kept[0] == rows:
            steps, resolutions = kept[1]
            return steps, dict(resolutions)
        steps, resolutions = fold_steps(saga_id, rows)
        self._store(self._folded, saga_id, (list(rows), (steps, dict(resolutions))))
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
