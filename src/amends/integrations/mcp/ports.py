"""What the gateway's parts read of the gateway: approvals, sessions, the ``amends_*`` tools and
the pass-through handlers.

The gateway creates these parts and they call back into it. They name what they need here, as
Protocols the gateway satisfies (mypy checks it where the gateway creates them), instead of
importing the gateway: so no module under ``integrations/mcp`` imports ``gateway``, not even for
annotations (issue 22 item 3; ``tests/architecture/test_layers.py`` counts ``if TYPE_CHECKING:``
imports as edges of the import graph). This module imports none of those parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amends import Catalog, Engine

    from .config import GatewayConfig
    from .contracts import ToolContract
    from .upstream import Upstream

__all__ = ["ExportedTool", "GatewayView"]


class ExportedTool(Protocol):
    """One upstream tool as the agent sees it (the gateway's ``Exported``)."""

    @property
    def catalog_name(self) -> str:
        """Name in the amends catalog and the saga log."""
        ...

    @property
    def contract(self) -> ToolContract | None:
        """The tool's contract from the contract file; ``None``: irreversible by default."""
        ...


class GatewayView(Protocol):
    """The gateway as its parts see it (``amends.integrations.mcp.Gateway``)."""

    @property
    def config(self) -> GatewayConfig:
        """The gateway's configuration (tenant, approval mode, upstreams, ...)."""
        ...

    @property
    def catalog(self) -> Catalog:
        """The amends catalog the gateway registered the upstream tools in."""
        ...

    @property
    def engine(self) -> Engine:
        """The engine that logs the agent's sagas and undoes them."""
        ...

    @property
    def upstreams(self) -> Sequence[Upstream]:
        """The upstream MCP servers, in configuration order."""
        ...
