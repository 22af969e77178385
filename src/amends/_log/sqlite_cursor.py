"""The SQLite log's cursor, one per transaction, the shared SQL's ``Tx``, and an in-memory log's
connection (moved out of :mod:`amends._log.sqlite` to keep that module under its size cap,
issue 29)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from .._native import python_class
from .database import RECORD_INSERTS

__all__ = ["Cursor", "PrivateConnection"]


@python_class
class PrivateConnection(sqlite3.Connection):
    """An in-memory log's connection (issue 29, ``_SqliteDatabase.untouched``): a blob opened
    on it (written in place) or a database deserialized into it changes rows without changing
    ``total_changes`` or the schema's version, so either marks it ``opened`` for good and the
    log checks every saga in full from then on."""

    opened = False

    def blobopen(self, *args: Any, **kwargs: Any) -> sqlite3.Blob:
        self.opened = True
        return super().blobopen(*args, **kwargs)

    def deserialize(self, *args: Any, **kwargs: Any) -> None:
        self.opened = True
        super().deserialize(*args, **kwargs)


class Cursor:
    now_sql = "((julianday('now') - 2440587.5) * 86400.0)"
    """The host's clock as SQLite reads it (no Python process can shift it; issue 21.11)."""
    shard: int | None = None
    """One writer at a time: a saga joins the shard its id hashes to (see ``Tx.shard``)."""

    def __init__(self, conn: sqlite3.Connection, kept: sqlite3.Cursor | None = None) -> None:
        # one cursor per transaction, not one per statement; an in-memory log keeps one
        self._cur = conn.cursor() if kept is None else kept
        self._last = 0
        self.cache: dict[str, str] = {}
        self.appended: set[str] = set()
        """Sagas this transaction appended to (kept across a savepoint rollback: a superset is
        harmless, :func:`write_heads` reads a head again when the cache lost it)."""
        self.appended_to = self.appended.add  # Tx's method, the set's own (issue 29: no frame)
        self.hold = False
        """Issue 29: hold runs of record appends (``RECORD_INSERTS``) for one ``executemany``
        before the next other statement or COMMIT (``flush``); only in a batch without
        savepoints: a failing append fails it, and it runs again one savepoint a write, unheld."""
        self._held: str | None = None
        self._rows: list[Sequence[Any]] = []

    def flush(self) -> None:
        if (held := self._held) is not None:
            rows, self._held, self._rows = self._rows, None, []
            self._cur.executemany(held, rows)
            self._last = self._cur.rowcount

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.hold:
            if sql is self._held:
                self._rows.append(params)
                return []
            self.flush()
            if sql in RECORD_INSERTS:
                self._held, self._rows = sql, [params]
                return []
        cur = self._cur
        cur.execute(sql, params if type(params) is tuple else tuple(params))
        rows = cur.fetchall()
        self._last = cur.rowcount
        return rows

    def rowcount(self) -> int:
        return self._last
