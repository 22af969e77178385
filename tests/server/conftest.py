"""Fixtures of the server tests (the harness lives in ``server_harness.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from server_harness import browser, live

__all__ = ["browser", "live"]
