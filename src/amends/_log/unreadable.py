"""A record the log cannot read is an altered record, never a traceback (rule 12).

Every record amends writes is JSON of a known shape; a record whose text is not JSON, or whose
JSON lacks a field or has the wrong type where the reader expects one, was written by someone
else (an edited row, a forged one). Reading it must not crash the process that reads it —
``amends doctor --verify`` least of all, and not ``show``, the HTTP API or an undo: the saga is
reported as altered (:class:`~amends.HistoryAlteredError`, a ``ChainProblem`` "edited") and
nothing acts on it.

This module runs no SQL and never decodes a record itself: it names what a decoder raises on
text of the wrong shape, and turns it into the saga's problem.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from .._errors import AmendsError, HistoryAlteredError
from .base import ChainProblem

__all__ = ["UNREADABLE", "readable", "unreadable_problem"]

UNREADABLE: tuple[type[Exception], ...] = (
    ValueError,  # not JSON (json.JSONDecodeError), int("x")
    TypeError,  # a list or a number where an object was written
    KeyError,  # a field every record of its kind has
    AttributeError,  # .get on what is not a mapping
    IndexError,
)
"""What decoding a record of the wrong shape raises (no SQL driver error is among them)."""

T = TypeVar("T")


def unreadable_problem(saga_id: str, exc: BaseException) -> ChainProblem:
    """The problem a record that cannot be read is: an edit of it."""
    what = type(exc).__name__
    return ChainProblem(
        saga_id,
        None,
        "edited",
        f"a record of it cannot be read ({what}: {str(exc)[:120]}): the record was altered",
    )


async def readable(saga_id: str | None, read: Awaitable[T], url: str = "") -> T:
    """``read``'s answer; a record of the wrong shape it met raises
    :class:`~amends.HistoryAlteredError` naming the saga, never the decoder's error.

    Raises:
        HistoryAlteredError: A record of the saga (or of one listed) cannot be read.
    """
    try:
        return await read
    except UNREADABLE as exc:
        if isinstance(exc, AmendsError):
            raise  # an error the reader meant (a bad argument), not a record's shape
        who = saga_id if saga_id is not None else "(a listed saga)"
        problem = unreadable_problem(who, exc)
        raise HistoryAlteredError(
            f"this saga's history was altered: saga {who!r}: {problem.detail}; amends will "
            f"not act on it. Run `amends doctor --verify{' --db ' + url if url else ''}` and "
            f"restore the log from a backup",
            problems=(problem,),
            saga_id=saga_id,
        ) from None
