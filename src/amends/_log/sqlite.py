"""The embedded default saga log: one SQLite file, WAL, ``synchronous=FULL``, group commit.

All writes go through one writer thread that commits every write waiting at that moment in a single
``BEGIN IMMEDIATE`` transaction (group commit: concurrent steps share one fsync), each inside its
own savepoint so that one failing write never takes its neighbours down. Other processes on the same
file serialise on SQLite's own lock, bounded by the busy timeout.

This module must never report a write as durable before its transaction has committed.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, cast
from urllib.parse import quote

from .._errors import (
    LogCorruptedError,
    LogError,
    LogLockedError,
    LogReadOnlyError,
)
from .._native import mypyc_attr
from .database import EAGER, started_eagerly, take_batch
from .schema import stored_version
from .sql import SCHEMA_VERSION, Database, SqlSagaLog, Tx, upgrade, write_heads
from .sqlite_cursor import Cursor as _Cursor
from .sqlite_cursor import PrivateConnection
from .sqlite_readers import Readers

__all__ = ["SqliteLog", "switch_to_wal"]

T = TypeVar("T")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


def translate(exc: sqlite3.Error, path: str) -> LogError:
    """A precise amends error for a SQLite failure, naming the file and the fix."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return LogLockedError(
            f"saga log {path!r} stayed locked by another process past the busy timeout; "
            f"retry, raise busy_timeout (SqliteLog(path, busy_timeout=...)), or stop the process "
            f"holding it (`fuser {path}` shows it)",
            path=path,
        )
    if (
        "readonly" in text
        or "read-only" in text
        or "full" in text
        or "disk i/o" in text
        or "unable to open" in text  # e.g. a read-only mount: the -shm file cannot be made
    ):
        return LogReadOnlyError(
            f"saga log {path!r} refuses writes ({exc}); free disk space or make the file and its "
            f"directory writable (the -wal and -shm files beside it too). Nothing was "
            f"half-written: the transaction was rolled back",
            path=path,
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return LogCorruptedError(
            f"saga log {path!r} is damaged or is not an amends log ({exc}); restore it from a "
            f"backup or move it aside, then point amends at a fresh file (--db NEW.db)",
            path=path,
        )
    return LogError(f"saga log {path!r}: {exc}", path=path)


def switch_to_wal(conn: sqlite3.Connection, timeout: float) -> str:
    """``PRAGMA journal_mode = WAL`` on ``conn``, waiting out other openers up to ``timeout`` s.

    Switching a fresh file to WAL needs an exclusive lock, and SQLite answers "database is
    locked" at once (its busy handler is not consulted there) while another connection holds a
    write lock on it, as it does while it creates the same new file: two agents starting
    together must both get the log, not one a LogLockedError (found by tests/conformance
    `test_concurrent_opens_migrate_once`), and a reader polling a file a worker is creating must
    wait, not fail (CI, 2026-12-05). Every SQLite file amends or its tests share between
    processes switches through here.
    """
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


# (the write, the event loop of its awaiter or None for a blocking caller, the future to settle,
# roughly how many bytes it writes)
_Job = tuple[Callable[[Tx], Any], asyncio.AbstractEventLoop | None, Any, int]


def _resolve(own: asyncio.AbstractEventLoop, settled: list[tuple[_Job, bool, Any]]) -> None:
    """Settle the batch's asyncio futures of loop ``own``, on it; skip those whose awaiter was
    cancelled (the write itself still stands)."""
    for (_fn, loop, fut, _size), ok, value in settled:
        if loop is not own or fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


def _settle_all(settled: list[tuple[_Job, bool, Any]]) -> None:
    """One wake-up per event loop per batch, not one per write (group commit's other half);
    each loop is handed the whole batch (issue 29: no list per loop built here, write by write)."""
    for loop in {job[1] for job, _ok, _value in settled}:
        if loop is None:  # blocking callers' futures, settled here
            for (_fn, own, fut, _size), ok, value in settled:
                if own is None:
                    try:
                        if ok:
                            fut.set_result(value)
                        else:
                            fut.set_exception(value)
                    except concurrent.futures.InvalidStateError:
                        pass  # a cancelled blocking caller must not kill the writer thread
            continue
        try:
            loop.call_soon_threadsafe(_resolve, loop, settled)
        except RuntimeError:
            pass  # that loop is closed: nobody is waiting any more


_OWN_SQL = frozenset({"amends._log.sql", "amends._log.admin"})
"""Modules whose write functions never read nor set ``sagas.head`` but through
:func:`write_heads`: an in-memory log's deferred heads can wait past their writes (issue 29)."""


def _autocommitted(sql: str) -> None:
    """In place of ``COMMIT`` for a write that committed itself (autocommit: see ``_one``)."""


_SCHEMA_MARK = (
    "SELECT (SELECT schema_version FROM pragma_schema_version), "
    "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger')"
)
"""Issue 29 (``untouched``): the schema's version, and whether it has a trigger."""

_CARRY_LIMIT = 4096
"""Entries of a committed transaction's cache carried to the next (a few per saga written)."""


class _SqliteDatabase(Database):
    _own = 0
    """Issue 29 (``untouched``): rows the log's own SQL changed on the connection (its
    ``total_changes`` moved while a write of ``_OWN_SQL`` or ``_write_heads`` ran)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: Synchronous,
        busy_timeout: float,
        must_exist: bool = False,
        read_only: bool = False,
        key: bytes | None = None,
    ) -> None:
        self.path = path
        self.memory = path == ":memory:"
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.read_only = read_only and not self.memory
        self._key = key
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._queued: collections.deque[None] = collections.deque()
        """Writes handed to the writer, not committed yet (one in ``get``'s hands too: 3.13's
        ``put`` hands it over, the queue reads empty); while any is, no write goes inline."""
        self._lock = threading.Lock()
        self._readers = Readers(self._lock)
        """One connection per reading thread, and the reads running (``_read_sync``)."""
        self._closed = False
        self._immutable = False
        self._writing = threading.Lock()  # one transaction at a time on the writer connection
        self._carry: dict[str, str] | None = None
        """Issue 29: what the last committed write transaction knew (chain heads, sagas seen
        without a reversal, fences checked), handed to the next one. Only for ``:memory:``: its
        connection is private, so this log object is the saga's only writer and what it wrote
        last is what is stored; a file or PostgreSQL may have another writer, so each write
        transaction reads the heads again. Dropped when a transaction fails, and when the
        connection changed rows outside a write transaction (``_carry_changes``)."""
        self._carry_changes = 0
        self._heads: dict[str, str] | None = {} if self.memory else None
        """Issue 29: an in-memory log's saga heads not yet written (saga id -> the hash of its
        last record, from which :func:`write_heads` computes the head). A commit leaves its
        sagas' heads here instead of UPDATEing each saga row (rule 12's head, ~13 % of an
        in-memory write); ``_write_heads`` writes them before anything reads the database
        (every ``read``, a write that is not the log's own SQL, ``close``, the connection
        handed out: ``_conn``). Only ``:memory:``: its connection is private, so nothing can
        read a stale head between; ``None`` once the connection was handed out (no longer
        private) and for a file log."""
        self.inline_when_idle = True
        if not self.memory:
            self._prepare_file(must_exist=must_exist or read_only)
        self._connection = self._connect()
        try:
            self._migrate()
        except BaseException:
            self._connection.close()
            raise
        self._kept = self._connection.cursor() if self.memory else None
        """Issue 29: the one cursor every transaction of an in-memory log runs on."""
        self._writer: threading.Thread | None = None
        if not self.memory and not self.read_only:  # ":memory:" runs writes inline (_inline)
            self._writer = threading.Thread(
                target=self._run, name=f"amends-sqlite:{path}", daemon=True
            )
            self._writer.start()

    # --- connections ----------------------------------------------------------------------
    @property
    def _conn(self) -> sqlite3.Connection:
        """The writer connection, for a caller outside this class (tests trace and tamper
        through it): an in-memory log writes the heads it deferred first and, the connection
        no longer being private, writes each commit's heads at commit from now on (issue 29)."""
        with self._lock:
            if self._heads is not None:
                self._write_heads()
                self._heads = None
        return self._connection

    def _prepare_file(self, *, must_exist: bool) -> None:
        """Refuse a missing file when asked to, never touch a file that is not an amends log,
        and create a new log readable by its owner only (rule 11)."""
        path = self.path
        if not os.path.exists(path):
            if must_exist:
                raise LogError(
                    f"saga log {path!r} does not exist; check the path (--db) or "
                    f"$AMENDS_DB. A read command never creates an empty log",
                    path=path,
                )
            try:  # 0600 from the start; SQLite gives -wal and -shm the same mode
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError as exc:
                raise LogReadOnlyError(
                    f"saga log {path!r} cannot be created ({exc.strerror}); make its "
                    f"directory writable or choose another --db path",
                    path=path,
                ) from exc
            return
        tables = self._probe_tables()
        if tables and "amends_meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise LogError(
                f"saga log {path!r} is not an amends log (it holds other tables: {shown}); "
                f"it was left untouched. Point --db at an amends log or a new file",
                path=path,
            )
        if must_exist and not tables:
            raise LogError(
                f"saga log {path!r} is not an amends log (an empty database); point --db at "
                f"the log your agents write",
                path=path,
            )

    def _probe_tables(self) -> set[str]:
        """The file's table names, read through a read-only connection (changes nothing)."""
        last: sqlite3.Error | None = None
        for immutable in (False, True):
            try:
                conn = sqlite3.connect(self._uri(immutable), uri=True, timeout=self.busy_timeout)
            except sqlite3.Error as exc:
                last = exc
                continue
            try:
                rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
                self._immutable = immutable
                return {str(r[0]) for r in rows}
            except sqlite3.Error as exc:
                last = exc
            finally:
                conn.close()
            if "not a database" in str(last).lower():
                break
        assert last is not None
        raise translate(last, self.path) from last

    def _uri(self, immutable: bool = False) -> str:
        # immutable=1: a WAL log in a directory we may not write (no -shm can be made); only
        # used read-only, when the plain read-only open failed
        extra = "&immutable=1" if immutable else ""
        return f"file:{quote(os.path.abspath(self.path))}?mode=ro{extra}"

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            if self.read_only:
                conn = sqlite3.connect(
                    self._uri(self._immutable),
                    uri=True,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                    factory=PrivateConnection if self.memory else sqlite3.Connection,
                )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if not self.memory and not self.read_only:
                mode = switch_to_wal(conn, self.busy_timeout)
                if str(mode).lower() != "wal":
                    raise LogError(
                        f"saga log {self.path!r} could not switch to WAL (got "
                        f"{mode!r}); put it on a local disk",
                        path=self.path,
                    )
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException as exc:
            if conn is not None:
                conn.close()  # never leak the file handle of a log we refuse to open
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, self.path) from exc
            raise
        return conn

    def _version(self) -> int:
        """The log's schema version (0: no amends tables yet), checked (``stored_version``)."""
        conn = self._connection

        def has(table: str) -> bool:
            sql = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
            return conn.execute(sql, (table,)).fetchone() is not None

        if not has("amends_meta"):
            return 0
        row = conn.execute("SELECT value FROM amends_meta WHERE key='schema_version'").fetchone()
        return stored_version(row[0] if row else None, has, self.path)

    def _migrate(self) -> None:
        conn = self._connection
        try:
            # the common case (schema current) takes no write lock
            version = self._version()
            if version == SCHEMA_VERSION:
                return
            if self.read_only:
                raise LogError(
                    f"saga log {self.path!r} has schema version {version}; this amends reads "
                    f"version {SCHEMA_VERSION}. Open it once for writing (e.g. `amends recover "
                    f"--db {self.path}`) to upgrade it, then read it again",
                    path=self.path,
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._version()  # another process may have migrated meanwhile
                upgrade(_Cursor(conn), version, "sqlite", self._key, self.path)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    # --- the writer thread ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch = take_batch(self._jobs, job)
            with self._writing:
                outcomes = self._commit(batch)
                for _ in batch:
                    self._queued.pop()
            _settle_all(outcomes)

    def _commit(self, batch: list[_Job]) -> list[tuple[_Job, bool, Any]]:
        """Run ``batch`` in one durable transaction; returns each job with its outcome.

        Optimistic: the batch runs without savepoints (issue 12: they cost two statements per
        write). Only if one write fails is the transaction rolled back and the batch re-run with
        one savepoint per write, so that the failing write never takes its neighbours down.
        Write functions only touch the database, so re-running them is safe.
        """
        if len(batch) > 1:  # unheld, a write that fails fails the whole batch: one test
            fast = self._transaction(batch, savepoints=False)
            if fast[0][1]:
                return fast
        return self._transaction(batch, savepoints=len(batch) > 1)

    def _write_cursor(self) -> _Cursor:
        """A cursor for the next write transaction, with the head cache the last commit left
        (issue 29: see ``_carry``) if nothing has changed the database since."""
        cur = _Cursor(self._connection, self._kept)
        if self._carry is not None:
            if self._connection.total_changes == self._carry_changes:
                cur.cache = self._carry
            self._carry = None
        return cur

    def _commit_heads(self, cur: _Cursor, execute: Callable[[str], Any]) -> None:
        """Rule 12: the heads of the sagas the transaction appended to, then ``COMMIT`` (run by
        ``execute``; :func:`_autocommitted` when the write committed itself, see ``_one``); an
        in-memory log leaves the heads for ``_write_heads`` (see ``_heads``) and carries the
        head cache to its next write (issue 29: see ``_carry``)."""
        appended = cur.appended
        heads = self._heads
        if heads is not None and appended:
            cache = cur.cache
            try:  # the hash of each saga's last record, as write_heads would take it
                last = {sid: cache[sid] for sid in appended}
            except KeyError:  # a savepoint rollback emptied the cache: write them now
                write_heads(cur, self._key, sorted(appended))
                execute("COMMIT")
                for sid in appended:
                    heads.pop(sid, None)  # written newer than what was waiting
            else:
                execute("COMMIT")
                heads.update(last)  # only once committed: a failed write leaves no head
        else:
            write_heads(cur, self._key, sorted(appended) if len(appended) > 1 else [*appended])
            execute("COMMIT")
        if self.memory and len(cur.cache) <= _CARRY_LIMIT:
            self._carry, self._carry_changes = cur.cache, self._connection.total_changes

    def _keep_stored_heads(self, cur: _Cursor) -> None:
        """Issue 29: a write run in autocommit (``_one``) raised after its one change stood, so
        its record stays, and with it its saga's head, deferred as a committed write's: read
        from the records, the cache of a write that raised being dropped."""
        heads = self._heads
        assert heads is not None  # autocommit only while the connection is private
        rows = cur.execute("SELECT saga_id FROM records WHERE rec_id = last_insert_rowid()")
        for sid in cur.appended | {str(r[0]) for r in rows}:
            last = cur.execute(
                "SELECT hash FROM records WHERE saga_id=? ORDER BY rec_id DESC LIMIT 1", (sid,)
            )
            heads[sid] = str(last[0][0] or "")

    def _write_heads(self) -> None:
        """Write the heads an in-memory log deferred (see ``_heads``), in one transaction; the
        caller holds ``_lock``. The head cache carried to the next write stays valid: these
        rows are the log's own."""
        heads = self._heads
        if not heads:
            return
        conn = self._connection
        changes = conn.total_changes
        in_step = self._carry is not None and changes == self._carry_changes
        cur = _Cursor(conn)
        cur.cache = heads
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                write_heads(cur, self._key, sorted(heads) if len(heads) > 1 else [*heads])
                cur.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        finally:
            self._own += conn.total_changes - changes  # the log's own rows (``untouched``)
        heads.clear()
        if in_step:
            self._carry_changes = conn.total_changes

    def _transaction(self, batch: list[_Job], *, savepoints: bool) -> list[tuple[_Job, bool, Any]]:
        conn = self._connection
        cur = self._write_cursor()
        cur.hold = not savepoints
        settled: list[tuple[_Job, bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for i, job in enumerate(batch):
                    if savepoints:
                        conn.execute(f"SAVEPOINT w{i}")
                    try:
                        value = job[0](cur)
                    except Exception as exc:
                        err = translate(exc, self.path) if isinstance(exc, sqlite3.Error) else exc
                        if not savepoints:
                            conn.execute("ROLLBACK")
                            if len(batch) > 1:  # the caller re-runs it with savepoints
                                return [(job, False, err) for job in batch]
                            return [(batch[0], False, err)]
                        conn.execute(f"ROLLBACK TO w{i}")
                        conn.execute(f"RELEASE w{i}")
                        cur.cache.clear()  # heads written by the rolled-back write are gone
                        settled.append((job, False, err))
                        continue
                    if savepoints:
                        conn.execute(f"RELEASE w{i}")
                    settled.append((job, True, value))
                cur.flush()
                if conn.in_transaction:
                    self._commit_heads(cur, conn.execute)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            err = translate(exc, self.path)
            return [(job, False, err) for job in batch]
        except BaseException as exc:
            return [(job, False, exc) for job in batch]
        return settled

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"saga log {self.path!r} is closed", path=self.path)

    def _check_writable(self) -> None:
        if self.read_only:
            raise LogReadOnlyError(
                f"saga log {self.path!r} was opened read-only; nothing was written. Open it "
                f"without read_only=True to write",
                path=self.path,
            )

    def _inline(self, fn: Callable[[Tx], T], write: bool, one_change: bool = False) -> T:
        """``:memory:`` logs: the connection is private and there is no fsync to overlap, so a
        write runs on the caller's thread (under a lock) instead of paying two thread hops."""
        self._check_open()
        with self._lock:
            own = write and getattr(fn, "__module__", None) in _OWN_SQL
            if self._heads and not own:
                # issue 29: nothing reads a head this log deferred, and a write that is not
                # the log's own SQL (which never reads nor sets ``sagas.head``) may do either
                self._write_heads()
            if not write:
                return fn(_Cursor(self._connection, self._kept))
            return cast(T, self._one(fn, one_change, own))

    def untouched(self) -> tuple[int, int] | None:
        """Issue 29 (see :meth:`Database.untouched`), for an in-memory log whose connection is
        still private (``_heads``): the rows changed on it other than by the log's own SQL
        (``total_changes`` less ``_own``: a raw statement on the connection, a write or read
        function of anyone else's, one rolled back too) and the schema's version (DDL such as
        a view changes no row); ``None`` while the schema has a trigger (its rows would count
        as those of the log's statement that fired it) and once a blob was opened on it
        (``PrivateConnection``), and inside a transaction (a write's read: rows it read may
        still be rolled back). Called inside ``_inline``, whose ``_lock`` keeps the log's own
        uses of the connection from running meanwhile; the connection must not be used by
        another thread while the log writes (as ``_carry``)."""
        conn = self._connection
        if self._heads is None or getattr(conn, "opened", True) or conn.in_transaction:
            return None  # a blob: ``PrivateConnection``
        ((version, triggers),) = conn.execute(_SCHEMA_MARK).fetchall()
        return None if triggers else (conn.total_changes - self._own, int(version))

    def _one(self, fn: Callable[[Tx], Any], one_change: bool, own: bool = False) -> Any:
        """One write in its own transaction, for ``:memory:`` logs (issue 29): what
        ``_commit([job])`` does for a batch of one (no savepoints, the heads left for
        ``_write_heads``, the head cache carried over), without the batch's lists; raises the
        write's error after rolling it back.

        A write whose one change is its last statement (``one_change``: an append) runs in
        autocommit while the connection is private (``_heads``): SQLite makes that statement
        its own transaction, all or nothing, and ``_lock`` keeps every other use of the
        connection from coming between the write's reads and it; no BEGIN IMMEDIATE, no
        COMMIT, the head deferred as ever. Refused, it changed nothing; raising after it, its
        record stands and so does its head (``_keep_stored_heads``). The rows an ``own`` write
        (the log's own SQL) changed count as the log's (``_own``, issue 29: ``untouched``);
        a write that raised leaves them uncounted: the next check runs in full."""
        conn = self._connection
        cur = self._write_cursor()
        tc = cur._cur  # BEGIN and COMMIT on the write's cursor: no cursor made for each
        alone = one_change and self._heads is not None
        changes = conn.total_changes
        try:
            if not alone:
                tc.execute("BEGIN IMMEDIATE")
            try:
                value = fn(cur)
                if conn.in_transaction:
                    self._commit_heads(cur, tc.execute)
                elif alone:
                    self._commit_heads(cur, _autocommitted)
                if own:
                    self._own += conn.total_changes - changes
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                elif alone and conn.total_changes != changes:
                    self._keep_stored_heads(cur)
                raise
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None
        return value

    def write(
        self, fn: Callable[[Tx], T], size: int = 0, *, one_change: bool = False
    ) -> Awaitable[T]:
        # issue 12: a future, not a coroutine (one object and one frame fewer per write); every
        # outcome, an error too, is delivered when it is awaited, as a coroutine would deliver it
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        try:
            if self.memory:
                fut.set_result(self._inline(fn, True, one_change))
                return fut
            if self._closed or self.read_only:  # one test on the hot path; the helpers raise
                self._check_open()
                self._check_writable()
            # quiet: no other callback is ready on the loop (asyncio's ready queue; absent on
            # other loops) and no write is queued, so a write committed inline delays nobody
            # and loses no group commit (tested here, not in a helper: issue 29, a call per write)
            ready = getattr(loop, "_ready", None) if self.inline_when_idle else None
            if (
                ready is not None
                and not ready
                and not self._queued
                and not (EAGER and loop.get_task_factory() is not None and started_eagerly(loop))
                and self._writing.acquire(blocking=False)
            ):
                # issue 12: nothing else is waiting to write and the event loop has nothing
                # else ready to run, so no batch can form: commit here, without the two thread
                # hops of the writer thread (the same transaction and fsync, synchronous=FULL)
                try:
                    if not self._queued:
                        ((_job, ok, value),) = self._commit([(fn, None, None, size)])
                        if not ok:
                            raise value
                        fut.set_result(cast(T, value))
                        return fut
                finally:
                    self._writing.release()
        except Exception as exc:
            fut.set_exception(exc)
            return fut
        self._queued.append(None)
        self._jobs.put((fn, loop, fut, size))
        return fut

    def _read_sync(self, fn: Callable[[Tx], T]) -> T:
        readers = self._readers  # a read counts itself in; close waits for it (Readers)
        with self._lock:
            self._check_open()
            readers.reads += 1
        try:
            conn = readers.get(self._connect)
            conn.execute("BEGIN")
            try:
                return fn(_Cursor(conn))
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        finally:
            with self._lock:
                readers.reads -= 1
                if readers.reads == 0:
                    readers.done.notify_all()

    def quick_check(self) -> list[str]:
        """``PRAGMA quick_check`` on a connection of its own, outside a transaction (inside one,
        SQLite stops at the first damaged page with "malformed" instead of naming it)."""
        self._check_open()
        try:
            conn = sqlite3.connect(self._uri(self._immutable), uri=True, timeout=self.busy_timeout)
        except sqlite3.Error as exc:
            return [str(translate(exc, self.path))]
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
            return [str(r[0]) for r in rows if str(r[0]) != "ok"]
        except sqlite3.Error as exc:  # so damaged that the check itself cannot go on
            return [str(translate(exc, self.path))]
        finally:
            conn.close()

    async def read(self, fn: Callable[[Tx], T]) -> T:
        if self.memory:
            return self._inline(fn, write=False)
        return await asyncio.to_thread(self._read_sync, fn)

    async def close(self) -> None:
        if self._closed:
            return
        with self._lock:  # reads starting from now are refused (_read_sync)
            self._closed = True
        if self._writer is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._writer.join)
        with self._lock:
            try:
                if self._heads:  # the log ends as it would have with each head written
                    self._write_heads()
            finally:
                self._connection.close()
        if self._readers:  # reader connections, or a read still running (counted in)
            await asyncio.to_thread(self._readers.close_all)


def signing_key_from_env(key: bytes | None) -> bytes | None:
    """``key``, else ``$AMENDS_LOG_KEY`` (UTF-8), else ``None``."""
    if key is not None:
        return key
    env = os.environ.get("AMENDS_LOG_KEY")
    return env.encode() if env else None


@mypyc_attr(allow_interpreted_subclasses=True)  # applications may subclass it (_native)
class SqliteLog(SqlSagaLog):
    """The saga log in one SQLite file (the embedded default).

    Args:
        path: File path, ``"sqlite:///path"``, or ``":memory:"`` for tests. Default ``./amends.db``.
        synchronous: SQLite's ``PRAGMA synchronous``. ``"FULL"`` (default) fsyncs every commit, so a
            power cut loses nothing logged; ``"NORMAL"`` is faster in WAL mode but may lose the last
            commits on power loss (never on a process crash).
        busy_timeout: Seconds to wait for another process's lock before raising LogLockedError.
        must_exist: Refuse a missing file (LogError naming it) instead of creating a new log;
            read commands (``show``, ``audit``, ``doctor``) pass ``True``.
        read_only: Open with ``mode=ro``: no write lock is taken, works on a read-only file or
            directory, and every write raises LogReadOnlyError. Implies ``must_exist``.
        signing_key: Key of the HMAC that chains the history (rule 11); default
            ``$AMENDS_LOG_KEY`` if set, else a plain SHA-256 chain. Use the same key for the
            life of the log: events hashed with another key verify as edited.

    A new log file is created readable and writable by its owner only (0600), and so are its
    ``-wal`` and ``-shm`` files. A file that holds another application's tables is refused
    and left untouched.

    Raises:
        LogError: ``must_exist`` and the file is missing, or the file is not an amends log.
        LogCorruptedError: The file is damaged or not a SQLite database.
        LogReadOnlyError: The file or its directory refuses writes.
        SchemaVersionError: The log was written by a newer amends.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "amends.db",
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 10.0,
        must_exist: bool = False,
        read_only: bool = False,
        signing_key: bytes | None = None,
    ) -> None:
        text = os.fspath(path)
        # SQLAlchemy's spelling: sqlite:///relative.db, sqlite:////absolute/path.db
        for prefix in ("sqlite:///", "sqlite://"):
            if text.startswith(prefix):
                text = text[len(prefix) :] or ":memory:"
                break
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise LogError(
                f"synchronous={synchronous!r} is not a SQLite level; use 'FULL' "
                f"(default), 'NORMAL', 'EXTRA' or 'OFF'"
            )
        if text != ":memory:":
            parent = Path(text).expanduser().resolve().parent
            if not parent.is_dir():
                raise LogError(
                    f"saga log directory {str(parent)!r} does not exist; create it "
                    f"or choose another --db path",
                    path=text,
                )
            text = str(Path(text).expanduser())
        self.path = text
        self.url = "sqlite:///" + text if text != ":memory:" else "sqlite:///:memory:"
        self.signing_key = signing_key_from_env(signing_key)
        self.read_only = read_only and text != ":memory:"
        self.db = _SqliteDatabase(
            text,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            must_exist=must_exist,
            read_only=read_only,
            key=self.signing_key,
        )
        if text == ":memory:":  # issue 29: a read fetches only a saga's new records
            self.reads.untouched = self.db.untouched

    def __repr__(self) -> str:
        return f"SqliteLog({self.path!r})"

    async def storage_problems(self) -> list[str]:
        """``PRAGMA quick_check``: every page of the file, b-tree structure and records (not
        index contents), in one read; a damaged page is named (issue 21 item 12)."""

        if self.path == ":memory:":
            return []
        return await asyncio.to_thread(cast(_SqliteDatabase, self.db).quick_check)
