"""A class marker for the optional mypyc-compiled build (``scripts/compile.py``, issue 29).

mypyc compiles a class to a native (C) class unless it carries a decorator mypyc does not know.
A native class cannot be weakly referenced (deriving it from an empty interpreted class was
tried: the process crashed), nor derive from most built-in and C types (a ``TimeoutError``, a
``sqlite3.Connection``), nor be subclassed by an interpreted class, and it has no instance
``__dict__`` (``amends._planner`` caches values there, so it is not compiled). The classes that
need one of these are marked :func:`python_class`, so the compiled build keeps them ordinary
Python classes (their methods are still compiled): a saga and a reversal's runner (weakly
referenced), ``_TimedOutAfter`` and the in-memory log's ``PrivateConnection``, the engine
(applications subclass it). Interpreted, the marker does nothing.

mypyc 2.4.1 fails (an internal error) on a closure in a method of such a class, so the SQL logs,
whose methods pass closures to the database, stay native and say instead, with
``@mypyc_attr(allow_interpreted_subclasses=True)``, that ``PostgresLog`` and applications may
subclass them. mypyc reads that decorator where mypy resolves it to ``mypy_extensions``; the
name is imported from here, where the interpreter gets a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

_C = TypeVar("_C", bound=type)

if TYPE_CHECKING:  # what mypyc reads (mypy_extensions comes with mypy; no runtime dependency)
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*attrs: str, **kwattrs: Any) -> Any:
        """Interpreted: ``@mypyc_attr(...)`` leaves the class as it is."""
        return lambda cls: cls


def python_class(cls: _C) -> _C:
    """Keep ``cls`` an ordinary Python class in the mypyc build; returns it unchanged."""
    return cls
