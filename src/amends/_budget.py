"""Budget: the caps on one reversal (rule 7: budget bounds the cascade).

Every value is finite, non-negative and at most its documented upper bound (issue 11): a budget of
``NaN`` or ``Infinity`` seconds would never run out, leave a reversal ``running`` forever and
write non-standard JSON into the log. Untrusted input (``Budget(...)``, :meth:`Budget.parse` for
HTTP bodies, the CLI flags) is refused with the value and the fix; :meth:`Budget.from_dict` reads a
budget back from the log and clamps values an older amends may have stored, so such a saga can
still be undone and recovered.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ._errors import ConfigError

__all__ = ["MAX_SECONDS", "MAX_TOKENS", "MAX_TOOL_CALLS", "Budget"]

MAX_TOOL_CALLS = 100_000
"""Upper bound of ``Budget.tool_calls``."""
MAX_TOKENS = 1_000_000_000
"""Upper bound of ``Budget.tokens``."""
MAX_SECONDS = 86_400.0
"""Upper bound of ``Budget.seconds`` (one day)."""

_FIELDS = ("tool_calls", "tokens", "seconds")
_BOUNDS: dict[str, float] = {
    "tool_calls": MAX_TOOL_CALLS,
    "tokens": MAX_TOKENS,
    "seconds": MAX_SECONDS,
}
_DEFAULTS: dict[str, float] = {"tool_calls": 100, "tokens": 100_000, "seconds": 60.0}
_EXAMPLE = "e.g. Budget(tool_calls=50, tokens=10_000, seconds=30)"


def check_budget_value(name: str, value: Any, *, flag: str | None = None) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a valid ``Budget.<name>``.

    ``flag`` names the input the value came from (``--budget-seconds``, ``budget.seconds``) so the
    message points at what the user typed.
    """
    label = flag or f"Budget.{name}"
    bound = _BOUNDS[name]
    integral = name != "seconds"
    kind = "a whole number" if integral else "a number of seconds"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{label} must be {kind}, got {value!r}; {_EXAMPLE}")
    if integral and not isinstance(value, int):
        raise ConfigError(f"{label} must be a whole number, got {value!r}; {_EXAMPLE}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"{label} must be a finite number, got {value!r}; a budget that never runs out "
            f"would leave the reversal running forever; give at most {bound:g}"
        )
    if value < 0:
        raise ConfigError(f"{label} must be non-negative, got {value!r}; {_EXAMPLE}")
    if value > bound:
        raise ConfigError(
            f"{label} is {value!r}, above the upper bound {bound:g}; give at most {bound:g} "
            f"(continue a reversal that ran out with `amends undo SAGA --continue`)"
        )


@dataclass(frozen=True)
class Budget:
    """Caps on a reversal. Every probe, inverse, retry and follow-up spends one tool call.

    Each value is finite, non-negative and at most its upper bound (``MAX_TOOL_CALLS`` = 100,000,
    ``MAX_TOKENS`` = 1,000,000,000, ``MAX_SECONDS`` = 86,400).

    Raises:
        ConfigError: A value is of the wrong type, negative, NaN, infinite or above its bound.
    """

    tool_calls: int = 100
    """Most tool calls the reversal may make (probes, retries, follow-ups). Default 100."""
    tokens: int = 100_000
    """Most tokens tools may report with ``call.spend(tokens=...)``. Default 100,000."""
    seconds: float = 60.0
    """Wall-clock seconds after which nothing more is dispatched. Default 60."""

    # issue 22 item 3: the bounds and the one value check are public here, so the CLI flags and
    # the HTTP schema state the same limits without importing amends' internals
    MAX_TOOL_CALLS: ClassVar[int] = MAX_TOOL_CALLS
    """Upper bound of ``tool_calls`` (100,000)."""
    MAX_TOKENS: ClassVar[int] = MAX_TOKENS
    """Upper bound of ``tokens`` (1,000,000,000)."""
    MAX_SECONDS: ClassVar[float] = MAX_SECONDS
    """Upper bound of ``seconds`` (86,400: one day)."""

    @staticmethod
    def check_value(name: str, value: Any, *, flag: str | None = None) -> None:
        """Check one budget value from untrusted input before building a :class:`Budget`.

        Args:
            name: ``"tool_calls"``, ``"tokens"`` or ``"seconds"``.
            value: what the user gave.
            flag: the input it came from (``--budget-seconds``), named in the message.

        Raises:
            ConfigError: ``value`` is of the wrong type, negative, NaN, infinite or above its
                bound (the message names the input, the value and the fix).
        """
        check_budget_value(name, value, flag=flag)

    def __post_init__(self) -> None:
        for name in _FIELDS:
            check_budget_value(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return {"tool_calls": self.tool_calls, "tokens": self.tokens, "seconds": self.seconds}

    @classmethod
    def parse(cls, data: Any, *, where: str = "budget") -> Budget:
        """Build a budget from untrusted data (an HTTP body): missing fields take the defaults.

        Raises:
            ConfigError: ``data`` is not a mapping of the three known fields, or a value is not
                valid (the message names the field, the value and the fix).
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(
                f"{where} must be an object with tool_calls, tokens, seconds; got {data!r}"
            )
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown {where} field(s) {sorted(map(str, unknown))!r}; known: "
                f"tool_calls, tokens, seconds"
            )
        for name, value in data.items():
            check_budget_value(name, value, flag=f"{where}.{name}")
        return cls(**data)

    @classmethod
    def from_dict(cls, data: Any) -> Budget:
        """Read back a budget stored in the log.

        Values an older amends accepted and stored (NaN, infinity, above the bound, negative)
        are clamped into range, so the saga can still be undone and recovered: NaN becomes the
        field's default, infinity and values above the bound become the bound, negatives 0.
        A malformed shape is still refused.

        Raises:
            ConfigError: ``data`` is not a mapping of the three known fields.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(
                f"budget must be an object with tool_calls, tokens, seconds; got {data!r}"
            )
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise ConfigError(
                f"unknown budget field(s) {sorted(map(str, unknown))!r}; known: "
                f"tool_calls, tokens, seconds"
            )
        clamped: dict[str, Any] = {}
        for name, value in data.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                check_budget_value(name, value)  # raises: not a number at all
            if isinstance(value, float) and math.isnan(value):
                number = float(_DEFAULTS[name])  # NaN says nothing: the default, not "forever"
            else:
                number = min(max(float(value), 0.0), _BOUNDS[name])
            clamped[name] = number if name == "seconds" else int(number)
        return cls(**clamped)


class BudgetMeter:
    """What a running reversal has spent; shared by its parallel branches (one event loop).

    Tool calls can be *reserved* (rule 10): before a run starts, each step that will call an
    inverse sets aside the calls its check and first attempt need, in undo order, so which steps
    a budget covers does not depend on how their parallel branches happen to interleave — and
    the preview, walking the same order, predicts it exactly. Unreserved calls (retries,
    follow-ups) come from what is left.

    Args:
        budget: The caps.
        calls_spent: Tool calls already spent (a continuation or take-over).
        tokens_spent: Tokens already spent.
        clock: Seconds, for the time cap (default ``time.monotonic``); a durable-execution
            runner passes its deterministic clock (Temporal: ``workflow.time``).
    """

    def __init__(
        self,
        budget: Budget,
        *,
        calls_spent: int = 0,
        tokens_spent: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.calls = calls_spent
        self.tokens = tokens_spent
        self.clock = clock
        self.started = clock()
        self._deadline = self.started + budget.seconds  # issue 29: read per call, not a property
        self.reserved: dict[str, int] = {}
        """Calls set aside per key (a step), not spent yet."""
        self.unfunded: dict[str, str] = {}
        """Keys whose reservation the budget could not cover, with why."""
        self._held = 0

    after = ""
    """Said after the detail of each step the budget cut (e.g. on Temporal, the task queue no
    worker served): the stored report names the whole cause (rules 7 and 8)."""

    @property
    def deadline(self) -> float:
        return self.started + self.budget.seconds

    def remaining_seconds(self) -> float:
        return max(0.0, self._deadline - self.clock())

    def exhausted(self) -> str | None:
        """Which cap is spent, in words, or ``None`` while there is budget left."""
        if self.calls >= self.budget.tool_calls:
            return f"tool-call budget of {self.budget.tool_calls} spent"
        return self._other_caps()

    def _other_caps(self) -> str | None:
        if self.tokens > 0 and self.tokens >= self.budget.tokens:
            return f"token budget of {self.budget.tokens} spent"
        if self.clock() >= self._deadline:
            return f"time budget of {self.budget.seconds:g}s spent"
        return None

    def free_calls(self) -> int:
        """Calls neither spent nor reserved."""
        return self.budget.tool_calls - self.calls - self._held

    def reserve(self, key: str, calls: int) -> bool:
        """Set ``calls`` aside for ``key`` (a step: its drift check and its first attempt) if
        the budget covers them. Else ``key`` is unfunded: its planned calls are refused,
        whatever others leave later, so the answer does not depend on timing, and a budget is
        spent on steps it can finish, never on the checks of steps it cannot (issue 24 item 7:
        three calls on five steps made three checks and reverted nothing)."""
        if calls <= 0:
            return True
        free = self.budget.tool_calls - self.calls - self._held  # free_calls(), once per step
        if free < calls:
            n = self.budget.tool_calls
            self.unfunded[key] = (
                f"tool-call budget of {n} spent"
                if free <= 0
                else f"tool-call budget of {n} leaves {free} call(s), too few for a step that "
                f"needs {calls} (its check and its inverse)"
            )
            return False
        self.reserved[key] = self.reserved.get(key, 0) + calls
        self._held += calls
        return True

    def release(self, key: str) -> None:
        """Give back what ``key`` reserved and did not spend."""
        self._held -= self.reserved.pop(key, 0)

    def take_call(
        self, key: str | None = None, *, planned: bool = False, borrow: Sequence[str] = ()
    ) -> str | None:
        """Spend one tool call; returns why not (and spends nothing) if the budget is gone.

        ``key``'s reservation pays first. A ``planned`` call of an unfunded key is refused;
        other calls take what is neither spent nor reserved, then what the keys in ``borrow``
        reserved (steps that wait for this one: if it fails they never run)."""
        budget = self.budget  # issue 29: _other_caps() inline, once per call
        if self.tokens > 0 and self.tokens >= budget.tokens:
            return f"token budget of {budget.tokens} spent"
        if self.clock() >= self._deadline:
            return f"time budget of {budget.seconds:g}s spent"
        if key is not None and self.reserved.get(key, 0) > 0:
            self.reserved[key] -= 1
            self._held -= 1
        elif planned and key in self.unfunded:
            return self.unfunded[key]
        elif self.free_calls() <= 0 and not self._borrow(borrow):
            return self._no_calls()
        self.calls += 1
        return None

    def _borrow(self, keys: Sequence[str]) -> bool:
        for other in keys:
            if self.reserved.get(other, 0) > 0:
                self.reserved[other] -= 1
                self._held -= 1
                return True
        return False

    def _no_calls(self) -> str:
        n = self.budget.tool_calls
        if self.calls >= n:
            return f"tool-call budget of {n} spent"
        return f"tool-call budget of {n} spent or set aside for steps undone before this one"
