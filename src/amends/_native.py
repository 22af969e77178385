"""A class marker for the optional mypyc-compiled build (``scripts/compile.py``, issue 29).

mypyc compiles a class to a native (C) class unless it carries a decorator mypyc does not know.
A native class cannot be weakly referenced; it cannot safely derive from an interpreted class
or from most built-in and C types (a ``TimeoutError``, a ``sqlite3.Connection``: mypyc or the
process crashes); an interpreted class cannot derive from it; and it has no instance
``__dict__`` for a descriptor or a ``functools.cached_property`` to cache a value in. The
classes that need one of these are marked :func:`python_class`, so the compiled build keeps
them ordinary Python classes (their methods are still compiled): a saga and a reversal's runner
(weakly referenced), ``_TimedOutAfter`` and the in-memory log's ``PrivateConnection``, the
engine and the SQL logs (interpreted bases; ``PostgresLog`` and applications subclass them), the
planner's steps and plans (cached in the instance's dict). Interpreted, the marker does nothing.
"""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound=type)


def python_class(cls: _C) -> _C:
    """Keep ``cls`` an ordinary Python class in the mypyc build; returns it unchanged."""
    return cls
