"""6. PostgreSQL load (issue 12): 1,000 sagas x 12 steps by 4 worker processes, forward then undo.

The load is ``tests/faults/load.py`` (the same workers, vendor and audit as
``tests/faults/test_load.py``), loaded from the tests directory as ``tests/pg.py`` is. Every run
is audited: every step done, every saga completed and reversed, every compensation sent once, and
the duplicate effects the vendor applied counted (goal 0). Worker and server CPU are reported
per saga, so a figure taken on a loaded machine can be read against its CPU cost.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from .common import REPO, Section, Target, scratch

GOAL = 100.0
"""Issue 12: sagas/s forward and undo with 4 workers on one PostgreSQL."""


def _load_driver() -> Any:
    path = REPO / "tests" / "faults" / "load.py"
    spec = importlib.util.spec_from_file_location("amends_tests_load", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the load driver {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def run(server: Any, quick: bool, sagas: int | None = None) -> list[Section]:
    """Forward then undo on a fresh database of ``server`` (a ``tests/pg.py`` PgServer);
    ``sagas`` (a multiple of 4) overrides the size: 1,000, or 200 with ``quick``."""
    load = _load_driver()
    if sagas is None:
        sagas = 200 if quick else 1000
    url = server.new_database()
    vpath = scratch("pgload-vendor.db")
    load0 = os.getloadavg()[0]
    fwd = load.run_phase(url, vpath, "record-many", sagas, data_dir=server.data)
    load1 = os.getloadavg()[0]
    undo = load.run_phase(url, vpath, "undo-many", sagas, data_dir=server.data)
    load2 = os.getloadavg()[0]
    world = load.audit(url, vpath, sagas, undo)
    steps = sagas * load.STEPS
    expected = {
        "step_states": {"done": steps},
        "completed_sagas": sagas,
        "reversal_states": {"done": sagas},
        "compensations_sent": sagas * 11,
        "undo_effects": sagas * 11,
    }
    wrong = {k: getattr(world, k) for k, v in expected.items() if getattr(world, k) != v}
    if world.log_problems:
        wrong["log_problems"] = world.log_problems[:5]
    if wrong or world.most_sends != 1 or dict(world.statuses) != {"cannot_undo": sagas}:
        raise AssertionError(
            f"PostgreSQL load left a wrong world: {wrong}, statuses {dict(world.statuses)}, "
            f"most sends of one compensation {world.most_sends}"
        )
    sec = Section(
        f"6. PostgreSQL: Load, {sagas:,} sagas x {load.STEPS} steps, {load.WORKERS} worker "
        f"processes",
        [
            "direction",
            "seconds",
            "sagas/s",
            "steps/s",
            "worker CPU ms/saga",
            "server CPU ms/saga",
            "load at start",
        ],
    )
    for name, phase, load_at in (("forward", fwd, load0), ("undo", undo, load1)):
        srv = "-" if phase.server_cpu is None else f"{phase.server_cpu / sagas * 1e3:.1f}"
        sec.rows.append(
            [
                name,
                f"{phase.seconds:.1f}",
                f"{sagas / phase.seconds:.1f}",
                f"{steps / phase.seconds:.0f}",
                f"{phase.worker_cpu / sagas * 1e3:.1f}",
                srv,
                f"{load_at:.2f}",
            ]
        )
        sec.targets.append(
            Target(
                f"PostgreSQL load {name}, {load.WORKERS} workers",
                f"{sagas / phase.seconds:.1f} sagas/s",
                f">= {GOAL:.0f} sagas/s",
                sagas / phase.seconds >= GOAL,
            )
        )
    sec.targets.append(
        Target(
            "PostgreSQL load: duplicate effects", str(world.duplicates), "0", not world.duplicates
        )
    )
    sec.notes.append(
        f"Each worker runs its share of the sagas 16 at a time on its own event loop (semaphore "
        f"16), all on one PostgreSQL log (fsync=on, synchronous_commit=on) on the same 2 cores; "
        f"each saga: 10 reversible puts (chains and independent keys), a charge (compensable) and "
        f"an email (irreversible), so every undo is cannot_undo with 11 compensations sent. "
        f"Audited: {steps:,} steps done, {sagas:,} reversals done, {world.compensations_sent:,} "
        f"compensations each sent once, {world.duplicates} duplicate effects. Load average at "
        f"the end: {load2:.2f}. CPU: the worker processes' rusage, and the server's processes "
        f"(/proc), per saga."
    )
    return [sec]
