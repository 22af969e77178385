"""Where a contract file's sensitive arguments come back from at undo time (rule 11).

``sensitive = ["api_key"]`` redacts the argument before anything is logged; an inverse (or a
probe) that needs the value again reads it from an environment variable, in the process that
runs undo. Which variable, in order (issue 24 item 5):

1. ``secret_env`` of the **forward** tool, the step being undone: its declaration applies to
   the inverse it records (``secret_env = { api_key = "ACME_API_KEY" }`` on ``hooks_create``
   is what ``hooks_delete`` reads at undo);
2. ``secret_env`` of the tool being called (the inverse or probe itself);
3. the argument's name in capitals (``$API_KEY``) -- only for a name one of those two tools
   declares ``sensitive``: nothing else is ever read (rule 12).

This is the one place a contract file's secrets are resolved; the core asks it through the
tools' ``resolve_secret`` (:class:`amends._secrets.SecretRequest`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from .._errors import ConfigError
from .._secrets import SecretRequest, SecretResolver


class _Declares(Protocol):
    """What the resolver reads of a contract (a Protocol: schema imports this module, so this
    module never imports schema, not even for types; issue 22: no import cycles)."""

    @property
    def name(self) -> str: ...
    @property
    def sensitive(self) -> tuple[str, ...]: ...
    @property
    def secret_env(self) -> Mapping[str, str]: ...


ToolContract = _Declares
_C = TypeVar("_C", bound=Any)

__all__ = ["file_resolver", "with_resolvers"]


def file_resolver(
    contracts: Mapping[str, ToolContract], names: Mapping[str, str] | None = None
) -> SecretResolver:
    """The resolver of every sensitive tool of one contract file.

    Args:
        contracts: The file's contracts, by contract name.
        names: Catalog name -> contract name, when they differ (an MCP upstream's prefix);
            default: the same.

    Raises (at undo time, reported as a failed inverse whose detail names the variable):
        ConfigError: The secret is not one these contracts declare, or its variable is not set.
    """
    table = dict(names) if names is not None else {n: n for n in contracts}

    def resolve(request: SecretRequest) -> str:
        forward = contracts.get(table.get(request.forward_tool or "", ""))
        called = contracts.get(table.get(request.tool, ""))
        var, origin = _variable(request.name, forward, called)
        value = os.environ.get(var)
        if value is None:
            raise ConfigError(
                f"the inverse of step {request.step_id} needs secret {request.name!r}, read "
                f"from ${var}, which is not set ({origin}); export {var} in the process that "
                f"runs undo"
            )
        return value

    return resolve


def _variable(
    name: str, forward: ToolContract | None, called: ToolContract | None
) -> tuple[str, str]:
    """The variable secret ``name`` is read from, and why (for the message)."""
    for c in (forward, called):
        if c is not None and name in c.secret_env:
            return c.secret_env[name], f"secret_env of tool {c.name!r} names it"
    for c in (forward, called):
        if c is not None and name in c.sensitive:
            return name.upper(), (
                f"tool {c.name!r} declares {name!r} sensitive without secret_env, so the "
                f"default ${name.upper()} is read"
            )
    tools = " or ".join(repr(c.name) for c in (forward, called) if c is not None) or "no tool"
    raise ConfigError(
        f"secret {name!r} is not declared sensitive by {tools}; amends reads only the secrets "
        f"a contract declares (add {name!r} to sensitive, with secret_env)"
    )


def with_resolvers(tools: Mapping[str, _C]) -> dict[str, _C]:
    """``tools`` with the file's resolver set on each that has a sensitive argument."""
    resolver = file_resolver(tools)
    return {
        name: dataclasses.replace(c, resolve_secret=resolver) if c.sensitive else c
        for name, c in tools.items()
    }
