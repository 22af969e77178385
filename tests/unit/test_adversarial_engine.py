"""Adversarial scenarios against the honesty rules (DESIGN.md 1-11) that no other test wrote.

Each test is an attack that once made the engine lie (report ``reverted`` for an effect that
stands), clobber (overwrite a value someone else wrote), pay twice, get stuck or crash; it asserts
the final world and the exact report.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import amends
from amends import StepState


class Kv:
    """A tiny vendor: a key-value store whose writes are logged as effects."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes: list[tuple[str, Any]] = []
        self.refuse_undo: set[str] = set()
        """Keys whose compensating write the vendor refuses (PermanentError)."""

    def catalog(self) -> amends.Catalog:
        cat = amends.Catalog()

        @cat.tool("kv.read", reversibility="read_only")
        async def read(call: amends.Call, key: str) -> dict[str, Any]:
            return {"value": self.data[key]} if key in self.data else {}

        @cat.tool("kv.set", reversibility="reversible")
        async def set_(call: amends.Call, key: str, value: Any) -> dict[str, Any]:
            if call.phase == "compensate" and key in self.refuse_undo:
                raise amends.PermanentError(f"the vendor refuses to write {key!r} back")
            before = self.data.get(key)
            self.data[key] = value
            self.writes.append((key, value))
            call.inverse("kv.set", key=key, value=before)
            call.expect("kv.read", {"key": key}, equals=value, path="value")
            return {"ok": True}

        @cat.tool("kv.set_undone_by_a_probe", reversibility="reversible")
        async def set_probe_inverse(call: amends.Call, key: str, value: Any) -> dict[str, Any]:
            self.data[key] = value
            call.inverse("kv.read", key=key)  # a read-only tool cannot take anything back
            call.expect("kv.read", {"key": key}, equals=value, path="value")
            return {"ok": True}

        return cat


@pytest.fixture
def kv() -> Kv:
    return Kv()


@pytest.fixture
async def kv_engine(kv: Kv) -> Any:
    eng = amends.Engine(kv.catalog(), log=amends.SqliteLog(":memory:"))
    yield eng
    await eng.close()


# --- rule 4: drift is judged as JSON sees values, not as Python's == does ---------------------


@pytest.mark.parametrize(
    ("agent_wrote", "human_wrote"),
    [
        (1, True),
        (0, False),
        (1.0, True),
        (True, 1),
        ({"n": 1}, {"n": True}),
        ([1, 0], [True, False]),
        ("1", 1),
    ],
)
async def test_a_human_value_equal_only_to_pythons_eq_is_drift_and_is_never_overwritten(
    kv: Kv, kv_engine: amends.Engine, agent_wrote: Any, human_wrote: Any
) -> None:
    """True == 1 in Python, but a person who changed 1 to True changed the world: drifted."""
    kv.data["qty"] = "before"
    async with kv_engine.saga("set qty") as saga:
        await saga.call("kv.set", key="qty", value=agent_wrote)
    kv.data["qty"] = human_wrote
    report = await kv_engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.DRIFTED
    assert s1.detail == (
        f"someone changed it since the agent acted: expected {agent_wrote!r}, found "
        f"{human_wrote!r}; left as it is"
    )
    assert report.status == "cannot_undo"
    assert kv.data["qty"] == human_wrote and type(kv.data["qty"]) is type(human_wrote)


async def test_preview_judges_drift_as_undo_does_true_is_not_one(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """Rule 10: the preview re-observes with the same comparison, so it shows needs review."""
    async with kv_engine.saga("set qty") as saga:
        await saga.call("kv.set", key="qty", value=1)
    kv.data["qty"] = True
    preview = await kv_engine.preview(saga.id)
    (step,) = preview.steps
    assert step.needs_review
    assert step.check == "someone changed it since the agent acted: expected 1, found True"


async def test_the_same_json_number_as_int_or_float_is_not_drift(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """1 and 1.0 are one JSON number: a vendor that echoes 1.0 for 1 has not drifted."""
    kv.data["qty"] = 7
    async with kv_engine.saga("set qty") as saga:
        await saga.call("kv.set", key="qty", value=1)
    kv.data["qty"] = 1.0  # the vendor re-serialised it
    report = await kv_engine.undo(saga.id)
    assert report.step("s1").state is StepState.REVERTED
    assert report.status == "fully_reversed"
    assert kv.data["qty"] == 7


def test_same_value_treats_none_and_missing_and_non_json_as_different() -> None:
    """None is not a missing key, a tuple is a JSON list, and non-JSON data never matches."""
    import datetime

    exp = amends.Expectation("kv.read", {}, equals=None, path=("value",))
    assert exp.holds({"value": None})
    assert not exp.holds({})
    assert amends.Expectation("p", {}, equals=[1, 2]).holds((1, 2))
    assert not amends.Expectation("p", {}, equals="2026-01-01").holds(datetime.date(2026, 1, 1))
    assert not amends.Expectation("p", {}, equals={"a": 1}).holds({"a": 1, "b": 2})
    assert not amends.Expectation("p", {}, equals=float("nan")).holds(float("nan"))


# --- rule 2 / rule 8: an inverse that cannot change anything is not an inverse ---------------


async def test_an_inverse_naming_a_read_only_tool_is_a_violation_never_reported_reverted(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """Calling a probe changes nothing; undo must not say "reverted" while the value stands."""
    kv.data["qty"] = 1
    async with kv_engine.saga("set qty") as saga:
        await saga.call("kv.set_undone_by_a_probe", key="qty", value=5)
    report = await kv_engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.ACKNOWLEDGED
    assert s1.violation == (
        "tool 'kv.set_undone_by_a_probe' recorded inverse 'kv.read', which is a read_only tool "
        "and changes nothing; record an inverse that undoes the effect, or register "
        "'kv.set_undone_by_a_probe' as 'irreversible'"
    )
    assert report.status == "cannot_undo"
    assert kv.data["qty"] == 5
    assert len(report.manual_actions) == 1


async def test_an_inverse_whose_tool_became_read_only_in_the_undo_catalog_is_acknowledged(
    kv: Kv,
) -> None:
    """The planner checks the catalog undo runs with, not only the one the saga ran with."""
    log = amends.SqliteLog(":memory:")
    first = amends.Engine(kv.catalog(), log=log)
    async with first.saga("set qty") as saga:
        await saga.call("kv.set", key="qty", value=5)
    changed = kv.catalog()
    later = amends.Catalog()
    for spec in changed:
        kind = "read_only" if spec.name == "kv.set" else spec.reversibility.value
        later.register(spec.name, spec.fn, reversibility=kind)
    second = amends.Engine(later, log=log)
    report = await second.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.ACKNOWLEDGED
    assert s1.detail == (
        "contract violation: its inverse tool 'kv.set' is read_only, so calling it cannot "
        "take the step back"
    )
    assert kv.data["qty"] == 5
    await second.close()


# --- rule 8: what a person reads is what happened --------------------------------------------


async def test_terminal_escapes_and_bidi_overrides_in_agent_text_cannot_repaint_the_report(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """A title, actor or argument holding ESC sequences, a bell or a right-to-left override is
    rendered as visible escapes in text and HTML, so it cannot clear the screen or spoof the
    status line."""
    title = "Deal\x1b[2J\x1b[HStatus:fully_reversed\u202e"
    async with kv_engine.saga(title, actor="agent\x1b[8m") as saga:
        await saga.call("kv.set", key="k\x07", value="v\x9b31m")
    kv.data["k\x07"] = "human"
    report = await kv_engine.undo(saga.id)
    assert report.status == "cannot_undo"
    assert report.title == title  # the data is kept as written; only rendering escapes it
    for text in (report.render("text"), report.render("html")):
        assert not [c for c in text if c not in "\n" and not c.isprintable()]
        assert "Deal\\x1b[2J\\x1b[HStatus:fully_reversed\\u202e" in text
    first = report.render("text").splitlines()[:3]
    assert first == [
        f"Undo of saga {saga.id} —",
        "  Deal\\x1b[2J\\x1b[HStatus:fully_reversed\\u202e",
        "Status: cannot_undo (0 of 1 taken back · 1 needs your attention)",
    ]
    assert "who: the person who asked the agent (agent\\x1b[8m)" in report.render("text")


# --- rules 3 and 6: a resolution speaks for the outcome a person saw, not a later one ---------


async def test_a_resolution_withdrawn_before_a_retry_neither_unblocks_nor_handles_its_failure(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """Ann resolves s2 while it is over budget: the continuation leaves it to her (issue 23: she
    may have written it back by hand; before, it was attempted anyway) and undoes s1, which
    waited for it. She withdraws it; the next continuation attempts s2 and its inverse fails:
    the failure is an open manual action, her earlier resolution handles nothing. Once she
    resolves the failure, nothing is left to continue."""
    kv.data.update(a=0, b=0)
    async with kv_engine.saga("two writes") as saga:
        a = saga.call("kv.set", key="a", value=1)
        saga.call("kv.set", key="b", value=2, after=[a])
    first = await kv_engine.undo(saga.id, budget=amends.Budget(tool_calls=0))
    assert [s.state for s in first.steps] == [StepState.BLOCKED, StepState.OVER_BUDGET]
    await kv_engine.resolve(saga.id, "s2", by="ann", note="will look at it")
    kv.refuse_undo.add("b")

    second = await kv_engine.resume(saga.id, budget=amends.Budget())
    assert second.step("s2").state is StepState.OVER_BUDGET
    assert second.step("s2").attempts == 0
    assert second.step("s1").state is StepState.REVERTED
    assert kv.data == {"a": 0, "b": 2}  # s2 left to Ann
    assert second.headline == "1 of 2 taken back · 1 handled by a person"

    await kv_engine.withdraw_resolution(saga.id, "s2", by="ann", note="not handled after all")
    third = await kv_engine.resume(saga.id, budget=amends.Budget())
    assert third.step("s2").state is StepState.FAILED
    assert kv.data == {"a": 0, "b": 2}
    assert third.resolutions == {}
    assert [m.step_id for m in third.open_manual_actions] == ["s2"]
    stored = await kv_engine.report(saga.id)
    assert stored is not None and stored.to_dict() == third.to_dict()
    assert third.headline == "1 of 2 taken back · 1 needs your attention"

    await kv_engine.resolve(saga.id, "s2", by="ann", note="wrote b back by hand")
    kv.data["b"] = 0
    with pytest.raises(amends.SagaStateError, match="nothing to continue"):
        await kv_engine.resume(saga.id, budget=amends.Budget())
    fourth = await kv_engine.report(saga.id)
    assert fourth is not None and fourth.step("s2").state is StepState.FAILED
    assert [m.step_id for m in fourth.open_manual_actions] == []
    assert fourth.headline == "1 of 2 taken back · 1 handled by a person"
    assert fourth.handled("s2")["note"] == "wrote b back by hand"  # type: ignore[index]


async def test_a_sent_follow_up_whose_resolution_was_lost_unblocks_a_continuation(
    kv: Kv, kv_engine: amends.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 re-check: Ann's follow-up for failed s2 was sent and logged, and her process
    stopped before writing its resolution. Every report shows s2 handled by Ann; a
    continuation must see the same (rule 3: s1, which waited for s2, is undone), never keep s1
    blocked behind what the report calls handled."""
    kv.data.update(a=0, b=0)
    async with kv_engine.saga("two writes") as saga:
        a = saga.call("kv.set", key="a", value=1)
        saga.call("kv.set", key="b", value=2, after=[a])
    await kv_engine.undo(saga.id, budget=amends.Budget(tool_calls=0))
    kv.refuse_undo.add("b")
    second = await kv_engine.resume(saga.id, budget=amends.Budget())
    assert second.step("s2").state is StepState.FAILED
    assert second.step("s1").state is StepState.BLOCKED
    assert await kv_engine.continuable(saga.id) == []

    async def stopped(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("process stopped")

    with monkeypatch.context() as m:
        m.setattr(kv_engine.log, "resolve_step", stopped)
        with pytest.raises(RuntimeError, match="process stopped"):
            await kv_engine.send_follow_up(
                saga.id, "s2", tool="kv.set", args={"key": "note", "value": "b"}, by="ann"
            )
    kv.data["b"] = 0  # what Ann's follow-up asked for was done
    shown = await kv_engine.report(saga.id)
    assert shown is not None and (shown.handled("s2") or {}).get("by") == "ann"
    assert await kv_engine.continuable(saga.id) == ["s1"]
    third = await kv_engine.resume(saga.id, budget=amends.Budget())
    assert third.step("s1").state is StepState.REVERTED
    assert kv.data == {"a": 0, "b": 0, "note": "b"}
    assert third.headline == "1 of 2 taken back · 1 handled by a person"
    assert (third.handled("s2") or {}).get("note", "").startswith("follow-up s2+f1 of reversal ")


# --- rule 10: the preview after an undo shows what happened ---------------------------------


async def test_preview_after_undo_shows_the_settled_steps_not_a_fresh_drift(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """Once undo reverted a step, its probe sees the inverse's own write; the preview must not
    call that someone else's change (nor offer to revert again): it shows the outcome, and a
    failed step as needing review. Only probes of unsettled steps would run: here none."""
    kv.data.update(a=0, b=0)
    async with kv_engine.saga("two writes") as saga:
        saga.call("kv.set", key="a", value=1)
        saga.call("kv.set", key="b", value=2)
    kv.refuse_undo.add("b")
    report = await kv_engine.undo(saga.id)
    assert [s.state for s in report.steps] == [StepState.REVERTED, StepState.FAILED]
    preview = await kv_engine.preview(saga.id)
    got = [(p.step_id, p.action, p.verb, p.needs_review, p.reason) for p in preview.steps]
    assert got == [
        (
            "s1",
            "skip",
            None,
            False,
            f"already reverted by reversal {report.reversal_id}: reverted with kv.set",
        ),
        (
            "s2",
            "skip",
            None,
            True,
            f"already failed by reversal {report.reversal_id}: "
            "kv.set failed permanently: the vendor refuses to write 'b' back",
        ),
    ]
    assert preview.needs_review == ["s2"]
    assert kv.data == {"a": 0, "b": 2}


# --- rule 9 / rule 1: a tool misusing Call is a contract violation, never a half-logged step --


@pytest.mark.parametrize(
    "misuse",
    [
        "expect_path_object",
        "expect_path_bool",
        "residue_party_object",
        "acknowledge_draft_bytes",
    ],
)
async def test_non_json_contract_data_is_a_violation_logged_with_the_step_not_a_raw_typeerror(
    kv: Kv, misuse: str
) -> None:
    """A path key, party or draft the log cannot hold once left the step 'intent' forever (the
    agent got a raw TypeError, undo blamed a stopped process); now the tool's Call refuses it,
    the step is logged, and the agent gets a StepFailedError naming the fix."""
    cat = kv.catalog()

    @cat.tool("kv.misuse", reversibility="reversible")
    async def misuse_tool(call: amends.Call, key: str) -> None:
        kv.data[key] = 1
        if misuse == "expect_path_object":
            call.expect("kv.read", {"key": key}, equals=1, path=[object()])
        elif misuse == "expect_path_bool":
            call.expect("kv.read", {"key": key}, equals=1, path=[True])
        elif misuse == "residue_party_object":
            call.residue("a notice was sent", parties=[object()])
        else:
            call.acknowledge(who="ops", draft=b"bytes")  # type: ignore[arg-type]

    engine = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    with pytest.raises(amends.StepFailedError) as info:
        async with engine.saga("misuse") as saga:
            await saga.call("kv.misuse", key="z")
    assert "contract violation inside kv.misuse" in str(info.value)
    assert info.value.state == "in_doubt"
    record = await engine.log.get_saga(saga.id)
    assert record is not None
    assert record.steps[0].state == "in_doubt"
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.IN_DOUBT
    assert report.step("s1").detail.startswith(
        "the call's outcome is unknown (contract violation inside kv.misuse: "
    )
    assert kv.data == {"z": 1}
    await engine.close()


# --- rule 7: a vendor's retry_after never parks the agent or the reversal -------------------


class Flaky:
    """A vendor that answers the first ``fails`` calls of a tool with a TransientError."""

    def __init__(self, retry_after: Any, fails: int) -> None:
        self.retry_after = retry_after
        self.fails = {"forward": fails, "compensate": fails}
        self.value: str | None = None

    def catalog(self) -> amends.Catalog:
        cat = amends.Catalog()

        @cat.tool("flaky.read", reversibility="read_only")
        async def read(call: amends.Call) -> str | None:
            return self.value

        @cat.tool("flaky.set", reversibility="reversible")
        async def set_(call: amends.Call, value: str | None) -> None:
            if self.fails.get(call.phase, 0) > 0:
                self.fails[call.phase] -= 1
                raise amends.TransientError("busy", retry_after=self.retry_after)
            before, self.value = self.value, value
            call.inverse("flaky.set", value=before)
            call.expect("flaky.read", equals=value)

        return cat


@pytest.mark.parametrize("retry_after", [float("nan"), float("inf"), -5, "soon", True])
async def test_a_retry_after_that_is_no_duration_is_ignored_forward_and_in_reverse(
    retry_after: Any,
) -> None:
    """NaN made asyncio.sleep wait forever (forward and during undo); a str raised TypeError.
    Such a hint is ignored and the policy's backoff is used."""
    flaky = Flaky(retry_after, fails=2)
    engine = amends.Engine(
        flaky.catalog(),
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(initial_backoff=0.001, max_backoff=0.01),
    )
    async with asyncio.timeout(10):
        async with engine.saga("flaky") as saga:
            await saga.call("flaky.set", value="new")
        assert flaky.value == "new"
        report = await engine.undo(saga.id, budget=amends.Budget(seconds=5))
    assert report.step("s1").state is StepState.REVERTED
    assert report.step("s1").detail == "reverted with flaky.set after 3 attempts"
    assert flaky.value is None
    await engine.close()


async def test_a_vendor_asking_to_retry_after_an_hour_ends_the_tries_and_says_so() -> None:
    """Forward: the step failed (a TransientError is the vendor's refusal, rule 9), promptly,
    naming the requested wait; the agent is not parked for an hour."""
    flaky = Flaky(3600, fails=1)
    engine = amends.Engine(flaky.catalog(), log=amends.SqliteLog(":memory:"))
    async with asyncio.timeout(10):
        with pytest.raises(amends.StepFailedError) as info:
            async with engine.saga("flaky") as saga:
                await saga.call("flaky.set", value="new")
    assert info.value.state == "failed"
    assert str(info.value) == (
        "step s1 (flaky.set) failed: flaky.set failed transiently (busy) and asked to be "
        "retried after 3600 s, longer than the retry policy waits (max_retry_after=30 s); "
        "not retried"
    )
    assert flaky.value is None
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.NOT_NEEDED
    await engine.close()


# --- rules 10 and 11: the preview observes what undo observes, and never shows a secret -----

CARD = "4111111111111111"


def card_catalog(
    holds: dict[str, int], probe_fails: list[bool], asked: list[str] | None = None
) -> amends.Catalog:
    cat = amends.Catalog()

    def resolver(request: amends.SecretRequest) -> str:
        if asked is not None:
            asked.append(request.name)
        return CARD

    @cat.tool("card.status", reversibility="read_only")
    async def status(call: amends.Call, card: str) -> int | None:
        if probe_fails:
            raise RuntimeError(f"issuer timeout for card {card}")
        return holds.get(card)

    @cat.tool("card.hold", reversibility="reversible", sensitive=["card"], resolve_secret=resolver)
    async def hold(call: amends.Call, card: str, cents: int) -> None:
        holds[card] = cents
        call.inverse("card.release", card=card)
        call.expect("card.status", {"card": card}, equals=cents)

    @cat.tool("card.release", sensitive=["card"], resolve_secret=resolver)
    async def release(call: amends.Call, card: str) -> None:
        holds.pop(card)

    return cat


async def test_preview_never_resolves_a_secret_and_says_its_probe_is_checked_at_undo_time() -> None:
    """Rules 10, 11: the probe's card argument is logged redacted. The preview used to resolve
    it to probe; now it resolves no secret at all: it predicts the step's normal verb and says
    the check happens at undo time. Undo resolves the card, checks and reverts."""
    holds: dict[str, int] = {}
    probe_fails: list[bool] = []
    asked: list[str] = []
    engine = amends.Engine(
        card_catalog(holds, probe_fails, asked), log=amends.SqliteLog(":memory:")
    )
    async with engine.saga("hold") as saga:
        await saga.call("card.hold", card=CARD, cents=500)
    preview = await engine.preview(saga.id)
    (step,) = preview.steps
    assert (step.action, step.needs_review, step.predicted) == (
        "revert", False, StepState.REVERTED,
    )  # fmt: skip
    assert step.check == (
        "checked at undo time: the arguments of probe card.status hold a secret (a preview "
        "never resolves a secret, rule 11); undo re-observes it before anything is sent"
    )
    assert asked == []  # no resolver was asked
    assert CARD not in repr(preview.to_dict())
    probe_fails.append(True)  # the preview does not call a probe it cannot give its argument
    assert (await engine.preview(saga.id)).steps[0].predicted is StepState.REVERTED
    assert asked == []
    probe_fails.clear()
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert holds == {}
    await engine.close()


def card_echo_catalog(holds: dict[str, int]) -> amends.Catalog:
    """The probe echoes the card, and the expectation is the whole probe result."""
    cat = amends.Catalog()

    def resolver(request: amends.SecretRequest) -> str:
        return CARD

    @cat.tool("card.status", reversibility="read_only")
    async def status(call: amends.Call, card: str) -> dict[str, Any]:
        return {"card": card, "held": holds.get(card)}

    @cat.tool("card.hold", reversibility="reversible", sensitive=["card"], resolve_secret=resolver)
    async def hold(call: amends.Call, card: str, cents: int) -> None:
        holds[card] = cents
        call.inverse("card.release", card=card)
        call.expect("card.status", {"card": card}, equals={"card": card, "held": cents})

    @cat.tool("card.release", sensitive=["card"], resolve_secret=resolver)
    async def release(call: amends.Call, card: str) -> None:
        holds.pop(card)

    return cat


async def test_an_expected_value_holding_a_secret_is_compared_with_the_secret_not_its_marker() -> (
    None
):
    """The log keeps the expectation redacted (rule 11); undo and the preview resolve it again,
    so an untouched world matches (it never could before: drift forever)."""
    holds: dict[str, int] = {}
    engine = amends.Engine(card_echo_catalog(holds), log=amends.SqliteLog(":memory:"))
    async with engine.saga("hold") as saga:
        await saga.call("card.hold", card=CARD, cents=500)
    record = await engine.log.get_saga(saga.id)
    assert record is not None and CARD not in repr(record.steps[0].expectation)
    preview = await engine.preview(saga.id)
    assert [p.action for p in preview.steps] == ["revert"]
    assert not preview.needs_review
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed"
    assert holds == {}
    await engine.close()


async def test_a_drift_detail_never_shows_a_secret_the_probe_returned() -> None:
    """The drift detail quotes what the probe found; the card in it is shown as its marker in
    the report, the stored report, the preview and the log (rule 11)."""
    holds: dict[str, int] = {}
    engine = amends.Engine(card_echo_catalog(holds), log=amends.SqliteLog(":memory:"))
    async with engine.saga("hold") as saga:
        await saga.call("card.hold", card=CARD, cents=500)
    holds[CARD] = 700  # the issuer changed the hold since
    preview = await engine.preview(saga.id)
    report = await engine.undo(saga.id)
    s1 = report.step("s1")
    assert s1.state is StepState.DRIFTED
    assert s1.detail == (
        "someone changed it since the agent acted: expected {'card': '[redacted:card]', "
        "'held': 500}, found {'card': '[redacted:card]', 'held': 700}; left as it is"
    )
    stored = await engine.report(saga.id)
    events = await engine.log.events(saga.id)
    for text in (report.to_json(), repr(stored), repr(preview.to_dict()), repr(events)):
        assert CARD not in text
    assert holds == {CARD: 700}
    await engine.close()


# --- rule 5 and rule 7: a crash among follow-ups neither repeats nor forgets one ------------


class Crash(BaseException):
    """The worker dies here (not an Exception: nothing in the engine may catch it)."""


class Orders:
    """An order desk whose cancel asks for two follow-ups: a customer email and a CRM note.

    ``order.cancel`` honours idempotency keys; ``mail.notify`` does not (every call sends);
    ``crm.note`` honours them when ``note_idempotent``."""

    def __init__(self, *, note_idempotent: bool) -> None:
        self.orders: dict[str, str] = {}
        self.cancels: list[str] = []
        self.mails: list[str] = []
        self.notes: dict[str, str] = {}
        self.crash_in_note = True
        self.note_idempotent = note_idempotent

    def catalog(self) -> amends.Catalog:
        cat = amends.Catalog()

        @cat.tool("order.status", reversibility="read_only")
        async def status(call: amends.Call, order: str) -> str | None:
            return self.orders.get(order)

        @cat.tool("order.place", reversibility="compensable")
        async def place(call: amends.Call, order: str) -> None:
            self.orders[order] = "placed"
            call.inverse("order.cancel", order=order)
            call.expect("order.status", {"order": order}, equals="placed")

        @cat.tool("order.cancel", idempotent=True)
        async def cancel(call: amends.Call, order: str) -> None:
            self.cancels.append(call.idempotency_key)
            self.orders[order] = "cancelled"
            call.follow_up("mail.notify", to="bob@acme.test", order=order)
            call.follow_up("crm.note", order=order)

        @cat.tool("mail.notify")
        async def notify(call: amends.Call, to: str, order: str) -> None:
            self.mails.append(to)

        @cat.tool("crm.note", idempotent=self.note_idempotent)
        async def note(call: amends.Call, order: str) -> None:
            if self.crash_in_note:
                self.crash_in_note = False
                raise Crash()  # the worker dies after the email went out
            self.notes[call.idempotency_key] = order

        return cat


async def crash_among_follow_ups_then_recover(orders: Orders, db: str) -> amends.UndoReport:
    cat = orders.catalog()
    first = amends.Engine(cat, log=db, lease_seconds=0.2)
    async with first.saga("place an order") as saga:
        await saga.call("order.place", order="o1")
    with pytest.raises(Crash):
        await first.undo(saga.id)
    await first.close()
    await asyncio.sleep(0.25)  # the dead worker's lease expires
    second = amends.Engine(cat, log=db, lease_seconds=0.2)
    (report,) = (await second.recover()).resumed
    await second.close()
    return report


async def test_a_crash_among_follow_ups_never_sends_one_twice_nor_reports_it_made(
    tmp_path: Any,
) -> None:
    """The email was sent before the worker died; the vendor ignores keys, so the take-over
    sends neither the inverse nor the email again, and says the email and the note may be
    missing (before: a second email, and 'fully_reversed' with no word of them)."""
    orders = Orders(note_idempotent=False)
    report = await crash_among_follow_ups_then_recover(orders, str(tmp_path / "l.db"))
    assert len(orders.cancels) == 1
    assert orders.mails == ["bob@acme.test"]  # exactly one email
    assert orders.notes == {}
    s1 = report.step("s1")
    assert s1.state is StepState.COMPENSATED
    assert s1.detail == (
        "compensated with order.cancel (it had returned before a worker stopped; not sent "
        "again); 2 follow-up(s) missing"
    )
    assert report.status == "partially_reversed"
    assert [r.what.split(" (")[0] for r in report.residue] == [
        "follow-up mail.notify(order='o1', to='bob@acme.test') may not have been made",
        "follow-up crm.note(order='o1') may not have been made",
    ]
    (manual,) = report.manual_actions
    assert manual.what.startswith(
        "The undo of order.place succeeded, but follow-up(s) it asked for may not have been made: "
    )
    assert manual.what.endswith("Check each one and make it by hand if it is missing.")
    assert report.headline == (
        "1 of 1 taken back (1 compensated, leaving a trace) · 1 needs your attention"
    )


async def test_a_follow_up_in_flight_at_a_crash_is_re_sent_with_its_key_when_its_vendor_dedups(
    tmp_path: Any,
) -> None:
    """The CRM honours keys: the note is re-sent under the same key and made once; only the
    email (whose vendor ignores keys) is reported as possibly missing."""
    orders = Orders(note_idempotent=True)
    report = await crash_among_follow_ups_then_recover(orders, str(tmp_path / "l.db"))
    assert len(orders.cancels) == 1
    assert orders.mails == ["bob@acme.test"]
    assert list(orders.notes.values()) == ["o1"]
    assert next(iter(orders.notes)).endswith(":s1:undo:follow_up:1")
    assert [r.what.split(" (")[0] for r in report.residue] == [
        "follow-up mail.notify(order='o1', to='bob@acme.test') may not have been made",
    ]


# --- rule 6: a resume racing an undo of the same engine joins it, never fences it -----------


async def test_a_resume_racing_an_undo_in_the_same_engine_waits_for_it_then_continues(
    kv: Kv,
) -> None:
    """The log lets an owner take over its own running reversal; a resume asked while this
    engine's undo was running took it over, the undo's inverse still landed, and both reports
    said 'over_budget' for the reverted step. Now the resume waits, then continues."""
    cat = kv.catalog()
    undone: list[str] = []

    @cat.tool("kv.slow_set", reversibility="reversible")
    async def slow_set(call: amends.Call, key: str, value: Any) -> None:
        if call.phase == "compensate":
            undone.append(key)
            await asyncio.sleep(0.2)
        before = kv.data.get(key)
        kv.data[key] = value
        call.inverse("kv.slow_set", key=key, value=before)
        call.expect("kv.read", {"key": key}, equals=value, path="value")

    engine = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    kv.data.update(a=0, b=0)
    async with engine.saga("two slow writes") as saga:
        await saga.call("kv.slow_set", key="a", value=1)
        await saga.call("kv.slow_set", key="b", value=2)
    # two probes and one inverse: one step is reverted, the other is over budget
    undo = asyncio.create_task(engine.undo(saga.id, budget=amends.Budget(tool_calls=3)))
    await asyncio.sleep(0.05)
    resumed = await engine.resume(saga.id, budget=amends.Budget())
    first = await undo
    assert sorted(s.state.value for s in first.steps) == ["over_budget", "reverted"]
    (done,) = [s.step_id for s in first.steps if s.state is StepState.REVERTED]
    assert undone[0] == {"s1": "a", "s2": "b"}[done]
    assert [s.state for s in resumed.steps] == [StepState.REVERTED, StepState.REVERTED]
    assert resumed.reversal_id == first.reversal_id
    assert sorted(undone) == ["a", "b"]  # each inverse sent once
    assert kv.data == {"a": 0, "b": 0}
    kinds = [e.kind for e in await engine.log.events(saga.id)]
    assert "reversal.taken_over" not in kinds
    assert kinds.count("reversal.continued") == 1
    await engine.close()


# --- rule 10 at dispatch: an undo window that closes while the inverse waits -----------------


async def test_an_undo_window_closing_while_the_inverse_waits_is_acknowledged_not_sent() -> None:
    """The wire's recall window is open when undo starts, but the recall must wait for the
    invoice's slow inverse (rule 3); by then the window has closed, so the recall is not sent
    and the step is Acknowledge with the reason, as the planner would now say."""
    import time

    recalls: list[str] = []
    voided: list[str] = []
    cat = amends.Catalog()

    @cat.tool("bank.wire", reversibility="compensable")
    async def wire(call: amends.Call, to: str) -> dict[str, str]:
        call.inverse("bank.recall", to=to, deadline=time.time() + 0.3)
        call.no_drift_check(reason="a wire in its recall window cannot be changed by anyone")
        return {"id": "w1"}

    @cat.tool("bank.recall")
    async def recall(call: amends.Call, to: str) -> None:
        recalls.append(to)

    @cat.tool("books.invoice", reversibility="compensable")
    async def invoice(call: amends.Call, wire_id: str) -> None:
        call.inverse("books.void", wire_id=wire_id)
        call.no_drift_check(reason="a draft invoice only this saga can see")

    @cat.tool("books.void")
    async def void(call: amends.Call, wire_id: str) -> None:
        await asyncio.sleep(0.5)
        voided.append(wire_id)

    engine = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    async with engine.saga("pay the supplier") as saga:
        w = saga.call("bank.wire", to="supplier")
        saga.call("books.invoice", wire_id=w["id"])  # depends on the wire
    report = await engine.undo(saga.id)
    assert voided == ["w1"]
    assert recalls == []
    s1 = report.step("s1")
    assert s1.state is StepState.ACKNOWLEDGED
    assert s1.detail.startswith("the undo window of bank.recall closed at ")
    assert s1.detail.endswith(
        " while this step waited for others to be undone first; it can no longer be taken "
        "back by a call"
    )
    assert report.step("s2").state is StepState.COMPENSATED
    assert report.status == "cannot_undo"
    assert [m.step_id for m in report.manual_actions] == ["s1"]
    await engine.close()


# --- rule 1: what the engine knows is made durable even when the agent is cancelled ---------


async def test_cancelling_the_agent_while_a_result_is_written_keeps_the_result_and_inverse(
    kv: Kv, kv_engine: amends.Engine
) -> None:
    """The tool returned and recorded its inverse; the agent's task was cancelled while the
    result was being logged. The write was abandoned, the step stayed 'intent', and undo could
    only say in doubt ("the process ... stopped", which it had not). Now it finishes writing."""
    real = kv_engine.log.finish_step
    writing = asyncio.Event()

    async def slow_finish(*args: Any, **kwargs: Any) -> Any:
        writing.set()
        await asyncio.sleep(0.1)
        return await real(*args, **kwargs)

    kv_engine.log.finish_step = slow_finish  # type: ignore[method-assign]
    ids: list[str] = []

    async def agent() -> None:
        async with kv_engine.saga("one write") as saga:
            ids.append(saga.id)
            await saga.call("kv.set", key="a", value=1)

    task = asyncio.create_task(agent())
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    kv_engine.log.finish_step = real  # type: ignore[method-assign]
    record = await kv_engine.log.get_saga(ids[0])
    assert record is not None
    assert [(s.state, s.inverse) for s in record.steps] == [
        ("done", {"tool": "kv.set", "args": {"key": "a", "value": None}})
    ]
    report = await kv_engine.undo(ids[0])
    assert report.step("s1").state is StepState.REVERTED
    assert kv.data == {"a": None}


# --- rule 6: a caller who hangs up does not cancel the reversal the others joined ------------


async def test_cancelling_the_first_undo_request_leaves_the_joined_request_its_report(
    kv: Kv,
) -> None:
    """Two requests join one reversal; the first one's client hangs up (its task is cancelled).
    The second still gets the report, the reversal finishes without a take-over, and the
    inverse is sent once. Before, the cancellation reached the joined request too and the
    reversal was left half-run."""
    cat = kv.catalog()
    sent: list[str] = []

    @cat.tool("kv.slow_set", reversibility="reversible")
    async def slow_set(call: amends.Call, key: str, value: Any) -> None:
        if call.phase == "compensate":
            sent.append(call.idempotency_key)
            await asyncio.sleep(0.2)
        before = kv.data.get(key)
        kv.data[key] = value
        call.inverse("kv.slow_set", key=key, value=before)
        call.expect("kv.read", {"key": key}, equals=value, path="value")

    engine = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    kv.data["a"] = 0
    async with engine.saga("one slow write") as saga:
        await saga.call("kv.slow_set", key="a", value=1)
    first = asyncio.create_task(engine.undo(saga.id))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(engine.undo(saga.id))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    report = await second
    assert report.status == "fully_reversed"
    assert kv.data == {"a": 0}
    assert len(sent) == 1
    kinds = [e.kind for e in await engine.log.events(saga.id)]
    assert "reversal.taken_over" not in kinds
    again = await engine.undo(saga.id)
    assert again.reversal_id == report.reversal_id and again.status == "fully_reversed"
    await engine.close()


# --- rules 4 and 5: a vendor honouring keys is still not written over after a crash -----------


class Stock:
    """A warehouse whose reservation is undone by a release that honours idempotency keys and
    has a landed probe; the worker may die inside the release, before or after it acts."""

    def __init__(self, crash: str) -> None:
        self.reserved: dict[str, int] = {}
        self.releases: list[str] = []
        self.crash = crash

    def catalog(self) -> amends.Catalog:
        cat = amends.Catalog()

        @cat.tool("stock.read", reversibility="read_only")
        async def read(call: amends.Call, sku: str) -> int:
            return self.reserved.get(sku, 0)

        @cat.tool("stock.reserve", reversibility="compensable")
        async def reserve(call: amends.Call, sku: str, n: int) -> None:
            self.reserved[sku] = self.reserved.get(sku, 0) + n
            call.inverse("stock.release", sku=sku, to=self.reserved[sku] - n)
            call.expect("stock.read", {"sku": sku}, equals=self.reserved[sku])
            call.landed("stock.read", {"sku": sku}, equals=self.reserved[sku] - n)

        @cat.tool("stock.release", idempotent=True)
        async def release(call: amends.Call, sku: str, to: int) -> None:
            if self.crash == "before":
                self.crash = ""
                raise Crash()
            if call.idempotency_key in self.releases:
                return  # a replayed key applies nothing (the vendor honours keys)
            self.releases.append(call.idempotency_key)
            self.reserved[sku] = to
            if self.crash == "after":
                self.crash = ""
                raise Crash()

        return cat


async def crash_in_release_then_recover(
    stock: Stock, db: str, meanwhile: dict[str, int] | None = None
) -> amends.UndoReport:
    cat = stock.catalog()
    first = amends.Engine(cat, log=db, lease_seconds=0.2)
    async with first.saga("reserve stock") as saga:
        await saga.call("stock.reserve", sku="A1", n=5)
    with pytest.raises(Crash):
        await first.undo(saga.id)
    await first.close()
    if meanwhile:
        stock.reserved.update(meanwhile)  # a person edits while the reversal is stopped
    await asyncio.sleep(0.25)
    second = amends.Engine(cat, log=db, lease_seconds=0.2)
    (report,) = (await second.recover()).resumed
    await second.close()
    return report


async def test_an_in_flight_release_is_not_re_sent_over_a_persons_edit_despite_the_key(
    tmp_path: Any,
) -> None:
    """The release died before acting; meanwhile a person set the stock to 9. The vendor
    would dedup the key, but a first send of it would overwrite the person's 9 with 0: drifted,
    not sent. (Without a landed probe the engine cannot tell, and re-sends, as before.)"""
    stock = Stock(crash="before")
    report = await crash_in_release_then_recover(stock, str(tmp_path / "l.db"), {"A1": 9})
    s1 = report.step("s1")
    assert s1.state is StepState.DRIFTED
    assert s1.detail == (
        "an earlier attempt of stock.release was in flight when a worker stopped; the world "
        "shows neither it (stock.read does not show it landed) nor the agent's write "
        "(stock.read), so someone changed it since; not sent again, needs review"
    )
    assert stock.reserved == {"A1": 9}
    assert stock.releases == []


@pytest.mark.parametrize(("crash", "sent"), [("before", 1), ("after", 1)])
async def test_an_in_flight_release_with_a_landed_probe_is_finished_exactly_once(
    tmp_path: Any, crash: str, sent: int
) -> None:
    """Died before acting: the world still shows the reservation, so it is sent (once).
    Died after acting: the landed probe shows it; the replay under the same key applies
    nothing."""
    stock = Stock(crash=crash)
    report = await crash_in_release_then_recover(stock, str(tmp_path / "l.db"))
    assert report.step("s1").state is StepState.COMPENSATED
    assert stock.reserved == {"A1": 0}
    assert len(stock.releases) == sent


@pytest.mark.parametrize("crash", ["before", "after"])
async def test_a_take_over_counts_the_call_that_was_in_flight_at_the_crash(
    tmp_path: Any, crash: str
) -> None:
    """Rule 7: the budget counts every call made, including the release the dead worker had
    sent. Before the call is made its budget is taken and logged with the dispatch record, so
    a take-over starts from it: drift probe (1) + release in flight (2), then the take-over's
    probes and its re-send under the same key: expectation (3), re-send (4) when the release
    died before acting; expectation (3), landed (4), re-send deduplicated (5) after."""
    stock = Stock(crash=crash)
    report = await crash_in_release_then_recover(stock, str(tmp_path / "l.db"))
    assert report.step("s1").state is StepState.COMPENSATED
    assert stock.reserved == {"A1": 0}
    assert report.tool_calls == (4 if crash == "before" else 5)
