"""amends — honest undo for AI-agent tool calls (the Saga pattern, done properly).

Declare each tool's reversibility in a :class:`Catalog`, run agent requests as sagas with an
:class:`Engine` (every step logged write-ahead with its inverse), and :meth:`Engine.undo` them:
compensation in dependency order, drift checks, idempotent retries, a budget, and a report that
never claims more than it verified.
"""

from ._budget import Budget
from ._calls import RetryPolicy, current_call, idempotency_key
from ._catalog_ref import tag_catalog
from ._contracts import (
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
from ._engine import Engine, RecoveryReport, Ref, Saga, Step, run
from ._errors import (
    AmendsError,
    ConfigError,
    ContractError,
    HistoryAlteredError,
    LeaseLostError,
    LogCorruptedError,
    LogError,
    LogLockedError,
    LogReadOnlyError,
    PermanentError,
    PreconditionFailed,
    SagaClosedError,
    SagaNotFoundError,
    SagaStateError,
    SchemaVersionError,
    StepFailedError,
    ToolError,
    TransientError,
)
from ._fields import fast_init as _fast_init
from ._log import SagaLog, SqliteLog, open_log
from ._log.base import (
    ChainProblem,
    Claim,
    CompensationRecord,
    CompensationWrite,
    Event,
    IdemRecord,
    LogHealth,
    Resolution,
    ReversalHead,
    ReversalRecord,
    SagaRecord,
    StepFinish,
    StepIntent,
    StepRecord,
)
from ._log.spend import FollowUpSpend
from ._planner import Plan, PlannedStep, Preview, PreviewStep, plan
from ._report import Outcome, StepOutcome, StepState, UndoReport, current_report
from ._reversal.agentic import FollowUpAgent, FollowUpOutcome, FollowUpProposal
from ._reversal.follow_ups import SentFollowUp
from ._secrets import Redaction, SecretRequest, SecretResolver, from_env
from ._toml_catalog import load_toml_catalog

__version__ = "0.1.0"

# issue 29: the frozen records made many times per saga (~4,700 fields per eval saga) fill their
# ``__dict__`` at once instead of one ``object.__setattr__`` call per field (``amends._fields``).
# Done here: the package's own module finishes before any importer of amends or of one of its
# submodules gets the classes. tests/unit/test_fast_init.py checks every one of them.
_FAST_RECORDS: tuple[type, ...] = (
    Acknowledgement,
    Expectation,
    Inverse,
    ManualAction,
    Residue,
    CompensationRecord,
    CompensationWrite,
    ReversalRecord,
    SagaRecord,
    StepFinish,
    StepIntent,
    StepRecord,
    PlannedStep,
    PreviewStep,
    StepOutcome,
)
for _cls in _FAST_RECORDS:
    _fast_init(_cls)
del _cls


def __getattr__(name: str) -> object:
    if name == "PostgresLog":  # optional extra, imported lazily
        from ._log.postgres import PostgresLog  # type: ignore[import-not-found,unused-ignore]

        return PostgresLog
    raise AttributeError(f"module 'amends' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public surface is __all__ (tests/architecture/test_exported_members.py); the lazily
    # imported PostgresLog is listed too
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "NOTHING",
    "Acknowledgement",
    "AmendsError",
    "Budget",
    "Call",
    "Catalog",
    "ChainProblem",
    "Claim",
    "CompensationRecord",
    "CompensationWrite",
    "ConfigError",
    "ContractError",
    "Engine",
    "Event",
    "Expectation",
    "FollowUp",
    "FollowUpAgent",
    "FollowUpOutcome",
    "FollowUpProposal",
    "FollowUpSpend",
    "HistoryAlteredError",
    "IdemRecord",
    "Inverse",
    "LeaseLostError",
    "LogCorruptedError",
    "LogError",
    "LogHealth",
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
    "Redaction",
    "Ref",
    "Residue",
    "Resolution",
    "RetryPolicy",
    "ReversalHead",
    "ReversalRecord",
    "Reversibility",
    "Saga",
    "SagaClosedError",
    "SagaLog",
    "SagaNotFoundError",
    "SagaRecord",
    "SagaStateError",
    "SchemaVersionError",
    "SecretRequest",
    "SecretResolver",
    "SentFollowUp",
    "SqliteLog",
    "Step",
    "StepFailedError",
    "StepFinish",
    "StepIntent",
    "StepOutcome",
    "StepRecord",
    "StepState",
    "ToolError",
    "ToolSpec",
    "TransientError",
    "UndoReport",
    "current_call",
    "current_report",
    "from_env",
    "idempotency_key",
    "load_toml_catalog",
    "open_log",
    "plan",
    "run",
    "tag_catalog",
]
