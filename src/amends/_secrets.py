"""Secrets are never stored (rule 11): redaction before the log, resolution at undo time.

A tool names the arguments that carry secrets (``@catalog.tool(..., sensitive=["card_number"])``).
Before anything of a step reaches the log — its arguments, result, inverse, expectation, residue,
acknowledgement or error — every value of those arguments is replaced by a marker
``[redacted:card_number]``, wherever it appears (a whole value or inside a longer string). The
values seen in a saga are remembered, in memory only, for the rest of that saga, so a later step
that receives the secret through a result is scrubbed too.

An inverse that needs a secret is recorded with the marker in its arguments; at undo time the
engine asks the tool's resolver (``resolve_secret=``) for the value again and substitutes it just
before the call. Whatever the inverse then raises or records is scrubbed of the resolved value
before it is logged or reported.

This module never writes to the log and never keeps a secret beyond the object that holds it.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ._errors import ConfigError, ContractError

if TYPE_CHECKING:
    from ._log.base import SagaRecord

__all__ = [
    "SecretRequest",
    "SecretResolver",
    "Vault",
    "from_env",
    "marker",
    "markers_in",
    "redact_args",
    "resolve_call_args",
    "resolve_markers",
    "scrub_record",
    "vault_for",
]

_MARKER = re.compile(r"\[redacted:([A-Za-z0-9_.\-]+)\]")
_MIN_SUBSTRING = 3
"""Secrets shorter than this are only replaced where they are a whole value: replacing every "7"
inside every string would destroy the log without protecting anything."""


def marker(name: str) -> str:
    """The text stored in place of the value of sensitive argument ``name``."""
    return f"[redacted:{name}]"


@dataclass(frozen=True)
class SecretRequest:
    """What a resolver is asked at undo time (one input dataclass, so fields can be added)."""

    name: str
    """The sensitive argument's name, e.g. ``"api_key"``."""
    tool: str
    """The tool whose inverse needs the value (the inverse tool's catalog name)."""
    forward_tool: str | None
    """The tool of the step being undone, which declared the argument sensitive."""
    saga_id: str
    """The saga being undone."""
    step_id: str
    """The step being undone."""
    tenant: str | None
    """The saga's tenant, for a secret store keyed by tenant."""
    args: Mapping[str, Any]
    """The step's logged (redacted) forward arguments, to pick the right secret (an account id)."""


SecretResolver = Callable[[SecretRequest], "str | Awaitable[str]"]
"""Returns the secret for a :class:`SecretRequest` (plain or async function)."""


def from_env(variables: Mapping[str, str] | None = None, *, prefix: str = "") -> SecretResolver:
    """A resolver that reads secrets from environment variables.

    Args:
        variables: Sensitive argument name -> environment variable; names not listed use
            ``prefix + NAME.upper()`` (``api_key`` -> ``$API_KEY``, or ``$CRM_API_KEY`` with
            ``prefix="CRM_"``).
        prefix: Prefix of the derived variable names.

    Raises (at undo time, reported as a failed inverse):
        ConfigError: The variable is not set.
    """
    table = dict(variables or {})

    def resolve(request: SecretRequest) -> str:
        var = table.get(request.name) or prefix + request.name.upper()
        value = os.environ.get(var)
        if value is None:
            raise ConfigError(
                f"the inverse of step {request.step_id} needs secret {request.name!r}, read "
                f"from ${var}, which is not set; export it in the process that runs undo"
            )
        return value

    return resolve


class Vault:
    """The secret values seen in one saga (memory only): value -> sensitive argument name."""

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}

    def add(self, name: str, value: Any) -> None:
        """Remember ``value`` (of sensitive argument ``name``) so it is scrubbed everywhere."""
        if value is None or isinstance(value, bool) or value == "":
            return
        if isinstance(value, str | int | float):
            self._names.setdefault(value, name)
        elif isinstance(value, Mapping):
            for v in value.values():
                self.add(name, v)
        elif isinstance(value, list | tuple):
            for v in value:
                self.add(name, v)
        else:
            self._names.setdefault(repr(value), name)

    def __bool__(self) -> bool:
        return bool(self._names)

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret replaced by its marker (JSON data in, JSON data out)."""
        if not self._names:
            return value
        if isinstance(value, str):
            return self._scrub_text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            name = self._names.get(value)
            return marker(name) if name is not None else value
        if isinstance(value, Mapping):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(v) for v in value]
        return value

    def _scrub_text(self, text: str) -> str:
        whole = self._names.get(text)
        if whole is not None:
            return marker(whole)
        # longest first, so a secret that contains another is replaced whole
        for secret in sorted(self._names, key=lambda s: -len(str(s))):
            shown = str(secret)
            if len(shown) >= _MIN_SUBSTRING and shown in text:
                text = text.replace(shown, marker(self._names[secret]))
        return text


_VAULTS: weakref.WeakKeyDictionary[object, Vault] = weakref.WeakKeyDictionary()


def vault_for(owner: object) -> Vault:
    """The vault of a saga (or of one reversal); created on first use, freed with its owner."""
    vault = _VAULTS.get(owner)
    if vault is None:
        vault = _VAULTS[owner] = Vault()
    return vault


def redact_args(
    sensitive: Sequence[str],
    args: Mapping[str, Any],
    vault: Vault,
    to_json: Callable[[Any], Any] = lambda v: v,
) -> Any:
    """The arguments as they may be logged: sensitive ones replaced by their marker.

    Their values are added to ``vault`` first, so the rest of what the step logs is scrubbed too.
    ``to_json`` turns the arguments into JSON data (after redaction, so a fallback ``repr`` of
    an odd value never contains a sensitive argument), and the result is scrubbed once more.
    """
    for name in sensitive:
        if name in args:
            vault.add(name, args[name])
    out = {k: (marker(k) if k in sensitive else v) for k, v in args.items()}
    return vault.scrub(to_json(out))


_T = TypeVar("_T")


def scrub_record(vault: Vault, record: _T) -> _T:
    """A copy of a frozen dataclass (a ``StepFinish``) with every secret in it replaced."""
    if not vault or not dataclasses.is_dataclass(record) or isinstance(record, type):
        return record
    changes = {f.name: vault.scrub(getattr(record, f.name)) for f in dataclasses.fields(record)}
    return dataclasses.replace(record, **changes)


def markers_in(value: Any) -> set[str]:
    """The names of the secrets whose markers appear in ``value``."""
    found: set[str] = set()
    if isinstance(value, str):
        found.update(_MARKER.findall(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            found |= markers_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            found |= markers_in(v)
    return found


def _substitute(value: Any, secrets: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        m = _MARKER.fullmatch(value)
        if m and m.group(1) in secrets:
            return secrets[m.group(1)]  # a whole value keeps its type (an int CVV stays an int)
        return _MARKER.sub(
            lambda m: str(secrets[m.group(1)]) if m.group(1) in secrets else m.group(0), value
        )
    if isinstance(value, Mapping):
        return {k: _substitute(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_substitute(v, secrets) for v in value]
    return value


async def resolve_markers(
    args: Mapping[str, Any],
    resolvers: Sequence[tuple[str, SecretResolver | None]],
    request: SecretRequest,
    vault: Vault,
) -> dict[str, Any]:
    """``args`` with each ``[redacted:NAME]`` marker replaced by the resolved secret.

    Args:
        args: Arguments as logged (an inverse's, a probe's).
        resolvers: ``(tool name, resolver)`` pairs tried in order: the inverse tool's own, then
            the forward tool's. The first one that is set answers.
        request: The request template; ``name`` is filled in per secret.
        vault: Receives every resolved value, so errors and residue are scrubbed of it.

    Raises:
        ContractError: A marker has no resolver, or the resolver failed or returned nothing.
    """
    names = markers_in(args)
    if not names:
        return dict(args)
    resolver = next((r for _, r in resolvers if r is not None), None)
    tools = " or ".join(repr(t) for t, _ in resolvers)
    secrets: dict[str, Any] = {}
    for name in sorted(names):
        req = dataclasses.replace(request, name=name)
        if resolver is None:
            raise _refused(
                req,
                f"the inverse needs secret {name!r}, which was redacted from the log (rule 11), "
                f"and neither {tools} has a resolver; register the tool with "
                f"resolve_secret=amends._secrets.from_env() or a secret-store callback",
            )
        secrets[name] = await _ask(resolver, req, tools, vault)
    return dict(_substitute(dict(args), secrets))


async def _ask(resolver: SecretResolver, req: SecretRequest, tools: str, vault: Vault) -> Any:
    """One secret from ``resolver``, remembered in ``vault`` so it is scrubbed from now on."""
    try:
        got = resolver(req)
        if inspect.isawaitable(got):
            got = await got
    except Exception as exc:
        raise _refused(
            req,
            f"the resolver for secret {req.name!r} of {tools} raised {type(exc).__name__}: "
            f"{vault.scrub(str(exc))}; fix the resolver or provide the secret it reads",
        ) from None
    if got is None or got == "":
        raise _refused(
            req,
            f"the resolver for secret {req.name!r} of {tools} returned {got!r}; it must return "
            f"the secret's value",
        )
    vault.add(req.name, got)
    return got


def _refused(req: SecretRequest, message: str) -> ContractError:
    return ContractError(message, tool=req.tool, saga_id=req.saga_id, step_id=req.step_id)


class _Spec(Protocol):
    """What secret resolution reads of a tool's spec (``amends.ToolSpec``)."""

    @property
    def name(self) -> str: ...

    @property
    def resolve_secret(self) -> SecretResolver | None: ...


class _Tools(Protocol):
    """What secret resolution reads of a catalog (``amends.Catalog``): this module sits below
    the contracts, so it names the two operations it needs rather than importing them."""

    def __contains__(self, tool: object, /) -> bool: ...

    def get(self, name: str, /) -> _Spec: ...


async def resolve_call_args(
    catalog: _Tools,
    saga: SagaRecord,
    tool: str,
    step_id: str,
    args: Mapping[str, Any],
    vault: Vault,
) -> dict[str, Any]:
    """The arguments of one undo-time call (inverse, probe, follow-up) with secrets resolved.

    The resolver is the called tool's ``resolve_secret``, else that of the tool of step
    ``step_id`` (which declared the argument sensitive). Every resolved value goes into
    ``vault``: scrub what the call raises or records with it before logging (rule 11). Used by
    the local runner and by any other runner (Temporal activities) so both behave alike.

    Raises:
        ContractError: A marker has no resolver, or the resolver failed or returned nothing.
    """
    fwd = next((s for s in saga.steps if s.step_id == step_id), None)
    specs = [catalog.get(tool)] if tool in catalog else []
    if fwd is not None and fwd.tool in catalog and fwd.tool != tool:
        specs.append(catalog.get(fwd.tool))
    return await resolve_markers(
        args,
        [(s.name, s.resolve_secret) for s in specs],
        SecretRequest(
            "",
            tool,
            fwd.tool if fwd else None,
            saga.saga_id,
            step_id,
            saga.tenant,
            fwd.args if fwd else {},
        ),
        vault,
    )
