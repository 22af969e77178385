"""The public names of each adapter, frozen: a change here is an API change, seen in review."""

from __future__ import annotations

import importlib

import pytest

SHARED = [
    "agent_run",
    "agent_run_sync",
    "approval_message",
    "declare",
    "follow_up_tools",  # issue 27 part 3
    "spend",
    "undo_tool",
]
EXPORTS = {
    "amends.integrations.langchain": [
        "AmendsMiddleware",
        "AmendsState",
        "amends_tool_node",
        "catalog_tools",
    ],
    "amends.integrations.pydantic_ai": ["AmendsToolset", "catalog_toolset"],
    "amends.integrations.openai_agents": [
        "AgentRunOutcome",
        "AmendsRunHooks",
        "approval_requests",
        "catalog_function_tools",
        "run_agent",
        "run_agent_sync",
        "wrap_agent",
        "wrap_tools",
    ],
}


@pytest.mark.parametrize("module", EXPORTS)
def test_the_adapters_public_names_are_exactly_these(module: str) -> None:
    """__all__ is sorted, holds exactly the frozen names, and every name resolves."""
    mod = importlib.import_module(module)
    assert mod.__all__ == sorted(mod.__all__)
    assert sorted(mod.__all__) == sorted(EXPORTS[module] + SHARED)
    for name in mod.__all__:
        assert getattr(mod, name) is not None
