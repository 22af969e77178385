"""Rule 9's retry in ``amends eval``: the ``retry_after_refusal`` family. A call on a resource
that the vendor refused had no effect, so the agent's retry of it on the same resource runs
(923b0bf); a call whose outcome is unknown (``in_doubt``) keeps the retry from running, directly
or behind a skipped step, and so does a step named in ``after=`` that did not end done. Checked
on the final world after the undo and on the report, by the oracle's own reading of rule 9."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from amends import StepState
from amends.evals.generator import FAMILIES, REFUSED_TIMES, Scenario, StepSpec, generate
from amends.evals.invariants import check
from amends.evals.runner import FAST_RETRY, run_scenario
from amends.evals.suite import run_indexes

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

K = FAMILIES.index("retry_after_refusal")
RECORDS = {r: {"stage": "lead", "owner": "sam", "amount": "100"} for r in ("r1", "r2", "r3")}
_ON = {"crm.update_field": "record_id", "crm.add_note": "record_id", "chat.edit": "message_id",
       "docs.share": "doc_id"}  # fmt: skip


def _upd(sid: str, rid: str, fld: str, value: str, after: tuple[str, ...] = ()) -> StepSpec:
    args = {"record_id": rid, "field": fld, "value": value}
    return StepSpec(sid, "crm.update_field", args, after)


def known() -> Scenario:
    """Refused then retried (r1), named after= the refusal (a mail), in doubt then a retry
    that must wait (r2, and a note on r2 behind the skipped retry), transient to the end then
    a chain through a skipped step (r3)."""
    steps = (
        _upd("s1", "r1", "stage", "Won1"),
        _upd("s2", "r1", "stage", "closed_won"),
        StepSpec("s3", "mail.send", {"to": "ana@acme.test", "subject": "Won"}, ("s1",)),
        _upd("s4", "r2", "stage", "closed_won"),
        _upd("s5", "r2", "stage", "closed_won"),
        _upd("s6", "r3", "stage", "x6"),
        _upd("s7", "r3", "owner", "kim", ("s6",)),
        _upd("s8", "r3", "stage", "closed_won"),
        _upd("s9", "r3", "owner", "kim"),
        StepSpec("s10", "crm.add_note", {"record_id": "r2", "text": "won"}),
    )
    faults = (("s1", "permanent", 1), ("s4", "act_then_raise", 1), ("s6", "transient", 8))
    return Scenario(9, 0, "handmade", steps, step_faults=faults, records=copy.deepcopy(RECORDS))


FORWARD = {
    "s1": "failed", "s2": "done", "s3": "skipped", "s4": "in_doubt", "s5": "skipped",
    "s6": "failed", "s7": "skipped", "s8": "done", "s9": "done", "s10": "skipped",
}  # fmt: skip


def test_the_generator_draws_refused_then_retried_and_in_doubt_then_blocked() -> None:
    scs = [generate(2, K + len(FAMILIES) * j) for j in range(80)]
    assert {sc.family for sc in scs} == {"retry_after_refusal"}
    assert FAST_RETRY.max_attempts < REFUSED_TIMES  # transient to the end: refused
    seen: set[tuple[str, str]] = set()
    for sc in scs:
        assert sc.step_faults and not sc.forward_faults and not sc.mutations
        by_id = {s.step_id: s for s in sc.steps}
        for sid, kind, times in sc.step_faults:
            first = by_id[sid]
            assert (kind, times) in {
                ("permanent", 1), ("transient", 8), ("act_then_raise", 1),
                ("raise_after_inverse", 1),
            }  # fmt: skip
            ends = {"act_then_raise": "in_doubt", "raise_after_inverse": "acted"}.get(
                kind, "refused"
            )
            later = sc.steps[sc.steps.index(first) + 1 :]
            on = first.args[_ON[first.tool]]
            retries = [s for s in later if s.tool == first.tool and s.args[_ON[s.tool]] == on
                       and sid not in s.after]  # fmt: skip
            assert retries, (sc.ref, sid)  # the same call on the same resource, waits only for it
            seen.add((ends, first.tool))
            if first.tool == "crm.update_field" and first.args["value"] != retries[0].args["value"]:
                seen.add((ends, "corrected arguments"))
            named = [s for s in later if sid in s.after]
            for s in named:  # a chain on the same record, or another resource's step
                same = s.args.get("record_id") == first.args.get("record_id")
                seen.add((ends, "chain" if same and s.tool == first.tool else f"after= {s.tool}"))
    tools = ("crm.update_field", "crm.add_note", "chat.edit", "docs.share")
    # "acted" (f6b3004's class): failed for the agent after acting, logged done: the retry waits
    for ends in ("refused", "in_doubt", "acted"):
        assert {(ends, t) for t in tools} <= seen, seen
        assert {(ends, "chain"), (ends, "corrected arguments"), (ends, "after= mail.send")} <= seen


async def test_a_known_saga_retry_runs_after_a_refusal_and_waits_behind_an_unknown_outcome() -> (
    None
):
    r = await run_scenario(known())
    assert r.forward == FORWARD
    assert check(r) == {name: [] for name in check(r)}
    report = r.reports[0]
    assert [(o.step_id, o.state) for o in report.steps] == [
        ("s1", StepState.NOT_NEEDED), ("s2", StepState.REVERTED), ("s3", StepState.NOT_NEEDED),
        ("s4", StepState.IN_DOUBT), ("s5", StepState.NOT_NEEDED), ("s6", StepState.NOT_NEEDED),
        ("s7", StepState.NOT_NEEDED), ("s8", StepState.REVERTED), ("s9", StepState.REVERTED),
        ("s10", StepState.NOT_NEEDED),
    ]  # fmt: skip
    assert report.status == "cannot_undo"  # s4 may have written r2: a person must check
    detail = {o.step_id: o.detail for o in report.steps}
    assert detail["s5"] == "never ran: step s4 (crm.update_field) it waits for is in_doubt"
    assert detail["s10"] == "never ran: step s5 (crm.update_field) it waits for is skipped"
    assert detail["s3"] == "never ran: step s1 (crm.update_field) it waits for is failed"
    assert detail["s7"] == "never ran: step s6 (crm.update_field) it waits for is failed"
    assert detail["s1"].startswith("the call failed, so it had no effect")
    crm = {rid: rec["fields"] for rid, rec in r.world["crm"]["records"].items()}
    assert crm["r1"] == crm["r3"] == RECORDS["r1"]  # the retries undone, the refusals did nothing
    r2 = r.world["crm"]["records"]["r2"]  # s4's write stands (a person checks); no retry, no note
    assert r2["fields"]["stage"] == "closed_won" and r2["version"] == 2 and r2["notes"] == {}
    assert r.world["mail"]["messages"] == {}  # named after= a refused call: never sent
    forward = {e["tag"] for e in r.effects if e.get("tag", "").endswith(":forward")}
    assert forward == {"s2:forward", "s4:forward", "s8:forward", "s9:forward"}
    undone = {e["tag"] for e in r.effects if e.get("tag", "").endswith(":compensate")}
    assert undone == {"s2:compensate", "s8:compensate", "s9:compensate"}


async def test_the_naive_stack_leaves_the_in_doubt_write_out_of_its_report() -> None:
    r = await run_scenario(known(), "naive")
    assert check(r)["honesty"] == [
        "report says fully_reversed, the world shows cannot_undo",
        "s4: missing from the report, world: stands",
    ]


async def test_the_oracle_catches_a_retry_that_never_ran_after_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before 923b0bf any step that did not end done blocked what waits for it: the agent's
    retry of a refused call never ran. The world is honest about that, so only ``forward``
    (rule 9 read by the oracle on its own) catches it."""
    from amends import _saga

    def any_not_done(step: Any) -> Any:
        return next((d for d in step.deps if d.state != "done"), None)

    monkeypatch.setattr(_saga, "blocker", any_not_done)
    r = await run_scenario(known())
    assert {s: st for s, st in r.forward.items() if st != FORWARD[s]} == {
        "s2": "skipped", "s8": "skipped", "s9": "skipped"
    }  # fmt: skip
    assert check(r)["forward"] == [
        "s2: the forward pass left it skipped, rule 9 says done (it waits only via a shared "
        "resource for s1, which had no effect)",
        "s8: the forward pass left it skipped, rule 9 says done (it waits only via a shared "
        "resource for s7, which had no effect)",
        "s9: the forward pass left it skipped, rule 9 says done (nothing blocks it)",
    ]
    assert check(r)["honesty"] == []  # what did not run is honestly reported as not needed


def ran_though_skipped(sid: str, why: str, said: str) -> list[str]:
    """What ``forward`` says of a step rule 9 says never runs, which ran and was undone."""
    return [
        f"{sid}: the forward pass left it done, rule 9 says skipped ({why})",
        f"{sid}: the world shows an effect of a call that never ran ({why})",
        f"{sid}: the report says reverted ({said!r}), not that it never ran ({why})",
    ]


async def test_the_oracle_catches_a_retry_that_ran_behind_an_unknown_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine that lets a step run whenever what it names in ``after=`` ended done, whatever
    the earlier writer of its resource did: the retry writes over a value that may be the
    in-doubt call's. Its effect in the world and its forward state are caught."""
    from amends import _saga

    def named_only(step: Any) -> Any:
        return next((d for d in step.deps[: step.direct] if d.state != "done"), None)

    monkeypatch.setattr(_saga, "blocker", named_only)
    r = await run_scenario(known())
    assert r.forward["s5"] == r.forward["s10"] == "done"
    why5 = "it shares a resource with s4, which is in_doubt and may have acted"
    why10 = "it shares a resource with s5, which is skipped and may have acted"
    said5, said10 = "reverted with crm.update_field", "reverted with crm.delete_note"
    assert check(r)["forward"] == [*ran_though_skipped("s5", why5, said5),
                                   *ran_though_skipped("s10", why10, said10)]  # fmt: skip


async def test_a_crm_field_not_back_to_its_value_before_the_saga_is_not_undone() -> None:
    """The journal shows every writer of r1.stage undone; a world where the value is not the
    one before the saga (an inverse restoring the refused call's value) is caught."""
    r = await run_scenario(known())
    world = copy.deepcopy(r.world)
    world["crm"]["records"]["r1"]["fields"]["stage"] = "Won1"
    bad = check(dataclasses.replace(r, world=world))
    assert bad["honesty"] == [
        "crm r1.stage is 'Won1' after the undo, not 'lead' as before the saga, though every "
        "step that wrote it (s2) is undone"
    ]


async def test_the_family_holds_every_invariant_on_the_real_engine() -> None:
    indexes = [K + len(FAMILIES) * j for j in range(12)]
    assert {generate(5, i).family for i in indexes} == {"retry_after_refusal"}
    tally = (await run_indexes(indexes, 5, ("amends",)))["amends"]
    assert tally.sagas == tally.checked["forward"] == 12
    assert tally.violations == dict.fromkeys(tally.violations, 0), tally.examples


def test_a_replay_shows_which_step_each_fault_hits(capsys: pytest.CaptureFixture[str]) -> None:
    from amends.cli import main

    sc = generate(1, K)
    assert sc.step_faults
    assert main(["eval", "--replay", f"1:{K}"]) == 0
    out = capsys.readouterr().out
    for sid, kind, times in sc.step_faults:
        assert f"forward fault on {sid}'s calls only: {kind} x{times}" in out


def acted() -> Scenario:
    """A write to r1 that acted and recorded its inverse, then raised (failed for the agent,
    logged done), its retry, a note on r1 behind that retry, and a mail named ``after=`` it."""
    steps = (
        _upd("s1", "r1", "stage", "Won1"),
        _upd("s2", "r1", "stage", "closed_won"),
        StepSpec("s3", "crm.add_note", {"record_id": "r1", "text": "won"}),
        StepSpec("s4", "mail.send", {"to": "ana@acme.test", "subject": "Won"}, ("s1",)),
    )
    faults = (("s1", "raise_after_inverse", 1),)
    return Scenario(9, 1, "handmade", steps, step_faults=faults, records=copy.deepcopy(RECORDS))


ACTED = {"s1": "failed", "s2": "skipped", "s3": "skipped", "s4": "skipped"}


async def test_a_retry_behind_a_call_that_acted_then_raised_never_runs_and_it_is_undone() -> None:
    """f6b3004's class in the eval: the first call is ``failed`` for the agent but its effect
    stands (logged done, inverse recorded), so the retry on its record never runs, nor what
    waits behind the retry; the undo puts the record back with the recorded inverse."""
    r = await run_scenario(acted())
    assert r.forward == ACTED
    assert check(r) == {name: [] for name in check(r)}
    report = r.reports[0]
    assert [(o.step_id, o.state) for o in report.steps] == [
        ("s1", StepState.REVERTED), ("s2", StepState.NOT_NEEDED), ("s3", StepState.NOT_NEEDED),
        ("s4", StepState.NOT_NEEDED),
    ]  # fmt: skip
    assert report.status == "fully_reversed"
    detail = {o.step_id: o.detail for o in report.steps}
    assert detail["s2"] == "never ran: step s1 (crm.update_field) it waits for is failed"
    assert detail["s3"] == "never ran: step s2 (crm.update_field) it waits for is skipped"
    r1 = r.world["crm"]["records"]["r1"]
    assert r1["fields"] == RECORDS["r1"] and r1["notes"] == {}
    assert r.world["mail"]["messages"] == {}
    forward = {e["tag"] for e in r.effects if e.get("tag", "").endswith(":forward")}
    assert forward == {"s1:forward"}


async def test_the_oracle_catches_a_retry_that_ran_behind_a_call_that_acted_then_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before f6b3004 a step ``failed`` for the agent counted as "no effect" whatever it had
    logged, so the retry ran over the first call's write (a second effect on r1)."""
    from amends import _outcome

    def failed_means_nothing(step: Any) -> bool:
        if step.state == "failed":
            return True
        return step.state == "skipped" and all(
            d.state == "done" or failed_means_nothing(d) for d in step.deps
        )

    monkeypatch.setattr(_outcome, "_no_effect", failed_means_nothing)
    r = await run_scenario(acted())
    assert r.forward == {**ACTED, "s2": "done", "s3": "done"}
    why2 = "it shares a resource with s1, which is failed and may have acted"
    why3 = "it shares a resource with s2, which is skipped and may have acted"
    said2, said3 = "reverted with crm.update_field", "reverted with crm.delete_note"
    assert check(r)["forward"] == [*ran_though_skipped("s2", why2, said2),
                                   *ran_though_skipped("s3", why3, said3)]  # fmt: skip
