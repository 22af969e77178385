"""Runs a compensation plan: drift checks, idempotency keys, retries, budget, parallel branches.

Split by responsibility (issue 22): :mod:`.ports` (the run's edges, one typed record),
:mod:`.dispatch` (one call: retries, budget, secrets, what a failure means), :mod:`.compensate`
(one step's inverse, write-ahead, crash rules, follow-ups), :mod:`.record` (what a run writes
and reports), :mod:`.runner` (the plan in undo order: the per-step decision the preview shares).
"""

from .._report import current_report, current_resolutions
from .dispatch import CallLost, Stop
from .ports import (
    LOCAL,
    BaseDispatcher,
    CompensationLog,
    Dispatcher,
    InFlightWait,
    LocalDispatcher,
    ReversalPorts,
)
from .runner import RunInput, described, run_plan, sentences

__all__ = [
    "LOCAL",
    "BaseDispatcher",
    "CallLost",
    "CompensationLog",
    "Dispatcher",
    "InFlightWait",
    "LocalDispatcher",
    "ReversalPorts",
    "RunInput",
    "Stop",
    "current_report",
    "current_resolutions",
    "described",
    "run_plan",
    "sentences",
]
