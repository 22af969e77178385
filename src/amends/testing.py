"""Test harness shipped to users: the adversarial generator as Hypothesis strategies.

``scenarios()`` draws whole adversarial scenarios (DAG, faults, mutations, undo requests, crash
points) over the :mod:`amends.sandbox` vendors, and ``run_scenario`` / ``check`` run one and judge
it on the world; ``saga_dags(...)`` draws fan-out DAGs over *your* catalog's tools, so
you can run your own sagas through ``amends.Engine`` and check your own invariants. Needs the
``testing`` extra (``pip install 'amends[testing]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from .evals.generator import Scenario, StepSpec, generate
from .evals.invariants import INVARIANTS, check, true_outcome
from .evals.runner import SagaResult, eval_catalog, run_scenario
from .sandbox import World, use_world

__all__ = [
    "INVARIANTS",
    "SagaResult",
    "Scenario",
    "StepSpec",
    "World",
    "check",
    "eval_catalog",
    "run_scenario",
    "saga_dags",
    "scenarios",
    "true_outcome",
    "use_world",
]


def scenarios(
    seeds: st.SearchStrategy[int] | None = None,
    indexes: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[Scenario]:
    """Adversarial scenarios from the seeded generator (each one reproducible as SEED:INDEX)."""
    return st.builds(
        generate,
        seeds if seeds is not None else st.integers(0, 2**31 - 1),
        indexes if indexes is not None else st.integers(0, 10**6),
    )


@st.composite
def _dag(
    draw: st.DrawFn,
    tools: Mapping[str, st.SearchStrategy[dict[str, Any]]],
    min_steps: int,
    max_steps: int,
) -> list[StepSpec]:
    n = draw(st.integers(min_steps, max_steps))
    names = sorted(tools)
    steps: list[StepSpec] = []
    for i in range(1, n + 1):
        tool = draw(st.sampled_from(names))
        args = draw(tools[tool])
        prior = [s.step_id for s in steps]
        after = draw(st.lists(st.sampled_from(prior), max_size=2, unique=True)) if prior else []
        steps.append(StepSpec(f"s{i}", tool, dict(args), tuple(sorted(after))))
    return steps


def saga_dags(
    tools: Mapping[str, st.SearchStrategy[dict[str, Any]]],
    *,
    min_steps: int = 1,
    max_steps: int = 40,
) -> st.SearchStrategy[list[StepSpec]]:
    """Random fan-out DAGs over your tools: ``tools`` maps a catalog name to a strategy of its
    keyword arguments. Run each step with ``saga.call(s.tool, step_id=s.step_id,
    after=[handles[a] for a in s.after], **s.args)``."""
    if not tools:
        raise ValueError(
            "saga_dags needs at least one tool, e.g. "
            "{'crm.update_field': st.fixed_dictionaries(...)}"
        )
    return _dag(tools, min_steps, max_steps)
