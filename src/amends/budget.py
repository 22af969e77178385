"""Budget: the caps on one reversal (rule 7: budget bounds the cascade)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["Budget"]


@dataclass(frozen=True)
class Budget:
    """Caps on a reversal. Every probe, inverse, retry and follow-up spends one tool call."""

    tool_calls: int = 100
    """Most tool calls the reversal may make (probes, retries, follow-ups). Default 100."""
    tokens: int = 100_000
    """Most tokens tools may report with ``call.spend(tokens=...)``. Default 100,000."""
    seconds: float = 60.0
    """Wall-clock seconds after which nothing more is dispatched. Default 60."""

    def __post_init__(self) -> None:
        for name, kind in (("tool_calls", int), ("tokens", int), ("seconds", (int, float))):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, kind) or value < 0:
                raise ConfigError(
                    f"Budget.{name} must be a non-negative number, got {value!r}; "
                    f"e.g. Budget(tool_calls=50, tokens=10_000, seconds=30)"
                )

    def to_dict(self) -> dict[str, Any]:
        return {"tool_calls": self.tool_calls, "tokens": self.tokens, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Any) -> Budget:
        """Build a budget from untrusted data (an HTTP body, a CLI flag, the log).

        Raises:
            ConfigError: ``data`` is not a mapping of the three known fields.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(
                f"budget must be an object with tool_calls, tokens, seconds; got {data!r}"
            )
        unknown = set(data) - {"tool_calls", "tokens", "seconds"}
        if unknown:
            raise ConfigError(
                f"unknown budget field(s) {sorted(unknown)!r}; known: tool_calls, tokens, seconds"
            )
        return cls(**data)


class BudgetMeter:
    """What a running reversal has spent; shared by its parallel branches (one event loop)."""

    def __init__(self, budget: Budget, *, calls_spent: int = 0, tokens_spent: int = 0) -> None:
        self.budget = budget
        self.calls = calls_spent
        self.tokens = tokens_spent
        self.started = time.monotonic()

    @property
    def deadline(self) -> float:
        return self.started + self.budget.seconds

    def remaining_seconds(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def exhausted(self) -> str | None:
        """Which cap is spent, in words, or ``None`` while there is budget left."""
        if self.calls >= self.budget.tool_calls:
            return f"tool-call budget of {self.budget.tool_calls} spent"
        if self.tokens > 0 and self.tokens >= self.budget.tokens:
            return f"token budget of {self.budget.tokens} spent"
        if time.monotonic() >= self.deadline:
            return f"time budget of {self.budget.seconds:g}s spent"
        return None

    def take_call(self) -> str | None:
        """Spend one tool call; returns why not (and spends nothing) if the budget is gone."""
        why = self.exhausted()
        if why is None:
            self.calls += 1
        return why
