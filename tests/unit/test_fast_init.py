"""``fast_init`` (issue 29, lane S-eval): the frozen dataclasses built many times per saga fill
their ``__dict__`` directly instead of one ``object.__setattr__`` call per field. The objects
must be indistinguishable from what the dataclass's own ``__init__`` builds: the same values in
the same order, the same signature, defaults, factories, ``init=False`` fields,
``__post_init__``, and still frozen.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from amends import _FAST_RECORDS
from amends._contracts import Expectation, Inverse
from amends._fields import fast_init
from amends._log.base import StepFinish

FAST = list(_FAST_RECORDS)
"""The records ``amends/__init__.py`` gives ``fast_init``: each is checked below."""


def _shape(fast: bool) -> type:
    seen: list[str] = []

    @dataclass(frozen=True)
    class Shape:
        a: int
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: int = field(default=4, init=False)
        e: dict[str, Any] = field(default_factory=dict, init=False)
        f: int = field(default=6, kw_only=True)
        g: tuple[int, ...] = field(default_factory=tuple, kw_only=True)

        def __post_init__(self) -> None:
            seen.append(repr(self))

    Shape.seen = seen  # type: ignore[attr-defined]
    return fast_init(Shape) if fast else Shape


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1,), {}), ((1, "x", [2]), {"f": 7, "g": (1,)}), ((), {"a": 3, "c": [5], "g": (2, 3)})],
)
def test_same_objects_as_the_dataclass_init(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    slow, fast = _shape(False), _shape(True)
    assert fast.__init__ is not slow.__init__  # type: ignore[misc]
    s, f = slow(*args, **kwargs), fast(*args, **kwargs)
    assert list(vars(f).items()) == list(vars(s).items())  # values and their order
    assert repr(f).split("(", 1)[1] == repr(s).split("(", 1)[1]
    assert fast.seen == slow.seen and len(fast.seen) == 1  # type: ignore[attr-defined]
    assert f.e is not fast(*args, **kwargs).e  # a fresh default per object
    assert inspect.signature(fast) == inspect.signature(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        fast()  # the required field is still required
    with pytest.raises(TypeError):
        fast(1, "x", [], 9)  # a kw_only field is still keyword-only


def test_classes_it_cannot_copy_keep_the_dataclass_init() -> None:
    @dataclass
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class WithInitVar:
        a: int
        b: dataclasses.InitVar[int] = 0

    @dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    for cls in (Mutable, WithInitVar, Slotted):
        init = cls.__init__
        assert fast_init(cls).__init__ is init


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_engine_classes_keep_their_signature(cls: type) -> None:
    init = cls.__init__
    original = init._dataclass_init  # type: ignore[attr-defined]
    assert inspect.signature(init) == inspect.signature(original)
    assert init.__qualname__ == original.__qualname__
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_engine_objects_equal_the_dataclass_built_ones() -> None:
    exp = Expectation(probe="crm.get", args={"id": "r1"}, equals="won", path=("stage",))
    inv = Inverse("crm.update", {"id": "r1"}, landed=exp, undo_after=("s1",))
    finish = StepFinish("done", inverse=inv.to_dict())
    for obj in (exp, inv, finish):
        cls = type(obj)
        slow = object.__new__(cls)
        values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
        cls.__init__._dataclass_init(slow, **values)  # type: ignore[attr-defined]
        assert slow == obj and list(vars(slow).items()) == list(vars(obj).items())
