"""Issue 29, the cost of a compensation: the reversal finds a step's logged redactions by id
(not by a scan of the saga per call), the plan decodes each inverse once, and the shortcuts
give exactly what the long way gave."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import amends
from amends._budget import BudgetMeter
from amends._calls import RetryPolicy
from amends._contracts import Inverse
from amends._log.base import SagaRecord, StepRecord
from amends._planner import plan
from amends._reversal.dispatch import Caller
from amends._reversal.ports import ReversalPorts
from amends._secrets import Redaction, Vault, under


class _CountedSteps(tuple[StepRecord, ...]):
    """A saga's steps that count how often they are walked."""

    walks = 0

    def __iter__(self) -> Iterator[StepRecord]:
        type(self).walks += 1
        return super().__iter__()


def _step(step_id: str, seq: int, redacted: tuple[Redaction, ...] = (), **kw: Any) -> StepRecord:
    return StepRecord(
        "saga_1", step_id, seq, "crm.update", {"v": seq}, (), (), "reversible", "reversible",
        kw.pop("state", "done"), redacted=redacted, **kw,
    )  # fmt: skip


def _saga(steps: tuple[StepRecord, ...]) -> SagaRecord:
    return SagaRecord("saga_1", "t", None, None, "completed", 0.0, 1.0, None, None, steps=steps)


def test_a_steps_redactions_are_what_a_scan_of_the_saga_finds_with_one_walk() -> None:
    """Every compensation and drift check asks for its step's redactions (rule 12): the
    reversal's caller answers as a scan of the saga's steps does, for every step, prefix and an
    unknown id, and walks the saga's steps once for all of them, not once per question."""
    card = Redaction(("inverse", "args", "card"), "card")
    key = Redaction(("expectation", "equals"), "api_key")
    landed = Redaction(("inverse", "landed", "args", "token"), "token")
    steps = _CountedSteps(
        (
            _step("a", 1, (card, key)),
            _step("b", 2),
            _step("c", 3, (landed,)),
            _step("a", 4, (key,)),  # a repeated id: the first one counts, as a scan finds it
        )
    )
    saga = _saga(steps)
    catalog = amends.Catalog()
    caller = Caller(
        ReversalPorts(log=None, catalog=catalog),  # type: ignore[arg-type]
        saga, BudgetMeter(amends.Budget()), RetryPolicy(), random.Random(0), Vault(),
    )  # fmt: skip
    questions = [
        (sid, prefix)
        for sid in ("a", "b", "c", "missing")
        for prefix in (
            ("inverse", "args"),
            ("expectation",),
            ("expectation", "args"),
            ("inverse", "landed"),
            ("inverse", "landed", "args"),
        )
    ]
    _CountedSteps.walks = 0
    got = [caller.redactions(sid, *prefix) for sid, prefix in questions * 3]
    assert _CountedSteps.walks == 1

    def scanned(sid: str, prefix: tuple[str, ...]) -> tuple[Redaction, ...]:
        step = next((s for s in saga.steps if s.step_id == sid), None)
        return () if step is None else under(step.redacted, prefix)

    want = [scanned(sid, prefix) for sid, prefix in questions * 3]
    assert got == want
    assert caller.redactions("a", "inverse", "args") == (Redaction(("card",), "card"),)
    assert caller.redactions("a", "expectation") == (Redaction(("equals",), "api_key"),)
    assert caller.redactions("c", "inverse", "landed", "args") == (Redaction(("token",), "token"),)
    assert caller.redactions("missing", "inverse", "args") == ()


def test_the_plan_keeps_the_inverse_its_classification_decoded() -> None:
    """A planned step's inverse is the step's logged inverse, decoded (one decode per step,
    issue 29), for a step to revert, one to review and one on an undo-order cycle; a step the
    plan does not call an inverse for has none."""
    inverse = {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a test"}
    unchecked = {"tool": "crm.update", "args": {"v": 1}}  # no drift check, no reason: review
    steps = (
        _step("a", 1, inverse=inverse),
        _step("b", 2, inverse=unchecked),
        _step("c", 3, inverse={**inverse, "undo_after": ["d"]}),
        _step("d", 4, inverse={**inverse, "undo_after": ["g"]}),
        _step("g", 5, inverse={**inverse, "undo_after": ["c"]}),
        _step("e", 6, inverse=inverse, state="failed"),
        _step("f", 7),
    )
    planned = {p.step_id: p for p in plan(_saga(steps), now=0.0).steps}
    assert [planned[s].action for s in "abcdgef"] == [
        "revert", "review", "review", "review", "review", "skip", "acknowledge",
    ]  # fmt: skip
    for s in steps[:5]:
        assert s.inverse is not None
        assert planned[s.step_id].inverse == Inverse.from_dict(s.inverse)
    assert planned["e"].inverse is None and planned["f"].inverse is None
    assert planned["a"].inverse is not planned["c"].inverse  # one per step, not shared
