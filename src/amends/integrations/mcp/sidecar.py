"""What a gateway's sagas record as their catalog (its config's path), what gateways before issue
24 recorded instead, and the file next to the log that named their config (now only read)."""

from __future__ import annotations

from pathlib import Path

from .config import GatewayConfig

__all__ = ["REF", "config_ref", "sidecar_path"]

REF = "amends.integrations.mcp.undo_catalog:gateway_catalog"
"""What sagas of gateways before issue 24 recorded as their catalog."""


def sidecar_path(log: str) -> Path | None:
    """The file next to a log path that names its gateway config (``None`` for a URL)."""
    if "://" in log and not log.startswith("sqlite:///"):
        return None
    if log in ("", ":memory:"):
        return None
    return Path(log.removeprefix("sqlite:///") + ".mcp-gateway.json")


def config_ref(config: GatewayConfig) -> str:
    """What a gateway's sagas record as their catalog: its config's absolute path."""
    return str(Path(config.source).resolve()) if config.source else REF
