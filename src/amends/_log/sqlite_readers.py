"""A SQLite file log's reader connections (moved out of :mod:`amends._log.sqlite` to keep that
module under its size cap): one per thread that reads, every one closed by the log's ``close``,
and a thread's own closed once that thread has ended. This module must never close a connection
a read is running on."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

__all__ = ["Readers"]


class Readers:
    """The reader connections of one log, and the reads running on them.

    sqlite3 lets one thread close a connection another thread is executing on, and the C library
    then crashes the process: a read counts itself in (``reads``, under ``lock``) and
    :meth:`close_all` waits for the count to reach zero before closing anything."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        """The log's lock: ``reads`` and the list of connections change under it."""
        self.reads = 0
        """Reads running now (see ``_SqliteDatabase._read_sync``)."""
        self.done = threading.Condition(lock)
        """Notified when ``reads`` drops to zero."""
        self._local = threading.local()
        self._open: list[tuple[threading.Thread, sqlite3.Connection]] = []

    def __bool__(self) -> bool:
        return bool(self._open or self.reads)

    def get(self, connect: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
        """This thread's connection, made by ``connect`` on the thread's first read."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect()
            self._local.conn = conn
            with self.lock:
                self._close_ended()
                self._open.append((threading.current_thread(), conn))
        return conn

    def _close_ended(self) -> None:
        """Close the connections of threads that have ended (the workers of an event loop's
        executor once the loop closed, a caller's own threads): a long-running process would
        otherwise keep one open file per thread that ever read, until the log closes. A read
        runs on its own thread, so none runs on these."""
        if all(thread.is_alive() for thread, _ in self._open):
            return
        kept = []
        for thread, conn in self._open:
            if thread.is_alive():
                kept.append((thread, conn))
            else:
                conn.close()
        self._open = kept

    def close_all(self) -> None:
        """Close every reader connection once no read is running on it (the log's ``close``,
        which refused new reads first)."""
        with self.done:
            self.done.wait_for(lambda: self.reads == 0)
            for _thread, conn in self._open:
                conn.close()
            self._open.clear()
