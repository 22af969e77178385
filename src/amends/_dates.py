"""Times a contract records: an inverse's deadline, when a residue settles (rule 10: one clock,
instants in UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ._errors import ContractError

__all__ = ["deadline_iso", "settles_at", "timestamp"]


def timestamp(iso: str) -> float:
    """Seconds since the epoch of a logged ISO-8601 time (logged deadlines are UTC)."""
    when = datetime.fromisoformat(iso)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def deadline_iso(deadline: datetime | str | float, tool: str) -> str:
    """Normalise an inverse's ``deadline=`` to an ISO-8601 UTC string (rule 10)."""
    try:
        if isinstance(deadline, datetime):
            when = deadline
        elif isinstance(deadline, str):
            when = datetime.fromisoformat(deadline)
        elif isinstance(deadline, int | float) and not isinstance(deadline, bool):
            when = datetime.fromtimestamp(float(deadline), UTC)
        else:
            raise TypeError(type(deadline).__name__)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise ContractError(
            f"deadline= of the inverse recorded by {tool!r} must be a datetime, an ISO-8601 "
            f"string or seconds since the epoch, got {deadline!r}; e.g. "
            f"deadline=datetime.now(UTC) + timedelta(days=1)",
            tool=tool,
        ) from exc
    if when.utcoffset() is None:
        # rule 10: a deadline is an instant. Read as UTC, a local time would close the window
        # hours early (a step acknowledged that could be undone) or late (a recall sent after
        # the bank stops accepting it), so the ambiguous value is refused, not guessed.
        raise ContractError(
            f"deadline= of the inverse recorded by {tool!r} is {deadline!r}, which has no time "
            f"zone, so amends cannot tell when the undo window closes; pass an aware time, "
            f"e.g. deadline=datetime.now(UTC) + timedelta(hours=1) or an ISO-8601 string with "
            f"an offset ('2030-01-01T12:00:00+00:00')",
            tool=tool,
        )
    return when.astimezone(UTC).isoformat()


def settles_at(now: datetime, days: float | None, business_days: int | None) -> str | None:
    if business_days is not None:
        day = now.date()
        left = business_days
        while left > 0:
            day += timedelta(days=1)
            if day.weekday() < 5:
                left -= 1
        return day.isoformat()
    if days is not None:
        return (now + timedelta(days=days)).date().isoformat()
    return None
