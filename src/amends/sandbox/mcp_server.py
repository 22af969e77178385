"""The sandbox vendors as an MCP server (``amends sandbox mcp --world FILE``), over stdio.

Each tool of :func:`amends.sandbox.sandbox_catalog` becomes an MCP tool of the same name that acts
on the world file, as a real vendor's MCP server would. It reads from the request ``_meta`` what a
vendor API would read from headers: the idempotency key (``amends/idempotency_key``) and, for a
compensation, the precondition its compare-and-set enforces (``amends/precondition``, rule 4).
The contract recorded by the Python tool is *not* sent back: the gateway's contracts come from its
own catalog (``builtin:sandbox``), never from the server. Needs ``amends[mcp]``.
"""

from __future__ import annotations

import inspect
import json
import typing
import uuid
from typing import Any

from amends import Call, Expectation, PermanentError, PreconditionFailed, ToolSpec, TransientError

from .catalog import sandbox_catalog
from .world import World

__all__ = ["build_server", "serve_stdio"]

_JSON_TYPES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    list[str]: {"type": "array", "items": {"type": "string"}},
}


def _schema(spec: ToolSpec) -> dict[str, Any]:
    fn = spec.fn
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for i, (name, p) in enumerate(inspect.signature(fn).parameters.items()):
        if i == 0:
            continue  # the amends.Call
        props[name] = dict(_JSON_TYPES.get(hints.get(name), {}))
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


def _phase(value: Any) -> Any:
    if value in ("forward", "compensate", "follow_up", "probe"):
        return value
    return "probe" if value == "before" else "forward"


def build_server(world: World) -> Any:
    """A low-level SDK server exposing the sandbox catalog over ``world``."""
    import mcp_types as types
    from mcp.server import Server

    catalog = sandbox_catalog(world)
    specs = {s.name: s for s in catalog}

    def text(message: str) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=message)], is_error=True
        )

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=s.name,
                    description=s.description,
                    input_schema=_schema(s),
                    annotations=types.ToolAnnotations(
                        read_only_hint=s.reversibility == "read_only"
                    ),
                )
                for s in specs.values()
            ]
        )

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        spec = specs.get(params.name)
        if spec is None:
            return text(f"PermanentError: no tool {params.name!r}")
        meta = ctx.meta if isinstance(ctx.meta, dict) else {}
        pre = meta.get("amends/precondition")
        call = Call(
            saga_id=str(meta.get("amends/saga_id", "mcp")),
            step_id=str(meta.get("amends/step_id", "mcp")),
            tool=spec.name,
            phase=_phase(meta.get("amends/phase")),
            idempotency_key=str(meta.get("amends/idempotency_key") or uuid.uuid4().hex),
            precondition=Expectation.from_dict(pre) if isinstance(pre, dict) else None,
        )
        world.tick()  # another process (a person, the test) may have moved the clock
        try:
            out = spec.fn(call, **dict(params.arguments or {}))
            result = await out if inspect.isawaitable(out) else out
        # Error text says how the vendor failed; builtin:sandbox reads it (rule 9).
        except PreconditionFailed as exc:
            return text(f"PreconditionFailed: {exc}")
        except TransientError as exc:
            return text(f"TransientError: {exc}")
        except PermanentError as exc:
            return text(f"PermanentError: {exc}")
        except TypeError as exc:  # wrong arguments: nothing ran
            return text(f"PermanentError: bad arguments for {spec.name}: {exc}")
        except Exception as exc:
            return text(f"Error: {type(exc).__name__}: {exc}")
        structured = result if isinstance(result, dict) else {"result": result}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, sort_keys=True))],
            structured_content=structured,
        )

    return Server("amends-sandbox", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(world_path: str, *, seed: int = 0) -> None:
    """Serve the sandbox over stdio until the client disconnects."""
    from mcp.server.stdio import stdio_server

    world = World(world_path, seed=seed)
    try:
        server = build_server(world)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        world.close()


if __name__ == "__main__":  # python -m amends.sandbox.mcp_server WORLD_FILE
    import asyncio
    import sys

    asyncio.run(serve_stdio(sys.argv[1]))
