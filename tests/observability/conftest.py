"""Fixtures of the observability tests (issue 28); the helpers live in ``otel_capture``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from otel_capture import lines, points, spans

__all__ = ["lines", "points", "spans"]
