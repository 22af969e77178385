"""The catalog of a gateway's saga, loadable without a running gateway (issue 14 item 7; issue 24
item 6).

Every saga records where its catalog comes from (:mod:`amends._catalog_ref`). A gateway's sagas
record **the absolute path of the gateway config** that ran them, so each saga names its own
gateway even when several gateways (several configs) share one log. ``amends undo``, ``amends
serve`` and the web page rebuild that gateway's catalog from the config — the same upstream tools
and contracts, each inverse and probe opening its own connection to its upstream — and
``--catalog`` accepts a gateway config as it accepts a TOML catalog. A gateway config is a
catalog the operator names or allows like any other: nothing in the log is executed, the recorded
path only says which config to read.

Older sagas recorded :data:`REF`, a function of the log's path that reads the config named by a
small file next to the log (``<log>.mcp-gateway.json``, written by gateways before issue 24) or by
``$AMENDS_MCP_CONFIG``; it is kept so those sagas can still be undone.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path

from amends import Catalog, ConfigError

from .config import load_config
from .sidecar import REF, config_ref, sidecar_path

__all__ = [
    "REF",
    "config_ref",
    "gateway_catalog",
    "gateway_catalog_at",
    "gateways_catalog",
    "is_gateway_config",
    "sidecar_path",
]


def is_gateway_config(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a gateway config (a TOML file with ``[[upstream]]`` tables) rather
    than a TOML catalog of HTTP tools. A file that cannot be read is not one."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data.get("upstream"), list)


def gateway_catalog_at(path: str | os.PathLike[str]) -> Catalog:
    """The catalog of the gateway configured by ``path``: its upstream tools with their
    contracts, each call opening its own connection to its upstream.

    Raises:
        ConfigError: The config is invalid or an upstream cannot be started.
    """
    from amends import run, tag_catalog

    from .gateway import Gateway

    gw = Gateway(load_config(Path(path)), engine=None)

    async def build() -> Catalog:
        await gw.start(keep_connections=False)
        catalog = gw.catalog
        await gw.close()
        return catalog

    return tag_catalog(run(build()), str(Path(path).resolve()))


def gateways_catalog(paths: Sequence[str]) -> Catalog:
    """One catalog for the sagas of several gateways sharing a log (``amends serve``).

    Raises:
        ConfigError: Two configs export a tool under the same catalog name (an undo could reach
            the wrong server): serve one config with ``--catalog``.
    """
    merged = Catalog()
    owner: dict[str, str] = {}
    for path in sorted(paths):
        for spec in gateway_catalog_at(path):
            if spec.name in owner:
                raise ConfigError(
                    f"tool {spec.name!r} is in the gateway configs {owner[spec.name]} and {path}; "
                    f"one server cannot tell which upstream an undo is for: serve one with "
                    f"--catalog {owner[spec.name]}"
                )
            owner[spec.name] = path
            merged.register(
                spec.name,
                spec.fn,
                reversibility=spec.reversibility if spec.explicit else None,
                resources=spec.resources,
                description=spec.description,
                timeout=spec.timeout,
                sensitive=spec.sensitive,
                resolve_secret=spec.resolve_secret,
                idempotent=spec.idempotent,
                describe=spec.describe,
            )
    return merged


def gateway_catalog(db: str) -> Catalog:
    """The catalog of the gateway that wrote log ``db`` (sagas from before issue 24, which
    recorded :data:`REF`): the config ``$AMENDS_MCP_CONFIG`` or ``<db>.mcp-gateway.json`` names.

    Raises:
        ConfigError: Neither names a config, or an upstream cannot be started.
    """
    config_path = os.environ.get("AMENDS_MCP_CONFIG")
    side = sidecar_path(db)
    if not config_path and side is not None and side.exists():
        config_path = json.loads(side.read_text(encoding="utf-8")).get("config")
    if not config_path:
        raise ConfigError(
            f"saga log {db!r} was written by an MCP gateway, but no config names its upstreams: "
            f"pass the gateway's config with --catalog gateway.toml (or set AMENDS_MCP_CONFIG)"
        )
    return gateway_catalog_at(config_path)
