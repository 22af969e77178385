"""An mcp 1.x client (run with the interpreter of .amends-mcp/mcp1): starts the gateway over
stdio, makes a write and undoes it, and prints what it got as JSON lines."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.client.stdio import stdio_client

from mcp import ClientSession, StdioServerParameters


async def main(python: str, config: str) -> None:
    params = StdioServerParameters(  # the whole environment: its PYTHONPATH names the tree
        command=python,
        args=["-m", "amends.integrations.mcp", "serve", "--config", config],
        env=dict(os.environ),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        r = await session.call_tool("kv_kv_set", {"key": "k", "value": "v1"})
        undo = await session.call_tool("amends_undo", {})
        print(
            json.dumps(
                {
                    "protocol": init.protocolVersion,
                    "tools": sorted(t.name for t in tools.tools),
                    "set": r.structuredContent,
                    "step": (r.meta or {}).get("amends/step"),
                    "undo": undo.structuredContent,
                    "undo_text": [getattr(c, "text", "") for c in undo.content],
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
