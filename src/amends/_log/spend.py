"""A follow-up's spend, added to its reversal's in the log's own transaction (issue 27, rule 7).

The follow-ups of a finished reversal (a person's send, an agent's proposals) hold no lease: two
may be sent at once, by two people, two agents or two processes. Each record of a reversal carries
the run's total spent, and the reversal's figure is its latest record's; a follow-up that wrote
the total it computed from what it read earlier would overwrite the other's spend, and both
would pass the budget's last call. So a follow-up's record says what it adds, and the log adds
it to the latest total and checks the caps in the transaction that writes it.

The record itself; the SQL log adds it in :mod:`.spend_sql`. It must never: write a total it did
not read in that transaction, or let a sum pass a cap.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FollowUpSpend"]


@dataclass(frozen=True)
class FollowUpSpend:
    """What one follow-up record adds to its reversal's spend, and the caps of that budget."""

    calls: int
    """Tool calls this record adds (the claim: the send's own call)."""
    tokens: int
    """Tokens this record adds (what an agent spent producing the follow-up)."""
    max_calls: int | None = None
    """The budget's tool-call cap the sum may not pass; ``None``: not checked (the outcome of
    a send already paid for)."""
    max_tokens: int | None = None
    """The budget's token cap the sum may not pass; ``None``: not checked."""
