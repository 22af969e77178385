"""The catalog of tool contracts, and the :class:`Call` a tool uses to record its inverse.

This module holds data and registration only. It never talks to the log or runs a reversal:
everything a tool records here is plain data that the engine makes durable
(rule 2: inverse is data).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Final, Literal

from ._arguments import call_arguments
from ._arguments import check_tool_args as _check_tool_args
from ._dates import deadline_iso as _deadline_iso
from ._dates import settles_at as _settles_at
from ._dates import timestamp as _timestamp
from ._describe import check_template, sentence, when_words
from ._errors import AmendsError, ContractError
from ._secrets import Redaction, SecretResolver

__all__ = [
    "NOTHING",
    "Acknowledgement",
    "Call",
    "Catalog",
    "Expectation",
    "FollowUp",
    "Inverse",
    "ManualAction",
    "Residue",
    "Reversibility",
    "ToolSpec",
]


class Reversibility(StrEnum):
    """What undo can do about a tool's effect. Compares equal to its string value."""

    READ_ONLY = "read_only"
    """No effect on the world; a probe. Needs no inverse."""
    REVERSIBLE = "reversible"
    """An inverse call removes the effect without trace."""
    COMPENSABLE = "compensable"
    """A forward action restores a known-good business state but leaves residue."""
    IRREVERSIBLE = "irreversible"
    """Nothing neutralises the effect; a person must follow up. The default."""


class _Nothing:
    """Sentinel for "no value recorded", distinct from ``None`` (which may be a real value)."""

    _instance: ClassVar[_Nothing | None] = None

    def __new__(cls) -> _Nothing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOTHING"

    def __bool__(self) -> bool:
        return False


NOTHING: Final = _Nothing()

# \Z, not $: "$" also matches before a final newline ("mail.send\n" was a tool name)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*\Z")

Phase = Literal["forward", "compensate", "follow_up", "probe"]


_JSON_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


class _NotPlain(Exception):
    pass


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:
        for k in value:
            if type(k) is not str:
                raise _NotPlain
        out = {}
        for k in sorted(value):
            v = value[k]
            out[k] = v if type(v) in _JSON_SCALARS else _plain(v)  # no call per scalar
        return out
    if kind is list or kind is tuple:
        return [v if type(v) in _JSON_SCALARS else _plain(v) for v in value]
    raise _NotPlain


def json_copy(value: Any) -> Any:
    """``value`` as ``json.loads(json.dumps(value, sort_keys=True))`` returns it.

    Issue 12 (the hot path): data already made of exact ``dict`` (string keys), ``list``,
    ``tuple``, ``str``, ``int``, ``float``, ``bool`` and ``None`` is copied directly, the same
    result without encoding and decoding it; anything else takes the round trip (and raises
    what it raises: ``TypeError``, ``ValueError``).
    """
    try:
        return _plain(value)
    except (_NotPlain, RecursionError):  # a circular or very deep value: json says why
        return json.loads(json.dumps(value, sort_keys=True))


def _check_json(value: Any, what: str, *, tool: str | None = None) -> Any:
    """Round-trip ``value`` through JSON so that what is logged is exactly what is replayed."""
    try:
        return json_copy(value)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise ContractError(
            f"{what} must be JSON data (str, int, float, bool, None, lists and dicts of them), "
            f"got {value!r}: {exc}; convert it before recording it",
            tool=tool,
        ) from exc


def same_value(observed: Any, expected: Any) -> bool:
    """Whether a probe's value equals an expected JSON value, as JSON sees them (rule 4).

    Python's ``==`` says ``True == 1 == 1.0`` and ``{"n": True} == {"n": 1}``; a person who
    changed a quantity from ``1`` to ``True`` (or a flag from ``False`` to ``0``) changed the
    world, and undo must not overwrite it. So a bool equals only a bool, a number only a number
    (``1`` and ``1.0`` are the same JSON number), a string only a string, ``None`` only ``None``;
    lists (or tuples) and mappings compare item by item with the same rule. Anything else
    (a datetime, bytes, an object) never equals JSON data: unsure means drifted.
    """
    if expected is None or isinstance(expected, bool | str):
        return type(observed) is type(expected) and observed == expected
    if isinstance(expected, int | float):
        return (
            isinstance(observed, int | float)
            and not isinstance(observed, bool)
            and observed == expected
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(observed, list | tuple)
            and len(observed) == len(expected)
            and all(same_value(o, e) for o, e in zip(observed, expected, strict=True))
        )
    if isinstance(expected, Mapping):
        return (
            isinstance(observed, Mapping)
            and len(observed) == len(expected)
            and all(k in observed and same_value(observed[k], v) for k, v in expected.items())
        )
    return False  # not JSON data: never a match (rule 4)


def _check_path(path: Any, what: str, *, tool: str) -> tuple[str | int, ...]:
    """An expectation's ``path``: keys (str) and list indexes (int) only, so it is logged as is."""
    keys = (path,) if isinstance(path, str | int) and not isinstance(path, bool) else path
    try:
        keys = tuple(keys)
    except TypeError:
        keys = (keys,)
    bad = [k for k in keys if not isinstance(k, str | int) or isinstance(k, bool)]
    if bad:
        raise ContractError(
            f"path= of the {what} recorded by {tool!r} must be keys (str) and list indexes "
            f"(int), got {path!r} ({bad[0]!r} is neither); e.g. path=('fields', 'stage')",
            tool=tool,
        )
    return keys


def _check_texts(values: Any, what: str, *, tool: str) -> tuple[str, ...]:
    """A list of names (``parties=``): each one text, so it is logged and shown as written."""
    items = (values,) if isinstance(values, str) else values
    try:
        items = tuple(items)
    except TypeError:
        items = (items,)
    if not all(isinstance(v, str) for v in items):
        raise ContractError(
            f"{what} recorded by {tool!r} must be a list of names (text), got {values!r}; "
            f"e.g. parties=['bob@acme.test']",
            tool=tool,
        )
    return items


def _check_optional_text(value: Any, what: str, *, tool: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ContractError(
            f"{what} recorded by {tool!r} must be text or None, got {value!r}", tool=tool
        )
    return value


def inverse_dict(
    tool: str,
    args: Mapping[str, Any],
    deadline: str | None,
    landed: Expectation | None,
    no_drift_check: str | None,
    undo_after: Sequence[str],
) -> dict[str, Any]:
    """An inverse as logged (``Inverse.to_dict``); the forward path builds it from the call's
    parts without making an ``Inverse`` first (issue 12: fewer objects per step)."""
    out: dict[str, Any] = {"tool": tool, "args": dict(args)}
    if deadline is not None:
        out["deadline"] = deadline
    if landed is not None:
        out["landed"] = landed.to_dict()
    if no_drift_check is not None:
        out["no_drift_check"] = no_drift_check
    if undo_after:
        out["undo_after"] = list(undo_after)
    return out


@dataclass(frozen=True)
class Inverse:
    """The call that takes a step back, computed when the step ran and stored as data."""

    tool: str
    """Catalog name of the tool to call at undo time."""
    args: Mapping[str, Any]
    """Concrete arguments captured from the world as observed when the step ran."""
    deadline: str | None = None
    """ISO-8601 time after which the vendor no longer accepts this inverse (an undo window, e.g.
    a wire recall); after it the step is Acknowledge, in the preview and at undo (rule 10).
    ``None``: the window never closes."""
    landed: Expectation | None = None
    """A read-only probe showing whether this inverse has taken effect ("did my refund land?").
    Used after a crash when the inverse's vendor ignores idempotency keys (rule 5)."""
    no_drift_check: str | None = None
    """Why the step needs no expectation, as the tool said (``call.no_drift_check``, rule 4);
    shown in the report and by ``amends audit``."""
    undo_after: tuple[str, ...] = ()
    """Steps whose inverses must succeed before this one runs (``saga.call(...,
    undo_after=[...])``, rule 3)."""

    def to_dict(self) -> dict[str, Any]:
        return inverse_dict(
            self.tool, self.args, self.deadline, self.landed, self.no_drift_check, self.undo_after
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inverse:
        landed = data.get("landed")
        return cls(  # by position, in the fields' order (issue 29: the planner's, once a step)
            data["tool"],
            dict(data["args"]),
            data.get("deadline"),
            Expectation.from_dict(landed) if landed else None,
            data.get("no_drift_check"),
            tuple(data.get("undo_after", ())),
        )

    def deadline_passed(self, now: float) -> bool:
        """Whether the undo window closed before ``now`` (seconds since the epoch)."""
        return self.deadline is not None and _timestamp(self.deadline) <= now


@dataclass(frozen=True)
class Expectation:
    """What the world must still show at undo time for the inverse to be safe.

    At undo, ``probe`` (a read-only tool) is called with ``args``; the value at ``path`` in its
    result must equal ``equals``. A mismatch is drift. The same expectation is handed to the
    inverse as ``call.precondition`` so that a vendor's compare-and-set can enforce it too.
    """

    probe: str
    """Catalog name of a read-only tool that observes the value."""
    args: Mapping[str, Any]
    """Arguments for the probe."""
    equals: Any
    """The value the world showed right after the step (the value we wrote, a version, an etag)."""
    path: tuple[str | int, ...] = ()
    """Keys into the probe's result; empty compares the whole result."""

    def extract(self, observed: Any) -> Any:
        """The part of a probe result compared with :attr:`equals` (``NOTHING`` if absent)."""
        value = observed
        for key in self.path:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return NOTHING
        return value

    def holds(self, observed: Any) -> bool:
        """Whether ``observed`` shows :attr:`equals` at :attr:`path`, compared as JSON values
        (:func:`same_value`: ``True`` is not ``1``, ``None`` is not a missing key)."""
        return same_value(self.extract(observed), self.equals)

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "args": dict(self.args),
            "equals": self.equals,
            "path": list(self.path),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Expectation:
        return cls(
            probe=data["probe"],
            args=dict(data["args"]),
            equals=data["equals"],
            path=tuple(data.get("path", ())),
        )


@dataclass(frozen=True)
class Residue:
    """A side effect that remains after compensation, in plain language."""

    what: str
    """What remains, as a person would say it ("Refund of 50.00 to c1 is on its way")."""
    parties: tuple[str, ...] = ()
    """Who is affected or will notice."""
    settles_at: str | None = None
    """ISO date when the residue settles (a refund lands), or ``None`` if it never does."""
    settles_in: tuple[str, float] | None = None
    """``("business_days", 3)`` or ``("days", 2.5)`` when the tool gave the settle date as a
    time after the compensation (``settles_in_business_days=3``): undo and its preview compute
    :attr:`settles_at` from it with one clock when they run (rule 10), not from when the
    forward call recorded it."""

    @property
    def settles_text(self) -> str:
        """When it settles, as a person reads it: "settles 10 Dec 2026" or "does not settle"
        (issue 26: no raw ISO dates for people; :attr:`settles_at` keeps the ISO date)."""
        return f"settles {when_words(self.settles_at)}" if self.settles_at else "does not settle"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what": self.what,
            "parties": list(self.parties),
            "settles_at": self.settles_at,
        }
        if self.settles_in is not None:
            out["settles_in"] = list(self.settles_in)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Residue:
        rel = data.get("settles_in")
        return cls(
            data["what"],
            tuple(data.get("parties", ())),
            data.get("settles_at"),
            (str(rel[0]), float(rel[1])) if rel else None,
        )

    def settling_from(self, now: datetime) -> Residue:
        """This residue with :attr:`settles_at` counted from ``now`` (the compensation's time)
        when it was given relatively; unchanged otherwise."""
        if self.settles_in is None:
            return self
        kind, n = self.settles_in
        when = _settles_at(now, n if kind == "days" else None, int(n) if kind != "days" else None)
        return Residue(self.what, self.parties, when, self.settles_in)


@dataclass(frozen=True)
class Acknowledgement:
    """Recorded by an irreversible tool: who must follow up, and a draft they can send."""

    who: str
    """Who can act ("the sender", "the account owner")."""
    parties: tuple[str, ...] = ()
    """Who was affected by the effect."""
    draft: str | None = None
    """A message the person can send as it is."""
    what: str | None = None
    """What stands, in plain language; the engine writes one from the step when omitted."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "who": self.who,
            "parties": list(self.parties),
            "draft": self.draft,
            "what": self.what,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Acknowledgement:
        return cls(data["who"], tuple(data.get("parties", ())), data.get("draft"), data.get("what"))


@dataclass(frozen=True)
class ManualAction:
    """What a person must still do for an effect the engine could not neutralise."""

    step_id: str
    """The step whose effect still stands."""
    what: str
    """What stands and what to do about it."""
    who: str
    """Who can act."""
    parties: tuple[str, ...] = ()
    """Who is affected."""
    draft: str | None = None
    """A draft message for that person to send."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "what": self.what,
            "who": self.who,
            "parties": list(self.parties),
            "draft": self.draft,
        }


@dataclass(frozen=True)
class FollowUp:
    """One more call a compensation asked for; it spends budget like any other call."""

    tool: str
    """Catalog name of the tool to call after the compensation."""
    args: Mapping[str, Any]
    """Its concrete arguments."""
    redacted: tuple[Redaction, ...] = ()
    """Where amends put a secret's marker in ``args`` (rule 12): the only places a secret is
    given back when the follow-up is made. Empty for a follow-up a tool asks for."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "args": dict(self.args)}
        if self.redacted:
            out["redacted"] = [r.to_dict() for r in self.redacted]
        return out


ToolFn = Callable[..., Awaitable[Any]] | Callable[..., Any]
ResourcesFn = Callable[[Mapping[str, Any]], Sequence[str]]


@dataclass(frozen=True)
class ToolSpec:
    """One catalog entry: a tool and its reversibility contract."""

    name: str
    """The tool's name ("crm.update_field"), as ``saga.call`` and inverses name it."""
    fn: ToolFn
    """The function that does the work, called with the step's ``Call`` and its arguments."""
    reversibility: Reversibility
    """What undo can do about a call of this tool (read_only, reversible, compensable,
    irreversible). Default irreversible."""
    explicit: bool
    """Whether the class was declared; ``False``: irreversible by default (``amends audit``)."""
    resources: ResourcesFn | None = None
    """The resources a call touches, from its arguments (``lambda args: [f"crm:{args['id']}"]``):
    a later step on the same resource depends on this one (its inverse runs first). Default:
    none."""
    description: str = ""
    """What the tool does, in a few words (the function's docstring by default); shown in the
    report, the audit and the MCP tool listing."""
    timeout: float | None = None
    """Seconds one call may take before the engine treats it as timed out."""
    sensitive: tuple[str, ...] = ()
    """Arguments that carry secrets (rule 11): redacted before anything reaches the log."""
    resolve_secret: SecretResolver | None = None
    """Gives a redacted secret back at undo time to an inverse that needs it (rule 11)."""
    idempotent: bool = False
    """Whether the vendor honours ``call.idempotency_key`` (a replay applies nothing). Only such a
    tool is re-sent a call that was in flight at a crash (rule 5). Default ``False``."""
    describe: str | None = None
    """The step in a sentence, as a template over its arguments ("Email '{subject}' to {to}");
    ``None``: the description (or name) followed by the arguments (issue 17)."""
    undo_after: tuple[str, ...] = ()
    """Tools whose inverses this tool's inverse waits for (rule 3): a step of this tool is undone
    only after the latest earlier step of each of them in the same saga (a refund the processor
    accepts only once the deal it was charged against is reopened). Default: none."""
    contract_file: str | None = None
    """The contract file that declares this tool (HTTP, MCP); ``None`` for a Python tool. A
    broken contract's violation names this file and its keys, not a Python call."""

    def sentence(self, args: Mapping[str, Any]) -> str:
        """A call of this tool in plain language, e.g. "Email 'Won' to bob@acme.test"."""
        return sentence(
            self.name,
            args,
            template=self.describe,
            description=self.description,
            sensitive=self.sensitive,
        )

    def resources_for(self, args: Mapping[str, Any]) -> list[str]:
        if self.resources is None:
            return []
        try:
            found = self.resources(args)
        except AmendsError:
            raise  # it says what is wrong in the contract's own terms (a TOML template's message)
        except Exception as exc:
            raise ContractError(
                f"resources function of tool {self.name!r} raised {exc!r} for arguments "
                f"{dict(args)!r}; make it accept every argument set the tool accepts",
                tool=self.name,
            ) from exc
        if isinstance(found, str) or not all(isinstance(r, str) for r in found):
            raise ContractError(
                f"resources function of tool {self.name!r} must return a list of strings, "
                f"got {found!r}",
                tool=self.name,
            )
        return list(found)


class Catalog:
    """The registry of tools: the single source of truth for each tool's reversibility.

    Example::

        catalog = amends.Catalog()

        @catalog.tool("crm.update_field", reversibility="reversible")
        async def update_field(call, record_id, field, value): ...
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def tool(
        self,
        name: str,
        *,
        reversibility: str | Reversibility | None = None,
        resources: ResourcesFn | None = None,
        description: str | None = None,
        timeout: float | None = None,
        sensitive: Sequence[str] = (),
        resolve_secret: SecretResolver | None = None,
        idempotent: bool = False,
        describe: str | None = None,
        undo_after: Sequence[str] = (),
    ) -> Callable[[ToolFn], ToolFn]:
        """Register the decorated function as tool ``name``.

        Args:
            name: Dotted catalog name, e.g. ``"crm.update_field"``.
            reversibility: ``"read_only"``, ``"reversible"``, ``"compensable"`` or
                ``"irreversible"``. Omitted means irreversible (and ``amends audit`` flags it).
            resources: Function of the call's arguments returning the resources it touches;
                steps sharing a resource are ordered, forward and in reverse.
            description: Shown by ``amends audit``; defaults to the function's docstring.
            timeout: Seconds one call may take.
            sensitive: Names of arguments that carry secrets (a card number, an API key);
                their values never reach the log, the report, the CLI or the web page
                (rule 11).
            resolve_secret: Called at undo time with an :class:`amends._secrets.SecretRequest`
                when an inverse needs a redacted secret (e.g. ``amends._secrets.from_env()``).
            idempotent: ``True`` if the vendor honours ``call.idempotency_key`` (a replayed key
                applies nothing). A call in flight at a crash is re-sent only to such a tool;
                otherwise the engine re-observes the world or reports ``in_doubt`` (rule 5).
            describe: The step in a sentence, a template over the call's arguments, e.g.
                ``"Email '{subject}' to {to}"``; shown on every screen instead of the tool name.
                Default: the description followed by the arguments.
            undo_after: Tools whose inverses this tool's must wait for (rule 3): a step waits
                for the latest earlier step of each, as ``saga.call(undo_after=[it])`` would.

        Raises:
            ContractError: The name is taken or malformed, the class unknown, the function
                does not take ``call`` first, or ``undo_after`` names no other tools.
        """

        def register(fn: ToolFn) -> ToolFn:
            self.register(
                name,
                fn,
                reversibility=reversibility,
                resources=resources,
                description=description,
                timeout=timeout,
                sensitive=sensitive,
                resolve_secret=resolve_secret,
                idempotent=idempotent,
                describe=describe,
                undo_after=undo_after,
            )
            return fn

        return register

    def register(
        self,
        name: str,
        fn: ToolFn,
        *,
        reversibility: str | Reversibility | None = None,
        resources: ResourcesFn | None = None,
        description: str | None = None,
        timeout: float | None = None,
        sensitive: Sequence[str] = (),
        resolve_secret: SecretResolver | None = None,
        idempotent: bool = False,
        describe: str | None = None,
        undo_after: Sequence[str] = (),
        contract_file: str | None = None,
    ) -> ToolSpec:
        """Register ``fn`` as tool ``name``; see :meth:`tool` for the arguments, and
        :attr:`ToolSpec.contract_file` (set by the contract-file loaders)."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ContractError(
                f"tool name {name!r} is not valid; use dotted identifiers such as "
                f"'crm.update_field'"
            )
        if name in self._tools:
            raise ContractError(
                f"tool {name!r} is already registered; give the new tool another name or "
                f"register it in a separate Catalog",
                tool=name,
            )
        explicit = reversibility is not None
        try:
            cls = Reversibility(str(reversibility)) if explicit else Reversibility.IRREVERSIBLE
        except ValueError:
            choices = ", ".join(repr(r.value) for r in Reversibility)
            raise ContractError(
                f"tool {name!r} has reversibility {reversibility!r}; use one of {choices}",
                tool=name,
            ) from None
        _check_tool_args(name, fn, resources, timeout, idempotent)
        secret_args = _check_sensitive(name, sensitive, resolve_secret)
        doc = description if description is not None else (inspect.getdoc(fn) or "")
        spec = ToolSpec(
            name=name,
            fn=fn,
            reversibility=cls,
            explicit=explicit,
            resources=resources,
            description=doc.strip().splitlines()[0] if doc else "",
            timeout=timeout,
            sensitive=secret_args,
            resolve_secret=resolve_secret,
            idempotent=idempotent,
            describe=check_template(name, describe),
            undo_after=_check_undo_after(name, undo_after),
            contract_file=contract_file,
        )
        self._tools[name] = spec
        return spec

    def get(self, name: str) -> ToolSpec:
        """The spec of tool ``name``.

        Raises:
            ContractError: No tool of that name is registered.
        """
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise ContractError(
                f"tool {name!r} is not in the catalog (registered: {known}); register it with "
                f"@catalog.tool({name!r}, reversibility=...)",
                tool=name,
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(sorted(self._tools.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._tools)

    def describe(self, tool: str, args: Mapping[str, Any]) -> str:
        """A call of ``tool`` with ``args`` in plain language; a tool not in this catalog is
        shown by name with its arguments."""
        spec = self._tools.get(tool)
        return spec.sentence(args) if spec is not None else sentence(tool, args)


def _check_undo_after(name: str, undo_after: Any) -> tuple[str, ...]:
    """``undo_after=`` of tool ``name``: the names of the tools whose inverses its own waits for.

    Raises:
        ContractError: Not a list of tool names, or the tool's own name.
    """
    if isinstance(undo_after, str) or not all(
        isinstance(t, str) and _NAME_RE.match(t) for t in undo_after
    ):
        raise ContractError(
            f"undo_after= of tool {name!r} must be a list of tool names, got {undo_after!r}; "
            f"e.g. undo_after=['crm.update_field'] (the refund waits for the deal's reopening)",
            tool=name,
        )
    if name in undo_after:
        raise ContractError(
            f"undo_after= of tool {name!r} names the tool itself; name the other tools whose "
            f"inverses must run first",
            tool=name,
        )
    return tuple(undo_after)


def _check_sensitive(
    name: str, sensitive: Sequence[str], resolve_secret: SecretResolver | None
) -> tuple[str, ...]:
    """Validate ``sensitive=`` / ``resolve_secret=`` of tool ``name`` (rule 11)."""
    if isinstance(sensitive, str) or not all(isinstance(a, str) and a for a in sensitive):
        raise ContractError(
            f"sensitive= of tool {name!r} must be a list of argument names, got {sensitive!r}; "
            f'e.g. sensitive=["card_number"]',
            tool=name,
        )
    if resolve_secret is not None and not callable(resolve_secret):
        raise ContractError(
            f"resolve_secret= of tool {name!r} must be a function of a SecretRequest, got "
            f"{resolve_secret!r}; e.g. resolve_secret=amends._secrets.from_env()",
            tool=name,
        )
    return tuple(sensitive)


class Call:
    """Handed to a tool as its first argument: what the call is, and where it records its contract.

    A forward call of a reversible or compensable tool must call :meth:`inverse` before returning;
    one that does not is logged as irreversible and reported as a contract violation (rule 2).
    """

    def __init__(
        self,
        *,
        saga_id: str,
        step_id: str,
        tool: str,
        phase: Phase,
        idempotency_key: str,
        attempt: int = 1,
        precondition: Expectation | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.saga_id = saga_id
        """The saga this call belongs to."""
        self.step_id = step_id
        """The step this call belongs to (for compensations: the step being undone)."""
        self.tool = tool
        """The catalog name of the tool being called."""
        self.phase: Phase = phase
        """``"forward"``, ``"compensate"``, ``"follow_up"`` or ``"probe"``."""
        self.idempotency_key = idempotency_key
        """Stable for this step's forward call, or for its compensation across retries, crashes
        and processes. Hand it to every vendor that accepts one."""
        self.attempt = attempt
        """1 for the first try, 2 for the first retry, and so on."""
        self.precondition = precondition
        """For a compensation: the expectation the world must still meet (for compare-and-set).
        Raise :class:`amends.PreconditionFailed` if the vendor rejects the write because of it."""
        self._now = now or (lambda: datetime.now(UTC))
        self.recorded_inverse: Inverse | _Nothing = NOTHING
        self.recorded_expectation: Expectation | None = None
        self.recorded_residue: list[Residue] = []
        self.recorded_acknowledgement: Acknowledgement | None = None
        self.recorded_follow_ups: list[FollowUp] = []
        self.recorded_no_drift_check: str | None = None
        self.recorded_landed: Expectation | None = None
        self.tokens = 0
        self.redact: Callable[[str], str] | None = None
        """While undoing: replaces every secret amends knows for this saga (resolved for this
        call or seen earlier) in a text by its marker (rule 11). A tool that cuts a vendor's
        words to length redacts them first: half a secret is recognised by no later scrub."""

    def inverse(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        /,
        *,
        deadline: datetime | str | float | None = None,
        **args: Any,
    ) -> None:
        """Record the call that takes this step back, with concrete arguments observed now.

        Ignored outside forward calls, so a tool can serve as its own inverse.

        Args:
            tool: Catalog name of the inverse tool.
            arguments: The inverse's arguments as one mapping (one named ``deadline`` too).
            deadline: When the undo window closes (a wire recall window, a grace period): a
                datetime, an ISO-8601 string or seconds since the epoch. After it the step is
                Acknowledge in the preview and at undo (rule 10).
            **args: The inverse's arguments, as JSON data.

        Raises:
            ContractError: Called twice, arguments not JSON, or one given twice.
        """
        if self.phase != "forward":
            # A tool that is its own inverse (crm.update_field) records one while compensating;
            # the inverse of an inverse is never used, so it is ignored there.
            return
        if not isinstance(self.recorded_inverse, _Nothing):
            raise ContractError(
                f"tool {self.tool!r} recorded an inverse twice; a step has exactly one inverse "
                f"(use call.follow_up() inside the inverse for extra calls)",
                tool=self.tool,
                step_id=self.step_id,
            )
        if not isinstance(tool, str) or not tool:
            raise ContractError(f"inverse tool name must be a string, got {tool!r}", tool=self.tool)
        if arguments is not None:  # no call on the hot path (tests/unit/test_hot_path.py)
            args = call_arguments(tool, arguments, args, "call.inverse")
        self.recorded_inverse = Inverse(
            tool,
            _check_json(args, f"inverse arguments of {self.tool!r}", tool=self.tool),
            deadline=None if deadline is None else _deadline_iso(deadline, self.tool),
        )

    def no_drift_check(self, *, reason: str) -> None:
        """Say why this step needs no expectation (rule 4), e.g. "a draft only this saga can see".

        A reversible or compensable step must record an expectation with :meth:`expect` or call
        this; otherwise its inverse is never dispatched blindly (the step is reported as a
        contract violation needing review). The reason is shown in the report and by
        ``amends audit``.

        Raises:
            ContractError: ``reason`` is empty.
        """
        if self.phase != "forward":
            return
        if not isinstance(reason, str) or not reason.strip():
            raise ContractError(
                f"no_drift_check(reason=...) of {self.tool!r} needs a plain-language reason why "
                f"no one else can change what this step wrote, got {reason!r}; e.g. "
                f'call.no_drift_check(reason="a draft only this saga can see")',
                tool=self.tool,
                step_id=self.step_id,
            )
        self.recorded_no_drift_check = reason.strip()

    def landed(
        self,
        probe: str,
        args: Mapping[str, Any] | None = None,
        /,
        *,
        equals: Any,
        path: Sequence[str | int] | str = (),
    ) -> None:
        """Record how to observe that the inverse has taken effect ("did my refund land?").

        After a crash with the inverse in flight, a vendor that ignores idempotency keys cannot
        safely be sent it again; the engine runs this read-only probe instead: if it shows
        ``equals`` (at ``path``) the inverse landed, otherwise the step is re-checked against its
        expectation or reported ``in_doubt`` (rule 5). Same arguments as :meth:`expect`.
        """
        if self.phase != "forward":
            return
        self.recorded_landed = self._observation(
            probe, args, equals, path, ("landed probe", "landed-probe arguments", "landed value")
        )

    def expect(
        self,
        probe: str,
        args: Mapping[str, Any] | None = None,
        /,
        *,
        equals: Any,
        path: Sequence[str | int] | str = (),
    ) -> None:
        """Record what the world must still show at undo time for the inverse to be safe.

        Args:
            probe: A read-only tool that observes the value.
            args: Arguments for the probe.
            equals: The value the probe must still return (after following ``path``).
            path: Keys into the probe's result, e.g. ``"version"`` or ``("fields", "stage")``.
        """
        if self.phase != "forward":
            return  # ignored outside forward calls, like inverse()
        self.recorded_expectation = self._observation(
            probe, args, equals, path, ("expectation", "expectation arguments", "expected value")
        )

    def _observation(
        self,
        probe: str,
        args: Mapping[str, Any] | None,
        equals: Any,
        path: Sequence[str | int] | str,
        names: tuple[str, str, str],
    ) -> Expectation:
        """A probe, its arguments and the value it must show, checked as JSON data; ``names``
        say in error messages what the path, the arguments and the value are of."""
        path_of, args_of, value_of = names
        keys = _check_path(path, path_of, tool=self.tool)
        return Expectation(
            probe,
            _check_json(dict(args or {}), f"{args_of} of {self.tool!r}", tool=self.tool),
            _check_json(equals, f"{value_of} of {self.tool!r}", tool=self.tool),
            keys,
        )

    def residue(
        self,
        what: str,
        *,
        parties: Sequence[str] = (),
        settles_in_days: float | None = None,
        settles_in_business_days: int | None = None,
        settles_at: str | None = None,
    ) -> None:
        """Record a side effect that will remain after compensation (forward) or that the
        compensation left (while compensating)."""
        if not isinstance(what, str) or not what.strip():
            raise ContractError(
                f"residue needs a plain-language description, got {what!r}", tool=self.tool
            )
        who = _check_texts(parties, "residue parties", tool=self.tool)
        _check_optional_text(settles_at, "residue settles_at", tool=self.tool)
        when = settles_at or _settles_at(self._now(), settles_in_days, settles_in_business_days)
        rel: tuple[str, float] | None = None
        if not settles_at and settles_in_business_days is not None:
            rel = ("business_days", float(settles_in_business_days))
        elif not settles_at and settles_in_days is not None:
            rel = ("days", float(settles_in_days))
        self.recorded_residue.append(Residue(what, who, when, rel))

    def acknowledge(
        self,
        *,
        who: str,
        parties: Sequence[str] = (),
        draft: str | None = None,
        what: str | None = None,
    ) -> None:
        """For an irreversible effect: who must follow up, and a draft message they can send."""
        if not isinstance(who, str) or not who.strip():
            raise ContractError(
                f"acknowledge(who=...) must name who can act, got {who!r}", tool=self.tool
            )
        self.recorded_acknowledgement = Acknowledgement(
            who,
            _check_texts(parties, "acknowledgement parties", tool=self.tool),
            _check_optional_text(draft, "acknowledgement draft", tool=self.tool),
            _check_optional_text(what, "acknowledgement what", tool=self.tool),
        )

    def follow_up(self, tool: str, /, **args: Any) -> None:
        """While compensating: ask for one more call after this one (it spends budget)."""
        if self.phase not in ("compensate", "follow_up"):
            raise ContractError(
                f"call.follow_up() is for compensations; tool {self.tool!r} "
                f"called it during {self.phase!r}",
                tool=self.tool,
            )
        self.recorded_follow_ups.append(
            FollowUp(
                tool, _check_json(args, f"follow-up arguments of {self.tool!r}", tool=self.tool)
            )
        )

    def spend(self, *, tokens: int) -> None:
        """Report tokens this call used (an LLM-backed tool); they count against the budget."""
        if not isinstance(tokens, int) or tokens < 0:
            raise ContractError(
                f"spend(tokens=...) takes a non-negative int, got {tokens!r}", tool=self.tool
            )
        self.tokens += tokens

    def __repr__(self) -> str:
        return (
            f"Call(tool={self.tool!r}, phase={self.phase!r}, saga_id={self.saga_id!r}, "
            f"step_id={self.step_id!r}, attempt={self.attempt})"
        )
