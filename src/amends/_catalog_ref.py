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

Nothing read from a log is ever imported or executed (rule 12, issue 21 item 2): the operator
names the catalogs a process may load (``--catalog``, repeatable, or ``$AMENDS_CATALOGS``), and
a saga's recorded reference only *selects* among those, by name and fingerprint
(:func:`choose_catalog`). A reference to anything else is refused, naming both.

This module never loads a catalog itself (only through the loaders the operator allowed) and
never writes to the log.
"""

from __future__ import annotations

import hashlib
import json
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._contracts import Catalog
from ._errors import ConfigError

__all__ = [
    "SANDBOX_REF",
    "Loader",
    "catalog_meta",
    "choose_catalog",
    "fingerprint",
    "needed_tools",
    "tag_catalog",
]

Loader = Callable[[], Catalog]
"""Loads one catalog the operator allowed (the CLI's loaders import a module or read a TOML file
only when called, and only once)."""

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
    expectation probes, and the tools of steps reversible or compensable (their contract says
    how to compensate). Irreversible and read-only steps need no tool at undo: they are
    acknowledged or not needed (sorted, unique) -- a step whose contract was broken when it ran
    included (it is undone as irreversible: an inverse it named that no catalog has, issue 23,
    must not make every undo of its saga refuse)."""
    names: set[str] = set()
    for s in steps:
        if (s.effective or s.declared) not in ("reversible", "compensable"):
            continue
        if s.declared in ("reversible", "compensable"):
            names.add(s.tool)
        if s.inverse:
            names.add(str(s.inverse.get("tool")))
        if s.expectation:
            names.add(str(s.expectation.get("probe")))
    return sorted(names)


def _recorded(meta: Any) -> tuple[str | None, str | None]:
    """(ref, fingerprint) of a saga's ``meta["catalog"]``; ``(None, None)`` when absent."""
    found = meta.get("catalog") if isinstance(meta, Mapping) else None
    if not isinstance(found, Mapping):
        return None, None
    ref, fp = found.get("ref"), found.get("fingerprint")
    return (ref if isinstance(ref, str) else None), (fp if isinstance(fp, str) else None)


def choose_catalog(
    meta: Mapping[str, Any],
    allowed: Mapping[str, Loader],
    *,
    saga_id: str,
    warn: Callable[[str], None] | None = None,
) -> tuple[str, Catalog]:
    """The catalog, among those the operator ``allowed`` (name -> loader), to undo a saga with.

    The saga's recorded reference (``meta["catalog"]``) only selects: an allowed catalog of
    that name, else the one allowed catalog whose fingerprint it recorded. When the operator
    allowed exactly one catalog, that one is used whatever the saga recorded (the operator
    chose it; ``warn`` says so if the name or the contracts differ). The sandbox's catalog is
    never used for a saga the sandbox did not make. Nothing is imported that the operator did
    not allow: the recorded reference may be anything (``os:remove``), it is data.

    Returns:
        The chosen catalog's name and the catalog.

    Raises:
        ConfigError: No catalog is allowed, none of those allowed is the saga's, or the sandbox
            would act for another saga; the message names what the saga recorded, what is
            allowed, and what to pass.
    """
    ref, fp = _recorded(meta)
    shown = f"{ref!r}" if ref else "no catalog"
    if not allowed and ref is None:
        raise ConfigError(
            f"saga {saga_id} does not record which catalog ran it (a catalog defined in "
            f"__main__ or inside a function, or a log from an older amends); pass the same "
            f"tools with --catalog MODULE:ATTR or --catalog tools.toml{_GUIDE}",
            saga_id=saga_id,
        )
    if not allowed:
        raise ConfigError(
            f"saga {saga_id} recorded {shown}, and this process is allowed no catalog; amends "
            f"never loads a catalog a log names (rule 12). Pass the catalog that ran the saga, "
            f"e.g. --catalog myproj.tools:catalog or --catalog tools.toml (or set "
            f"AMENDS_CATALOGS){_CHECK if ref else ''}{_GUIDE}",
            saga_id=saga_id,
        )
    name = _select(ref, fp, allowed, saga_id)
    if name == SANDBOX_REF and ref != SANDBOX_REF:
        raise ConfigError(
            f"saga {saga_id} was not made by the sandbox; the sandbox's tools would act on the "
            f"sandbox, not on your vendors. Pass the catalog that ran it with --catalog{_GUIDE}",
            saga_id=saga_id,
        )
    catalog = allowed[name]()
    now = fingerprint(catalog)
    if warn is not None and ref is not None and name != ref:
        warn(f"saga {saga_id} recorded catalog {ref!r}; undoing with {name!r}, as allowed")
    if warn is not None and fp and fp != now:
        warn(
            f"the contracts of catalog {name} changed since saga {saga_id} ran (fingerprint {fp} "
            f"then, {now} now); undoing with the contracts at hand"
        )
    return name, catalog


def _select(ref: str | None, fp: str | None, allowed: Mapping[str, Loader], saga_id: str) -> str:
    """The allowed name ``ref``/``fp`` selects (see :func:`choose_catalog`)."""
    if ref is not None and ref in allowed:
        return ref
    if len(allowed) == 1:
        return next(iter(allowed))
    if fp:
        same = [n for n, load in allowed.items() if fingerprint(load()) == fp]
        if len(same) == 1:
            return same[0]
    names = ", ".join(repr(n) for n in allowed)
    raise ConfigError(
        f"saga {saga_id} recorded catalog {ref!r} (fingerprint {fp}), which is not among the "
        f"catalogs this process is allowed to load ({names}); amends never loads a catalog a log "
        f"names (rule 12). Pass the catalog that ran the saga too, e.g. --catalog "
        f"myproj.tools:catalog{_CHECK if ref else ''}{_GUIDE}",
        saga_id=saga_id,
    )


# issue 26 item 8: where a catalog must live (an importable module) and how amends finds it
_GUIDE = ". Where a catalog lives and how amends finds it: docs/your-project.md"
_CHECK = "; the log's reference is only a hint: check it is your catalog before you pass it"
