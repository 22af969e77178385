"""The generator's step kind is drawn as ``random.choices`` draws it (issue 29, lane evs4: the
cumulative weights are summed once per process, not per step), so every scenario of every
seed stays what it was."""

from __future__ import annotations

import bisect
import random

import pytest

from amends.evals import generator
from amends.evals.generator import generate


def test_a_step_kind_is_the_draw_random_choices_makes_and_uses_one_random_number() -> None:
    """For many states of the generator, the kind drawn equals ``rng.choices(kinds,
    weights)[0]`` from an equal state, and both leave the generator in the same state."""
    kinds, weights = list(generator._KINDS), list(generator._KIND_WEIGHTS)
    assert len(kinds) == len(weights) == 18 and weights[kinds.index("careless")] == 0
    sums = [sum(weights[: i + 1]) for i in range(len(weights))]
    assert sums == generator._KIND_CUM
    table = generator._KIND_CUM
    for seed in range(300):
        ours, theirs = random.Random(seed), random.Random(seed)
        for _ in range(20):
            at = bisect.bisect(table, ours.random() * generator._KIND_TOTAL, 0, len(kinds) - 1)
            assert generator._KINDS[at] == theirs.choices(kinds, weights=weights)[0]
            assert ours.getstate() == theirs.getstate()
    assert generator._KIND_CUM is table and table[-1] == sum(weights)


def test_a_step_is_drawn_without_random_choices() -> None:
    """The per-step draw no longer goes through ``random.choices`` (which built the weights'
    sums for every step)."""

    class NoChoices(random.Random):
        def choices(self, *args: object, **kwargs: object) -> list[object]:
            raise AssertionError("random.choices was called for a step's kind")

    for seed in range(50):
        rng = NoChoices(seed)
        step = generator._step(rng, 0, generator._Drawn())
        assert step.step_id == "s0"
    with pytest.raises(AssertionError):
        NoChoices(1).choices([1], weights=[1])


def test_scenarios_are_the_ones_the_choices_draw_gives() -> None:
    """Whole scenarios: the generator with its kind drawn by ``random.choices`` (as before)
    and as it is now give equal scenarios for a range of seeds and indexes."""

    def old_step(rng: random.Random, i: int, drawn: generator._Drawn) -> generator.StepSpec:
        prior = drawn.steps
        after: tuple[str, ...] = ()
        if prior and rng.random() < 0.45:
            after = tuple(sorted({rng.choice(prior).step_id for _ in range(rng.randint(1, 2))}))
        kind = rng.choices(list(generator._KINDS), weights=list(generator._KIND_WEIGHTS))[0]
        return generator._kind_step(rng, kind, i, drawn, after)

    now = [generate(seed, i) for seed in (1, 2, 3) for i in range(0, 400, 7)]
    real = generator._step
    generator._step = old_step
    try:
        before = [generate(seed, i) for seed in (1, 2, 3) for i in range(0, 400, 7)]
    finally:
        generator._step = real
    assert now == before
