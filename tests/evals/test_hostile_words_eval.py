"""The ``words`` invariant and the ``hostile_words`` family of ``amends eval`` (rules 6, 8, 12).

Text an agent wrote and its vendors echo, and a vendor's refusal, carry line breaks, control
characters and the line separators U+2028/U+2029 followed by what reads as amends' own report
("Status: fully_reversed", a step row, "Needs a person:"); the text report must keep them on
their item's line, and the follow-up agent's list of open actions too. A step the budget cut
keeps its verb (Revert/Compensate: continuing the undo does it), and the continuation does it.
On the core before this lane's fix (U+2028 and lone surrogates printed raw), the family
violated ``words`` in 22 of its first 60 sagas of seed 1; before 669b2a6 (line breaks printed
raw) in 57; before 76c30f2 (a budget-cut step read "Acknowledge") in all of the first 60
``budget`` sagas. A vendor answering another resource's id is caught by ``never_worse`` and
``honesty`` once the sandbox's check of the answer is taken away.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import amends
from amends import Engine, SqliteLog, StepState, UndoReport
from amends.evals.generator import FAMILIES, HOSTILE_WORDS, Scenario, StepSpec, generate
from amends.evals.invariants import applicable, check
from amends.evals.runner import run_scenario
from amends.evals.words import HEADINGS, check_words
from amends.integrations._follow_up_tools import FollowUpSession

K = FAMILIES.index("hostile_words")
RECORDS = {r: {"stage": "lead", "owner": "sam", "amount": "100"} for r in ("r1", "r2")}


def _family(n: int, seed: int = 1) -> list[Scenario]:
    return [generate(seed, K + len(FAMILIES) * j) for j in range(n)]


def test_the_generator_draws_hostile_words_in_steps_and_in_vendor_refusals() -> None:
    scs = _family(40)
    assert {sc.family for sc in scs} == {"hostile_words"}
    assert {sc.words for sc in scs} == set(HOSTILE_WORDS)
    carried = [
        s
        for sc in scs
        for s in sc.steps
        if any(isinstance(v, str) and any(w in v for w in HOSTILE_WORDS) for v in s.args.values())
    ]
    assert {s.tool for s in carried} >= {"mail.send", "calendar.create_event", "chat.post"}
    assert any(sc.reversal_faults for sc in scs) and any(sc.step_faults for sc in scs)
    assert any(sc.budget_calls < 200 for sc in scs)
    assert generate(1, K) == generate(1, K)  # SEED:INDEX reproduces it


async def test_amends_holds_every_invariant_on_the_family() -> None:
    for sc in _family(12):
        r = await run_scenario(sc)
        assert "words" in applicable(r)
        assert {k: v for k, v in check(r).items() if v} == {}, sc.ref


def _handmade() -> Scenario:
    words = HOSTILE_WORDS[3]  # U+2028 / U+2029
    steps = (
        StepSpec("s1", "crm.update_field", {"record_id": "r1", "field": "stage", "value": "won"}),
        StepSpec("s2", "mail.send", {"to": "ana@acme.test", "subject": f"Re: 2{words}"}),
        StepSpec("s3", "chat.post", {"channel": "#sales", "text": f"update{HOSTILE_WORDS[0]}"}),
        StepSpec("s4", "crm.add_note", {"record_id": "r2", "text": f"n4{HOSTILE_WORDS[5]}"}),
    )
    return Scenario(7, 0, "handmade", steps, records=RECORDS, words=words,
                    reversal_faults=(("chat.delete", "permanent", 1),))  # fmt: skip


async def test_a_report_printing_a_vendors_separator_as_a_line_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-made saga passes; with the text report's escaping put back as it was (only
    control characters: U+2028/U+2029 printed raw), ``words`` catches the lines."""
    r = await run_scenario(_handmade())
    assert {k: v for k, v in check(r).items() if v} == {}
    text = r.reports[0].render("text")
    assert "\\u2028Status: fully_reversed" in text and "\u2028" not in text

    from amends import _visible

    monkeypatch.setattr(_visible, "_HIDDEN_CATEGORIES", frozenset({"Cc"}))
    found = check_words(r.reports, hostile=True)
    assert any("is not amends' own: 'Status:" in m for m in found), found
    assert any(m.startswith("the text report's status lines") for m in found), found
    assert check(r)["words"] == found


def _with_step(report: UndoReport, sid: str, **change: Any) -> UndoReport:
    steps = tuple(dataclasses.replace(o, **change) if o.step_id == sid else o
                  for o in report.steps)  # fmt: skip
    return dataclasses.replace(report, steps=steps)


async def test_a_budget_cut_step_that_reads_acknowledge_is_caught() -> None:
    """Rule 6: a step the budget cut keeps Revert/Compensate ("continuing the undo does it");
    the report of the engine before 76c30f2 said "Acknowledge" (a person must follow up)."""
    steps = tuple(
        StepSpec(f"s{i}", "crm.update_field", {"record_id": "r1", "field": f, "value": f"v{i}"})
        for i, f in enumerate(("stage", "owner", "amount"), 1)
    )
    r = await run_scenario(Scenario(7, 0, "handmade", steps, records=RECORDS, budget_calls=2))
    cut = [o for o in r.reports[0].steps if o.state is StepState.OVER_BUDGET]
    assert cut and all(o.verb == "Revert" for o in cut)
    assert "words" in applicable(r) and check(r)["words"] == []
    assert r.preview_cut == {o.step_id: ("Revert", "reversible") for o in cut}  # rule 10 too
    r.reports[0] = _with_step(r.reports[0], cut[0].step_id, verb="Acknowledge")
    r.preview_cut[cut[0].step_id] = ("Acknowledge", "reversible")
    assert check(r)["words"] == [
        f"{cut[0].step_id}: the preview predicts the budget cuts it (continuing does it), yet its "
        f"verb is 'Acknowledge', not 'Revert'",
        f"{cut[0].step_id}: the budget cut it before its inverse ran (continuing does it), yet "
        f"its verb is 'Acknowledge', not 'Revert'",
    ]


async def test_a_continuation_that_leaves_a_budget_cut_step_is_caught() -> None:
    """A person continues a budget-cut undo (``finish="resolve"``): every cut step no person
    resolved is attempted; a continuation leaving one over budget with calls to spare, or
    saying reverted without the world's inverse, violates ``finish``."""
    writes = enumerate(("stage", "owner", "amount") * 2, 1)
    steps = tuple(
        StepSpec(f"s{i}", "crm.update_field", {"record_id": f"r{1 + i % 2}", "field": f,
                                                "value": f"v{i}"})
        for i, f in writes
    )  # fmt: skip
    sc = Scenario(7, 0, "handmade", steps, records=RECORDS, budget_calls=1, finish="resolve")
    r = await run_scenario(sc)
    assert isinstance(r.continued, UndoReport) and r.finished
    assert {k: v for k, v in check(r).items() if v} == {}
    left = next(o for o in r.reports[-1].steps
                if o.state is StepState.OVER_BUDGET and o.step_id not in r.finished)  # fmt: skip
    r.continued = _with_step(r.continued, left.step_id, state=StepState.OVER_BUDGET)
    assert check(r)["finish"] == [
        f"{left.step_id} was over budget; the continuation ({r.continued.runs[-1]['tool_calls']} "
        f"calls of 100) left it so: 'reverted with crm.update_field'",
        f"{left.step_id}: the continuation says over_budget, world: undone=True",
    ]


async def test_the_follow_up_agents_open_actions_keep_hostile_words_on_their_item() -> None:
    """The follow-up agent reads the open manual actions (``amends_open_actions``): each
    item's words stay on its line, whatever line breaks or separators the vendor wrote."""
    sc = _handmade()
    log = SqliteLog(":memory:")
    engines: list[Engine] = []

    def factory(*args: Any, **kw: Any) -> Engine:
        engines.append(Engine(*args, **kw))
        return engines[-1]

    try:
        r = await run_scenario(sc, engine_factory=factory, log=log)
        saga_id = r.reports[0].saga_id
        agent = engines[0].follow_up_agent(saga_id, by="agent:eval", allow=["mail.send"])
        answer = await FollowUpSession(agent).open_actions()
    finally:
        await log.close()
    lines = answer.text.splitlines()
    assert lines == answer.text.split("\n")
    actions = [m.step_id for m in r.reports[0].manual_actions]
    assert [x.split()[2].rstrip(":") for x in lines if x.startswith("- ")] == actions
    assert not [x for x in lines if x.lstrip().startswith(HEADINGS)]
    assert isinstance(agent, amends.FollowUpAgent)


def _lying(kind: str) -> Scenario:
    steps = (
        StepSpec("s1", "payments.charge", {"customer": "cus_acme", "cents": 500}),
        StepSpec("s2", "chat.post", {"channel": "#sales", "text": "charged"}),
        StepSpec("s3", "mail.send", {"to": "ana@acme.test", "subject": "Receipt"}, ("s1",)),
    )
    return Scenario(7, 0, "handmade", steps, records=RECORDS, step_faults=(("s1", kind, 1),))


@pytest.mark.parametrize("kind", ["answer_other_id", "answer_null_id"])
async def test_a_vendor_answer_naming_another_resource_leaves_the_step_in_doubt(kind: str) -> None:
    """The processor charged cus_acme but answered the id of someone else's charge (or null):
    the sandbox's charge tool takes no inverse from it, the step is in doubt (rule 9), the
    step named after it never runs, nothing else is refunded, and the preview agrees."""
    r = await run_scenario(_lying(kind))
    assert r.forward == {"s1": "in_doubt", "s2": "done", "s3": "skipped"}
    first = {o.step_id: o.state for o in r.reports[0].steps}
    assert first["s1"] is StepState.IN_DOUBT and first["s2"] is StepState.COMPENSATED
    assert "UntrustedAnswer" in next(o.detail for o in r.reports[0].steps if o.step_id == "s1")
    charges = r.world["payments"]["charges"]
    assert [c["refunded"] for c in charges.values()] == [0] * len(charges)
    assert r.preview is not None and r.preview["s1"] == "in_doubt"
    assert {k: v for k, v in check(r).items() if v} == {}


async def test_an_inverse_taken_from_an_answer_naming_another_charge_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the sandbox's check taken away (a tool trusting its vendor's id), undo refunds
    someone else's charge and says the step was compensated: ``never_worse`` and ``honesty``
    catch it on the world (the refund's charge is not the one the step made)."""
    from amends.sandbox import catalog

    monkeypatch.setattr(catalog, "_names_what_it_made", lambda *a: None)
    r = await run_scenario(_lying("answer_other_id"))
    assert r.forward["s1"] == "done"
    decoy = r.world["payments"]["charges"]["ch_1"]
    assert decoy["customer"] == "cus_globex" and decoy["refunded"] == 500  # not its charge
    v = check(r)
    assert v["never_worse"] == [
        "s1: its inverse acted on payments ch_1, which its forward call did not make "
        "(payments ch_2)"
    ]
    assert "s1: report says compensated, world: stands" in v["honesty"]


def test_replaying_a_hostile_saga_prints_its_words_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``amends eval --replay`` of a saga whose words hold a lone surrogate and U+2028 printed
    the true world with rich's JSON (the surrogate raised UnicodeEncodeError at the terminal,
    exit 1 with a traceback) and a violation's words raw; both are escapes now."""
    from amends.cli import main

    ref = next(sc.ref for sc in _family(40)
               if any("\ud800" in v for s in sc.steps for v in s.args.values()
                      if isinstance(v, str)))  # fmt: skip
    assert main(["eval", "--replay", ref]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")  # a terminal can print all of it
    assert "\u2028" not in out and "\x1b" not in out
    assert "\\ud800" in out
