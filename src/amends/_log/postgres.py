"""The shared saga log in PostgreSQL: many workers, many processes, one database.

Every write runs as one ``REPEATABLE READ`` transaction that, at ``COMMIT``, updates the row of
every saga it appended a record to (``_Cursor.commit``), so two writes to one saga are ordered by
that row lock and the later one fails (40001) if the other committed after its snapshot: the
checks in :mod:`amends._log.sql` (one reversal per saga, no step after a claim, generation
fencing, the hash chain's head), each followed by an append to its saga, hold across processes
exactly as under SQLite's single writer. Serialization failures, deadlocks and the unique-key race
of two workers claiming the same reversal are retried by re-running the whole write function.
(Until issue 12 this was ``SERIALIZABLE``, whose page-level read locks made most group commits
of a loaded log fail and run twice.) Statements go in pipeline mode: a write is one round trip
plus one per statement whose rows it reads.

Connection loss (a server restart, a failover) is retried until ``retry_seconds`` have passed.
A write is never applied twice: if the connection dies before ``COMMIT`` was sent the transaction
cannot have committed and is re-run; if it dies *during* ``COMMIT`` the outcome is looked up by
transaction id (``pg_xact_status``) on a fresh connection and the write is re-run only if it did
not commit.

Requires the ``amends[postgres]`` extra (psycopg 3 and psycopg_pool), imported lazily.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._errors import ConfigError, LogError, LogReadOnlyError
from .database import redact, scrubbed, take_batch
from .integrity import next_shard, writer_shard
from .schema import stored_version
from .sql import (
    _FENCE,
    _NO_REVERSAL,
    SCHEMA_VERSION,
    Database,
    SqlSagaLog,
    Tx,
    upgrade,
    write_heads,
)
from .sqlite import _settle_all, signing_key_from_env
from .tally import LOG_TABLES

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

# A library does not print: the pool's reconnection warnings go to the application's logging
# if it has any, never straight to a CLI user's terminal (issue 26 item 9).
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

__all__ = ["PostgresLog", "redact"]

T = TypeVar("T")

_MIGRATION_LOCK = 0x616D656E6473  # "amends": pg_advisory_xact_lock key for migrations
# SQLSTATEs whose transaction never committed and may be re-run as a whole.
_RERUN = {"40001", "40P01", "23505"}
_MAX_RERUNS = 50


_PLACEHOLDER = re.compile(r"\?")


@functools.lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """Rewrite the shared SQL's ``?`` placeholders to psycopg's ``%s`` (escaping literal ``%``)."""
    return _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))


@functools.lru_cache(maxsize=512)
def _deferrable(sql: str) -> bool:
    """An INSERT or UPDATE whose rows nobody reads: it may wait to ride with the next
    statement's round trip (issue 12: pipeline mode)."""
    return sql.startswith(("INSERT", "UPDATE")) and "RETURNING" not in sql


_XID = "SELECT pg_current_xact_id()::text::bigint"
_BEGIN_WRITE = "BEGIN ISOLATION LEVEL REPEATABLE READ"
# What the writes of a group commit would each read first, for the sagas and reversals this
# process wrote to lately, in the batch's first round trip (see _Cursor.prefetch).
_PREFETCH = (
    "SELECT 's', s.id, s.id, NULL::int, NULL::int, "
    "EXISTS (SELECT 1 FROM reversals WHERE saga_id = s.id), "
    "(SELECT hash FROM records WHERE saga_id = s.id ORDER BY rec_id DESC LIMIT 1) "
    "FROM unnest(%s::text[]) AS s(id) "
    "WHERE EXISTS (SELECT 1 FROM sagas WHERE saga_id = s.id AND state = 'running') "
    "UNION ALL "
    "SELECT 'r', r.reversal_id, r.saga_id, r.generation, r.continuations, true, "
    "(SELECT hash FROM records WHERE saga_id = r.saga_id ORDER BY rec_id DESC LIMIT 1) "
    "FROM reversals r WHERE (r.reversal_id = ANY(%s) OR r.saga_id = ANY(%s)) "
    "AND r.state = 'running'"
)
_FRESH = 1.0
"""Seconds a connection counts as alive after its last use (no check round trip)."""
_RECENT = 64
"""Most sagas (and reversals) a writer remembers as recently written, for the prefetch."""
_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


class _Cursor:
    """A :class:`Tx` over one psycopg cursor that sends statements in pipeline mode (issue 12):
    ``BEGIN`` and every INSERT or UPDATE are held back and sent together with the next
    statement whose rows are wanted, or with ``COMMIT``, so a write costs one round trip, not
    one per statement. An error in a held-back statement surfaces at that next round trip, and
    the transaction is aborted then, as it would have been.

    ``want_xid``: the first round trip also fetches the transaction id (what an unknown
    ``COMMIT`` is looked up by, see :meth:`_PgDatabase._one_attempt`)."""

    now_sql = "extract(epoch from clock_timestamp())::double precision"
    """The server's clock: leases are judged by it, never by a worker's (issue 21 item 11)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        cur: psycopg.Cursor[Any],
        begin: str | None = None,
        *,
        want_xid: bool = False,
        key: bytes | None = None,
        shard: int | None = None,
    ) -> None:
        import psycopg

        self._error = psycopg.Error
        self._conn = conn
        self._cur = cur
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        if begin is not None:
            self._pending.append((begin, ()))
        self._want_xid = want_xid
        self._key = key
        self.shard = shard
        self.xid: int | None = None
        self.cache: dict[str, str] = {}
        self._appended: set[str] = set()
        self._prefetched: dict[str, str] = {}
        self.round_trips = 0
        """Round trips to the server so far (tests pin the cost of a write with it)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if _deferrable(sql):
            self._pending.append((to_pyformat(sql), tuple(params)))
            return []
        self._send(to_pyformat(sql), tuple(params))
        if self._cur.description is None:
            return []
        return list(self._cur.fetchall())

    def _send(self, sql: str | None, params: tuple[Any, ...] = ()) -> None:
        pending, self._pending = self._pending, []
        if sql is not None:
            pending.append((sql, params))
        fetch_xid = self._want_xid and self.xid is None
        if not pending:
            return
        self.round_trips += 1
        if len(pending) == 1 and not fetch_xid:
            self._cur.execute(*pending[0])
            return
        side = self._conn.cursor() if fetch_xid else None
        first: BaseException | None = None
        try:
            try:
                # one round trip for all of them. Not prepared: psycopg's prepared-statement
                # cache can go out of step with the server when a pipeline aborts ("prepared
                # statement _pg3_N does not exist"), so a pipelined statement is sent in full
                with self._conn.pipeline():
                    try:
                        for i, (q, p) in enumerate(pending):
                            self._cur.execute(q, p, prepare=False)
                            if i == 0 and side is not None:  # right after BEGIN
                                side.execute(_XID, prepare=False)
                    except self._error as exc:
                        first = exc  # leave the block normally: psycopg then syncs quietly
            except self._error:
                if first is None:
                    raise
            if first is not None:
                raise first
            if side is not None:
                row = side.fetchone()
                self.xid = int(row[0]) if row else 0
        finally:
            if side is not None:
                side.close()

    def flush(self) -> None:
        """Send every held-back statement now (one round trip); raises their first error."""
        self._send(None)

    def prefetch(self, sagas: Sequence[str], reversals: Sequence[str]) -> None:
        """Read now, in the transaction's first round trip, what each write of a group commit
        would otherwise read with a round trip of its own (issue 12): for each running saga its
        chain head and whether it has a reversal; for each running reversal (given, or of one of
        those sagas) its generation, run and saga (the :mod:`amends._log.sql` checks, stored in
        ``cache`` as they store them).

        Same answers as reading them later: REPEATABLE READ gives every statement of the
        transaction one snapshot, and what this transaction writes itself replaces the cached
        value (sql.py's rule for ``cache``). Must run before any write function."""
        if not self._pending or self.round_trips:
            raise RuntimeError("prefetch must be the transaction's first round trip")
        self._pending.append((_PREFETCH, (list(sagas), list(reversals), list(sagas))))
        self.flush()
        for kind, ident, saga_id, generation, run, has_reversal, head in self._cur.fetchall():
            self.cache[saga_id] = self._prefetched[saga_id] = str(head or "")
            if kind == "r":
                self.cache[_FENCE + ident] = f"{generation}:{run or 0}:{saga_id}"
            elif not has_reversal:
                self.cache[_NO_REVERSAL + saga_id] = ""

    def appended_to(self, saga_id: str) -> None:
        self._appended.add(saga_id)

    def appended(self) -> set[str]:
        """The sagas this transaction appended to (kept across savepoint rollbacks)."""
        return set(self._appended)

    def written_reversals(self) -> list[str]:
        """The reversals whose generation this transaction checked (sql.py's fence marks)."""
        return [k[len(_FENCE) :] for k in self.cache if k.startswith(_FENCE)]

    def keep_appended(self) -> None:
        """Before ``cache`` is cleared for a rollback to a savepoint: forget what
        :meth:`prefetch` read (the sagas appended to are kept: their rows are still claimed at
        ``COMMIT``, their heads read again; claiming more is harmless)."""
        self._prefetched.clear()

    def commit(self) -> None:
        """The held-back statements, the claim on every saga appended to, and ``COMMIT`` in
        one round trip (the xid must be known before ``COMMIT`` is sent: it is fetched first
        if no round trip has been made yet).

        The claim replaces SERIALIZABLE (issue 12: under load most group commits failed on
        SERIALIZABLE's page-level read locks and ran twice): every saga whose chain this
        transaction extended has its row updated, in saga order: the update sets the saga's
        head (rule 12, :func:`write_heads`). A concurrent write to the same saga waits for this
        one and, under REPEATABLE READ, fails with 40001 and runs again on a fresh snapshot, so
        the one-head-per-saga checks of :mod:`amends._log.sql` (no step after a claim,
        generation fencing, the chain head) hold as they did: every such check is followed by
        an append to that saga."""
        write_heads(self, self._key, sorted(self._appended))
        if self._want_xid and self.xid is None:
            self.flush()
        self._send("COMMIT")

    def discard(self) -> None:
        """Forget held-back statements (their transaction or savepoint is being rolled back)."""
        self._pending.clear()

    def rowcount(self) -> int:
        self.flush()
        return int(self._cur.rowcount)


class _CommitUnknown(Exception):
    """The connection died while COMMIT was in flight: outcome must be looked up."""

    def __init__(self, xid: int, cause: BaseException, result: Any) -> None:
        super().__init__(str(cause))
        self.xid = xid
        self.cause = cause
        self.result = result
        """What the write function returned: the write's result if it turns out committed."""


class _Fallback(Exception):
    """A write of a group-commit batch failed: re-run the batch with one savepoint per write."""


class _PgDatabase(Database):
    def __init__(
        self,
        url: str,
        *,
        min_size: int,
        max_size: int,
        connect_timeout: float,
        retry_seconds: float,
        must_exist: bool = False,
        read_only: bool = False,
        key: bytes | None = None,
    ) -> None:
        self.must_exist = must_exist or read_only
        self.read_only = read_only
        self._key = key
        try:
            import psycopg
            import psycopg_pool  # noqa: F401  (the pool comes from the extra too)
        except ImportError as exc:  # pragma: no cover - exercised without the extra
            raise ConfigError(
                f"log URL {redact(url)!r} needs PostgreSQL support: "
                f"pip install 'amends[postgres]' ({exc})"
            ) from exc
        self._psycopg = psycopg
        self.url = url
        self.safe_url = redact(url)
        self.retry_seconds = retry_seconds
        self.connect_timeout = connect_timeout
        self._closed = False
        self._lock = threading.Lock()
        self._last_used: dict[int, float] = {}
        self.pool = self._open_pool(min_size, max_size)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._recent_sagas: dict[str, None] = {}
        self._recent_reversals: dict[str, None] = {}
        self._shard = writer_shard()  # where this writer's sagas join log_heads (Tx.shard)
        self._writer = threading.Thread(target=self._run, name="amends-pg-writer", daemon=True)
        try:
            if self.read_only or self.must_exist:
                self._run_with_retries(self._check_tx, write=False)
            if not self.read_only and self._run_with_retries(self._version, write=False) != (
                SCHEMA_VERSION
            ):
                self._migrate()
        except BaseException:
            self.pool.close()
            raise
        self._stopping = False
        self._writer.start()

    def _open_pool(self, min_size: int, max_size: int) -> psycopg_pool.ConnectionPool[Any]:
        import psycopg_pool

        timeout = self.connect_timeout
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self.url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._connect_kwargs(),
            check=self._check_connection,
            timeout=timeout,
            reconnect_timeout=max(self.retry_seconds, timeout),
            open=False,
            name="amends",
        )
        self._first_connection()
        try:
            pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            pool.close()
            raise LogError(
                f"saga log {self.safe_url!r}: could not connect to PostgreSQL within "
                f"{timeout:g} s; check that the server is running and the URL's host, "
                f"port, user, password and database are right (psql '<url>' tests it)",
                path=self.safe_url,
            ) from exc
        return pool

    def _connect_kwargs(self) -> dict[str, Any]:
        """The options of every connection this log opens (the pool's and a direct one)."""
        return {"autocommit": True, "connect_timeout": max(1, int(self.connect_timeout))}

    def _first_connection(self) -> None:
        """One connection before the pool opens, so an unreachable server, a wrong password or
        a missing database fails at once with the server's own words (issue 26 item 9: the
        pool retried for 10 s, printing its raw error to stderr each time)."""
        try:
            self._psycopg.connect(self.url, **self._connect_kwargs()).close()
        except self._psycopg.Error as exc:  # a URL libpq cannot parse too: no traceback
            # rule 11: libpq's words may quote the URL, password and all
            why = scrubbed(" ".join(str(exc).split()), self.url) or type(exc).__name__
            raise LogError(
                f"saga log {self.safe_url!r}: could not connect to PostgreSQL ({why}); check "
                f"that the server is running and the URL's host, port, user, password and "
                f"database are right (psql '<url>' tests it)",
                path=self.safe_url,
            ) from None

    # --- errors ---------------------------------------------------------------------------
    def translate(self, exc: BaseException) -> LogError:
        """A precise amends error for a psycopg failure, naming the server (no password)."""
        psycopg = self._psycopg
        sqlstate = getattr(exc, "sqlstate", None) or ""
        url = self.safe_url
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return LogReadOnlyError(
                f"saga log {url!r}: the database user may not write the amends tables ({exc}); "
                f"GRANT INSERT, UPDATE, SELECT on them, or connect as their owner",
                path=url,
            )
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction) or sqlstate == "25006":
            return LogReadOnlyError(
                f"saga log {url!r} is read-only (a hot standby or default_transaction_read_only)"
                f"; point --db at the primary. Nothing was written",
                path=url,
            )
        if sqlstate.startswith("53"):
            return LogReadOnlyError(
                f"saga log {url!r}: the server is out of resources ({exc}); free disk space or "
                f"connections on the server, then retry. Nothing was half-written: the "
                f"transaction was rolled back",
                path=url,
            )
        if isinstance(exc, psycopg.OperationalError):
            return LogError(
                f"saga log {url!r}: lost the connection to PostgreSQL and could not get it back "
                f"within {self.retry_seconds:g} s ({exc}); check the server, then run "
                f"`amends recover --db URL` to resume anything left unfinished",
                path=url,
            )
        return LogError(f"saga log {url!r}: {exc}", path=url)

    # --- transactions ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; after a server restart, a direct one as soon as the server
        answers, rather than waiting out the pool's reconnect backoff (1, 2, 4, 8, 16 s), which
        on a loaded machine can outlast ``retry_seconds``."""
        try:
            conn = self.pool.getconn(timeout=min(self.connect_timeout, 2.0))
        except self._pool_timeout():
            stats = self.pool.get_stats()
            if stats.get("pool_size", 0) >= stats.get("pool_max", 1):
                raise  # every connection is busy, none broken: wait in the retry loop
            direct = self._psycopg.connect(self.url, **self._connect_kwargs())
            try:
                yield direct
            finally:
                direct.close()
            return
        try:
            yield conn
        finally:
            self._last_used[id(conn)] = time.monotonic()
            self.pool.putconn(conn)

    def _check_connection(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's check when it hands out a connection: an empty query (a round trip), but
        only for a connection idle for more than a second (issue 12: a round trip per
        transaction otherwise). A connection that died since its last use fails its first
        statement instead, before anything was committed, and the write is re-run."""
        if time.monotonic() - self._last_used.get(id(conn), 0.0) > _FRESH:
            import psycopg_pool

            psycopg_pool.ConnectionPool.check_connection(conn)

    def _one_attempt(self, fn: Callable[[Tx], T], *, write: bool, fallback: bool = False) -> T:
        """``fn`` in one transaction on one connection. ``fallback``: a group-commit batch: a
        statement of ``fn`` that fails when it reaches the server with ``COMMIT`` raises
        :class:`_Fallback` (the batch's writes are then run one savepoint each), and the first
        round trip prefetches what the batch's writes read (:meth:`_Cursor.prefetch`)."""
        psycopg = self._psycopg
        status = psycopg.pq.TransactionStatus
        with self._connection() as conn, conn.cursor() as cur:
            if not write:
                tx = _Cursor(conn, cur, _BEGIN_READ)  # BEGIN rides with the first query
                try:
                    return fn(tx)
                finally:
                    tx.discard()
                    if conn.info.transaction_status in (status.INTRANS, status.INERROR):
                        # ends the read-only transaction as ROLLBACK would; psycopg forgets its
                        # prepared statements after a ROLLBACK, not after a COMMIT
                        cur.execute("COMMIT")
            tx = _Cursor(conn, cur, _BEGIN_WRITE, want_xid=True, key=self._key, shard=self._shard)
            try:
                if fallback and (self._recent_sagas or self._recent_reversals):
                    tx.prefetch(list(self._recent_sagas), list(self._recent_reversals))
                result = fn(tx)
            except BaseException:
                tx.discard()
                if conn.info.transaction_status in (status.INTRANS, status.INERROR):
                    try:
                        cur.execute("ROLLBACK")
                    except psycopg.OperationalError:
                        pass
                raise
            try:
                tx.commit()
            except psycopg.Error as exc:
                state = exc.sqlstate or ""
                if conn.info.transaction_status in (status.INTRANS, status.INERROR):
                    # a held-back statement failed: the server answered, COMMIT never ran
                    try:
                        cur.execute("ROLLBACK")
                    except psycopg.OperationalError:
                        pass
                    if fallback and not (state in _RERUN and state != "23505"):
                        raise _Fallback from exc
                    raise
                if tx.xid is None or not isinstance(exc, psycopg.OperationalError):
                    raise  # COMMIT was not sent (the xid is fetched first), or was refused
                if state[:2] in ("40", "23", "53", "25"):
                    raise  # the server answered: it did not commit
                raise _CommitUnknown(tx.xid, exc, result) from exc
            self._remember(tx)
            return result

    def _remember(self, tx: _Cursor) -> None:
        """The sagas and reversals a committed write touched, most recent last (capped): what
        the next group commit prefetches. Writer thread only."""
        for recent, keys in (
            (self._recent_sagas, tx.appended()),
            (self._recent_reversals, tx.written_reversals()),
        ):
            for key in keys:
                recent.pop(key, None)
                recent[key] = None
            while len(recent) > _RECENT:
                del recent[next(iter(recent))]

    def _xact_status(self, xid: int) -> str | None:
        with self._connection() as conn:
            row = conn.execute("SELECT pg_xact_status(%s::text::xid8)", (str(xid),)).fetchone()
            return None if row is None else row[0]

    def _run_with_retries(self, fn: Callable[[Tx], T], *, write: bool, fallback: bool = False) -> T:
        psycopg = self._psycopg
        deadline = time.monotonic() + self.retry_seconds
        backoff = 0.02
        reruns = 0
        pending_xid: int | None = None
        pending_result: Any = None
        while True:
            if self._closed:
                raise LogError(f"saga log {self.safe_url!r} is closed", path=self.safe_url)
            try:
                if pending_xid is not None:
                    status = self._xact_status(pending_xid)
                    if status == "committed":
                        return pending_result  # type: ignore[no-any-return]
                    if status == "in progress":
                        raise psycopg.OperationalError("transaction still finishing")
                    pending_xid = None  # aborted, or lost before it reached the log
                return self._one_attempt(fn, write=write, fallback=fallback)
            except _CommitUnknown as unknown:
                pending_xid = unknown.xid
                pending_result = unknown.result
                err: BaseException = unknown.cause
            except psycopg.Error as exc:
                state = exc.sqlstate or ""
                limit = 3 if state == "23505" else _MAX_RERUNS  # a real duplicate fails fast
                if state in _RERUN and reruns < limit:
                    reruns += 1
                    if write and state == "40001":  # maybe another writer's shard too
                        self._shard = next_shard(self._shard)
                    time.sleep(min(0.001 * reruns, 0.05))
                    continue
                if not isinstance(exc, psycopg.OperationalError) or state[:2] in ("53", "25"):
                    raise self.translate(exc) from exc
                err = exc
            except self._pool_timeout() as exc:
                err = exc
            if time.monotonic() >= deadline:
                raise self.translate(
                    err if isinstance(err, psycopg.Error) else psycopg.OperationalError(str(err))
                ) from err
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _pool_timeout(self) -> type[Exception]:
        import psycopg_pool

        return psycopg_pool.PoolTimeout

    def _version(self, tx: Tx) -> int:
        """The log's schema version (0: no amends tables yet), checked (``stored_version``)."""

        def has(table: str) -> bool:
            # pg_class read by a query, under the transaction's snapshot like the version row
            # below: to_regclass looks in the catalog's latest state, which can hold the tables
            # of a migration committed after this snapshot while its version row is not in it
            found = tx.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace"
                " n ON n.oid = c.relnamespace WHERE c.relname = ? AND n.nspname = ANY"
                " (current_schemas(false)))",
                (table,),
            )
            return bool(found and found[0][0])

        if not has("amends_meta"):
            return 0
        row = tx.execute("SELECT value FROM amends_meta WHERE key='schema_version'")
        return stored_version(row[0][0] if row else None, has, self.safe_url)

    def _check_tx(self, tx: Tx) -> None:
        """must_exist / read_only: the database must already hold an amends log."""
        version = self._version(tx)
        if version == 0:
            raise LogError(
                f"saga log {self.safe_url!r} is not an amends log (the database has no "
                f"amends_meta table); check the URL's database name. A read command never "
                f"creates a log",
                path=self.safe_url,
            )
        if self.read_only and version < SCHEMA_VERSION:
            raise LogError(
                f"saga log {self.safe_url!r} has schema version {version}; this amends reads "
                f"version {SCHEMA_VERSION}. Open it once for writing (e.g. `amends recover "
                f"--db URL`) to upgrade it",
                path=self.safe_url,
            )

    def _migrate(self) -> None:
        """Upgrade the schema under a session advisory lock, in a transaction whose snapshot is
        taken after the lock is held (so a worker that waited sees the version another worker
        just wrote, and does not run the same DDL again)."""
        psycopg = self._psycopg
        try:
            with self.pool.connection() as conn:
                conn.execute(f"SELECT pg_advisory_lock({_MIGRATION_LOCK})")
                try:
                    with conn.transaction(), conn.cursor() as cur:
                        tx = _Cursor(conn, cur)
                        version = self._version(tx)
                        upgrade(tx, version, "postgres", self._key, self.safe_url)
                        tx.flush()
                finally:
                    conn.execute(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK})")
        except psycopg.Error as exc:
            raise self.translate(exc) from exc

    # --- Database -------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise LogReadOnlyError(
                f"saga log {self.safe_url!r} was opened read-only; nothing was written. Open "
                f"it without read_only=True to write",
                path=self.safe_url,
            )

    def write(
        self, fn: Callable[[Tx], T], size: int = 0, *, one_change: bool = False
    ) -> Awaitable[T]:
        # issue 29: a future, as SqliteLog's (queued when called); a refusal comes with it.
        # ``one_change`` is ignored: every write is a transaction with the saga's head in it
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        try:
            self._check_writable()
            if self._stopping or self._closed:
                raise LogError(f"saga log {self.safe_url!r} is closed", path=self.safe_url)
        except LogError as exc:
            fut.set_exception(exc)
            return fut
        self._jobs.put((fn, loop, fut, size))
        return fut

    # --- group commit (issue 12) ----------------------------------------------------------
    def _run(self) -> None:
        """The writer thread: every write waiting at that moment goes into one transaction
        (one WAL flush for all of them), capped by count and bytes."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch = take_batch(self._jobs, job)
            _settle_all(self._commit(batch))

    def _commit(self, batch: list[Any]) -> list[tuple[Any, bool, Any]]:
        if len(batch) == 1:
            try:
                return [(batch[0], True, self._run_with_retries(batch[0][0], write=True))]
            except BaseException as exc:
                return [(batch[0], False, exc)]
        fns = [job[0] for job in batch]
        psycopg = self._psycopg

        def fast(tx: Tx) -> list[Any]:
            out = []
            for fn in fns:
                try:
                    out.append(fn(tx))
                except psycopg.Error as exc:
                    if (exc.sqlstate or "") in _RERUN and exc.sqlstate != "23505":
                        raise  # a serialization failure: the whole batch runs again
                    raise _Fallback from exc
                except Exception as exc:
                    raise _Fallback from exc
            return out

        try:
            values = self._run_with_retries(fast, write=True, fallback=True)
            return [(job, True, v) for job, v in zip(batch, values, strict=True)]
        except _Fallback:
            pass  # one write failed: run the batch again, each write in its own savepoint
        except BaseException as exc:
            return [(job, False, exc) for job in batch]

        try:
            outs = self._run_with_retries(functools.partial(self._one_by_one, fns), write=True)
        except BaseException as exc:
            return [(job, False, exc) for job in batch]
        return [(job, ok, v) for job, (ok, v) in zip(batch, outs, strict=True)]

    def _one_by_one(self, fns: list[Callable[[Tx], Any]], tx: Tx) -> list[tuple[bool, Any]]:
        """The batch again, each write in its own savepoint: one that fails is rolled back
        alone and answered with its error; the others commit."""
        psycopg = self._psycopg
        held = cast(_Cursor, tx)
        out: list[tuple[bool, Any]] = []
        for i, fn in enumerate(fns):
            tx.execute(f"SAVEPOINT w{i}")
            try:
                value = fn(tx)
                held.flush()  # its held-back statements fail here, inside its savepoint
            except psycopg.Error as exc:
                if (exc.sqlstate or "") in _RERUN and exc.sqlstate != "23505":
                    raise
                held.discard()
                tx.execute(f"ROLLBACK TO SAVEPOINT w{i}")
                held.keep_appended()
                tx.cache.clear()
                out.append((False, self.translate(exc)))
                continue
            except Exception as exc:
                held.discard()
                tx.execute(f"ROLLBACK TO SAVEPOINT w{i}")
                held.keep_appended()
                tx.cache.clear()
                out.append((False, exc))
                continue
            tx.execute(f"RELEASE SAVEPOINT w{i}")
            out.append((True, value))
        return out

    async def read(self, fn: Callable[[Tx], T]) -> T:
        return await asyncio.to_thread(self._run_with_retries, fn, write=False)

    async def close(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True  # new writes are refused; queued ones still commit
        self._jobs.put(None)
        await asyncio.to_thread(self._writer.join)
        self._closed = True
        await asyncio.to_thread(self.pool.close)


class PostgresLog(SqlSagaLog):
    """The saga log in PostgreSQL, shared by many worker processes.

    Same semantics as :class:`~amends.SqliteLog`; the database itself enforces one reversal per
    saga and fences a worker whose lease was taken over.

    Args:
        url: ``postgresql://user:password@host:port/dbname`` (libpq URL; ``postgres://`` works).
        min_size: Connections kept open.
        max_size: Most connections this process opens.
        connect_timeout: Seconds to wait for the first connection.
        retry_seconds: How long an operation keeps retrying after losing the connection
            (e.g. a server restart) before raising :class:`~amends._errors.LogError`.
        must_exist: Refuse a database that holds no amends log instead of creating the tables.
        read_only: Never write (no migration; every write raises LogReadOnlyError).
        signing_key: HMAC key of the history's hash chain; default ``$AMENDS_LOG_KEY``.

    Raises:
        LogError: The server cannot be reached (the message names it, without the password).
        SchemaVersionError: The log was written by a newer amends.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout: float = 10.0,
        retry_seconds: float = 30.0,
        must_exist: bool = False,
        read_only: bool = False,
        signing_key: bytes | None = None,
    ) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(
                f"PostgresLog needs a postgresql:// URL, got {redact(url)!r}; "
                f"e.g. postgresql://amends@localhost:5432/amends"
            )
        if min_size < 0 or max_size < max(1, min_size):
            raise ConfigError(
                f"PostgresLog pool sizes min_size={min_size}, max_size={max_size} are invalid; "
                f"use 0 <= min_size <= max_size and max_size >= 1"
            )
        self.url = redact(url)
        self.read_only = read_only
        self.signing_key = signing_key_from_env(signing_key)
        self.db = _PgDatabase(
            url,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
            retry_seconds=retry_seconds,
            must_exist=must_exist,
            read_only=read_only,
            key=self.signing_key,
        )

    async def storage_problems(self) -> list[str]:
        """Every row of every amends table read once, each table in its own read (issue 21
        item 12): a page PostgreSQL cannot read (a damaged header, a checksum mismatch when the
        cluster has data checksums) fails its table's read and is named. Index pages are not
        checked: install the ``amcheck`` extension for that."""
        problems = []
        for table in ("amends_meta", "sagas", "records", "reversals", *LOG_TABLES, "idem_keys"):

            def fn(tx: Tx, table: str = table) -> None:
                tx.execute(f"SELECT sum(length(t::text)) FROM {table} t")

            try:
                await self.db.read(fn)
            except LogError as exc:
                problems.append(f"table {table}: {exc}")
        return problems

    def __repr__(self) -> str:
        return f"PostgresLog({self.url!r})"
