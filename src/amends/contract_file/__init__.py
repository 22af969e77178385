"""One TOML contract language for every tool outside Python; HTTP and MCP are its transports.

A contract file says, per tool, what undo can do about it -- its class, its inverse and
expectation as templates over the call's arguments, what it captured and what it returned --
exactly as ``@catalog.tool`` and :class:`amends.Call` say it in Python (docs/toml-catalog.md is the
reference). The package has four parts, each the only one of its kind:

- :mod:`.schema` reads and validates a file (one key set; every error names the file, the tool,
  the key, the value and the fix);
- :mod:`.templates` fills templates, encodes URL path segments and redacts credentials;
- :mod:`.applier` turns a contract plus one call into the ``Call`` declarations the engine logs;
- :mod:`.transport` is the seam a transport implements: make one call, say ok / refused /
  transient / drift / unknown, with the result as data.

``amends.load_toml_catalog`` (HTTP, ``amends._toml_catalog``) and the MCP gateway
(``amends.integrations.mcp``) are its transports. This package never talks to a vendor itself.
"""

from __future__ import annotations

from .applier import Binding, Captured, read_captures, registration, tool_function, undo_after
from .schema import (
    MAX_TIMEOUT,
    Capture,
    ContractFile,
    Effects,
    ToolContract,
    probe_problems,
    read_file,
)
from .transport import (
    ErrorRules,
    OutcomeUnknownError,
    Transport,
    TransportRequest,
    TransportResult,
)

__all__ = [
    "MAX_TIMEOUT",
    "Binding",
    "Capture",
    "Captured",
    "ContractFile",
    "Effects",
    "ErrorRules",
    "OutcomeUnknownError",
    "ToolContract",
    "Transport",
    "TransportRequest",
    "TransportResult",
    "probe_problems",
    "read_captures",
    "read_file",
    "registration",
    "tool_function",
    "undo_after",
]
