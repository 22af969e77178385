"""Handing a running saga from one process to another (an approval answered hours later, in
another worker): the SQL of pausing a saga and of continuing it.

A paused saga is ``running`` with no worker: its ``owner`` is :data:`PAUSED` and it has no lease,
so recovery never takes it for a crashed worker's (it has no step in flight: pausing waits for
every step first, rule 1). Continuing it is one conditional update: only one process wins
(``owner`` stays :data:`PAUSED` until then), and never a saga whose reversal exists (a saga being
undone takes no new step). Both are events in the saga's history (rule 12), which records which
worker paused and which continued it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigError, SagaStateError
from . import leases
from .base import SagaLog, SagaRecord
from .database import Database, Tx
from .records import dumps, loads

__all__ = ["NOT_PAUSED", "PAUSED", "HandoffQueries", "handoff_log", "pause_saga"]

PAUSED = "paused"
"""The ``owner`` of a paused saga: no worker holds it; any process may continue it."""

NOT_PAUSED = f"COALESCE(owner, '') <> '{PAUSED}'"
"""SQL: the saga row is not paused (recovery and ``doctor`` leave a paused saga alone)."""


class HandoffQueries:
    """Mixed into :class:`~amends._log.sql.SqlSagaLog`: needs its ``db`` and ``signing_key``."""

    db: Database

    def append_saga_event(self, tx: Tx, saga_id: str, kind: str, now: float, text: str) -> None:
        """Append an event to the saga's tamper-evident history (the SQL log's own)."""
        raise NotImplementedError

    async def pause_saga(
        self, saga_id: str, owner: str, *, now: float, context: Mapping[str, Any] | None = None
    ) -> bool:
        """Release ``owner``'s running saga for another process to continue; ``False`` (nothing
        written) when ``owner`` does not hold it. ``context`` (JSON) goes to the continuing
        process."""
        text = dumps({"owner": owner, "context": dict(context or {})})

        def fn(tx: Tx) -> bool:
            tx.execute(
                "UPDATE sagas SET owner=?, lease_until=NULL "
                "WHERE saga_id=? AND owner=? AND state='running'",
                (PAUSED, saga_id, owner),
            )
            if tx.rowcount() != 1:
                return False
            self.append_saga_event(tx, saga_id, "saga.paused", now, text)
            return True

        return await self.db.write(fn)

    async def continue_saga(
        self, saga_id: str, owner: str, *, lease_until: float, now: float
    ) -> tuple[SagaRecord, dict[str, Any]] | None:
        """Take a paused saga for ``owner`` (one process wins); ``None`` (nothing written) when
        it is not paused or a reversal of it exists. Returns the saga as it now stands and the
        context its pause handed on."""

        def fn(tx: Tx) -> dict[str, Any] | None:
            tx.execute(
                f"UPDATE sagas SET owner=?, lease_until={leases.as_db(tx)} "
                "WHERE saga_id=? AND owner=? AND state='running' AND NOT EXISTS "
                "(SELECT 1 FROM reversals r WHERE r.saga_id=?)",
                (owner, *leases.db(lease_until), saga_id, PAUSED, saga_id),
            )
            if tx.rowcount() != 1:
                return None
            paused = tx.execute(
                "SELECT body FROM records WHERE saga_id=? AND kind='saga.paused' "
                "ORDER BY rec_id DESC LIMIT 1",
                (saga_id,),
            )
            self.append_saga_event(tx, saga_id, "saga.continued", now, dumps({"owner": owner}))
            body = loads(paused[0][0]) if paused else {}
            context = body.get("context") if isinstance(body, dict) else None
            return context if isinstance(context, dict) else {}

        context = await self.db.write(fn)
        if context is None:
            return None
        saga = await self.get_saga(saga_id)  # type: ignore[attr-defined]
        return saga, context


def handoff_log(log: SagaLog) -> HandoffQueries:
    """``log``, which can hand a saga between processes.

    Raises:
        ConfigError: A log of another kind (the message names the logs that can).
    """
    if not isinstance(log, HandoffQueries):
        raise ConfigError(
            f"the saga log {log!r} cannot hand a saga to another process; use "
            f"amends.SqliteLog (a file) or amends.PostgresLog"
        )
    return log


async def pause_saga(
    log: HandoffQueries, saga_id: str, owner: str, context: Mapping[str, Any]
) -> None:
    """Release ``owner``'s saga for another process (see :meth:`amends.Saga.pause`).

    Raises:
        SagaStateError: ``owner`` no longer held it (its lease ran out and recovery closed it).
    """
    if not await log.pause_saga(saga_id, owner, now=time.time(), context=context):
        raise SagaStateError(
            f"saga {saga_id!r} could not be paused: this process ({owner}) no longer holds it "
            f"(its lease ran out and `amends recover` closed it); `amends show {saga_id}` "
            f"shows what it did, and a new saga takes the request up again",
            saga_id=saga_id,
        )
