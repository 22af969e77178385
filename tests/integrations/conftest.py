"""Fixtures for the agent-framework adapter tests (issue 15)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export attempts offline
sys.path.insert(0, str(Path(__file__).parent))
