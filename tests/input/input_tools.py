"""A catalog at module level, so the CLI can load it by reference (``input_tools:CATALOG``)."""

from __future__ import annotations

from core_world import fresh, without

WORLD, CATALOG = fresh()
SPEC = "input_tools:CATALOG"


UPGRADED = without(CATALOG, "crm.update_field")
"""The catalog after an upgrade renamed ``crm.update_field`` (issue 23)."""
