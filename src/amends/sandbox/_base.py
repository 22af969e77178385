"""What every sandbox vendor module needs from the world, without importing it.

The vendors (mail, calendar, CRM, ...) are created by :class:`amends.sandbox.World` and call it
through ``self.world``, typed as :class:`VendorWorld`; they import only this module, so the world
and its vendors form no import cycle, not even one for type annotations (issue 9; issue 22
item 3: ``tests/architecture/test_layers.py`` counts ``if TYPE_CHECKING:`` imports too).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import date, timedelta
from typing import Any, Protocol, TypeVar, cast

__all__ = ["RecordReader", "VendorWorld", "add_business_days", "atomic"]


class RecordReader(Protocol):
    """A vendor another vendor reads from (payments checks a deal's stage in the CRM)."""

    def get(self, record_id: str) -> dict[str, Any]: ...


class VendorWorld(Protocol):
    """The part of :class:`amends.sandbox.World` a vendor uses (the world satisfies it; mypy
    checks that where the world creates its vendors)."""

    @property
    def rng(self) -> random.Random: ...

    @property
    def crm(self) -> RecordReader: ...

    @property
    def txn(self) -> AbstractContextManager[Any]: ...

    def atomic(self) -> AbstractContextManager[Any]: ...

    def after_commit(self) -> None: ...

    def now(self) -> float: ...

    def today(self) -> date: ...

    def iso(self, ts: float | None = None) -> str: ...

    def get(self, tbl: str, key: str, default: Any = None) -> Any: ...

    def items(self, tbl: str) -> list[tuple[str, Any]]: ...

    def next_id(self, prefix: str) -> str: ...

    def replay(self, vendor: str, idempotency_key: str | None) -> Any: ...

    def commit(
        self,
        puts: list[tuple[str, str, Any]],
        effects: list[dict[str, Any]] | None = None,
        *,
        vendor: str | None = None,
        idempotency_key: str | None = None,
        response: Any = None,
    ) -> Any: ...


F = TypeVar("F", bound=Callable[..., Any])


def atomic(method: F) -> F:
    """Decorator for vendor methods: the whole method runs in one world transaction; faults due
    once the vendor has acted fire after it committed (see ``World.after_commit``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        world = self.world
        with world.txn:  # world.atomic(), without the call
            out = method(self, *args, **kwargs)
        if world._after:  # a fault due once the call acted (issue 29: rarely, so no call)
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
