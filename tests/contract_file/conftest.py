"""Fixtures of the contract-language tests (the helpers live in ``contract_setup.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
