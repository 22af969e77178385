"""Issue 29, the reversal's planning and sentences: each shortcut gives exactly what the general
path gives (the same sentence, copy, plan and report), including the edge cases it hands back to
the general path, and the shortcut is the one taken."""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
from typing import Any

import pytest

import amends
from amends import _describe
from amends._describe import _Sentence, _show, _unquoted, sentence
from amends._fields import replaced
from amends._log.base import SagaRecord, StepRecord
from amends._planner import PlannedStep, plan
from amends._reversal import runner as runner_module
from amends._secrets import Vault


class _Colour(enum.StrEnum):
    RED = "red"


def _general(
    tool: str,
    args: Mapping[str, Any],
    template: str | None = None,
    description: str = "",
    sensitive: tuple[str, ...] = (),
) -> str:
    """The sentence as the formatter gives it, every value looked at (issue 17's own path)."""
    safe = {k: f"[redacted:{k}]" if k in sensitive else v for k, v in args.items()}
    if template:
        try:
            return _Sentence().vformat(_unquoted(template, safe), (), safe)
        except (KeyError, ValueError, IndexError, AttributeError):
            pass

    def show(v: Any) -> str:
        if v is None or v == "":
            return "an empty value"
        if isinstance(v, list | tuple) and all(isinstance(x, str) for x in v):
            v = ", ".join(v)
        text = v if isinstance(v, str) else repr(v)
        return text if len(text) <= 60 else text[:59] + "…"

    shown = ", ".join(
        f"{k}=(empty)"
        if v is None
        else f"{k}={show(v)!r}"
        if isinstance(v, str)
        else f"{k}={show(v)}"
        for k, v in sorted(safe.items())
    )
    head = description.strip().rstrip(".") if description else ""
    return f"{head} ({shown})" if head else f"{tool}({shown})"


_TEMPLATES = [
    "Email '{subject}' to {to}",
    'Email "{subject}" to {to}',
    "Set '{a}'{b}' then '{c}'",  # quotes shared by two fields: the arguments' order decides
    "Charge {cents:cents} USD to '{to}' at {start:when}",
    "Quoted spec '{start:when}' and '{subject}'",
    "Braces {{'{subject}'}} kept",
    "Nothing to fill",
    "Unknown {missing}",  # not passed: the default sentence
    "Bad {to",  # not valid syntax: the default sentence
    "Converted {to!r} and '{subject}'",  # a conversion: the formatter's own path
]
_ARGS: list[dict[str, Any]] = [
    {"subject": "Won", "to": "bob@x.test", "a": "1", "b": "2", "c": "3", "cents": 2400,
     "start": "2026-12-10T16:00:00Z"},
    {"subject": "", "to": None, "a": "", "b": "", "c": None, "cents": 0, "start": ""},
    {"b": "", "a": "", "c": "", "subject": "", "to": "", "cents": None, "start": None},
    {"subject": "x" * 60, "to": "y" * 61, "a": _Colour.RED, "b": True, "c": [], "cents": -5,
     "start": "2026-12-10"},
    {"subject": ["ann@x.test", "bob@x.test"], "to": ("c",), "a": 10**59 - 1, "b": 10**59,
     "c": -(10**59) + 1, "cents": -(10**59), "start": 3.5},
    {"subject": {"k": "v"}, "to": b"bytes", "a": 1.0, "b": 10**80, "c": False, "cents": True,
     "start": "not a time"},
    # one argument (issue 29: the default sentence neither sorts nor joins it)
    {"to": None}, {"to": ""}, {"to": "y" * 61}, {"a": _Colour.RED}, {"cents": 10**59},
    {"cents": -(10**59) + 1}, {"b": True}, {"c": ["ann@x.test"]}, {"start": 3.5}, {},
]  # fmt: skip


@pytest.mark.parametrize("args", _ARGS)
@pytest.mark.parametrize("template", [*_TEMPLATES, None])
def test_a_sentence_on_the_short_paths_is_the_one_the_general_formatter_gives(
    template: str | None, args: dict[str, Any]
) -> None:
    """Plain strings and short ints skip ``_show``'s general checks, and only the arguments a
    template quotes are looked at for emptiness (issue 29); empty quoted and unquoted values,
    quotes two fields share, specs, str subclasses, 60/61-character values, ints either side of
    60 digits, bools, lists, a missing field and a sensitive one all read as the formatter's
    own path says, with the description as head or without."""
    for description, sensitive in (("", ()), ("Does a thing.", ("to",))):
        got = sentence("t.x", args, template=template, description=description,
                       sensitive=sensitive)  # fmt: skip
        want = _general("t.x", args, template, description, sensitive)
        assert got == want, (template, args, description)
    for value in args.values():
        assert _show(value) == _general("t", {"v": value}, "{v}")
    if template in ("Email '{subject}' to {to}", "Nothing to fill"):
        quoted = _describe._quoted_names(template)  # the shortcut's own question, cached
        assert quoted == ({"subject"} if "{subject}" in template else set())


@dataclasses.dataclass(frozen=True)
class _Cached:
    a: int
    b: str

    @functools.cached_property
    def twice(self) -> int:
        return self.a * 2


class _Watched(dict[str, Any]):
    """An instance dict that counts whole copies."""

    copies = 0

    def copy(self) -> dict[str, Any]:
        type(self).copies += 1
        return dict(self)


def test_replaced_copies_an_instance_dict_whole_only_when_it_holds_exactly_the_fields() -> None:
    """``replaced`` copies the instance dict in one go when it holds the fields and nothing else;
    one that also holds a cached property's value is copied field by field, so the copy
    computes its own (a stale ``twice`` would be 2 for ``a=5``). Either way it equals
    ``dataclasses.replace``."""
    plain = _Cached(1, "x")
    object.__setattr__(plain, "__dict__", _Watched(plain.__dict__))
    _Watched.copies = 0
    copy = replaced(plain, a=5)
    assert _Watched.copies == 1
    assert copy == dataclasses.replace(plain, a=5) == _Cached(5, "x")
    assert copy.twice == 10 and type(copy.__dict__) is dict

    cached = _Cached(1, "x")
    assert cached.twice == 2
    object.__setattr__(cached, "__dict__", _Watched(cached.__dict__))
    _Watched.copies = 0
    again = replaced(cached, a=5)
    assert _Watched.copies == 0
    assert "twice" not in again.__dict__ and again.twice == 10
    assert again == dataclasses.replace(cached, a=5)
    with pytest.raises(TypeError):  # not a field: dataclasses.replace says so, as before
        replaced(cached, twice=3)


def _step(step_id: str, seq: int, **kw: Any) -> StepRecord:
    return StepRecord(
        "saga_1", step_id, seq, "crm.update", {"v": seq}, kw.pop("deps", ()), (), "reversible",
        "reversible", "done", **kw,
    )  # fmt: skip


def test_a_planned_steps_id_is_its_steps_kept_in_the_instance_without_a_lock() -> None:
    """``PlannedStep.step_id`` is a plain descriptor, not ``functools.cached_property`` (which
    takes a lock at each first read on Python 3.11): the first read keeps the id in the
    instance; equality, ``to_dict`` and ``replace()`` ignore it, and a copy with another step
    reads that step's id."""
    assert not isinstance(PlannedStep.__dict__["step_id"], functools.cached_property)
    inverse = {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a draft"}
    saga = SagaRecord(
        "saga_1", "t", None, None, "completed", 0.0, 1.0, None, None,
        steps=(_step("a", 1, inverse=inverse), _step("b", 2, deps=("a",), inverse=inverse)),
    )  # fmt: skip
    first = plan(saga, now=0.0)
    second = plan(saga, now=0.0)
    p = first.steps[0]
    assert "step_id" not in p.__dict__
    assert p.step_id == "a" and p.__dict__["step_id"] == "a"
    assert p == second.steps[0] and p.to_dict() == second.steps[0].to_dict()
    assert [q.step_id for q in first.steps] == ["a", "b"] and first["b"].waits_for == ()
    assert first["a"].waits_for == ("b",)
    moved = dataclasses.replace(p, step=saga.steps[1])
    assert moved.step_id == "b"
    assert replaced(p, step=saga.steps[1]).step_id == "b"


def _blind_catalog(world: dict[str, Any]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("kv.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> Any:
        return world.get(key)

    @catalog.tool("kv.set", reversibility="reversible")
    async def put(call: amends.Call, key: str, value: str) -> None:
        call.inverse("kv.set", key=key, value=world.get(key))
        call.expect("kv.get", {"key": key}, equals=value)
        world[key] = value

    @catalog.tool("kv.set_blind", reversibility="reversible")
    async def put_blind(call: amends.Call, key: str, value: str) -> None:
        call.inverse("kv.set", key=key, value=world.get(key))  # no expectation: review
        world[key] = value

    return catalog


async def test_the_runner_asks_once_per_step_waited_for_whether_it_can_clear() -> None:
    """Four steps wait for one that cannot end undone (no drift check: review, rule 4): the
    budget's reserve asks ``_cannot_clear`` about it once, not once per waiter, and the report
    is as before: the review step drifted, the four blocked, the world untouched by undo."""
    world: dict[str, Any] = {}
    engine = amends.Engine(_blind_catalog(world), log=amends.SqliteLog(":memory:"))
    async with engine.saga("shortcuts") as saga:
        firsts = [saga.call("kv.set", key=f"k{i}", value=f"v{i}") for i in range(4)]
        await saga.gather(*firsts)
        last = saga.call("kv.set_blind", key="last", value="v", after=firsts)
        await saga.gather(last)
    asked: list[str] = []
    real = runner_module._Runner._cannot_clear

    def counted(self: Any, dep: str) -> bool:
        asked.append(dep)
        return real(self, dep)

    runner_module._Runner._cannot_clear = counted  # type: ignore[method-assign]
    try:
        report = await engine.undo(saga.id)
    finally:
        runner_module._Runner._cannot_clear = real  # type: ignore[method-assign]
        await engine.close()
    assert asked == [last.id]
    states = {s.step_id: s.state.value for s in report.steps}
    assert states == {last.id: "drifted", **{f.id: "blocked" for f in firsts}}
    assert report.status == "cannot_undo" and report.tool_calls == 0
    assert world == {"k0": "v0", "k1": "v1", "k2": "v2", "k3": "v3", "last": "v"}


async def test_a_compensation_recorded_with_no_secret_is_logged_as_given_and_with_one_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Recorder.record`` skips the vault's walk when the reversal resolved no secret (issue
    29); when it did, the detail and data are scrubbed (rule 11) as before."""
    walks: list[Any] = []
    real = Vault.scrub_at

    def counted(self: Vault, value: Any, at: Any = ()) -> Any:
        walks.append(value)
        return real(self, value, at)

    monkeypatch.setattr(Vault, "scrub_at", counted)
    world: dict[str, Any] = {}
    engine = amends.Engine(_blind_catalog(world), log=amends.SqliteLog(":memory:"))
    async with engine.saga("no secret") as saga:
        step = saga.call("kv.set", key="k", value="v")
    report = await engine.undo(saga.id)
    assert report.status == "fully_reversed" and world == {"k": None}
    records = await engine.log.get_compensations(report.reversal_id)
    assert records[step.id].state == "reverted"
    assert records[step.id].detail == "reverted with kv.set"
    assert walks == []
    await engine.close()

    secret_world: dict[str, Any] = {}
    catalog = amends.Catalog()

    @catalog.tool("kv.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> Any:
        return secret_world.get(key)

    @catalog.tool(
        "kv.put", reversibility="reversible", sensitive=["token"],
        resolve_secret=lambda req: "tok-SECRET",
    )  # fmt: skip
    async def put(call: amends.Call, key: str, value: str, token: str) -> None:
        if call.phase == "compensate":
            call.residue(f"used {token}", parties=["ops"])
        else:
            call.inverse("kv.put", key=key, value="old", token=token)
            call.expect("kv.get", {"key": key}, equals=value)
        secret_world[key] = value

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("a secret") as saga:
        step = saga.call("kv.put", key="k", value="v", token="tok-SECRET")
    report = await engine.undo(saga.id)
    assert secret_world == {"k": "old"}
    records = await engine.log.get_compensations(report.reversal_id)
    logged = records[step.id]
    assert logged.state == "reverted"
    assert logged.data["residue"][0]["what"] == "used [redacted:token]"
    assert "tok-SECRET" not in repr(logged.data) and "tok-SECRET" not in report.to_json()
    assert walks  # the vault held the resolved token: every record went through it
    await engine.close()


@pytest.mark.parametrize(
    "logged",
    [
        {"tool": "crm.update", "args": {"v": 0}},
        {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a draft"},
        {
            "tool": "crm.update",
            "args": {"v": 1, "w": [1, 2]},
            "deadline": "2100-01-01T00:00:00+00:00",
            "landed": {"probe": "crm.get", "args": {"id": 1}, "equals": 1, "path": ["v"]},
            "undo_after": ["s1", "s2"],
        },
    ],
)
def test_inverse_from_dict_puts_each_logged_field_in_its_own_place(logged: dict[str, Any]) -> None:
    """Issue 29: ``Inverse.from_dict`` (the planner's, once a step) builds by position; field
    for field it is the inverse built by keywords, its arguments a copy of the logged ones."""
    got = amends.Inverse.from_dict(logged)
    landed = logged.get("landed")
    assert got == amends.Inverse(
        tool=logged["tool"],
        args=logged["args"],
        deadline=logged.get("deadline"),
        landed=amends.Expectation.from_dict(landed) if landed else None,
        no_drift_check=logged.get("no_drift_check"),
        undo_after=tuple(logged.get("undo_after", ())),
    )
    assert got.args is not logged["args"]


def test_a_plan_asks_the_catalog_once_per_inverse_tool_whether_it_is_read_only() -> None:
    """Issue 29: one answer per inverse tool per plan; every step whose inverse tool is
    read-only is still acknowledged (rule 2), the others planned."""
    catalog = amends.Catalog()

    @catalog.tool("crm.update", reversibility="reversible")
    async def update(call: amends.Call, v: int) -> None:
        call.inverse("crm.update", v=v)

    @catalog.tool("crm.peek", reversibility="read_only")
    async def peek(call: amends.Call, v: int) -> int:
        return v

    asked: list[str] = []
    real = amends.Catalog.get

    def get(self: amends.Catalog, name: str) -> Any:
        asked.append(name)
        return real(self, name)

    peeked = {"tool": "crm.peek", "args": {"v": 0}, "no_drift_check": "a draft"}
    undone = {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a draft"}
    saga = SagaRecord(
        "saga_1", "t", None, None, "completed", 0.0, 1.0, None, None,
        steps=tuple(
            _step(f"s{i}", i, inverse=peeked if i % 2 else undone) for i in range(1, 7)
        ),
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(amends.Catalog, "get", get)
        got = plan(saga, catalog, now=0.0)
    assert sorted(asked) == ["crm.peek", "crm.update"]
    assert [p.action for p in got.steps] == ["acknowledge", "revert"] * 3
    assert got.steps[0].reason.startswith("contract violation: its inverse tool 'crm.peek'")


def test_undo_order_without_waits_is_the_plans_order_and_with_them_sorted() -> None:
    """Issue 29: a plan where no step waits is run in its own order (nothing sorted); with
    waits, a step after every step it waits for, the others in the plan's order (rule 3)."""
    from amends._reversal.runner import undo_order

    inverse = {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a draft"}
    alone = SagaRecord(
        "saga_1", "t", None, None, "completed", 0.0, 1.0, None, None,
        steps=tuple(_step(f"s{i}", i, inverse=inverse) for i in range(1, 5)),
    )  # fmt: skip
    got = plan(alone, now=0.0)
    assert undo_order(got) == list(got.steps)
    chained = SagaRecord(
        "saga_1", "t", None, None, "completed", 0.0, 1.0, None, None,
        steps=(
            _step("s1", 1, inverse=inverse),
            _step("s2", 2, inverse=inverse, deps=("s1",)),
            _step("s3", 3, inverse=inverse),
        ),
    )  # fmt: skip
    assert [p.step_id for p in undo_order(plan(chained, now=0.0))] == ["s2", "s3", "s1"]


def test_a_default_sentence_of_one_argument_is_neither_sorted_nor_joined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the shortcut is the one taken (``sorted`` is the general path's first act)."""

    def refused(*args: Any, **kw: Any) -> Any:
        raise AssertionError("sorted")

    monkeypatch.setattr(_describe, "sorted", refused, raising=False)
    assert sentence("t.x", {"i": 5}) == "t.x(i=5)"
    assert sentence("t.x", {"to": "bob"}, description="Mail.") == "Mail (to='bob')"
    with pytest.raises(AssertionError, match="sorted"):
        sentence("t.x", {"i": 5, "j": 6})


def test_a_plan_of_steps_that_neither_depend_nor_declare_an_order_works_out_no_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: no waits are worked out when no step depends on another or declares an undo
    order (none waits, none is on a cycle); one dependency or one declaration and they are."""
    from amends import _planner

    asked: list[int] = []
    real = _planner.undo_waits

    def counted(steps: Any) -> dict[str, set[str]]:
        asked.append(1)
        return real(steps)

    monkeypatch.setattr(_planner, "undo_waits", counted)
    inverse = {"tool": "crm.update", "args": {"v": 0}, "no_drift_check": "a draft"}

    def saga(*steps: StepRecord) -> SagaRecord:
        return SagaRecord("saga_1", "t", None, None, "completed", 0.0, 1.0, None, None, steps=steps)

    alone = plan(saga(*(_step(f"s{i}", i, inverse=inverse) for i in range(1, 4))), now=0.0)
    assert asked == [] and [p.waits_for for p in alone.steps] == [(), (), ()]
    assert [p.action for p in alone.steps] == ["revert"] * 3
    after = {**inverse, "undo_after": ["s1"]}
    declared = plan(saga(_step("s1", 1, inverse=inverse), _step("s2", 2, inverse=after)), now=0.0)
    assert asked == [1] and declared["s2"].waits_for == ("s1",)
    chained = plan(saga(_step("s1", 1, inverse=inverse), _step("s2", 2, inverse=inverse,
                                                               deps=("s1",))), now=0.0)  # fmt: skip
    assert asked == [1, 1] and chained["s1"].waits_for == ("s2",)
