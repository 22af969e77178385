"""The seam between the shared SQL and a backend: run a function in one transaction, or read."""

from __future__ import annotations

import asyncio
import queue
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "EAGER",
    "EAGER_TASKS",
    "INSERT_FORWARD",
    "INSERT_RECORD",
    "MAX_BATCH",
    "MAX_BATCH_BYTES",
    "RECORD_INSERTS",
    "Database",
    "Tx",
    "redact",
    "started_eagerly",
    "take_batch",
]

T = TypeVar("T")


class Tx(Protocol):
    """A cursor inside one transaction."""

    cache: dict[str, str]
    """What this transaction already read or wrote, so a batch of writes to one saga reads it
    once: chain heads (saga_id -> hash) and which sagas it saw without a reversal (a key
    prefixed with NUL). Cleared by the backend when it rolls part of a batch back."""
    now_sql: str
    """An SQL expression for the database's current time in epoch seconds: the clock leases
    are judged by (issue 21 item 11, :mod:`amends._log.leases`)."""
    shard: int | None
    """The ``log_heads`` shard a saga started in this transaction joins, or ``None`` for the
    shard its id hashes to. PostgreSQL gives each writer a shard of its own, so writers in
    different processes starting sagas at once do not update one row and serialize on it
    (each such pair used to fail with 40001 and run again); the shard is then named in the
    ``saga.started`` record, inside the chain. SQLite has one writer: ``None``."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; returns its rows (empty for statements without a result)."""

    def rowcount(self) -> int:
        """Rows changed by the last statement."""

    def appended_to(self, saga_id: str) -> None:
        """This transaction appended a record to ``saga_id``'s chain: the backend writes the
        saga's head (:func:`amends._log.sql.write_heads`) when it commits, once per saga, in
        saga order (rule 12: a history cut short is then visible)."""


class Database(ABC):
    """How a backend runs work: ``write`` inside one durable transaction, ``read`` consistently."""

    @abstractmethod
    def write(
        self, fn: Callable[[Tx], T], size: int = 0, *, one_change: bool = False
    ) -> Awaitable[T]:
        """Run ``fn`` in a write transaction and commit durably; awaiting the result returns
        once committed (a coroutine, or a future on the hot path: issue 12).

        ``size`` is roughly how many bytes ``fn`` writes (group commit caps a batch by bytes).
        ``one_change`` says that ``fn`` changes the database in one statement, its last (an
        append: reads, then one ``INSERT``), so that statement alone is the transaction: a
        backend whose writer nobody else can interleave with may run it without ``BEGIN`` and
        ``COMMIT`` (issue 29: an in-memory SQLite log); the others ignore it.
        """

    @abstractmethod
    async def read(self, fn: Callable[[Tx], T]) -> T: ...

    def untouched(self) -> object | None:
        """Issue 29: called inside a read, a mark equal to one taken at an earlier read only
        if nothing but this log object's own SQL changed the database between (rule 12's check
        of a saga verified then may be skipped); ``None`` when the backend cannot prove that
        cheaply (a file another process may write, PostgreSQL): check in full."""
        return None

    @abstractmethod
    async def close(self) -> None: ...


INSERT_RECORD = (
    "INSERT INTO records (saga_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""How the shared SQL appends a record to the log (``amends._log.sql._append``)."""
INSERT_FORWARD = (
    "INSERT INTO records (saga_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash) "
    "VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)"
)
"""The same for a record of no reversal (every forward record): the NULL written in the
statement, not bound (issue 29: sqlite3 runs an adapter lookup, ~3 k instructions, for each
bound ``None``)."""
RECORD_INSERTS = frozenset({INSERT_RECORD, INSERT_FORWARD})
"""Statements whose result nobody reads: a backend may hold their rows and insert them
together before its next other statement (issue 29: a SQLite group commit's ``executemany``)."""

MAX_BATCH = 256
"""Most writes one group commit carries."""
MAX_BATCH_BYTES = 1 << 20
"""A batch stops growing at about this many bytes of records (issue 12: batches capped by bytes)."""


def take_batch(jobs: queue.Queue[Any] | queue.SimpleQueue[Any], first: Any) -> list[Any]:
    """Group commit, for a backend's writer thread: ``first`` and every write waiting now, capped
    by count and by bytes (each job's ``[3]`` is its size). A stop marker (``None``) met on the
    way is put back, so the thread still sees it after this batch."""
    batch = [first]
    size = first[3]
    while len(batch) < MAX_BATCH and size < MAX_BATCH_BYTES:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            break
        if more is None:
            jobs.put(None)
            break
        batch.append(more)
        size += more[3]
    return batch


_PASSWORD_IN_URL = re.compile(r"(?P<user>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s\[\]]*):[^\s/?#]*@")
"""``scheme://user:password@``: up to the last ``@`` before the path, as a password may hold
an unescaped ``@``."""


def hide_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it replaced by
    ``***``, the rest as written: for a URL :func:`urlsplit` rejects (an unclosed ``[`` in the
    host) and for a driver's message that quotes one (rule 11)."""
    return _PASSWORD_IN_URL.sub(r"\g<user>:***@", text)


def scrubbed(text: str, url: str) -> str:
    """A driver's message about ``url`` without ``url``'s password, even where the driver split
    the URL elsewhere than :func:`hide_passwords` does (libpq ends a password at its first
    ``@``, so the rest of it can come back as a host name)."""
    text = hide_passwords(text)
    m = _PASSWORD_IN_URL.match(url)
    if m is not None:
        for piece in url[m.end("user") + 1 : m.end() - 1].split("@"):
            if piece:
                text = text.replace(piece, "***")
    return text


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe for error messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]  # as written: ``parts.port`` raises on "host:x"
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, ""))


EAGER: Final = hasattr(asyncio, "eager_task_factory")
"""Python 3.12+: tasks may start eagerly (``eager_task_factory``, or any task factory)."""
EAGER_TASKS: Final[set[asyncio.Task[Any]] | None] = getattr(asyncio.tasks, "_eager_tasks", None)


def started_eagerly(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the current task is running its first steps inside the ``create_task`` that
    made it (Python 3.12's eager tasks), not as a callback of the loop.

    ``SqliteLog`` commits a write inline only when the loop's ready queue is empty: then no
    other task can write in this pass, so no batch can form. That holds only while tasks start
    lazily. An eagerly started task runs inside whoever created it, before the ready queue
    sees anything: a 1,000-step fan-out under ``eager_task_factory`` committed every intent
    and outcome inline, one fsync each and the event loop blocked meanwhile (2 commits per step
    instead of ~0.01), and an undo of 100 compensations 112 commits instead of 4. Such a
    write goes to the writer's batch. Where asyncio keeps no set of the tasks being started
    eagerly, every task of a loop with a task factory counts as one."""
    if EAGER_TASKS is None:
        return True
    return asyncio.current_task(loop) in EAGER_TASKS
