"""Fixtures of the trust-boundary tests (issue 21): the helpers of this directory importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
