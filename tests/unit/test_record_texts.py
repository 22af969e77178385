"""Issue 29: an intent's and a step outcome's record text is written from its parts (the fixed
keys in sorted order, each value encoded on its own), byte for byte what the encoder gives for
the whole body; these compare the two on many shapes of record."""

from __future__ import annotations

import random
from typing import Any

import pytest

from amends._log.base import StepFinish, StepIntent
from amends._log.records import (
    _finish_text,
    cap_result,
    dumps,
    finish_body,
    finish_text,
    intent_text,
)
from amends._log.texts import intent_body, step_intent_text
from amends._secrets import Redaction

_STRS = ["", "a", "bench.noop", 'q"uote', "back\\slash", "tab\tnew\nline", "é ü ✓", "\x00\x1f"]
_STRS.append("😀")
_SCALARS: list[Any] = [
    *_STRS,
    0,
    -1,
    7,
    10**30,
    True,
    False,
    None,
    0.5,
    -0.0,
    1e300,
    float("inf"),
    float("nan"),
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.6:
        return rng.choice(_SCALARS)
    if roll < 0.8:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_STRS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _args(rng: random.Random) -> dict[str, Any]:
    return {rng.choice(_STRS): _value(rng) for _ in range(rng.randrange(5))}


def _intent(rng: random.Random) -> StepIntent:
    ids = [rng.choice(["s1", "s2", 'odd"id', "ü"]) for _ in range(rng.randrange(3))]
    return StepIntent(
        "saga_x",
        "s9",
        seq=rng.choice([1, 2, 1000]),
        tool=rng.choice(_STRS),
        args=_args(rng),
        deps=rng.choice([ids, tuple(ids), []]),
        resources=rng.choice([[], ["crm:r1"], ("a", "b"), ["x", 'y"']]),
        declared=rng.choice(["reversible", "compensable", "irreversible"]),
        now=1.5,
        redacted=rng.choice([(), (Redaction(("k",), "API_KEY", 0),)]),
        explicit=rng.random() < 0.7,
    )


def _finish(rng: random.Random) -> StepFinish:
    def maybe(value: Any) -> Any:
        return value if rng.random() < 0.5 else None

    inverse = maybe(
        rng.choice(
            [
                {"tool": "t.undo", "args": _args(rng), "no_drift_check": rng.choice(_STRS)},
                {"tool": "t.undo", "args": _args(rng)},
                {"tool": "t.undo", "args": _args(rng), "deadline": "2026-01-01T00:00:00+00:00"},
                {"args": _args(rng), "no_drift_check": "r", "tool": 5},
                {"args": {}, "no_drift_check": None, "undo_after": ["s1"]},
            ]
        )
    )
    return StepFinish(
        rng.choice(["done", "failed", "in_doubt"]),
        effective=maybe(rng.choice(["reversible", "irreversible"])),
        result=maybe(_value(rng)),
        inverse=inverse,
        expectation=maybe({"probe": "p", "args": _args(rng), "equals": _value(rng)}),
        residue=rng.choice([(), ({"what": "an email", "n": 1},)]),
        acknowledgement=maybe({"who": "ops", "draft": rng.choice(_STRS)}),
        violation=rng.choice([None, "", "it broke rule 2"]),
        error=rng.choice([None, "", "boom", 'said "no"']),
        redacted=rng.choice([(), (Redaction(("result",), "TOKEN", 3),)]),
    )


@pytest.mark.parametrize("seed", range(40))
def test_an_intents_text_is_the_encoders_text_of_its_body(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        intent = _intent(rng)
        assert step_intent_text(intent) == intent_text(intent_body(intent))


@pytest.mark.parametrize("seed", range(40))
def test_an_outcomes_text_is_the_encoders_text_of_its_body(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        finish = _finish(rng)
        assert _finish_text(finish) == dumps(finish_body(finish))
        assert finish_text(cap_result(finish, None)) == dumps(finish_body(finish))


def test_the_fan_out_steps_records_take_the_written_way() -> None:
    """The bench step's records: the shapes the parts are written for (not the encoder's way)."""
    intent = StepIntent(
        "saga_x", "s1", seq=1, tool="bench.noop", args={"i": 0}, deps=[], resources=[],
        declared="reversible", now=1.0,
    )  # fmt: skip
    assert step_intent_text(intent) == (
        '{"args":{"i":0},"declared":"reversible","deps":[],"resources":[],"seq":1,'
        '"tool":"bench.noop"}'
    )
    finish = StepFinish(
        "done",
        effective="reversible",
        result=0,
        inverse={"tool": "bench.noop", "args": {"i": 0}, "no_drift_check": "n/a"},
    )
    assert _finish_text(finish) == (
        '{"effective":"reversible","inverse":{"args":{"i":0},"no_drift_check":"n/a",'
        '"tool":"bench.noop"},"result":0,"state":"done"}'
    )


def test_an_argument_the_log_cannot_keep_whole_takes_the_bodys_way() -> None:
    deep: Any = 1
    for _ in range(150):
        deep = [deep]
    huge = 10**5000
    for args in ({"deep": deep}, {"huge": huge}):
        intent = StepIntent(
            "saga_x", "s1", seq=1, tool="t", args=args, deps=[], resources=[],
            declared="reversible", now=1.0,
        )  # fmt: skip
        text = step_intent_text(intent)
        assert text == intent_text(intent_body(intent))
        assert "repr" in text
