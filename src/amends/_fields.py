"""Copies of dataclass instances on hot paths, without :func:`dataclasses.replace`'s per-field
work (issue 25 item 6, issue 29: an adapter's every tool call, every step an undo describes,
every preview line). It knows nothing of amends' own types.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["field_values", "replaced"]

T = TypeVar("T")

_PLAIN: dict[type, tuple[tuple[str, ...], frozenset[str]] | None] = {}
"""Per class: its field names, when a copy of its instance dict is the instance
``dataclasses.replace`` builds; ``None`` when it is not (slots, ``__post_init__``, a field
that is not an ``__init__`` argument)."""


def _plain(kind: type) -> tuple[tuple[str, ...], frozenset[str]] | None:
    if kind not in _PLAIN:
        fields = dataclasses.fields(kind)
        plain = (
            "__dict__" in dir(kind)
            and not hasattr(kind, "__post_init__")
            and all(f.init for f in fields)
        )
        names = tuple(f.name for f in fields)
        _PLAIN[kind] = (names, frozenset(names)) if plain else None
    return _PLAIN[kind]


def field_values(obj: Any) -> dict[str, Any]:
    """The dataclass ``obj``'s fields and their values, read from its instance dict (what a
    cached property stored there is not a field, and is left out)."""
    plain = _plain(type(obj))
    if plain is None:
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    held = obj.__dict__
    return {n: held[n] for n in plain[0]}


def replaced(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)``: the same fields, the same type, for a class
    whose ``__init__`` only stores its arguments (no ``__post_init__``); other classes, and a
    change that is not a field, go through ``dataclasses.replace`` itself."""
    kind = type(obj)
    plain = _plain(kind)
    if plain is None or not plain[1].issuperset(changes):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    held = obj.__dict__
    copy: T = object.__new__(kind)
    values = copy.__dict__
    for n in plain[0]:
        values[n] = held[n]
    values.update(changes)
    return copy
