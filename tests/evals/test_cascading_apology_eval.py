"""Issue 27 part 3 in ``amends eval``: the ``cascading_apology`` family. After the undo, a
scripted agent answers each apology sent with two more; the operator allows some tools, a person
refuses some of the rest, and only the reversal's budget stops it. On the real engine and log:
calls <= cap, tokens <= cap, every proposal sent (once), refused by a person, or listed as not
done; an engine that ignores the cap is caught."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from amends.evals.broken import IgnoresCapEngine
from amends.evals.cascade import check_cascade
from amends.evals.generator import FAMILIES, Scenario, generate
from amends.evals.invariants import check
from amends.evals.runner import SagaResult, run_scenario
from amends.evals.suite import ENGINES, run_indexes

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

K = FAMILIES.index("cascading_apology")


def family(n: int, seed: int = 5) -> list[Scenario]:
    return [generate(seed, K + len(FAMILIES) * j) for j in range(n)]


async def test_the_cascading_apology_family_holds_every_invariant_on_the_real_engine() -> None:
    indexes = [K + len(FAMILIES) * j for j in range(12)]
    assert {generate(5, i).family for i in indexes} == {"cascading_apology"}
    tally = (await run_indexes(indexes, 5, ("amends",)))["amends"]
    assert tally.sagas == 12
    assert tally.violations == dict.fromkeys(tally.violations, 0), tally.examples


async def test_every_way_a_proposal_can_end_occurs_and_each_is_accounted_for() -> None:
    """The family is not vacuous: across 16 sagas the agent is stopped by the call cap and by
    the token cap, a person refuses, the operator's policy lets tools through, and every
    proposal's mark is in the world exactly once when it was sent, never otherwise."""
    seen: Counter[str] = Counter()
    for sc in family(16):
        r = await run_scenario(sc)
        run = r.cascade
        assert run is not None and run.proposals, sc.ref
        assert len(run.outcomes) == len(run.proposals)
        assert run.calls_spent <= sc.budget_calls and run.tokens_spent <= sc.budget_tokens
        assert not any(check(r).values()), (sc.ref, check(r))
        for o in run.outcomes:
            seen[o["state"]] += 1
            if o["state"] == "refused":
                assert o["detail"] == "refused by a person"
        if run.stopped:
            seen["stopped: " + ("tokens" if "token budget" in run.stopped else "calls")] += 1
            assert not any(o["state"] == "sent" for o in run.outcomes if o["n"] in run.left)
    assert seen["sent"] and seen["refused"] and seen["not_done"], seen
    assert seen["stopped: calls"] and seen["stopped: tokens"], seen


async def test_an_engine_that_ignores_the_cap_is_caught() -> None:
    assert "broken-ignores-cap" in ENGINES
    caught: list[list[str]] = []
    for sc in family(30):
        good = await run_scenario(sc)
        assert good.cascade is not None
        if good.cascade.stopped is None or good.reports[0].tool_calls >= sc.budget_calls:
            continue  # the cap did not stop the agent, or the undo itself spent it all
        assert check(good)["bounded"] == []
        bad = check(await run_scenario(sc, engine_factory=IgnoresCapEngine))
        assert bad["bounded"], sc.ref
        caught.append(bad["bounded"])
        if len(caught) == 4:
            break
    assert len(caught) == 4
    assert all(any("tool calls, cap" in m or "tokens, cap" in m for m in b) for b in caught)


async def test_the_oracle_catches_a_dropped_proposal_and_one_sent_twice() -> None:
    sc = next(s for s in family(30) if s.allow_tools == ("mail.send", "sms.send"))
    r: SagaResult = await run_scenario(sc)
    run = r.cascade
    assert run is not None and run.outcomes
    assert check_cascade(sc, run, r.effects, r.world)["honesty"] == []
    dropped = dataclasses.replace(run, outcomes=run.outcomes[:-1])
    n = run.proposals[-1]["n"]
    assert (
        f"proposal p{n} ({run.proposals[-1]['tool']}) silently dropped"
        in check_cascade(sc, dropped, r.effects, r.world)["honesty"]
    )
    sent = next(o for o in run.outcomes if o["state"] == "sent")
    msgs = r.world["mail"]["messages"]
    twice = next(m for m in msgs.values() if f"[p{sent['n']}]" in m["subject"])
    world = {**r.world, "mail": {"messages": {**msgs, "again": dict(twice)}}}
    assert (
        f"proposal p{sent['n']} reported sent, the world holds 2 of it"
        in check_cascade(sc, run, r.effects, world)["honesty"]
    )


async def test_follow_ups_that_fail_or_lose_their_answer_are_accounted_for() -> None:
    """The family also draws faults on the agent's own tool calls (a vendor refusing, failing
    for a while, acting with its answer lost): across the seed's first 30 sagas some proposals
    end ``failed`` and one ``in_doubt``; each is listed in ``agent.left``, a failed one is not
    in the world, an in-doubt one at most once, and every invariant holds."""
    seen: Counter[str] = Counter()
    for sc in family(30):
        if not sc.follow_up_faults:
            continue
        r = await run_scenario(sc)
        run = r.cascade
        assert run is not None
        assert not any(check(r).values()), (sc.ref, check(r))
        for o in run.outcomes:
            seen[o["state"]] += 1
            if o["state"] in ("failed", "in_doubt"):
                assert o["n"] in run.left, (sc.ref, o)
    assert seen["failed"] >= 3 and seen["in_doubt"] >= 1, seen
    assert {f[1] for sc in family(30) for f in sc.follow_up_faults} == {
        "transient",
        "permanent",
        "act_then_raise",
    }
