"""Secrets are never stored (rule 11) and never handed to a stranger (rule 12).

A tool names the arguments that carry secrets (``@catalog.tool(..., sensitive=["card_number"])``).
Before anything of a step reaches the log — its arguments, result, inverse, expectation, residue,
acknowledgement or error — every value of those arguments is replaced by a marker
``[redacted:card_number]``, wherever it appears (a whole value or inside a longer string). The
values seen in a saga are remembered, in memory only, for the rest of that saga, so a later step
that receives the secret through a result is scrubbed too.

Every replacement is also recorded as a :class:`Redaction`: the exact place (the path of keys and
list indexes inside the logged record, and for a marker inside a longer text its offset) where
amends itself put a marker. The positions are logged with the record, inside the hash chain.

At undo time a secret is given back **only at those recorded positions** (rule 12): the engine
asks a resolver (``resolve_secret=``) for the value and substitutes it just before the call. Text
that merely looks like a marker — a CRM field a third party filled with ``[redacted:api_key]``
and a later step captured, a memo a prompt-injected agent wrote — is data and is sent verbatim.
A resolver is asked only for names a contract declared ``sensitive``; :func:`from_env` reads only
the variables of declared names. Whatever the call then raises or records is scrubbed of the
resolved value before it is logged or reported.

This module never writes to the log and never keeps a secret beyond the object that holds it.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, quote_plus

from ._errors import ConfigError, ContractError

__all__ = [
    "Redaction",
    "SecretRequest",
    "SecretResolver",
    "Vault",
    "from_env",
    "marker",
    "markers_in",
    "masked",
    "redact_args",
    "redactions_from",
    "resolve_call_args",
    "scrub_record",
    "under",
    "vault_for",
]

_MARKER = re.compile(r"\[redacted:([A-Za-z0-9_.\-]+)\]")
_MIN_SUBSTRING = 3
"""Secrets shorter than this are only replaced where they are a whole value: replacing every "7"
inside every string would destroy the log without protecting anything."""

PathPart = str | int
"""One step of a path inside logged JSON: a key of an object or an index of a list."""


def marker(name: str) -> str:
    """The text stored in place of the value of sensitive argument ``name``."""
    return f"[redacted:{name}]"


@dataclass(frozen=True)
class Redaction:
    """One place where amends itself put a secret's marker when it logged a value (rule 12).

    Undo gives a secret back only at such a place; marker-looking text anywhere else is data.
    """

    at: tuple[PathPart, ...]
    """Where: the keys and list indexes from the logged value's root, e.g.
    ``("inverse", "args", "card_number")``."""
    name: str
    """The sensitive argument whose value was replaced, e.g. ``"card_number"``."""
    offset: int | None = None
    """For a marker inside a longer text: where it starts in the logged text; ``None`` when the
    marker is the whole value."""

    def to_dict(self) -> dict[str, Any]:
        """As logged: ``{"at": [...], "name": ..., "offset": ...}`` (no offset: whole value)."""
        out: dict[str, Any] = {"at": list(self.at), "name": self.name}
        if self.offset is not None:
            out["offset"] = self.offset
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Redaction:
        """The redaction :meth:`to_dict` describes.

        Raises:
            ConfigError: ``data`` is not what :meth:`to_dict` returns.
        """
        try:
            at = tuple(data["at"])
            name = data["name"]
            offset = data.get("offset")
            ok = (
                all(isinstance(p, str | int) and not isinstance(p, bool) for p in at)
                and isinstance(name, str)
                and (offset is None or (isinstance(offset, int) and offset >= 0))
            )
        except (KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise ConfigError(
                f"{data!r:.120} is not a logged redaction; pass what Redaction.to_dict() returned"
            )
        return cls(at, name, offset)


def redactions_from(data: Iterable[Any] | None) -> tuple[Redaction, ...]:
    """Logged redactions (``to_dict`` form or :class:`Redaction`) as a tuple of them.

    Raises:
        ConfigError: An item is not a logged redaction.
    """
    return tuple(r if isinstance(r, Redaction) else Redaction.from_dict(r) for r in data or ())


def under(redactions: Iterable[Redaction], prefix: Sequence[PathPart]) -> tuple[Redaction, ...]:
    """The redactions inside the value at ``prefix``, with their paths relative to it."""
    n = len(prefix)
    want = tuple(prefix)
    return tuple(Redaction(r.at[n:], r.name, r.offset) for r in redactions if r.at[:n] == want)


def masked(value: Any, places: Iterable[Redaction]) -> Any:
    """``value`` with each place (a path relative to it) shown as that secret's marker, whatever
    it holds now: what the world shows where a secret was expected is one too (a rotated key),
    and no vault knows it (rule 11). A path ``value`` does not have masks the part it stops at."""
    for r in places:
        value = _masked_at(value, r.at, marker(r.name))
    return value


def _masked_at(value: Any, at: tuple[PathPart, ...], shown: str) -> Any:
    if not at:
        return shown
    head, rest = at[0], at[1:]
    if isinstance(value, Mapping):
        keys = [k for k in value if _key(k) == head]
        if keys:
            return {k: _masked_at(v, rest, shown) if k in keys else v for k, v in value.items()}
    elif isinstance(value, list | tuple) and isinstance(head, int) and 0 <= head < len(value):
        return [_masked_at(v, rest, shown) if i == head else v for i, v in enumerate(value)]
    return shown  # not the shape the secret was logged in: none of it is shown


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
    declared: tuple[str, ...] = ()
    """The names the contracts of ``tool`` and ``forward_tool`` declared ``sensitive``: the only
    names a resolver is asked for (rule 12)."""


SecretResolver = Callable[[SecretRequest], "str | Awaitable[str]"]
"""Returns the secret for a :class:`SecretRequest` (plain or async function)."""


def from_env(
    variables: Mapping[str, str] | None = None,
    *,
    prefix: str = "",
    names: Iterable[str] | None = None,
) -> SecretResolver:
    """A resolver that reads secrets from environment variables — only those of declared names.

    Args:
        variables: Sensitive argument name -> environment variable, e.g.
            ``{"api_key": "CRM_API_KEY"}``; these names are read from exactly these variables.
        prefix: Other declared names are read from ``prefix + NAME.upper()`` (``api_key`` ->
            ``$API_KEY``, or ``$CRM_API_KEY`` with ``prefix="CRM_"``).
        names: The names this resolver may derive a variable for; default: the names the
            contract declared ``sensitive`` (:attr:`SecretRequest.declared`). A requested name
            that is neither here nor in ``variables`` is refused, never looked up: a log can
            never make amends read ``$AWS_SECRET_ACCESS_KEY`` by asking for it (rule 12).

    Raises (at undo time, reported as a failed inverse):
        ConfigError: The name was not declared, or its variable is not set.
    """
    table = dict(variables or {})
    fixed = None if names is None else frozenset(names)

    def resolve(request: SecretRequest) -> str:
        allowed = fixed if fixed is not None else frozenset(request.declared)
        if request.name in table:
            var = table[request.name]
        elif request.name in allowed:
            var = prefix + request.name.upper()
        else:
            raise ConfigError(
                f"the inverse of step {request.step_id} asked for secret {request.name!r}, "
                f"which no contract declared sensitive (declared: "
                f"{', '.join(sorted(allowed | set(table))) or 'none'}); from_env reads only the "
                f"variables of declared names. Declare it with sensitive=[{request.name!r}] or "
                f"map it: from_env({{{request.name!r}: 'VARIABLE'}})"
            )
        value = os.environ.get(var)
        if value is None:
            raise ConfigError(
                f"the inverse of step {request.step_id} needs secret {request.name!r}, read "
                f"from ${var}, which is not set; export it in the process that runs undo"
            )
        return value

    return resolve


Found = list[Redaction]


def _key(key: Any) -> str:
    """A mapping key as it is logged (JSON turns ``1`` into ``"1"``, ``True`` into ``"true"``)."""
    return key if isinstance(key, str) else json.dumps(key)


def _encoded_forms(text: str) -> set[str]:
    """The ways ``text`` is echoed when a URL, a form or a JSON text carries it (other than as
    itself): percent-encoded (path and query), form-encoded, JSON-escaped."""
    # surrogatepass: an argument may hold a lone surrogate ("\ud800"), which UTF-8 cannot
    # encode; quote() raised, the step was left in doubt and the caller got a raw exception
    sp = "surrogatepass"
    forms = {
        quote(text, safe="", errors=sp),
        quote(text, errors=sp),
        quote_plus(text, errors=sp),
        json.dumps(text)[1:-1],
    }
    forms.discard(text)
    return forms


class Vault:
    """The secret values seen in one saga (memory only): value -> sensitive argument name."""

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}
        self._pattern: re.Pattern[str] | None = None
        self._texts: dict[str, str] = {}
        self._encoded: set[str] = set()
        """Texts of :attr:`_texts` that are a secret's encoded form, not the secret itself."""
        self._stale = False

    def add(self, name: str, value: Any) -> None:
        """Remember ``value`` (of sensitive argument ``name``) so it is scrubbed everywhere."""
        if value is None or isinstance(value, bool) or value == "":
            return
        if isinstance(value, str | int | float):
            if value not in self._names:
                self._names[value] = name
                self._stale = True
        elif isinstance(value, Mapping):
            for v in value.values():
                self.add(name, v)
        elif isinstance(value, list | tuple):
            for v in value:
                self.add(name, v)
        else:
            self.add(name, repr(value))

    def __bool__(self) -> bool:
        return bool(self._names)

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret replaced by its marker (JSON data in, JSON data out)."""
        if not self._names:
            return value
        return self._walk(value, (), None)

    def scrub_at(self, value: Any, at: tuple[PathPart, ...] = ()) -> tuple[Any, Found]:
        """:meth:`scrub`, and where it put each marker (paths start with ``at``)."""
        found: Found = []
        if not self._names:
            return value, found
        return self._walk(value, at, found), found

    def _walk(self, value: Any, at: tuple[PathPart, ...], found: Found | None) -> Any:
        if isinstance(value, str):
            return self._scrub_text(value, at, found)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            name = self._names.get(value)
            if name is None:
                return value
            if found is not None:
                found.append(Redaction(at, name))
            return marker(name)
        if isinstance(value, Mapping):
            # rule 11: a vendor may echo a secret as a key ({"sk_live_...": "invalid"}); a key
            # is scrubbed too, but never a place undo gives a secret back (rule 12)
            return {
                self._scrub_key(k): self._walk(v, (*at, _key(k)), found) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(v, (*at, i), found) for i, v in enumerate(value)]
        return value

    def _scrub_key(self, key: Any) -> Any:
        return self._scrub_text(key, (), None) if isinstance(key, str) else key

    def _texts_pattern(self) -> re.Pattern[str] | None:
        if self._stale:
            self._texts = {}
            for secret, name in self._names.items():
                shown = str(secret)
                if len(shown) >= _MIN_SUBSTRING:
                    self._texts.setdefault(shown, name)
            self._encoded = set()
            for shown, name in list(self._texts.items()):
                # rule 11: a tool or a vendor echoes a secret as a URL or JSON carries it (an
                # HTTP client's error names the URL, percent-encoded): those forms go too
                for form in _encoded_forms(shown):
                    if form not in self._texts:
                        self._texts[form] = name
                        self._encoded.add(form)
            # longest first, so a secret that contains another is replaced whole
            ordered = sorted(self._texts, key=lambda s: -len(s))
            self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
            self._stale = False
        return self._pattern

    def _scrub_text(self, text: str, at: tuple[PathPart, ...], found: Found | None) -> str:
        whole = self._names.get(text)
        if whole is not None:
            if found is not None:
                found.append(Redaction(at, whole))
            return marker(whole)
        pattern = self._texts_pattern()
        if pattern is None:
            return text
        pieces: list[str] = []
        pos = 0
        length = 0  # of the scrubbed text so far: where the next marker starts
        for m in pattern.finditer(text):
            pieces.append(text[pos : m.start()])
            length += m.start() - pos
            name = self._texts[m.group()]
            if found is not None and m.group() not in self._encoded:
                # rule 12: only the secret's own text is a place undo gives it back at; an
                # encoded form's marker stays data (it would be given back unencoded)
                found.append(Redaction(at, name, length))
            shown = marker(name)
            pieces.append(shown)
            length += len(shown)
            pos = m.end()
        if not pieces:
            return text
        pieces.append(text[pos:])
        return "".join(pieces)


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
) -> tuple[Any, list[Redaction]]:
    """The arguments as they may be logged, and where amends put a marker in them.

    Sensitive arguments are replaced by their marker, and their values are added to ``vault``
    first, so the rest of what the step logs is scrubbed too. ``to_json`` turns the arguments
    into JSON data (after redaction, so a fallback ``repr`` of an odd value never contains a
    sensitive argument), and the other arguments are scrubbed once more. Paths of the
    redactions are relative to the arguments (``("card_number",)``).
    """
    for name in sensitive:
        if name in args:
            vault.add(name, args[name])
    out = to_json({k: (marker(k) if k in sensitive else v) for k, v in args.items()})
    found: list[Redaction] = []
    if not isinstance(out, dict):
        return vault.scrub(out), found
    logged: dict[str, Any] = {}
    for k, v in out.items():
        if k in sensitive and v == marker(k):
            found.append(Redaction((k,), k))
            logged[k] = v
        else:
            logged[k], more = vault.scrub_at(v, (k,))
            found += more
    return logged, found


_T = TypeVar("_T")


def scrub_record(vault: Vault, record: _T) -> _T:
    """A copy of a frozen dataclass (a ``StepFinish``) with every secret in it replaced.

    A record with a ``redacted`` field gets the positions of the markers put in it (paths start
    with the field's name, e.g. ``("inverse", "args", "card_number")``), after those it had.
    """
    if not vault or not dataclasses.is_dataclass(record) or isinstance(record, type):
        return record
    changes: dict[str, Any] = {}
    found: list[Redaction] = []
    names = [f.name for f in dataclasses.fields(record)]
    for name in names:
        if name != "redacted":
            changes[name], more = vault.scrub_at(getattr(record, name), (name,))
            found += more
    if "redacted" in names:
        changes["redacted"] = (*record.redacted, *found)  # type: ignore[attr-defined]
    return dataclasses.replace(record, **changes)


def markers_in(value: Any) -> set[str]:
    """The names of the secrets whose markers appear in ``value`` (for display; never a reason
    to resolve anything: only :class:`Redaction` positions are)."""
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


# --- resolution at recorded positions (rule 12) -------------------------------------------------


def _altered(at: Sequence[PathPart], why: str) -> ContractError:
    where = "/".join(str(p) for p in at) or "(the whole value)"
    return ContractError(
        f"the logged value at {where} does not hold the marker amends recorded there ({why}); "
        f"the step's logged data was changed, so no secret is given back. Run `amends doctor "
        f"--verify`"
    )


def _substitute(root: Any, redactions: Sequence[Redaction], secrets: Mapping[str, Any]) -> Any:
    """``root`` (a copy) with the secret put at each recorded position, and nowhere else."""
    root = copy.deepcopy(root)
    by_place: dict[tuple[PathPart, ...], list[Redaction]] = {}
    for r in redactions:
        by_place.setdefault(r.at, []).append(r)
    holder: dict[str, Any] = {"": root}
    for at, here in by_place.items():
        parent: Any = holder
        key: PathPart = ""
        for part in at:
            try:
                parent = parent[key]
                if not _has(parent, part):
                    raise _altered(at, "no such place")
                key = part
            except (KeyError, IndexError, TypeError):
                raise _altered(at, "no such place") from None
        parent[key] = _put(parent[key], at, here, secrets)
    return holder[""]


def _has(parent: Any, part: PathPart) -> bool:
    if isinstance(parent, Mapping):
        return isinstance(part, str) and part in parent
    return isinstance(parent, list) and isinstance(part, int) and 0 <= part < len(parent)


def _put(
    value: Any, at: Sequence[PathPart], here: Sequence[Redaction], secrets: Mapping[str, Any]
) -> Any:
    whole = [r for r in here if r.offset is None]
    if whole:
        if len(here) > 1 or value != marker(whole[0].name):
            raise _altered(at, "the value is not the marker")
        return secrets[whole[0].name]  # a whole value keeps its type (an int CVV stays an int)
    if not isinstance(value, str):
        raise _altered(at, "the value is not text")
    out = value
    last = len(value) + 1
    for r in sorted(here, key=lambda r: -(r.offset or 0)):  # from the end: offsets stay valid
        start = r.offset or 0
        shown = marker(r.name)
        if start + len(shown) > last or value[start : start + len(shown)] != shown:
            raise _altered(at, f"no marker at offset {start}")
        out = out[:start] + str(secrets[r.name]) + out[start + len(shown) :]
        last = start
    return out


class _Spec(Protocol):
    """What secret resolution reads of a tool's spec (``amends.ToolSpec``)."""

    @property
    def name(self) -> str: ...

    @property
    def sensitive(self) -> tuple[str, ...]: ...

    @property
    def resolve_secret(self) -> SecretResolver | None: ...


class _Tools(Protocol):
    """What secret resolution reads of a catalog (``amends.Catalog``): this module sits below
    the contracts, so it names the two operations it needs rather than importing them."""

    def __contains__(self, tool: object, /) -> bool: ...

    def get(self, name: str, /) -> _Spec: ...


class _LoggedStep(Protocol):
    """What secret resolution reads of a logged step (``amends.StepRecord``)."""

    @property
    def step_id(self) -> str: ...

    @property
    def tool(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Any]: ...

    @property
    def redacted(self) -> tuple[Redaction, ...]: ...


class _LoggedSaga(Protocol):
    """What secret resolution reads of a logged saga (``amends.SagaRecord``): the log sits
    above this module and stores its redactions, so this module names the fields it needs
    rather than importing the log (no import cycle, not even for annotations: issue 22)."""

    @property
    def saga_id(self) -> str: ...

    @property
    def tenant(self) -> str | None: ...

    @property
    def steps(self) -> Sequence[_LoggedStep]: ...


async def resolve_call_args(
    catalog: _Tools,
    saga: _LoggedSaga,
    tool: str,
    step_id: str,
    args: Mapping[str, Any],
    vault: Vault,
    *,
    at: Sequence[Redaction] = (),
) -> dict[str, Any]:
    """The arguments of one undo-time call (inverse, probe, follow-up) with secrets resolved
    at the recorded positions ``at`` (relative to ``args``) and nowhere else (rule 12).

    The resolver is the called tool's ``resolve_secret``, else that of the tool of step
    ``step_id``; it is asked only for names one of the two declared ``sensitive``. Every
    resolved value goes into ``vault``: scrub what the call raises or records with it before
    logging (rule 11). Used by the local runner and by any other runner (Temporal activities)
    so both behave alike.

    Raises:
        ContractError: A recorded secret has no resolver or was not declared, the resolver
            failed or returned nothing, or the logged value no longer holds the marker there.
    """
    if not at:
        return dict(args)  # no position amends redacted: every marker-looking text is data
    fwd = next((s for s in saga.steps if s.step_id == step_id), None)
    specs = [catalog.get(tool)] if tool in catalog else []
    if fwd is not None and fwd.tool in catalog and fwd.tool != tool:
        specs.append(catalog.get(fwd.tool))
    declared = tuple(sorted({n for s in specs for n in s.sensitive}))
    request = SecretRequest(
        "",
        tool,
        fwd.tool if fwd else None,
        saga.saga_id,
        step_id,
        saga.tenant,
        fwd.args if fwd else {},
        declared,
    )
    resolver = next((s.resolve_secret for s in specs if s.resolve_secret is not None), None)
    tools = " or ".join(repr(s.name) for s in specs) or repr(tool)
    secrets: dict[str, Any] = {}
    for name in sorted({r.name for r in at}):
        req = dataclasses.replace(request, name=name)
        if name not in declared:
            raise _refused(
                req,
                f"the inverse needs secret {name!r}, which neither {tools} declares sensitive; "
                f"a resolver is asked only for declared names (rule 12): add {name!r} to the "
                f"tool's sensitive=[...]",
            )
        if resolver is None:
            raise _refused(
                req,
                f"the inverse needs secret {name!r}, which was redacted from the log (rule 11), "
                f"and neither {tools} has a resolver; register the tool with "
                f"resolve_secret=amends.from_env(prefix=...) or a secret-store callback",
            )
        secrets[name] = await _ask(resolver, req, tools, vault)
    try:
        return dict(_substitute(dict(args), at, secrets))
    except ContractError as exc:
        raise _refused(request, str(exc)) from None


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
