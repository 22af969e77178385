"""The public surface of ``amends`` is exactly ``amends.__all__`` (httpx's
``tests/test_exported_members.py``): implementation modules are private (``amends._engine``), so
any public name that appears on the package without being exported fails here."""

from __future__ import annotations

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
