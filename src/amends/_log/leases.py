"""Leases judged by the database's clock (issue 21 item 11).

A worker holds a running saga or reversal while its lease lasts; past it, another worker may
recover the saga or take the reversal over. If each worker judged that by its own wall clock, a
server whose clock runs a minute ahead would take over a live reversal and send an in-flight
refund again. So every lease is stored, and compared, on the database's clock: SQLite's (the
host's: ``julianday('now')``, which no Python process can shift) or PostgreSQL's
(``clock_timestamp()`` on the server).

The log's interface keeps speaking the caller's clock (``lease_until=time.time() + 15``,
``now=time.time()``): a caller's time ``t`` is ``t + (db_now - local_now)`` on the database's
clock, with ``local_now`` read by this process right before the statement and ``db_now`` by the
database in the statement itself. Both readings of the caller's clock carry the same error, so
it cancels: two workers a minute apart compute the same database time. Values read back are
turned into the caller's clock the same way. A caller that passes a ``now`` other than its
clock (a test simulating time) gets exactly that shift, as before.

This module only writes SQL fragments (and the error a lost lease raises); the statements live
in :mod:`amends._log.sql`.
"""

from __future__ import annotations

import time
from typing import Any

from .._errors import LeaseLostError
from .database import Tx

__all__ = ["as_db", "db", "local"]


def as_db(tx: Tx) -> str:
    """SQL for a caller's time on the database's clock; takes the two parameters of :func:`db`."""
    return f"(? + ({tx.now_sql} - ?))"


def db(t: float | None) -> tuple[float | None, float]:
    """The parameters of :func:`as_db` for the caller's time ``t`` (``None`` stays NULL)."""
    return t, time.time()


def local(value: Any, db_now: Any) -> float | None:
    """A lease read from the database (``value``, on its clock, read at ``db_now``) on this
    process's clock."""
    if value is None:
        return None
    return float(value) - (float(db_now) - time.time())


def lost(reversal_id: str, current: Any, generation: int) -> LeaseLostError:
    """The error of a write fenced out: another worker took the reversal over."""
    return LeaseLostError(
        f"reversal {reversal_id!r} was taken over by another worker (generation {current}, "
        f"this worker holds {generation}); this worker stops and sends nothing more",
    )
