"""The adversarial suite: amends holds every invariant; naive and each broken engine do not."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from amends.cli import main
from amends.evals.broken import (
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
)
from amends.evals.invariants import check
from amends.evals.runner import run_scenario
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
    assert amends.sagas == naive.sagas == len(indexes) == 28
    assert amends.violations == dict.fromkeys(amends.violations, 0), amends.examples
    assert amends.silently_wrong == 0
    assert naive.silent_failure_rate > 0.5
    assert set(amends.by_family) == set(FAMILIES) - {"stall"}


def test_generator_is_deterministic_and_covers_1_to_40_steps_plus_the_familys() -> None:
    assert generate(1, 17) == generate(1, 17)
    assert generate(1, 17) != generate(2, 17)
    sizes = [len(generate(1, i).steps) for i in range(300)]
    assert min(sizes) >= 1 and max(sizes) <= 40 + 4  # a family appends up to 4 steps
    assert [generate(1, i).family for i in range(len(FAMILIES))] == list(FAMILIES)


def test_generator_produces_each_issue_10_class() -> None:
    """Each class of issue 10 is generated, as data a replay shows."""
    by_family = {f: [generate(2, i) for i in range(k, 15 * len(FAMILIES), len(FAMILIES))]
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
