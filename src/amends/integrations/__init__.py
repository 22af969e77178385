"""Where amends meets the places agents run: MCP servers, agent frameworks, Temporal.

Each integration is a sub-package or module behind its own extra (``amends[mcp]``,
``amends[langchain]``, ``amends[pydantic-ai]``, ``amends[openai-agents]``, ``amends[temporal]``),
imported only when a user imports it. They use amends' public API, as a user's code would; nothing
in the core imports from here.
"""
