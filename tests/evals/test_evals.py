"""The adversarial suite: amends holds every invariant; naive and each broken engine do not."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import amends
from amends import StepState
from amends.cli import main
from amends.evals.broken import (
    LooseEqualityEngine,
    NoDriftCheckEngine,
    NoIdempotencyEngine,
    ResendAfterCrashEngine,
    ReverseTimeOrderEngine,
    UncheckedReportEngine,
    WaitsForInFlightEngine,
)
from amends.evals.generator import (
    FAMILIES,
    STALL_BUDGET,
    Mutation,
    Scenario,
    StepSpec,
    generate,
    lookalike,
)
from amends.evals.invariants import check
from amends.evals.runner import previewable, run_scenario
from amends.evals.suite import run_indexes, run_suite
from amends.testing import saga_dags, scenarios

# An event loop's self-pipe socket (not created by amends.evals) is sometimes garbage-collected
# unclosed during these tests; tracked in the report, filtered narrowly here.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

RECORDS = {"r1": {"stage": "lead", "owner": "sam", "amount": "100"}}
START = "2026-12-09T15:00:00+00:00"


def _sc(steps: list[StepSpec], **kw: object) -> Scenario:
    return Scenario(7, 0, "handmade", tuple(steps), records=RECORDS, **kw)  # type: ignore[arg-type]


async def test_every_family_amends_holds_every_invariant_and_naive_is_silently_wrong() -> None:
    """Two sagas of every family but stall (its own test: it sleeps), on the sandbox."""
    indexes = [i for i in range(2 * len(FAMILIES)) if generate(3, i).family != "stall"]
    tallies = await run_indexes(indexes, 3, ("amends", "naive"))
    amends, naive = tallies["amends"], tallies["naive"]
    assert amends.sagas == naive.sagas == len(indexes) == 38  # 20 families (issue 27: selective,
    # cascading_apology; rule 9: retry_after_refusal; rule 12: hostile_words)
    assert amends.violations == dict.fromkeys(amends.violations, 0), amends.examples
    assert amends.silently_wrong == 0
    assert naive.silent_failure_rate > 0.5
    assert set(amends.by_family) == set(FAMILIES) - {"stall"}


async def test_a_batch_runs_with_the_batch_collector_and_puts_the_callers_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: while the sagas run, the collector uses the batch thresholds and the objects
    alive before the batch are frozen; afterwards (an error too) the caller's settings are back
    and nothing stays frozen. The sagas are checked as before."""
    import gc

    from amends.evals import suite

    gc.set_threshold(700, 10, 10)
    seen: list[tuple[tuple[int, ...], int]] = []
    real = suite.check

    def spy(r: Any) -> Any:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return real(r)

    monkeypatch.setattr(suite, "check", spy)
    indexes = [i for i in range(8) if generate(5, i).family not in ("stall", "crash")]
    tallies = await run_indexes(indexes, 5, ("amends",))
    assert tallies["amends"].sagas == len(indexes) == len(seen)
    assert tallies["amends"].violations == dict.fromkeys(tallies["amends"].violations, 0)
    assert all(t == suite.BATCH_GC_THRESHOLD and frozen > 0 for t, frozen in seen), seen
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0

    def broken(r: Any) -> Any:
        raise RuntimeError("an invariant check crashed")

    monkeypatch.setattr(suite, "check", broken)
    with pytest.raises(RuntimeError, match="crashed"):
        await run_indexes(indexes[:1], 5, ("amends",))
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_generator_is_deterministic_and_covers_1_to_40_steps_plus_the_familys() -> None:
    assert generate(1, 17) == generate(1, 17)
    assert generate(1, 17) != generate(2, 17)
    sizes = [len(generate(1, i).steps) for i in range(300)]
    # one_plan appends up to 3 chains of 4 and 2 gate chains of 4
    assert min(sizes) >= 1 and max(sizes) <= 40 + 12 + 8
    assert [generate(1, i).family for i in range(len(FAMILIES))] == list(FAMILIES)


def test_generator_draws_the_same_steps_as_before_issue_29() -> None:
    """The generator's lookups became incremental (issue 29); every saga's steps are drawn
    exactly as before: a sha256 of 600 sagas' steps (seeds 1-3, indexes 0-199), computed with
    the generator of ea026dc (a8c10e83...). It moved once on purpose since: the family
    ``retry_after_refusal`` (issue: rule 9 retries, after 923b0bf) made FAMILIES 19 long, so
    each index's family (``index % 19``), hence its draws, changed; and once more when
    ``one_plan`` learned gates behind gates (issue 23, ``_gates``: its sagas' draws changed,
    no other family's); and once more when the family ``hostile_words`` (rule 12: words that
    read as the report's own lines) made FAMILIES 20 long. The digest below is that
    generator's, and pins it from now on."""
    digest = hashlib.sha256()
    for seed in (1, 2, 3):
        for index in range(200):
            steps = [dataclasses.asdict(s) for s in generate(seed, index).steps]
            digest.update(json.dumps(steps, sort_keys=True).encode())
    assert digest.hexdigest() == "0083c90cfc037eb843ba619731f80a6584f98c5f2804fbf4383aa2685216a886"


def test_generator_produces_each_issue_10_class() -> None:
    """Each class of issue 10 is generated, as data a replay shows (30 sagas of each family:
    with 19 families, the first 15 ``follow_ups`` sagas of seed 2 fault only ``chat.announce``;
    over 900 the two follow-ups are faulted 412 and 391 times)."""
    by_family = {f: [generate(2, i) for i in range(k, 30 * len(FAMILIES), len(FAMILIES))]
                 for k, f in enumerate(FAMILIES)}  # fmt: skip
    tools = {f: {s.tool for sc in scs for s in sc.steps} for f, scs in by_family.items()}
    kinds = {f: {k for sc in scs for _, k, _ in sc.forward_faults + sc.reversal_faults}
             for f, scs in by_family.items()}  # fmt: skip
    assert kinds["acts_then_fails"] == {"act_then_raise", "raise_after_inverse"}  # rule 9
    keyless = by_family["keyless_crash"]  # rule 5
    assert all(sc.crash_op == "ledger.reverse" and "ledger.post" in {s.tool for s in sc.steps}
               for sc in keyless)  # fmt: skip
    assert {"chat.announce", "crm.log_activity"} <= {  # rule 7: nested, failing follow-ups
        t for sc in by_family["follow_ups"] for t, _, _ in sc.reversal_faults
    }
    assert any("log_to" in s.args for sc in by_family["follow_ups"] for s in sc.steps)
    declared = [s for sc in by_family["undo_order"] for s in sc.steps if s.undo_after]  # rule 3
    assert declared and all(s.tool == "payments.charge" and "deal" in s.args for s in declared)
    assert {"careless.update_field", "docs.create_private_note"} <= tools["no_expectation"]
    # rule 7: a stalled forward call while undo runs on a seconds budget of milliseconds
    assert all(sc.stall and sc.budget_seconds == STALL_BUDGET for sc in by_family["stall"])


def test_generator_produces_issue_23s_same_resource_chains_gated_drift_and_budget_cuts() -> None:
    """one_plan (rule 10): a CRM field written two or three times, another field of the record
    after it, another actor's edit of a later write, and tool-call budgets below the need."""
    scs = [generate(2, i) for i in range(FAMILIES.index("one_plan"), 40 * len(FAMILIES),
                                         len(FAMILIES))]  # fmt: skip
    chains = []
    for sc in scs:
        writes = collections.Counter(
            (s.args["record_id"], s.args["field"]) for s in sc.steps if s.tool == "crm.update_field"
        )
        chains.append(max(writes.values()))
    assert min(chains) >= 2 and max(chains) >= 3
    assert any(s.args["value"].startswith("gate") for sc in scs for s in sc.steps
               if s.tool == "crm.update_field" and isinstance(s.args["value"], str))  # fmt: skip
    assert sum(1 for sc in scs if any(m.kind == "human_edit" for m in sc.mutations)) >= 10
    assert sum(1 for sc in scs if sc.budget_calls < len(sc.steps)) >= 5
    assert all(previewable(sc) for sc in scs)


def test_generator_produces_a_drifted_step_behind_a_gate_behind_another_gate() -> None:
    """one_plan (issue 23): writes to different records whose inverses each wait for the one
    before (``undo_after``), two deep, another actor editing one of them: what waits behind the
    drifted one is blocked, in the preview as in undo. The generator produced no ``undo_after``
    in this family before."""
    scs = [generate(2, i) for i in range(FAMILIES.index("one_plan"), 100 * len(FAMILIES),
                                         len(FAMILIES))]  # fmt: skip
    deep = 0
    for sc in scs:
        waits = {s.step_id: s.undo_after for s in sc.steps if s.undo_after}
        two_deep = {a for a, (b,) in waits.items() if b in waits}
        edited = {m.step_id for m in sc.mutations}
        behind = {b for a in two_deep for b in (a, *waits[a], *waits[waits[a][0]])}
        deep += bool(two_deep and edited & behind)
    assert deep >= 5
    assert all(previewable(sc) for sc in scs)


class PlanOnlyPreviewEngine(amends.Engine):
    """A preview as it was before issue 23: each step's own check, no gating, no budget."""

    async def preview(self, saga_id: str, *, budget: amends.Budget | None = None) -> Any:
        got = await super().preview(saga_id, budget=amends.Budget(tool_calls=100_000))
        steps = tuple(
            dataclasses.replace(p, predicted=StepState.DRIFTED)
            if p.predicted is StepState.DRIFTED
            else dataclasses.replace(
                p,
                predicted={"revert": StepState.REVERTED, "compensate": StepState.COMPENSATED}.get(
                    p.action, p.predicted
                ),
            )
            for p in got.steps
        )
        return dataclasses.replace(got, steps=steps)


async def test_preview_invariant_catches_a_preview_that_ignores_gating_and_budget() -> None:
    """Two writes to one record, the later one edited by a person since: undo blocks the
    earlier one, and a preview that judges each step alone says it will be reverted."""
    steps = [
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"}),
        StepSpec("s2", "crm.update_field", {"record_id": "r1", "field": "owner", "value": "ann"}),
    ]
    sc = _sc(steps, mutations=(Mutation("human_edit", "s2", "bob"),))
    good = await run_scenario(sc)
    assert good.preview == {"s1": "blocked", "s2": "drifted"}
    assert not any(check(good).values())
    bad = await run_scenario(sc, engine_factory=PlanOnlyPreviewEngine)
    assert check(bad)["preview"] == ["s1: preview predicted reverted, undo reported blocked"]


def test_generator_produces_lookalike_edits_and_edits_between_crash_and_recovery() -> None:
    """The adversary's classes: a person retypes a value the agent wrote into one Python finds
    ``==`` but JSON does not (drift family), and a person acts while the crashed worker is down
    (crash family)."""
    scs = [generate(5, i) for i in range(40 * len(FAMILIES))]
    drift = [sc for sc in scs if sc.family == "drift"]
    looks = [(sc, m) for sc in drift for m in sc.mutations if m.kind == "lookalike_edit"]
    assert len(looks) >= len(drift) // 2
    for sc, m in looks:
        wrote = next(s.args["value"] for s in sc.steps if s.step_id == m.step_id)
        assert m.value == wrote and type(m.value) is not type(wrote)  # True vs 1, 0 vs False
    crash = [sc for sc in scs if sc.family == "crash"]
    during = [sc for sc in crash if sc.recovery_mutations]
    assert len(crash) // 4 <= len(during) < len(crash)
    assert any(m.kind == "lookalike_edit" for sc in during for m in sc.recovery_mutations)
    assert all(not sc.recovery_mutations for sc in scs if sc.family != "crash")


@pytest.mark.parametrize(("wrote", "person"), [(1, True), (False, 0), (True, 1), (0, False)])
async def test_lookalike_edit_is_drift_and_a_loose_equality_engine_overwrites_it(
    wrote: object, person: object
) -> None:
    """Rule 4: a person's ``True`` where the agent wrote ``1`` is a change (JSON tells them
    apart): amends leaves it, drifted; an engine comparing with ``==`` writes the old value back."""
    assert lookalike(wrote) == person
    step = StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "seats", "value": wrote})
    sc = _sc([step], mutations=(Mutation("lookalike_edit", "s1", person),))
    good = await run_scenario(sc)
    seats = good.world["crm"]["records"]["r1"]["fields"]["seats"]
    assert seats == person and type(seats) is type(person)
    assert [o.state.value for o in good.reports[0].steps] == ["drifted"]
    assert not any(check(good).values()), check(good)
    bad = await run_scenario(sc, engine_factory=LooseEqualityEngine)
    assert bad.world["crm"]["records"]["r1"]["fields"]["seats"] is None  # the old value
    assert check(bad)["never_worse"] == [
        "s1: update_field overwrote another actor's change to crm r1.seats"
    ]


async def test_a_persons_edit_between_a_crash_and_recovery_is_never_overwritten() -> None:
    """Rule 5 with rule 4: the delete was in flight when the worker died; a collaborator edits
    the draft before recovery. The recovering engine sees neither the agent's draft nor the
    delete and does not send it again (drifted); an engine without drift checks deletes it."""
    sc = _sc(
        [StepSpec("s1", "docs.create_draft", {"title": "Plan", "text": "t"})],
        crash=(1, False),
        crash_op="docs.delete",  # the worker dies as the delete is sent, before it lands
        recovery_mutations=(Mutation("collaborator_edit", "s1", "edited by a collaborator"),),
    )
    good = await run_scenario(sc)
    assert good.crashed
    doc = good.world["docs"]["docs"]["doc_1"]
    assert (doc["text"], doc["status"]) == ("edited by a collaborator", "draft")
    assert [o.state.value for o in good.reports[-1].steps] == ["drifted"]
    assert not any(check(good).values()), check(good)
    bad = await run_scenario(sc, engine_factory=NoDriftCheckEngine)
    assert bad.world["docs"]["docs"]["doc_1"]["status"] == "deleted"
    assert check(bad)["never_worse"] == [
        "s1: delete overwrote another actor's change to docs doc_1"
    ]


@pytest.mark.parametrize("landed", [False, True])
async def test_a_webhook_write_between_a_crash_and_recovery_is_drift_whether_the_undo_landed(
    landed: bool,
) -> None:
    """The write-back of s1 was in flight at the crash (landed or not); a webhook writes the
    field before recovery. The engine sees neither the agent's value nor the old one: drifted,
    not sent again, the webhook's value kept. Honest either way (rule 8: unsure), though the
    journal shows the write-back landed when it did."""
    step = StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"})
    sc = _sc(
        [step],
        crash=(1, landed),
        crash_op="crm.update_field",
        recovery_mutations=(Mutation("webhook_edit", "s1", "churned"),),
    )
    r = await run_scenario(sc)
    assert r.crashed
    assert r.world["crm"]["records"]["r1"]["fields"]["stage"] == "churned"
    assert [o.state.value for o in r.reports[-1].steps] == ["drifted"]
    assert _ops(r.effects).count(("s1:compensate", "update_field")) == int(landed)
    assert not any(check(r).values()), check(r)


async def test_stalled_forward_step_undo_returns_within_the_seconds_budget() -> None:
    """Rule 7: undo asked while a forward call stalls answers within its seconds budget; the
    stalled step is reported as still standing (its effect lands later), never cancelled."""
    steps = [
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "a"}),
        StepSpec("s2", "payments.charge", {"customer": "cus_acme", "cents": 300}),
        StepSpec("s3", "chat.post", {"channel": "#sales", "text": "hi"}, ("s2",)),
    ]
    sc = _sc(steps, stall="payments.charge", stall_seconds=1.5, budget_seconds=0.3)
    r = await run_scenario(sc)
    assert r.stalled == ["s2"]
    assert r.durations[0] < 1.5
    states = {o.step_id: o.state.value for o in r.reports[0].steps}
    assert states["s1"] == "reverted"
    assert states["s2"] in ("in_doubt", "over_budget")
    assert states.get("s3", "cancelled") in ("cancelled", "not_needed")
    assert ("s2:forward", "charge") in _ops(r.effects)  # it acted after the undo answered
    assert not any(check(r).values()), check(r)
    # issue 23 (finish): once the charge went through, a continuation refunds it
    assert isinstance(r.continued, amends.UndoReport), r.continued
    assert {o.step_id: o.state.value for o in r.continued.steps}["s2"] == "compensated"
    assert ("s2:compensate", "refund") in _ops(r.continued_effects)
    bad = await run_scenario(sc, engine_factory=WaitsForInFlightEngine)
    assert bad.durations[0] > 1.0  # it waited for the stalled call
    assert check(bad)["bounded"] == [
        "the first answer came only after the stalled step s2 acted (1.5s after undo was asked); "
        "budget 0.3s"
    ]


async def test_drift_check_invariant_catches_engine_that_skips_drift_checks() -> None:
    sc = _sc(
        [StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"})],
        mutations=(Mutation("human_edit", "s1", "lost"),),
    )
    good = await run_scenario(sc)
    assert good.world["crm"]["records"]["r1"]["fields"]["stage"] == "lost"  # the human's value
    assert good.reports[0].steps[0].state.value == "drifted"
    assert not any(check(good).values())
    bad = await run_scenario(sc, engine_factory=NoDriftCheckEngine)
    # the human's "lost" was overwritten: without a precondition the sandbox CRM writes blindly
    assert bad.world["crm"]["records"]["r1"]["fields"]["stage"] == "lead"
    assert check(bad)["never_worse"] == [
        "s1: update_field overwrote another actor's change to crm r1.stage"
    ]


def _ops(effects: list[dict[str, object]]) -> list[tuple[object, object]]:
    """(tag, op) of every effect a tool caused, in order."""
    return [(e["tag"], e["op"]) for e in effects if e.get("tag")]


async def test_an_inverse_the_budget_cut_off_in_flight_is_finished_by_a_continuation() -> None:
    """Issue 23 (finish): s1's inverse stalls at its vendor; the 0.3 s budget cuts it off in
    flight with no time left to look: in doubt for want of budget. The eval continues the
    reversal once the stalled charge acted: s1 is looked at, reverted, and the charge refunded.
    Before, continuing answered "nothing to continue"."""
    steps = [
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "a"}),
        StepSpec("s2", "payments.charge", {"customer": "cus_acme", "cents": 300}),
    ]
    sc = _sc(
        steps, stall="payments.charge", stall_seconds=1.5, budget_seconds=0.3,
        inverse_stalls=("s1",),
    )  # fmt: skip
    r = await run_scenario(sc)
    first = r.reports[0].step("s1")
    assert first.state.value == "in_doubt"
    assert "no budget was left to look with its probes" in first.detail
    assert isinstance(r.continued, amends.UndoReport), r.continued
    assert {o.step_id: o.state.value for o in r.continued.steps} == {
        "s1": "reverted",
        "s2": "compensated",
    }
    assert not any(check(r).values()), check(r)


async def test_idempotency_invariant_catches_engine_that_ignores_idempotency_keys() -> None:
    steps = [
        StepSpec("s1", "docs.create_draft", {"title": "Plan", "text": "t"}),
        StepSpec("s2", "docs.share", {"doc_id": {"$ref": "s1", "key": "id"}, "people": ["a@x"]}),
    ]
    # call 1: the drift probe; call 2: the unshare, which lands, then the process dies
    sc = _sc(steps, crash=(2, True))
    good = await run_scenario(sc)
    assert good.crashed
    assert _ops(good.effects) == [
        ("s1:forward", "create"),
        ("s2:forward", "share_notice"),
        ("s2:compensate", "unshare"),  # re-sent after recovery with the same key: replayed
        ("s1:compensate", "delete"),
    ]
    assert [o.state.value for o in good.reports[-1].steps] == ["reverted", "compensated"]
    assert not any(check(good).values())
    bad = await run_scenario(sc, engine_factory=NoIdempotencyEngine)
    assert _ops(bad.effects).count(("s2:compensate", "unshare")) == 2
    assert check(bad)["idempotency"] == ["s2: inverse applied 2 times"]


async def test_rule5_a_reversal_in_flight_at_a_crash_is_never_resent_to_a_key_ignoring_ledger() -> (
    None
):
    """The ledger ignores idempotency keys: after the crash amends asks the landed probe instead
    of re-sending (one reversing entry); an engine that re-sends blindly books two."""
    sc = _sc(
        [StepSpec("s1", "ledger.post", {"account": "acme", "cents": 500})],
        crash=(2, True),  # call 1: the drift probe; call 2: the reversal lands, the worker dies
    )
    good = await run_scenario(sc)
    assert good.crashed
    assert _ops(good.effects) == [("s1:forward", "post"), ("s1:compensate", "reverse_entry")]
    assert good.world["ledger"]["entries"]["le_1"]["status"] == "reversed"
    assert [o.state.value for o in good.reports[-1].steps] == ["compensated"]
    assert not any(check(good).values())
    bad = await run_scenario(sc, engine_factory=ResendAfterCrashEngine)
    assert _ops(bad.effects).count(("s1:compensate", "reverse_entry")) == 2
    v = check(bad)
    assert v["never_worse"] == ["le_1 refunded 2 times"]
    assert v["idempotency"] == ["s1: inverse applied 2 times"]


async def test_order_invariant_catches_engine_that_undoes_in_reverse_time_order() -> None:
    sc = _sc(
        [
            StepSpec(
                "s1",
                "calendar.create_event",
                {"title": "Kickoff", "start": START, "attendees": ["a@x"]},
            ),
            StepSpec("s2", "chat.post", {"channel": "#sales", "text": {"$ref": "s1", "key": "id"}}),
        ],
        reversal_faults=(("chat.delete", "permanent", 1),),
    )
    good = await run_scenario(sc)
    assert [(o.step_id, o.state.value) for o in good.reports[0].steps] == [
        ("s1", "blocked"),
        ("s2", "failed"),
    ]
    assert good.world["calendar"]["events"]["evt_1"]["status"] == "confirmed"
    assert not any(check(good).values())
    bad = await run_scenario(sc, engine_factory=ReverseTimeOrderEngine)
    assert bad.world["calendar"]["events"]["evt_1"]["status"] == "cancelled"
    assert check(bad)["order"] == ["s1 was undone before its dependent s2 (which never was)"]


async def test_order_invariant_judges_each_scenario_by_its_own_dependencies_interleaved() -> None:
    """The oracle groups a scenario's dependencies once (issue 29); two scenarios with the same
    ref, one where the chat post quotes the event and one where it does not, checked in turn,
    are each judged by their own steps."""
    event = StepSpec(
        "s1", "calendar.create_event", {"title": "Kickoff", "start": START, "attendees": ["a@x"]}
    )
    quoting = _sc(
        [
            event,
            StepSpec("s2", "chat.post", {"channel": "#sales", "text": {"$ref": "s1", "key": "id"}}),
        ],
        reversal_faults=(("chat.delete", "permanent", 1),),
    )
    plain = dataclasses.replace(
        quoting, steps=(event, StepSpec("s2", "chat.post", {"channel": "#sales", "text": "hi"}))
    )
    assert quoting.ref == plain.ref
    bad_quoting = await run_scenario(quoting, engine_factory=ReverseTimeOrderEngine)
    bad_plain = await run_scenario(plain, engine_factory=ReverseTimeOrderEngine)
    for r in (bad_quoting, bad_plain):  # the same world either way: the event undone, the post not
        assert r.world["calendar"]["events"]["evt_1"]["status"] == "cancelled"
        assert {o.step_id: o.state.value for o in r.reports[0].steps} == {
            "s1": "compensated",
            "s2": "failed",
        }
    for _ in range(2):
        assert check(bad_quoting)["order"] == [
            "s1 was undone before its dependent s2 (which never was)"
        ]
        assert check(bad_plain)["order"] == []


async def test_honesty_invariant_catches_engine_that_reports_reverted_without_checking() -> None:
    sc = _sc(
        [StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"})],
        mutations=(Mutation("webhook_edit", "s1", "churned"),),
    )
    bad = await run_scenario(sc, engine_factory=UncheckedReportEngine)
    assert bad.world["crm"]["records"]["r1"]["fields"]["stage"] == "churned"
    v = check(bad)
    assert v["honesty"] == [
        "report says fully_reversed, the world shows cannot_undo",
        "s1: report says reverted, world: stands",
    ]


async def test_bounded_and_idempotency_catch_the_naive_stack() -> None:
    steps = [
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"}),
        StepSpec("s2", "crm.add_note", {"record_id": "r1", "text": "n"}),
    ]
    r = await run_scenario(_sc(steps, budget_calls=1), "naive")
    assert check(r)["bounded"] == ["2 tool calls, budget 1"]
    good = await run_scenario(_sc(steps, budget_calls=1))
    assert good.reports[0].tool_calls <= 1 and not any(check(good).values())
    r = await run_scenario(_sc(steps, requests="concurrent", n_requests=3), "naive")
    assert "3 requests got 3 different reversals" in check(r)["idempotency"]
    good = await run_scenario(_sc(steps, requests="concurrent", n_requests=3))
    assert len({rep.reversal_id for rep in good.reports}) == 1
    assert not any(check(good).values())


@pytest.mark.slow
async def test_three_hundred_sagas_over_two_processes_amends_holds_every_invariant() -> None:
    tallies = await run_suite(300, 11, ("amends", "naive"), jobs=2)
    amends, naive = tallies["amends"], tallies["naive"]
    assert amends.sagas == naive.sagas == 300
    assert amends.violations == dict.fromkeys(amends.violations, 0), amends.examples
    assert set(amends.by_family) == set(FAMILIES)
    assert naive.silent_failure_rate > 0.5


def test_cli_eval_json_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--sagas", "9", "--seed", "4", "--json", "--jobs", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engines"]["amends"]["silent_failure_rate"] == 0
    assert data["engines"]["naive"]["sagas"] == 9
    assert main(["eval", "--replay", "4:3", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["scenario"]["index"] == 3
    assert set(rep["engines"]) == {"amends", "naive"}
    assert all(not v for v in rep["engines"]["amends"]["violations"].values())
    assert main(["eval", "--replay", "nonsense"]) == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(seeds=st.integers(0, 50), indexes=st.integers(0, 500)))
def test_property_amends_holds_every_invariant(sc: Scenario) -> None:
    assume(sc.family != "stall")  # it sleeps seconds; pinned by its own test and the slow run
    r = asyncio.run(run_scenario(sc))
    assert check(r) == {k: [] for k in check(r)}, sc.ref


@given(saga_dags({"crm.read_field": st.fixed_dictionaries({"record_id": st.just("r1"),
                                                          "field": st.just("stage")})},
                 max_steps=5))  # fmt: skip
def test_saga_dags_draws_valid_dags(steps: list[StepSpec]) -> None:
    ids = [s.step_id for s in steps]
    assert 1 <= len(steps) <= 5
    for i, s in enumerate(steps):
        assert set(s.after) <= set(ids[:i])
