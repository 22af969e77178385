"""Arguments checked at the edge of the core: a call's arguments given as one mapping besides
keywords (how a tool's own argument named like an amends option, ``after`` or ``deadline``,
reaches the tool: ``saga.call``, ``call.inverse``), and what ``Catalog.register`` is given.
Imports nothing of the modules that use it."""

from __future__ import annotations

import inspect
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ._errors import ConfigError, ContractError

__all__ = ["call_arguments", "check_id", "check_tool_args", "new_id"]


def call_arguments(
    tool: str, arguments: Mapping[str, Any] | None, args: dict[str, Any], how: str = "saga.call"
) -> dict[str, Any]:
    """A call's arguments from a mapping and keywords (issue 25: the mapping carries names
    amends' own options use, ``after`` in ``saga.call``, ``deadline`` in ``call.inverse``).

    Raises:
        ContractError: ``arguments`` is not a mapping of names, or repeats a keyword.
    """
    if arguments is None:
        return args
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise ContractError(
            f"the arguments of {tool!r} must be a mapping of names to values, got "
            f"{arguments!r}; e.g. {how}({tool!r}, {{'after': '2026-01-01'}})",
            tool=tool if isinstance(tool, str) else None,
        )
    both = sorted(set(arguments) & set(args))
    if both:
        raise ContractError(
            f"argument {both[0]!r} of {tool!r} is given twice, in the mapping and by keyword; "
            f"give it once",
            tool=tool if isinstance(tool, str) else None,
        )
    return {**arguments, **args}


def check_tool_args(name: str, fn: Any, resources: Any, timeout: Any, idempotent: Any) -> None:
    """Validate what :meth:`Catalog.register` is given (besides the name and the class)."""
    if not callable(fn):
        raise ContractError(f"tool {name!r} must be a function, got {fn!r}", tool=name)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    ):
        params = []
    if not params:
        raise ContractError(
            f"tool {name!r} must take the amends.Call as its first positional parameter, "
            f"e.g. 'async def {getattr(fn, '__name__', 'tool')}(call, ...)'",
            tool=name,
        )
    if resources is not None and not callable(resources):
        raise ContractError(
            f"resources of tool {name!r} must be a function of the arguments, got "
            f"{resources!r}; e.g. resources=lambda args: [f\"crm:{{args['record_id']}}\"]",
            tool=name,
        )
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise ContractError(
            f"timeout of tool {name!r} must be a positive number of seconds, got {timeout!r}",
            tool=name,
        )
    if not isinstance(idempotent, bool):
        raise ContractError(
            f"idempotent= of tool {name!r} must be True or False, got {idempotent!r}",
            tool=name,
        )


def new_id(prefix: str) -> str:
    """A fresh, time-ordered id (``saga_…``, ``rev_…``), so ids sort by creation in listings."""
    return f"{prefix}_{time.time_ns():x}{uuid.uuid4().hex[:10]}"


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


def check_id(value: Any, what: str, *, saga_id: str | None = None) -> None:
    """Refuse a saga or step id that is not 1-128 of letters, digits and ``_ . : -``.

    Raises:
        ConfigError: The id is not a string or breaks those rules (the message shows it).
    """
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ConfigError(
            f"{what} {value!r} is not valid: use 1-128 letters, digits and _ . : - "
            f"(starting with a letter or digit), e.g. 'charge_card'",
            saga_id=saga_id,
        )
