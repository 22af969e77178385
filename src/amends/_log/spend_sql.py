"""The SQL log's half of :class:`.spend.FollowUpSpend`: a follow-up's record text, its totals
summed with the reversal's latest record's in the writing transaction, its caps checked there;
and the check of a follow-up's ``first`` write (no record under its key yet)."""

from __future__ import annotations

import dataclasses

from .._errors import SagaStateError
from .base import CompensationWrite
from .database import Tx
from .records import compensation_text, spent

__all__ = ["first_write", "spend_text"]


def spend_text(tx: Tx, write: CompensationWrite, run: int, saga_id: str) -> str:
    """``write``'s record text, its totals the reversal's latest record's plus ``write.spend``.

    Raises:
        SagaStateError: The sum would pass a cap ("the reversal's budget is spent"): nothing is
            written, nothing may be sent.
    """
    add = write.spend
    assert add is not None
    rows = tx.execute(
        "SELECT body FROM records WHERE reversal_id = ? AND phase = 'c' "
        "ORDER BY rec_id DESC LIMIT 1",
        (write.reversal_id,),
    )
    before = spent(str(rows[0][0]) if rows else None, run)
    calls, tokens = before[0] + add.calls, before[1] + add.tokens
    for was, total, cap, what in ((before[0], calls, add.max_calls, "tool calls"),
                                  (before[1], tokens, add.max_tokens, "tokens")):  # fmt: skip
        if cap is not None and total > cap:
            step = write.step_id.split("+f", 1)[0]  # the follow-up's key: s3+f1
            raise SagaStateError(
                f"the reversal's budget is spent ({what}: {was} of {cap} spent, this follow-up "
                f"needs {total - was} more; another follow-up was sent meanwhile): the "
                f"follow-up was not sent; continue the reversal with a new budget (amends undo "
                f"{saga_id} --continue --budget-calls N), or send it by hand and resolve the "
                f"manual action (amends resolve {saga_id} {step} --note ...)",
                saga_id=saga_id,
                step_id=step,
            )
    return compensation_text(dataclasses.replace(write, calls_spent=calls, tokens_spent=tokens))


def first_write(tx: Tx, reversal_id: str, step_id: str) -> None:
    """Refuse a ``first`` write when the reversal has a record under ``step_id`` (issue 27).

    Safe across processes: SQLite holds the write lock; on PostgreSQL every append updates the
    saga's row at ``COMMIT``, so of two transactions that both found none, one fails with a
    serialization error, runs again on a fresh snapshot, and finds the other's record."""
    if tx.execute(
        "SELECT 1 FROM records WHERE reversal_id=? AND step_id=? AND phase='c' LIMIT 1",
        (reversal_id, step_id),
    ):
        raise SagaStateError(
            f"{step_id!r} of reversal {reversal_id} is already recorded: another request made "
            f"it at the same time; `amends follow-up list` shows what was sent",
            step_id=step_id,
        )
