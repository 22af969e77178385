"""Which catalog produced a saga, so it is undone with the same tools (issue 11, item 3).

A saga records ``meta["catalog"] = {"ref", "fingerprint", "tools"}`` when it starts:

- ``ref`` says where the catalog can be loaded again: an import reference ``MODULE:ATTR`` (a
  :class:`~amends.Catalog`, or a function of the log's path returning one), the absolute path of a
  TOML catalog, or ``amends.sandbox:demo_catalog`` for sandbox sagas. ``None`` when it cannot be
  known (a catalog built inside a function or in ``__main__``): then ``amends undo`` asks for
  ``--catalog`` instead of guessing.
- ``fingerprint`` is a hash of the contracts (name, class, declared or not) of the catalog's tools,
  so a catalog that changed since the saga ran is noticed.
- ``tools`` lists the catalog's tool names.

This module never loads a catalog itself and never writes to the log.
"""

from __future__ import annotations

import hashlib
import json
import sys
import weakref
from collections.abc import Iterable
from typing import Any

from ._contracts import Catalog

__all__ = ["SANDBOX_REF", "catalog_meta", "needed_tools", "tag_catalog"]

SANDBOX_REF = "amends.sandbox:demo_catalog"
"""The reference recorded for sagas run with the sandbox's tools."""

_TAGS: weakref.WeakKeyDictionary[Catalog, str] = weakref.WeakKeyDictionary()
_FOUND: weakref.WeakKeyDictionary[Catalog, str | None] = weakref.WeakKeyDictionary()


def tag_catalog(catalog: Catalog, ref: str) -> Catalog:
    """Record that ``catalog`` can be loaded again from ``ref`` (``MODULE:ATTR`` or a TOML path).

    The CLI tags what ``--catalog`` loaded; a program whose catalog is not a module-level
    attribute can tag it so that ``amends undo`` finds it without ``--catalog``.
    """
    _TAGS[catalog] = ref
    return catalog


def fingerprint(catalog: Catalog) -> str:
    """A hash of the contracts of ``catalog``'s tools (name, class, declared or by default)."""
    summary = [[t.name, t.reversibility.value, t.explicit] for t in catalog]
    return hashlib.sha256(json.dumps(summary).encode()).hexdigest()[:16]


def _module_attr(catalog: Catalog) -> str | None:
    """``MODULE:ATTR`` of an importable module whose attribute is this very catalog.

    Several modules may hold it (``from tools import catalog``): the one that defines its tools
    wins, then a module that is not a pytest ``conftest``, then the shortest name.
    """
    tool_modules = {getattr(t.fn, "__module__", None) for t in catalog}
    found: list[tuple[bool, bool, int, str]] = []
    # .copy() is atomic under the GIL; another thread importing a module meanwhile would make
    # list(sys.modules.items()) raise "dictionary changed size during iteration"
    for name, module in sys.modules.copy().items():
        if module is None or name == "__main__" or name.startswith("_"):
            continue
        try:
            items = list(vars(module).copy().items())
        except TypeError:
            continue
        for attr, value in items:
            if value is catalog and not attr.startswith("_"):
                ref = f"{name}:{attr}"
                found.append((name not in tool_modules, "conftest" in name, len(ref), ref))
    return min(found)[3] if found else None


def _infer(catalog: Catalog) -> str | None:
    tools = list(catalog)
    mods = {getattr(t.fn, "__module__", None) or "" for t in tools}
    if tools and all(m == "amends.sandbox" or m.startswith("amends.sandbox.") for m in mods):
        return SANDBOX_REF  # every tool is the sandbox's own: the sandbox made this saga
    if catalog not in _FOUND:
        _FOUND[catalog] = _module_attr(catalog)
    return _FOUND[catalog]


_SUMMARY: weakref.WeakKeyDictionary[Catalog, tuple[int, str, list[str]]] = (
    weakref.WeakKeyDictionary()
)


def catalog_meta(catalog: Catalog) -> dict[str, Any]:
    """The ``meta["catalog"]`` a saga run with ``catalog`` records."""
    # A catalog only grows (a name is never registered twice), so its size says whether the
    # cached fingerprint is current; computing it costs ~0.1 ms per saga otherwise.
    cached = _SUMMARY.get(catalog)
    if cached is None or cached[0] != len(catalog):
        cached = (len(catalog), fingerprint(catalog), [t.name for t in catalog])
        _SUMMARY[catalog] = cached
    return {
        "ref": _TAGS.get(catalog) or _infer(catalog),
        "fingerprint": cached[1],
        "tools": list(cached[2]),
    }


def needed_tools(steps: Iterable[Any]) -> list[str]:
    """Every tool an undo of these logged steps may call or plan with: the inverses, the
    expectation probes, and the tools of steps declared reversible or compensable (their
    contract says how to compensate). Irreversible and read-only steps need no tool at undo:
    they are acknowledged or not needed (sorted, unique)."""
    names: set[str] = set()
    for s in steps:
        if s.declared in ("reversible", "compensable"):
            names.add(s.tool)
        if s.inverse:
            names.add(str(s.inverse.get("tool")))
        if s.expectation:
            names.add(str(s.expectation.get("probe")))
    return sorted(names)
