"""Distributed execution on Temporal (``pip install 'amends[temporal]'``).

A saga's reversal runs as a Temporal workflow whose id derives from the saga id, so every caller
attaches to the one reversal (rule 6). The plan comes from amends' planner and every step follows
the local engine's rules; each drift probe, compensation and follow-up is an activity carrying
amends' idempotency key, and every compensation event lands in the shared saga log::

    runner = TemporalRunner("127.0.0.1:7233")
    engine = amends.Engine(catalog, log="postgresql://...", runner=runner)
    report = await engine.undo(saga_id)

    # on each worker machine (or: amends worker --temporal HOST:PORT --db URL --catalog REF)
    async with make_worker(await connect("127.0.0.1:7233"), catalog, "postgresql://..."):
        ...
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    from amends import ConfigError

    raise ConfigError(
        f"amends.integrations.temporal needs the Temporal SDK: pip install 'amends[temporal]' "
        f"({exc})"
    ) from exc

from ._interceptor import AmendsInterceptor
from ._runner import (
    DEFAULT_TASK_QUEUE,
    TemporalRunner,
    TemporalUnavailableError,
    connect,
    make_worker,
    workflow_id,
)
from ._workflow import ReversalInput, ReversalWorkflow

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "AmendsInterceptor",
    "ReversalInput",
    "ReversalWorkflow",
    "TemporalRunner",
    "TemporalUnavailableError",
    "connect",
    "make_worker",
    "workflow_id",
]
