"""What the gateway passes through to its upstreams besides tools: resources, prompts, logging.

These MCP features read (a resource, a prompt) or configure the connection (a subscription, a
log level); none acts on the world, so none is a saga step and none needs a contract. The
gateway lists what each upstream offers and routes each request to the upstream that listed it
(issue 24 item 9: every conformance check a server passes directly also passes through the
gateway). Prompt names carry the upstream's prefix as tool names do; a resource URI is the
upstream's own.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp_types as types

    from .ports import GatewayView
    from .upstream import Upstream

__all__ = ["handlers"]


def _caps(up: Upstream) -> Any:
    return up.capabilities


async def _each(gw: GatewayView, feature: str) -> list[Upstream]:
    return [up for up in gw.upstreams if getattr(_caps(up), feature, None) is not None]


def handlers(gw: GatewayView) -> dict[str, Any]:
    """The low-level server handlers for resources, prompts and logging, by keyword."""
    import mcp_types as types
    from mcp_types import INVALID_PARAMS

    from mcp import MCPError

    owner: dict[str, Upstream] = {}
    prompts: dict[str, tuple[Upstream, str]] = {}

    def route(uri: str) -> Upstream:
        if uri in owner:
            return owner[uri]
        ups = [up for up in gw.upstreams if getattr(_caps(up), "resources", None) is not None]
        if len(ups) == 1:
            return ups[0]
        raise MCPError(INVALID_PARAMS, f"no upstream lists resource {uri!r}; list resources first")

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        out: list[types.Resource] = []
        for up in await _each(gw, "resources"):
            for r in await up.page("list_resources"):
                owner[str(r.uri)] = up
                out.append(r)
        return types.ListResourcesResult(resources=out)

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        out: list[types.ResourceTemplate] = []
        for up in await _each(gw, "resources"):
            out += await up.page("list_resource_templates")
        return types.ListResourceTemplatesResult(resource_templates=out)

    async def read_resource(ctx: Any, params: Any) -> types.ReadResourceResult:
        result: types.ReadResourceResult = await route(str(params.uri)).request(
            "read_resource", str(params.uri)
        )
        return result

    async def subscribe(ctx: Any, params: Any) -> types.EmptyResult:
        await route(str(params.uri)).request("subscribe_resource", str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: Any) -> types.EmptyResult:
        await route(str(params.uri)).request("unsubscribe_resource", str(params.uri))
        return types.EmptyResult()

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        out: list[types.Prompt] = []
        for up in await _each(gw, "prompts"):
            for p in await up.page("list_prompts"):
                name = f"{up.name}_{p.name}" if up.config.prefix else p.name
                prompts[name] = (up, p.name)
                out.append(p.model_copy(update={"name": name}))
        return types.ListPromptsResult(prompts=out)

    async def get_prompt(ctx: Any, params: Any) -> types.GetPromptResult:
        if params.name not in prompts:
            await list_prompts(ctx, None)
        if params.name not in prompts:
            raise MCPError(
                INVALID_PARAMS, f"unknown prompt {params.name!r}; list the prompts first"
            )
        up, name = prompts[params.name]
        result: types.GetPromptResult = await up.request(
            "get_prompt", name, dict(params.arguments or {})
        )
        return result

    async def set_level(ctx: Any, params: Any) -> types.EmptyResult:
        for up in await _each(gw, "logging"):
            await up.request("set_logging_level", params.level)
        return types.EmptyResult()

    out: dict[str, Any] = {}
    if any(getattr(_caps(up), "resources", None) is not None for up in gw.upstreams):
        out.update(
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
        )
    if any(getattr(_caps(up), "prompts", None) is not None for up in gw.upstreams):
        out.update(on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    if any(getattr(_caps(up), "logging", None) is not None for up in gw.upstreams):
        out["on_set_logging_level"] = set_level
    return out


def quietly(make: Any) -> Any:
    """Build the server without the SDK's deprecation warning for the logging capability (the
    gateway passes it on only because an upstream offers it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()
