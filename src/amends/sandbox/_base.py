"""What every sandbox vendor module needs from the world, without importing it.

The vendors (mail, calendar, CRM, ...) are created by :class:`amends.sandbox.World` and call it
through ``self.world``; they import only this module, so the world and its vendors form no
import cycle (issue 9: the sandbox's world/vendor pair included).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any, TypeVar, cast

__all__ = ["add_business_days", "atomic"]

F = TypeVar("F", bound=Callable[..., Any])


def atomic(method: F) -> F:
    """Decorator for vendor methods: the whole method runs in one world transaction; faults due
    once the vendor has acted fire after it committed (see ``World.after_commit``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        world = self.world
        with world.atomic():
            out = method(self, *args, **kwargs)
        world.after_commit()  # outside the transaction: the effect stays applied
        return out

    return cast(F, wrapper)


def add_business_days(start: date, days: int) -> date:
    """``start`` moved forward by ``days`` working days (Saturday and Sunday skipped)."""
    day = start
    left = days
    while left > 0:
        day += timedelta(days=1)
        if day.weekday() < 5:
            left -= 1
    return day
