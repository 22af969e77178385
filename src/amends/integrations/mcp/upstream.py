"""Connections to upstream MCP servers, and the one table that translates their failures.

An upstream is reached with the official SDK's :class:`mcp.Client` (stdio by command, or
streamable HTTP by URL). This module decides nothing about sagas: it forwards a call and says
what came back, translating SDK errors at the edge (STYLE.md: one table, ``raise X from exc``).
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from amends import AmendsError, ConfigError, PermanentError, PreconditionFailed, TransientError

from .config import UpstreamConfig
from .contracts import ErrorRules

if TYPE_CHECKING:
    import mcp_types

__all__ = ["Upstream", "UpstreamError", "error_text", "raise_for_error", "result_value"]


class UpstreamError(AmendsError):
    """An upstream call whose outcome is unknown: an ``isError`` result the contract does not
    read as "refused", or a transport failure after the request was sent (rule 9: in doubt)."""


def error_text(result: mcp_types.CallToolResult) -> str:
    """The text of a result's content blocks, joined (what an error says)."""
    parts = [getattr(c, "text", "") for c in result.content]
    return "\n".join(p for p in parts if p).strip()


def result_value(result: mcp_types.CallToolResult) -> Any:
    """What templates and the log see as a tool's result: ``structured_content`` (a lone
    ``{"result": x}`` wrapper, the SDK's shape for non-object outputs, unwrapped), else the text."""
    sc = result.structured_content
    if sc is not None:
        if isinstance(sc, dict) and set(sc) == {"result"}:
            return sc["result"]
        return sc
    return error_text(result)


def raise_for_error(result: mcp_types.CallToolResult, rules: ErrorRules, tool: str) -> None:
    """Translate an ``isError`` result by the contract's error rules (rule 9).

    Raises:
        PreconditionFailed: The text matches ``drift`` (a compare-and-set refused the write).
        TransientError: It matches ``transient``.
        PermanentError: It matches ``refused``: the server refused, nothing happened.
        UpstreamError: It matches nothing: the outcome is unknown.
    """
    if not result.is_error:
        return
    text = error_text(result) or "(no message)"
    if rules.drift is not None and rules.drift.search(text):
        raise PreconditionFailed(f"{tool}: {text[:500]}")
    if rules.transient is not None and rules.transient.search(text):
        raise TransientError(f"{tool}: {text[:500]}")
    if rules.refused is not None and rules.refused.search(text):
        raise PermanentError(f"{tool} refused: {text[:500]}")
    raise UpstreamError(
        f"{tool} returned an error the contract does not read as a refusal, so whether it took "
        f"effect is unknown: {text[:500]}",
        tool=tool,
    )


class Upstream:
    """One connected upstream MCP server."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self.tools: dict[str, mcp_types.Tool] = {}
        self._client: Any = None

    def _target(self) -> tuple[Any, str]:
        from mcp.client.stdio import get_default_environment

        from mcp import StdioServerParameters

        cfg = self.config
        if cfg.command is not None:
            env = get_default_environment()
            env.update(cfg.env or {})
            params = StdioServerParameters(
                command=cfg.command, args=list(cfg.args), env=env, cwd=cfg.cwd
            )
            return params, f"command {' '.join([cfg.command, *cfg.args])!r}"
        assert cfg.url is not None
        return cfg.url, f"URL {cfg.url!r}"

    async def connect(self, stack: AsyncExitStack, *, keep: bool = True) -> None:
        """Start (or reach) the server and list its tools. With ``keep``, the connection stays
        open until ``stack`` closes; without, every later :meth:`call` opens its own (for
        ``amends undo`` and the web page, which undo a gateway's saga without a gateway).

        Raises:
            ConfigError: The server cannot be started or reached (the message names it).
        """
        from mcp import Client

        target, where = self._target()
        try:
            async with AsyncExitStack() as local:
                client = await (stack if keep else local).enter_async_context(Client(target))
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    for t in page.tools:
                        self.tools[t.name] = t
                    cursor = page.next_cursor
                    if not cursor:
                        break
                if keep:
                    self._client = client
        except (OSError, AmendsError) as exc:
            raise ConfigError(
                f"upstream {self.name!r} ({where}) could not be started: {exc}; check the "
                f"command or URL in the gateway config"
            ) from exc
        except Exception as exc:
            raise ConfigError(
                f"upstream {self.name!r} ({where}) did not answer as an MCP server: "
                f"{type(exc).__name__}: {exc}; check the command or URL in the gateway config"
            ) from exc

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> mcp_types.CallToolResult:
        """Forward one ``tools/call``.

        Raises:
            PermanentError: The server rejected the request itself (unknown tool, bad params):
                nothing ran.
            UpstreamError: The transport failed after the request was sent: outcome unknown.
        """
        from mcp import Client, MCPError

        try:
            args = json.loads(json.dumps(arguments))
            m: Any = meta
            result: mcp_types.CallToolResult
            if self._client is not None:
                result = await self._client.call_tool(tool, args, meta=m)
            else:  # no kept connection: one for this call
                async with Client(self._target()[0]) as client:
                    result = await client.call_tool(tool, args, meta=m)
        except MCPError as exc:
            # JSON-RPC errors -32601/-32602 mean the request was rejected before the tool ran.
            if exc.code in (-32601, -32602):
                raise PermanentError(
                    f"{self.name}.{tool} rejected the call: {exc.error.message}"
                ) from exc
            raise UpstreamError(
                f"{self.name}.{tool} failed with MCP error {exc.code}: {exc.error.message}; "
                f"whether it took effect is unknown",
                tool=tool,
            ) from exc
        except Exception as exc:  # a broken pipe, a closed stream: the request may have landed
            raise UpstreamError(
                f"{self.name}.{tool}: the connection to the upstream failed "
                f"({type(exc).__name__}: {exc}); whether the call took effect is unknown",
                tool=tool,
            ) from exc
        return result
