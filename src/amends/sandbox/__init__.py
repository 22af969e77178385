"""Simulated vendors with real semantics, and the honest catalog over them.

``World`` holds every vendor's state (in memory, or in a SQLite file other processes can open);
``sandbox_catalog(world)`` is the ready catalog of tool contracts (``sandbox_catalog()`` acts on
the world bound with ``use_world(world)`` in the calling task, so one catalog serves many worlds);
``world.faults`` injects faults (a vendor that refuses, stalls, acts then raises; a crash at the
Nth call) and every effect a tool causes is tagged with its step; ``demo_catalog(db)`` is the
CLI's default catalog. The sandbox uses only the public API of amends, as a user's code would.
"""

from __future__ import annotations

from .catalog import demo_catalog, sandbox_catalog
from .demo import DemoResult, run_demo, run_demo_async
from .world import EPOCH, Faults, SimulatedCrash, World, current_world, use_world

__all__ = [
    "EPOCH",
    "DemoResult",
    "Faults",
    "SimulatedCrash",
    "World",
    "current_world",
    "demo_catalog",
    "run_demo",
    "run_demo_async",
    "sandbox_catalog",
    "use_world",
]
