"""The ``sagas`` and ``reversals`` rows as records: the columns the SQL log selects and how a
row reads back (issue 21.11: leases on the caller's clock, :mod:`amends._log.leases`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from . import leases
from .base import Resolution, ReversalRecord, SagaRecord
from .database import Tx
from .records import dumps, loads, spent
from .unreadable import UNREADABLE

__all__ = [
    "N_SAGA",
    "REV_COLS",
    "SAGA_COLS",
    "SELECTION_KEY",
    "Selection",
    "budget_text",
    "listed_reversal",
    "listed_saga",
    "rev_select",
    "reversal_of",
    "saga_of",
]

SAGA_COLS = (
    "saga_id, title, tenant, actor, state, created_at, finished_at, owner, lease_until, meta"
)
N_SAGA = 10
REV_COLS = (
    "r.reversal_id, r.saga_id, r.state, r.budget, r.owner, r.generation, r.lease_until, "
    "r.requested_at, r.finished_at, r.report, r.continuations, "
    # spent by the current run: derived from its latest compensation record (issue 12)
    "(SELECT c.body FROM records c WHERE c.reversal_id = r.reversal_id AND c.phase = 'c' "
    "ORDER BY c.rec_id DESC LIMIT 1), "
    "{now}"  # the database's clock, to read the lease on the caller's (issue 21.11)
)


def rev_select(tx: Tx) -> str:
    """``SELECT`` of a reversal row as :func:`reversal_of` reads it."""
    return f"SELECT {REV_COLS.format(now=tx.now_sql)} FROM reversals r"


def listed_reversal(row: Sequence[Any]) -> ReversalRecord:
    """:func:`reversal_of` for a listing: a latest compensation record that cannot be read
    (an altered one) counts nothing spent, so one altered saga does not hide every other one
    from the listing; its own check marks it (rule 12), and nothing acts on it."""
    try:
        return reversal_of(row)
    except UNREADABLE:  # budget, report and spend as if unset: the saga is marked altered
        return reversal_of([*row[:3], "{}", *row[4:9], None, row[10], None, *row[12:]])


def listed_saga(row: Sequence[Any], reversal: ReversalRecord | None, db_now: Any) -> SagaRecord:
    """:func:`saga_of` for a listing: a ``meta`` that cannot be read counts as empty, so one
    altered saga row does not hide every other saga (rule 12: its check marks it)."""
    try:
        return saga_of(row, (), reversal, db_now=db_now)
    except UNREADABLE:
        return saga_of([*row[:9], None, *row[10:]], (), reversal, db_now=db_now)


def reversal_of(row: Sequence[Any]) -> ReversalRecord:
    continuations = int(row[10] or 0)
    calls, tokens = spent(row[11], continuations)
    # issue 27: the budget column also holds the selection (covered by the same history
    # records as the budget: ``reversal.requested`` / ``reversal.continued``)
    budget = loads(row[3])
    selection = budget.pop(SELECTION_KEY, None) if isinstance(budget, dict) else None
    return ReversalRecord(
        row[0],
        row[1],
        row[2],
        budget,
        row[4],
        int(row[5]),
        leases.local(row[6], row[12]),
        row[7],
        row[8],
        calls,
        tokens,
        loads(row[9]),
        continuations,
        tuple(selection) if selection is not None else None,
    )


SELECTION_KEY = "selection"
"""Where the reversals row's ``budget`` column keeps :attr:`ReversalRecord.selection`."""


Selection = Sequence[str] | None | Literal["keep"]
"""What a reversal covers from a claim on: steps asked for, ``None`` (the whole saga) or
``"keep"`` (what it covered, issue 27)."""


def budget_text(
    budget: Mapping[str, Any], selection: Selection, rev: ReversalRecord | None = None
) -> str:
    """The ``budget`` column: the run's budget and, for a selective undo, its selection
    (``"keep"``: ``rev``'s, a continuation covers what the reversal covered)."""
    if selection == "keep":
        selection = rev.selection if rev is not None else None
    if selection is None:
        return dumps(dict(budget))
    return dumps({**budget, SELECTION_KEY: list(selection)})


def saga_of(
    row: Sequence[Any],
    steps: Sequence[Any] = (),
    reversal: ReversalRecord | None = None,
    resolutions: Mapping[str, Resolution] | None = None,
    *,
    db_now: Any,
) -> SagaRecord:
    return SagaRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        leases.local(row[8], db_now),
        tuple(steps),
        reversal,
        meta=loads(row[9]) or {},
        resolutions=dict(resolutions or {}),
    )
