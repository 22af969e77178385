"""The catalog of a gateway's saga, loadable without a running gateway (issue 14, item 7).

Every saga records where its catalog comes from (:mod:`amends._catalog_ref`); a gateway's sagas
record :data:`REF`, a function of the log's path. It finds the gateway config through a small file
next to the log (``<log>.mcp-gateway.json``, written by the gateway) or ``$AMENDS_MCP_CONFIG``, and
builds the same catalog whose tools open a connection to their upstream for each call. So
``amends undo``, ``amends serve`` and the web page undo a gateway's saga with the same contracts.
"""

from __future__ import annotations

import json
import os

from amends import Catalog, ConfigError

from .config import load_config
from .sidecar import REF, sidecar_path, write_sidecar

__all__ = ["REF", "gateway_catalog", "sidecar_path", "write_sidecar"]


def gateway_catalog(db: str) -> Catalog:
    """The catalog of the gateway that wrote log ``db``: its upstream tools and contracts.

    Raises:
        ConfigError: Neither ``$AMENDS_MCP_CONFIG`` nor ``<db>.mcp-gateway.json`` names a config,
            or an upstream cannot be started.
    """
    from amends import run

    from .gateway import Gateway

    config_path = os.environ.get("AMENDS_MCP_CONFIG")
    side = sidecar_path(db)
    if not config_path and side is not None and side.exists():
        config_path = json.loads(side.read_text(encoding="utf-8")).get("config")
    if not config_path:
        raise ConfigError(
            f"saga log {db!r} was written by an MCP gateway, but no config names its upstreams: "
            f"set AMENDS_MCP_CONFIG to the gateway's config file"
        )
    gw = Gateway(load_config(config_path), engine=None)

    async def build() -> Catalog:
        await gw.start(keep_connections=False)
        catalog = gw.catalog
        await gw.close()
        return catalog

    return run(build())
