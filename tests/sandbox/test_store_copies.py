"""An in-memory world keeps values privately: what a read returns never aliases the world's state,
a value written is not changed by its writer mutating it afterwards, copies of a world share
nothing a caller can reach, and types come back exact (issue 29: most values are kept as private
copies, not marshal-encoded; both forms must behave the same)."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from amends.sandbox import World

_TBL = "test.values"

VALUES: list[Any] = [
    True,
    1,
    1.0,
    None,
    "s",
    {"a": 1, "b": True, "c": 1.5, "d": None, "e": "x"},  # flat dict
    [1, "two", 3.0, False, None],  # flat list
    {"id": "r", "fields": {"k": "v"}, "notes": {}, "tags": ["a"], "version": 2},  # two levels
    {"deep": {"er": {"still": [1]}}},  # three levels: encoded
    {"rows": [{"a": 1}]},  # a list of dicts: encoded
    {1: "int key"},  # a key that is not a str: encoded, and it stays an int
    [[1], [2]],
    (1, [2]),
]


def _types(value: Any) -> Any:
    """``value`` with every leaf replaced by its type (== alone says True == 1 == 1.0)."""
    if isinstance(value, dict):
        return {(type(k), k): _types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value), [_types(v) for v in value])
    return (type(value), value)


def _mutate(value: Any) -> None:
    """Change every container reachable from ``value``, in place."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _mutate(v)
        value["mutated"] = True
    elif isinstance(value, list):
        for v in value:
            _mutate(v)
        value.append("mutated")


@pytest.mark.parametrize("tbl", [_TBL, "idem"])  # "idem" (replayed responses): always encoded
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_value_reads_back_equal_with_exact_types_and_never_aliased(value: Any, tbl: str) -> None:
    w = World()
    written = _types(value)
    w.commit([(tbl, "k", value)])
    _mutate(value)  # the writer's object changes: the world's does not
    got = w.get(tbl, "k")
    assert _types(got) == written
    _mutate(got)  # a reader changes what it got: the world does not
    assert _types(w.get(tbl, "k")) == written
    assert _types(dict(w.items(tbl))["k"]) == written
    copy = w.copy()
    _mutate(dict(w.items(tbl))["k"])
    assert _types(copy.get(tbl, "k")) == written
    assert _types(w.get(tbl, "k")) == written


def test_a_replayed_response_changed_by_its_caller_leaves_the_next_replay_alone() -> None:
    w = World()
    first = w.crm.update_field("acme", "stage", "won", idempotency_key="k")
    first["record"]["fields"]["stage"] = "lost"
    again = w.crm.update_field("acme", "stage", "won", idempotency_key="k")
    again["record"]["notes"]["n"] = "x"
    third = w.crm.update_field("acme", "stage", "won", idempotency_key="k")
    assert third["record"]["fields"]["stage"] == "won"
    assert third["record"]["notes"] == {}
    assert third["old"] == "negotiation"


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_an_effect_reads_back_equal_and_never_aliased(value: Any) -> None:
    w = World()
    n = w.effect_count()
    effect = {"vendor": "test", "op": "put", "key": "k", "value": value, "list": [1]}
    w.commit([], [effect])
    written = _types(w.effects()[n])
    _mutate(effect)
    _mutate(value)
    got = w.effects()[n]
    assert _types(got) == written
    _mutate(got)
    assert _types(w.effects()[n]) == written
    assert _types(w.copy().effects()[n]) == written


def test_a_crm_record_read_and_changed_by_its_reader_leaves_the_world_alone() -> None:
    w = World()
    rec = w.crm.get("acme")
    rec["fields"]["stage"] = "lost"
    rec["notes"]["n"] = "x"
    rec["version"] = 99
    assert w.crm.get("acme") == {
        "id": "acme",
        "fields": {
            "name": "ACME Corp",
            "stage": "negotiation",
            "amount": "10000",
            "owner": "dana@example.com",
            "renewal": "pending",
        },
        "version": 1,
        "etag": 'W/"acme-1"',
        "notes": {},
    }
    assert w.snapshot()["crm"]["records"]["acme"]["fields"]["stage"] == "negotiation"


def test_a_snapshot_changed_by_its_reader_leaves_the_world_and_its_copies_alone(
    tmp_path: object,
) -> None:
    """A snapshot is read in one pass over the store (issue 29): every value in it is the
    reader's own, in memory as in a file, and both kinds of world show the same snapshot (every
    vendor table, empty ones as ``{}``, keys in order)."""
    mem, path = World(), f"{tmp_path}/w.world"
    with World(path) as file:
        for w in (mem, file):
            w.crm.update_field("acme", "stage", "won")
            w.chat.post("#sales", "hello")
        copy = mem.copy()
        snap = mem.snapshot()
        assert snap == file.snapshot() == copy.snapshot()
        assert snap["sms"] == {"messages": {}}
        assert list(snap["crm"]["records"]) == sorted(snap["crm"]["records"])
        for got in (snap, file.snapshot()):
            got["crm"]["records"]["acme"]["fields"]["stage"] = "lost"
            got["chat"]["messages"].clear()
            got["sms"]["messages"]["x"] = 1
        for w in (mem, file, copy):
            again = w.snapshot()
            assert again["crm"]["records"]["acme"]["fields"]["stage"] == "won"
            assert len(again["chat"]["messages"]) == 1
            assert again["sms"] == {"messages": {}}


class _Stage(enum.StrEnum):
    WON = "won"


class _Count(int):
    pass


@pytest.mark.parametrize(
    "value",
    [_Stage.WON, {"stage": _Stage.WON}, [_Count(1)], {"f": {"stage": _Stage.WON}}, object()],
    ids=repr,
)
def test_a_value_marshal_refuses_is_refused_in_memory_as_before(value: Any) -> None:
    w = World()
    with pytest.raises(ValueError, match="unmarshallable object"):
        w.commit([(_TBL, "k", value)])
    with pytest.raises(ValueError, match="unmarshallable object"):
        w.commit([], [{"vendor": "test", "op": "put", "value": value}])
