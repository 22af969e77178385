"""Every error amends raises, in one tree.

```
AmendsError
├── ContractError (TypeError)        a tool registration or a Call used against its contract
├── ConfigError (ValueError)         bad argument, budget, URL or TOML catalog
│   └── SagaStateError               the saga's state does not allow this request now
├── ToolError                        raised *by tools* to tell the engine what happened
│   ├── TransientError               retry with backoff, within budget
│   └── PermanentError               stop this branch; the effect stands
│       └── PreconditionFailed       the vendor's compare-and-set saw drift: nothing was written
├── StepFailedError                  a forward step did not take effect (``await step`` raises it)
├── SagaNotFoundError (LookupError)  no saga with that id in this log (or not in your tenant)
├── SagaClosedError                  a call on a saga that has already been undone or closed
├── HistoryAlteredError              a saga's history was altered: amends will not act on it
└── LogError                         the saga log cannot be used as it is
    ├── LogLockedError               another process holds the database lock past the busy timeout
    ├── LogCorruptedError            the file is not a readable amends log
    ├── LogReadOnlyError             the file or disk refuses writes (read-only, disk full)
    ├── SchemaVersionError           the log was written by a newer amends
    └── LeaseLostError               another worker took over this reversal (fencing)
```

Messages name the offending value and say what to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AmendsError",
    "ConfigError",
    "ContractError",
    "HistoryAlteredError",
    "LeaseLostError",
    "LogCorruptedError",
    "LogError",
    "LogLockedError",
    "LogReadOnlyError",
    "PermanentError",
    "PreconditionFailed",
    "SagaClosedError",
    "SagaNotFoundError",
    "SagaStateError",
    "SchemaVersionError",
    "StepFailedError",
    "ToolError",
    "TransientError",
]


class AmendsError(Exception):
    """Root of every error amends raises. Structured fields are ``None`` when they do not apply."""

    def __init__(
        self,
        message: str,
        *,
        saga_id: str | None = None,
        step_id: str | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.saga_id = saga_id
        self.step_id = step_id
        self.tool = tool

    def __reduce__(self) -> Any:  # keep fields across pickling (process pools, multiprocessing)
        return (
            _rebuild,
            (type(self), self.message, self.saga_id, self.step_id, self.tool, self.__dict__),
        )


def _rebuild(
    cls: type[AmendsError],
    message: str,
    saga_id: str | None,
    step_id: str | None,
    tool: str | None,
    state: dict[str, Any],
) -> AmendsError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class ContractError(AmendsError, TypeError):
    """A tool was registered, or a :class:`~amends.Call` used, against the catalog's contract."""


class ConfigError(AmendsError, ValueError):
    """An argument, budget, URL or TOML catalog is not valid."""


class SagaStateError(ConfigError):
    """The request does not fit the saga's state now: resolving a step whose effect no longer
    stands, retrying a step that did not fail, continuing a reversal with nothing left to
    attempt. Nothing was written; the message says what the state is and what to do."""


class ToolError(AmendsError):
    """Raised by a tool to tell the engine how its call ended."""


class TransientError(ToolError):
    """The call did not take effect and may succeed if retried (rate limit, timeout, 5xx).

    The engine retries with exponential backoff and jitter while the budget allows.
    """

    def __init__(
        self, message: str = "transient failure", *, retry_after: float | None = None, **fields: Any
    ) -> None:
        super().__init__(message, **fields)
        self.retry_after = retry_after
        """Seconds the vendor asked us to wait before retrying, when it said."""


class PermanentError(ToolError):
    """The call failed and retrying will not help (closed card, dispute, 4xx). Stops the branch."""


class PreconditionFailed(PermanentError):
    """The vendor's compare-and-set found the world changed since the expectation was recorded.

    Raised by an inverse that was handed ``call.precondition``; the engine marks the step
    ``drifted`` (rule 4: never overwrite a value someone else wrote).
    """


class StepFailedError(AmendsError):
    """A forward step failed; its effect did not take place (or is in doubt, see ``state``)."""

    def __init__(self, message: str, *, state: str = "failed", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.state = state


class SagaNotFoundError(AmendsError, LookupError):
    """No saga with this id is in the log (or it belongs to another tenant)."""


class SagaClosedError(AmendsError):
    """The saga is being undone or has been undone: no new step may start."""


class HistoryAlteredError(AmendsError):
    """This saga's history was altered: its tamper-evident records do not verify (rule 12).

    Undo, resume, resolve, preview and report refuse such a saga: acting on forged or truncated
    data could send a compensation twice or report what did not happen. ``problems`` lists what
    the check found (:class:`amends._log.base.ChainProblem`); ``amends doctor --verify`` shows
    them for the whole log.
    """

    def __init__(self, message: str, *, problems: tuple[Any, ...] = (), **fields: Any) -> None:
        super().__init__(message, **fields)
        self.problems = problems
        """What the verification found, one :class:`~amends._log.base.ChainProblem` each."""


class LogError(AmendsError):
    """The saga log cannot be used as it is."""

    def __init__(self, message: str, *, path: str | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.path = path


class LogLockedError(LogError):
    """Another process held the database lock for longer than the busy timeout."""


class LogCorruptedError(LogError):
    """The database file is damaged or is not an amends log."""


class LogReadOnlyError(LogError):
    """The database refuses writes: a read-only file or mount, or a full disk."""


class SchemaVersionError(LogError):
    """The log's schema is newer than this amends understands."""


class LeaseLostError(LogError):
    """This worker's lease on a reversal expired and another worker took it over."""
