"""Where a gateway's sagas say their catalog comes from, and the file next to the log that names
the gateway's config (so ``amends undo`` rebuilds the same contracts without a gateway running)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .config import GatewayConfig

__all__ = ["REF", "sidecar_path", "write_sidecar"]

REF = "amends.integrations.mcp.undo_catalog:gateway_catalog"
"""What a gateway's sagas record as their catalog."""


def sidecar_path(log: str) -> Path | None:
    """The file next to a log path that names its gateway config (``None`` for a URL)."""
    if "://" in log and not log.startswith("sqlite:///"):
        return None
    if log in ("", ":memory:"):
        return None
    return Path(log.removeprefix("sqlite:///") + ".mcp-gateway.json")


def write_sidecar(config: GatewayConfig) -> None:
    """Record next to the log which config this gateway runs (owner-readable only)."""
    path = sidecar_path(config.log)
    if path is None or not config.source:
        return
    data = json.dumps({"config": str(Path(config.source).resolve())})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
