"""amends — honest undo for AI-agent tool calls (the Saga pattern, done properly).

Declare each tool's reversibility in a :class:`Catalog`, run agent requests as sagas with an
:class:`Engine` (every step logged write-ahead with its inverse), and :meth:`Engine.undo` them:
compensation in dependency order, drift checks, idempotent retries, a budget, and a report that
never claims more than it verified.
"""

from __future__ import annotations

from .budget import Budget
from .calls import RetryPolicy, current_call
from .contracts import (
    NOTHING,
    Acknowledgement,
    Call,
    Catalog,
    Expectation,
    FollowUp,
    Inverse,
    ManualAction,
    Residue,
    Reversibility,
    ToolSpec,
)
from .engine import Engine, RecoveryReport, Ref, Saga, Step, run
from .errors import (
    AmendsError,
    ConfigError,
    ContractError,
    LeaseLostError,
    LogCorruptedError,
    LogError,
    LogLockedError,
    LogReadOnlyError,
    PermanentError,
    PreconditionFailed,
    SagaClosedError,
    SagaNotFoundError,
    SchemaVersionError,
    StepFailedError,
    ToolError,
    TransientError,
)
from .log import SagaLog, SqliteLog, open_log
from .log.base import Resolution
from .planner import Plan, PlannedStep, Preview, PreviewStep
from .report import Outcome, StepOutcome, StepState, UndoReport
from .secrets import SecretRequest, from_env
from .toml_catalog import load_toml_catalog

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name == "PostgresLog":  # optional extra, imported lazily
        from .log.postgres import PostgresLog  # type: ignore[import-not-found,unused-ignore]

        return PostgresLog
    raise AttributeError(f"module 'amends' has no attribute {name!r}")


__all__ = [
    "NOTHING",
    "Acknowledgement",
    "AmendsError",
    "Budget",
    "Call",
    "Catalog",
    "ConfigError",
    "ContractError",
    "Engine",
    "Expectation",
    "FollowUp",
    "Inverse",
    "LeaseLostError",
    "LogCorruptedError",
    "LogError",
    "LogLockedError",
    "LogReadOnlyError",
    "ManualAction",
    "Outcome",
    "PermanentError",
    "Plan",
    "PlannedStep",
    "PostgresLog",
    "PreconditionFailed",
    "Preview",
    "PreviewStep",
    "RecoveryReport",
    "Ref",
    "Residue",
    "Resolution",
    "RetryPolicy",
    "Reversibility",
    "Saga",
    "SagaClosedError",
    "SagaLog",
    "SagaNotFoundError",
    "SchemaVersionError",
    "SecretRequest",
    "SqliteLog",
    "Step",
    "StepFailedError",
    "StepOutcome",
    "StepState",
    "ToolError",
    "ToolSpec",
    "TransientError",
    "UndoReport",
    "current_call",
    "from_env",
    "load_toml_catalog",
    "open_log",
    "run",
]
