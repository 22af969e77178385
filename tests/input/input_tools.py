"""A catalog at module level, so the CLI can load it by reference (``input_tools:CATALOG``)."""

from __future__ import annotations

from core_world import fresh

WORLD, CATALOG = fresh()
SPEC = "input_tools:CATALOG"
