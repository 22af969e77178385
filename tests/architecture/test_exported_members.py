"""The public surface of ``amends`` is exactly ``amends.__all__`` (httpx's
``tests/test_exported_members.py``): implementation modules are private (``amends._engine``), so
any public name that appears on the package without being exported fails here."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Iterator

import amends

# Sub-packages a user imports by name (documented in docs/architecture.md); importing them sets an
# attribute on the package, which is not a leak.
SUBPACKAGES = {"cli", "contract_file", "evals", "integrations", "sandbox", "server", "testing"}


def public_names(module: object) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")}


def test_every_public_name_on_amends_is_exported() -> None:
    assert public_names(amends) - SUBPACKAGES == set(amends.__all__)


def test_every_exported_name_exists() -> None:
    missing = [name for name in amends.__all__ if not hasattr(amends, name)]
    assert missing == []


def test_a_stray_public_name_is_caught() -> None:
    """The check itself can fail: a name added to the package without exporting it."""
    amends.stray_helper = object()  # type: ignore[attr-defined]
    try:
        assert public_names(amends) - SUBPACKAGES != set(amends.__all__)
    finally:
        del amends.stray_helper  # type: ignore[attr-defined]


def _classes_in(hint: object) -> Iterator[type]:
    """The classes a type hint names (``list[SagaRecord] | None`` -> list, SagaRecord, NoneType)."""
    if isinstance(hint, type):
        yield hint
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        yield origin
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)


def _public_hints(obj: object) -> Iterator[tuple[str, object]]:
    """(where, hint) for what a user gets back from ``obj``: the return of every public function
    and method, the value of every public property, the fields of a public record."""
    name = getattr(obj, "__name__", repr(obj))
    if inspect.isclass(obj):
        for attr, member in inspect.getmembers(obj):
            fn = member.fget if isinstance(member, property) else member
            if attr.startswith("_") or not callable(fn) or inspect.isclass(fn):
                continue
            hint = typing.get_type_hints(fn).get("return")
            if hint is not None:
                yield f"{name}.{attr}()", hint
        if dataclasses.is_dataclass(obj):
            hints = typing.get_type_hints(obj)
            for f in dataclasses.fields(obj):
                if not f.name.startswith("_"):
                    yield f"{name}.{f.name}", hints[f.name]
    elif callable(obj):
        hint = typing.get_type_hints(obj).get("return")
        if hint is not None:
            yield f"{name}()", hint


def unexported_types(names: typing.Iterable[str]) -> list[str]:
    """amends classes that a public name hands to its user without their being exported."""
    exported = {id(getattr(amends, n)) for n in amends.__all__}
    found = set()
    for n in names:
        for where, hint in _public_hints(getattr(amends, n)):
            for cls in _classes_in(hint):
                if cls.__module__.split(".")[0] == "amends" and id(cls) not in exported:
                    found.add(f"{where} gives {cls.__module__}.{cls.__qualname__}")
    return sorted(found)


def test_every_type_the_public_api_returns_is_exported() -> None:
    """Issue 22 item 3: ``SagaLog.get_saga`` returned a ``SagaRecord`` a user could not import
    from ``amends``. A public method, property or record field whose type is an amends class
    that is not exported fails here: export it (and document it) or stop returning it."""
    assert unexported_types(amends.__all__) == []


def test_an_unexported_return_type_is_caught() -> None:
    """The check itself can fail: a public method returning a private class."""

    class _Hidden:
        pass

    _Hidden.__module__, _Hidden.__qualname__ = "amends._somewhere", "_Hidden"

    def leaky() -> object:
        return []

    leaky.__annotations__ = {"return": list[_Hidden]}  # a real class, not a string to resolve

    amends.leaky = leaky  # type: ignore[attr-defined]
    try:
        assert unexported_types(["leaky"]) == ["leaky() gives amends._somewhere._Hidden"]
    finally:
        del amends.leaky  # type: ignore[attr-defined]
