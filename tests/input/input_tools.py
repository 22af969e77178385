"""A catalog at module level, so the CLI can load it by reference (``input_tools:CATALOG``)."""

from __future__ import annotations

from core_world import fresh

WORLD, CATALOG = fresh()
SPEC = "input_tools:CATALOG"


def _without(name: str) -> object:
    """CATALOG as an upgrade left it: tool ``name`` renamed away (issue 23)."""
    import amends

    out = amends.Catalog()
    for t in CATALOG:
        if t.name != name:
            out.register(
                t.name, t.fn, reversibility=t.reversibility.value if t.explicit else None,
                resources=t.resources, timeout=t.timeout, idempotent=t.idempotent,
            )  # fmt: skip
    return out


UPGRADED = _without("crm.update_field")
"""The catalog after an upgrade renamed ``crm.update_field``."""
