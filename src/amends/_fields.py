"""Copies of dataclass instances on hot paths, without :func:`dataclasses.replace`'s per-field
work (issue 25 item 6, issue 29: an adapter's every tool call, every step an undo describes,
every preview line), and a cheaper ``__init__`` for the frozen ones made many times per saga
(:func:`fast_init`). It knows nothing of amends' own types.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init", "field_values", "replaced"]

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
    plain = _PLAIN[kind] if kind in _PLAIN else _plain(kind)
    if plain is None or not plain[1].issuperset(changes):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    held = obj.__dict__
    # issue 29: an instance dict holding exactly the fields is copied whole (in C); one that
    # holds more (a cached property's value, which the copy must compute afresh) field by field
    values = held.copy() if held.keys() == plain[1] else {n: held[n] for n in plain[0]}
    values.update(changes)
    copy: T = object.__new__(kind)
    _set(copy, "__dict__", values)  # one dict set whole, as fast_init's __init__ does
    return copy


_set = object.__setattr__


_HAS_FACTORY: Any = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", object())
"""The default ``dataclasses`` itself gives a parameter with a factory (shown as ``<factory>``)."""


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen dataclass ``cls`` an ``__init__`` that sets its ``__dict__`` at once.

    ``@dataclass(frozen=True)`` generates an ``__init__`` that sets each field with
    ``object.__setattr__(self, name, value)``: a call through a wrapper descriptor per field,
    ~600 machine instructions each by callgrind. An eval saga builds ~770 such objects (~4,700
    fields: report outcomes, compensation writes, step records, inverses, expectations, planned
    steps), so those calls alone were ~3.6 % of its instructions (issue 29). This ``__init__``
    builds the same values in the same order into one dict and sets it as the instance's
    ``__dict__`` with a single ``object.__setattr__`` call. Everything else stays the
    dataclass's own: the signature (names, defaults, kinds, annotations), default factories,
    ``init=False`` fields (left unset unless they have a factory, as the dataclass does),
    ``__post_init__``, and the frozen ``__setattr__`` / ``__delattr__`` that refuse later
    assignments.

    For a class ``@dataclass(frozen=True)`` made (``amends/__init__.py`` applies it to the
    engine's hot records). A class it cannot copy exactly (not frozen, with ``__slots__``,
    ``InitVar`` or ``ClassVar`` pseudo-fields, a field named like one of the generated code's
    own names, no instance ``__dict__`` as a class of the mypyc build) is returned unchanged,
    with the dataclass's ``__init__``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not params.init or "__slots__" in cls.__dict__:
        return cls
    if "__dict__" not in dir(cls):  # a native class of the mypyc build: its own __init__ is C
        return cls
    flds = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(flds) != len(cls.__dataclass_fields__):  # type: ignore[attr-defined]
        return cls  # InitVar / ClassVar entries: leave them to dataclasses
    names = {f.name for f in flds}
    if names & {"self", "__set", "__HAS"} or any(
        n.startswith("__dflt_") or n.startswith("__fact_") for n in names
    ):
        return cls
    original = cls.__init__
    env: dict[str, Any] = {"__HAS": _HAS_FACTORY, "__set": object.__setattr__}
    positional: list[str] = []
    keyword: list[str] = []
    items: list[str] = []
    for f in flds:
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            env[f"__dflt_{f.name}"] = f.default
        if has_factory:
            env[f"__fact_{f.name}"] = f.default_factory
        if f.init:
            param = f.name
            if has_default:
                param += f"=__dflt_{f.name}"
            elif has_factory:
                param += "=__HAS"
            (keyword if f.kw_only else positional).append(param)
            if has_factory:
                value = f"__fact_{f.name}() if {f.name} is __HAS else {f.name}"
            else:
                value = f.name
        elif has_factory:
            value = f"__fact_{f.name}()"
        else:
            continue  # init=False without a factory: unset, as the dataclass leaves it (a
            # default is then read from the class attribute)
        items.append(f"{f.name!r}: {value}")
    # one dict, set whole: a combined dict keeps attribute reads specialised (filling the
    # instance's own __dict__ would turn it into a split dict whose reads cost ~2.5x)
    body = [f"    __set(self, '__dict__', {{{', '.join(items)}}})"]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    args = ["self", *positional] + (["*", *keyword] if keyword else [])
    src = f"def __init__({', '.join(args)}):\n" + "\n".join(body) + "\n"
    ns: dict[str, Any] = {}
    exec(src, env, ns)
    init = ns["__init__"]
    init.__qualname__ = original.__qualname__
    init.__module__ = original.__module__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    init._dataclass_init = original  # the replaced one, for the tests
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
