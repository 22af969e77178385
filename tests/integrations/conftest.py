"""Fixtures for the agent-framework adapter tests (issue 15)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace export attempts offline
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def close_engines() -> Iterator[None]:
    """Close every engine ``agent_scene.new_engine`` made in the test (its log's connection)."""
    import agent_scene

    yield
    while agent_scene.OPENED:
        asyncio.run(agent_scene.OPENED.pop().close())
