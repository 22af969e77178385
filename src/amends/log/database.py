"""The seam between the shared SQL and a backend: run a function in one transaction, or read."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Database", "Tx"]

T = TypeVar("T")


class Tx(Protocol):
    """A cursor inside one transaction."""

    cache: dict[str, str]
    """Chain heads (saga_id -> hash) written in this transaction, so a batch of writes to one
    saga reads its head once. Cleared by the backend when it rolls part of a batch back."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; returns its rows (empty for statements without a result)."""

    def rowcount(self) -> int:
        """Rows changed by the last statement."""


class Database(ABC):
    """How a backend runs work: ``write`` inside one durable transaction, ``read`` consistently."""

    @abstractmethod
    async def write(self, fn: Callable[[Tx], T], size: int = 0) -> T:
        """Run ``fn`` in a write transaction and commit durably before returning.

        ``size`` is roughly how many bytes ``fn`` writes (group commit caps a batch by bytes).
        """

    @abstractmethod
    async def read(self, fn: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    async def close(self) -> None: ...
