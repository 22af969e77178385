"""A class marker for the optional mypyc-compiled build (``scripts/compile.py``, issue 29).

mypyc compiles a class to a native (C) class unless it carries a decorator mypyc does not know.
A native class cannot be weakly referenced, nor derive from most built-in or C types (a
``TimeoutError``, a ``sqlite3.Connection``: mypyc crashes or the process does). The classes that
need either (a saga and a reversal's runner, weakly referenced; ``_TimedOutAfter``, the
in-memory log's ``PrivateConnection``) are marked :func:`python_class`, so the compiled build
keeps them ordinary Python classes (their methods are still compiled).
Interpreted, the marker does nothing.
"""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound=type)


def python_class(cls: _C) -> _C:
    """Keep ``cls`` an ordinary Python class in the mypyc build; returns it unchanged."""
    return cls
