"""The MCP gateway (``amends mcp serve``): every MCP tool call gets a contract, a saga step and
an honest undo.

Needs the ``amends[mcp]`` extra (the official ``mcp`` SDK, 2.x). Nothing in the core imports this
package; ``import amends`` works without the extra. See docs/mcp.md.
"""

from __future__ import annotations

from .config import GatewayConfig, UpstreamConfig, load_config
from .contracts import ContractFile, ToolContract, builtin_contract_path, load_contracts

__all__ = [
    "ContractFile",
    "Gateway",
    "GatewayConfig",
    "ToolContract",
    "UpstreamConfig",
    "builtin_contract_path",
    "load_config",
    "load_contracts",
    "serve",
]


def __getattr__(name: str) -> object:
    # The SDK is imported only when the gateway itself is used.
    if name == "Gateway":
        from .gateway import Gateway

        return Gateway
    if name == "serve":
        from .cli import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
