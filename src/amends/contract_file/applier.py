"""The applier: a contract plus one call's arguments, captures and result become the ``Call``
declarations the engine logs (inverse, expect, landed, residue, acknowledge, no_drift_check,
deadline) -- for every transport alike.

A tool of a contract file becomes a catalog function (:func:`tool_function`) that, for a forward
call: reads the captures (read-only, before the write; rule 1 holds because the write is sent only
after the intent is durable and every capture answered), sends the call through its
:data:`~.transport.Transport`, reads the observations, then fills every template of the contract
and records them on the ``Call``. Templates are filled once, when the step runs, and stored as
concrete data (rule 2). If they cannot be filled -- the result lacks a key the inverse needs --
the effect happened but nothing is recorded: the step is irreversible and its manual action
names the cause (rules 2 and 8), instead of a half-recorded contract.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Protocol, TypeVar

from .._contracts import Call, ToolFn
from .._errors import ConfigError, ContractError, PermanentError, TransientError
from .._secrets import SecretResolver, marker
from . import templates
from .schema import Capture, Effects, ToolContract
from .secret_env import file_resolver
from .transport import ErrorRules, Phase, Transport, TransportRequest, raise_for, read, says

__all__ = [
    "Binding",
    "Captured",
    "read_captures",
    "registration",
    "tool_function",
    "undo_after",
]


class Who(Protocol):
    """What a capture needs to know of its step (a ``Call``, or a step not started yet)."""

    @property
    def saga_id(self) -> str: ...

    @property
    def step_id(self) -> str: ...

    @property
    def idempotency_key(self) -> str: ...


@dataclass(frozen=True)
class Binding:
    """How the tools of a set of contract files reach the world, and their catalog names."""

    transport: Transport
    """Makes one call of a tool, by its contract name."""
    contracts: Mapping[str, ToolContract]
    """Every contract of the set, by contract name (one upstream's files, one HTTP file)."""
    prefix: str = ""
    """Catalog name = ``prefix + contract name`` (an MCP upstream's ``<name>.``)."""
    label: str = "contract"
    """How messages name a tool's contract (``contract of 'kv.kv_set'``)."""
    refuses_null: Callable[[str, str], str | None] | None = None
    """Why the tool ``name`` (contract name) cannot be called with argument ``arg`` null (its
    URL has no spelling for null, its input schema does not take one), else ``None``. An
    inverse recorded with such a null is refused when the forward step records it, not found
    at undo (rule 2: the step has no usable inverse, and the preview says so)."""

    def catalog_name(self, name: str) -> str:
        """The catalog name of the contract-file tool ``name``."""
        return self.prefix + name

    @cached_property
    def resolver(self) -> SecretResolver:
        """One secret resolver for every sensitive tool of the set (forward declarations first,
        :mod:`.secret_env`)."""
        return file_resolver(self.contracts, {self.catalog_name(n): n for n in self.contracts})


@dataclass(frozen=True)
class Captured:
    """What the captures of one step read."""

    values: dict[str, Any]
    """Capture name -> value (``None`` for one that found nothing)."""
    absent: frozenset[str] = frozenset()
    """Names of the captures whose error matched ``absent_when``."""


def _request(
    name: str,
    args: Mapping[str, Any],
    who: Who,
    phase: Phase,
    key: str,
    sensitive: tuple[str, ...] = (),
) -> TransportRequest:
    return TransportRequest(
        tool=name,
        args=dict(args),
        phase=phase,
        saga_id=who.saga_id,
        step_id=who.step_id,
        idempotency_key=key,
        precondition=getattr(who, "precondition", None),
        sensitive=sensitive,
    )


Redact = Callable[[str], str]


def _redact(sensitive: tuple[str, ...], args: Mapping[str, Any]) -> Redact | None:
    """Replaces the call's sensitive values in a tool's words, before a message cuts them to
    length (the engine scrubs what is logged, but cannot recognise half a secret)."""
    values = {args[n]: marker(n) for n in sensitive if n in args}
    return templates.Redactor().adding(values).text if values else None


def _known_secrets(
    call: Call, args: Mapping[str, Any], declared: tuple[str, ...]
) -> tuple[str, ...]:
    """The arguments of an undo-time call that hold a secret the saga knows, though this tool
    does not declare them sensitive (only the forward tool did): its transport redacts them
    too, before it cuts a URL or the vendor's words to length (rule 11)."""
    saga = call.redact
    if saga is None:
        return ()
    return tuple(
        n for n, v in args.items() if n not in declared and isinstance(v, str) and saga(v) != v
    )


def _with_saga(redact: Redact | None, call: Call) -> Redact | None:
    """``redact``, then every secret the saga knows (``call.redact``): an inverse's words may
    echo a secret only the forward tool declared sensitive (rule 11)."""
    saga = call.redact
    if saga is None or redact is None:
        return saga or redact
    return lambda text: saga(redact(text))


def _rules(binding: Binding, name: str, caller: ToolContract) -> ErrorRules:
    """How the answers of the read-only tool ``name`` read: its own contract's ``[errors]``,
    else (a Python probe of an HTTP catalog) those of the contract that calls it."""
    probe = binding.contracts.get(name)
    return probe.errors if probe is not None else caller.errors


async def read_captures(
    contract: ToolContract, binding: Binding, who: Who, args: Mapping[str, Any]
) -> Captured:
    """Read the captures of a forward call, before the write (the write is not sent yet).

    Raises:
        TransientError: A capture failed transiently: the write was not sent; try again.
        PermanentError: A capture failed otherwise: the write was not sent (rule 1).
    """
    scope = {"args": dict(args)}
    tool = binding.catalog_name(contract.name)
    values: dict[str, Any] = {}
    absent: set[str] = set()
    for cap in contract.captures:
        where = f"{binding.label} of {tool!r} capture {cap.name!r}"
        try:
            cargs = templates.fill(dict(cap.args), scope, where, call=True)
            path = tuple(str(p) for p in templates.fill(list(cap.path), scope, where, call=True))
        except ConfigError as exc:
            raise PermanentError(f"{exc}; the write was not sent") from None
        request = _request(cap.tool, cargs, who, "before", who.idempotency_key + ":before")
        result = read(_rules(binding, cap.tool, contract), await binding.transport(request), cargs)
        absent_when = cap.absent_when
        if not result.ok and absent_when is not None and says(absent_when, result.said(), cargs):
            values[cap.name] = None
            absent.add(cap.name)
            continue
        if not result.ok:
            err = TransientError if result.kind == "transient" else PermanentError
            said = result.explained(_redact(contract.sensitive, args))
            raise err(
                f"{tool}: reading the state before the write ({cap.tool}) failed, so the write "
                f"was not sent: {said}"
            )
        try:
            values[cap.name] = _read(cap, result.value(), path, where)
        except ConfigError as exc:
            raise PermanentError(f"{exc}; the write was not sent") from None
    return Captured(values, frozenset(absent))


def _read(cap: Capture, value: Any, path: tuple[str, ...], where: str) -> Any:
    """What a capture or observation keeps of its tool's answer: the value at ``path``, and of
    its text the ``match`` pattern's first group (or whole match), when it declares one.

    Raises:
        ConfigError: A key of ``path`` is missing, or ``match`` finds nothing.
    """
    value = templates.dig(value, path, where)
    if cap.match is None:
        return value
    found = cap.match.search(value if isinstance(value, str) else str(value))
    if found is None:
        raise ConfigError(
            f"{where}: match {cap.match.pattern!r} found nothing in {templates.quoted(value)}"
        )
    return found.group(1) if found.re.groups else found.group(0)


async def _observe(
    contract: ToolContract, binding: Binding, call: Call, scope: Mapping[str, Any]
) -> dict[str, Any]:
    """Read the observations right after a write that succeeded."""
    tool = binding.catalog_name(contract.name)
    observed: dict[str, Any] = {}
    for ob in contract.observes:
        where = f"{binding.label} of {tool!r} observe {ob.name!r}"
        oargs = templates.fill(dict(ob.args), scope, where, call=True)
        path = tuple(str(p) for p in templates.fill(list(ob.path), scope, where, call=True))
        request = _request(ob.tool, oargs, call, "after", call.idempotency_key + ":after")
        result = read(_rules(binding, ob.tool, contract), await binding.transport(request))
        if not result.ok:
            said = result.explained(_redact(contract.sensitive, scope["args"]))
            raise ConfigError(f"{where}: the read after the write failed: {said}")
        observed[ob.name] = _read(ob, result.value(), path, where)
    return observed


def _declarations(
    effects: Effects, binding: Binding, scope: Mapping[str, Any], where: str
) -> list[Callable[[Call], None]]:
    """Every template of ``effects`` filled, as declarations to make on a ``Call``."""
    out: list[Callable[[Call], None]] = []
    if effects.inverse is not None:
        inv = effects.inverse
        tool = binding.catalog_name(inv["tool"])
        args = templates.fill(dict(inv.get("args", {})), scope, f"{where} inverse", call=True)
        if binding.refuses_null is not None and None in args.values():
            _check_nulls(binding.refuses_null, inv, args, f"{where} inverse")
        deadline = templates.fill(inv.get("deadline"), scope, f"{where} inverse deadline")
        # one mapping: an upstream's own argument may be named ``deadline`` (or ``tool``)
        out.append(lambda c: c.inverse(tool, args, deadline=deadline))
    for key in ("expect", "landed"):
        table = getattr(effects, key)
        if table is None:
            continue
        probe = binding.catalog_name(table["probe"])
        path = templates.fill(table.get("path", []), scope, f"{where} {key} path", call=True)
        keys = (path,) if isinstance(path, str | int) else tuple(path)
        pargs = templates.fill(dict(table.get("args", {})), scope, f"{where} {key}", call=True)
        equals = templates.fill(table["equals"], scope, f"{where} {key}", call=True)
        out.append(partial(_observation, key, probe, pargs, equals, keys))
    if effects.expect is None and effects.no_drift_check is not None:
        reason = effects.no_drift_check
        out.append(lambda c: c.no_drift_check(reason=reason))
    if effects.residue is not None:
        residue = templates.fill(dict(effects.residue), scope, f"{where} residue")
        out.append(lambda c: _residue(c, residue))
    if effects.acknowledge is not None:
        a = templates.fill(dict(effects.acknowledge), scope, f"{where} acknowledge")
        out.append(
            lambda c: c.acknowledge(
                who=a["who"], parties=a.get("parties", ()), draft=a.get("draft"), what=a.get("what")
            )
        )
    return out


def _check_nulls(
    refuses: Callable[[str, str], str | None],
    inv: Mapping[str, Any],
    args: Mapping[str, Any],
    where: str,
) -> None:
    """Raises ConfigError for the first null argument the inverse's tool cannot take."""
    for arg, value in args.items():
        why = refuses(inv["tool"], arg) if value is None else None
        if why is not None:
            tpl = inv.get("args", {}).get(arg)
            fix = (
                f"; give it a default if one is right, e.g. '{tpl[:-1]}|default:...}}'"
                if isinstance(tpl, str) and tpl.endswith("}")
                else ""
            )
            raise ConfigError(
                f"{where}: argument {arg!r} ({templates.quoted(tpl, 80)}) found null, and "
                f"{inv['tool']!r} {why}{fix}"
            )


def _observation(
    key: str, probe: str, args: Any, equals: Any, path: tuple[Any, ...], call: Call
) -> None:
    record = call.expect if key == "expect" else call.landed
    record(probe, args, equals=equals, path=path)


def _residue(call: Call, r: Mapping[str, Any]) -> None:
    if "when" in r and not r["when"]:
        return  # a conditional residue whose condition did not hold (``when = "{result.added}"``)
    call.residue(
        r["what"],
        parties=r.get("parties", ()),
        settles_in_days=r.get("settles_in_days"),
        settles_in_business_days=r.get("settles_in_business_days"),
        settles_at=r.get("settles_at"),
    )


def _scratch(call: Call) -> Call:
    return Call(
        saga_id=call.saga_id,
        step_id=call.step_id,
        tool=call.tool,
        phase=call.phase,
        idempotency_key=call.idempotency_key,
    )


async def _record_forward(
    contract: ToolContract,
    binding: Binding,
    call: Call,
    scope: dict[str, Any],
    absent: frozenset[str],
) -> None:
    """Record the contract of a forward call that returned (rule 2), or, if it cannot be filled
    in, nothing but the acknowledgement that names why (the effect stands)."""
    tool = binding.catalog_name(contract.name)
    where = f"{binding.label} of {tool!r}"
    effects = contract.effects
    if contract.if_absent is not None and contract.if_absent[0] in absent:
        effects = contract.if_absent[1]
    try:
        if contract.observes:
            scope["observed"] = await _observe(contract, binding, call, scope)
        todo = _declarations(effects, binding, scope, where)
        scratch = _scratch(call)
        for declare in todo:  # every declaration checked first: nothing is half-recorded
            declare(scratch)
    except (ConfigError, ContractError) as exc:
        # rule 2 and rule 8: the write happened; its inverse cannot be filled in, so nothing is
        # recorded (the step is irreversible) and the report says why.
        call.acknowledge(
            who=f"whoever maintains {contract.source}",
            what=f"{tool} ran, but its contract could not be applied ({exc}); its effect "
            f"stands and undo cannot take it back",
        )
        return
    for declare in todo:
        declare(call)


def _as_inverse(
    contract: ToolContract, binding: Binding, call: Call, scope: Mapping[str, Any]
) -> None:
    """What this tool records when it runs as an inverse or a follow-up: residue it leaves, and
    follow-up calls (each spends budget, rule 7).

    The call has already succeeded here: a template that cannot be filled must not turn it into
    a failure (a person would then be asked to redo a refund that was made). What cannot be
    described becomes residue saying so (rule 7: a missing follow-up is residue, never the
    inverse's state).
    """
    tool = binding.catalog_name(contract.name)
    where = f"{binding.label} of {tool!r}"
    if contract.compensate_residue is not None:
        try:
            filled = templates.fill(
                dict(contract.compensate_residue), scope, f"{where} compensate_residue"
            )
            _residue(_scratch(call), filled)
        except (ConfigError, ContractError) as exc:
            call.residue(f"{tool} ran, but what it leaves behind could not be described ({exc})")
        else:
            _residue(call, filled)
    for fu in contract.compensate_follow_ups:
        try:
            filled = templates.fill(dict(fu), scope, f"{where} compensate_follow_up", call=True)
            if "when" in filled and not filled["when"]:
                continue
            follow = (binding.catalog_name(filled["tool"]), dict(filled.get("args", {})))
            _scratch(call).follow_up(follow[0], **follow[1])
        except (ConfigError, ContractError) as exc:
            call.residue(
                f"{tool} ran, but the follow-up {fu['tool']} it asks for could not be filled in "
                f"({exc}), so it was not sent"
            )
        else:
            call.follow_up(follow[0], **follow[1])


_NOTHING_CAPTURED = Captured({})
"""What a call without captures read (one shared object: nothing writes to it)."""

EarlyCaptures = Callable[[Call], Awaitable[Captured] | None]
"""Gives the captures a caller started before the forward function ran, or ``None``."""


def tool_function(
    contract: ToolContract | None,
    binding: Binding,
    name: str,
    *,
    early: EarlyCaptures | None = None,
    rules: ErrorRules | None = None,
) -> ToolFn:
    """The catalog function of one contract-file tool.

    Args:
        contract: The tool's contract; ``None``: a tool with no contract (irreversible), only
            forwarded.
        binding: How the tool is reached and named.
        name: The tool's name in its contract file (the upstream's name).
        early: Captures started while the step's intent was written (the MCP gateway does).
        rules: How the errors of a tool without a contract read.
    """
    tool = binding.catalog_name(name)
    errors = contract.errors if contract is not None else (rules or ErrorRules())
    sensitive = contract.sensitive if contract is not None else ()

    # ``call`` positional-only: a tool outside Python may have an argument named ``call``
    async def run(call: Call, /, **args: Any) -> Any:
        scope: dict[str, Any] = {"args": args}
        captured = _NOTHING_CAPTURED
        if call.phase == "forward" and contract is not None and contract.captures:
            pending = early(call) if early is not None else None
            captured = await (pending or read_captures(contract, binding, call, args))
            scope["capture"] = captured.values
            if contract.before:
                scope["before"] = captured.values.get("before")
        secret = sensitive + _known_secrets(call, args, sensitive)
        request = _request(name, args, call, call.phase, call.idempotency_key, secret)
        result = await binding.transport(request)
        if not result.ok or errors.refused_answer is not None:
            raise_for(result, errors, tool, args, _with_saga(_redact(secret, args), call))
        value = result.value()
        if contract is None or call.phase == "probe":
            return value
        scope["result"] = value
        if call.phase == "forward":
            await _record_forward(contract, binding, call, scope, captured.absent)
        else:
            _as_inverse(contract, binding, call, scope)
        return value

    run.__name__ = tool.replace(".", "_").replace("-", "_")
    return run


_S = TypeVar("_S", bound="HasTool")


class HasTool(Protocol):
    """A step of a saga, as :func:`undo_after` reads it."""

    @property
    def tool(self) -> str: ...


def undo_after(contract: ToolContract, binding: Binding, steps: Iterable[_S]) -> list[_S]:
    """The steps whose inverses a new step of ``contract`` must wait for (rule 3): for each tool
    its ``undo_after`` names, the latest of ``steps`` (the saga's earlier steps) that called it.
    A caller that opens steps itself passes them to ``saga.call(..., undo_after=...)``."""
    wanted = {binding.catalog_name(t) for t in contract.undo_after}
    latest: dict[str, _S] = {}
    for step in steps:
        if step.tool in wanted:
            latest[step.tool] = step
    return list(latest.values())


def registration(contract: ToolContract, binding: Binding) -> dict[str, Any]:
    """The ``Catalog.register`` keywords a contract declares (its class, resources, secrets,
    idempotency, sentence, timeout)."""
    tool = binding.catalog_name(contract.name)
    kwargs: dict[str, Any] = {
        "reversibility": contract.reversibility,
        "idempotent": contract.idempotent,
        "describe": contract.describe,
        "timeout": contract.timeout,
        "contract_file": contract.source,
    }
    if contract.description:
        kwargs["description"] = contract.description
    if contract.resources:
        kwargs["resources"] = _resources(
            contract.resources, f"{binding.label} of {tool!r} resources", tool
        )
    if contract.sensitive:
        kwargs["sensitive"] = list(contract.sensitive)
        kwargs["resolve_secret"] = binding.resolver
    return kwargs


def _resources(
    tpls: tuple[str, ...], where: str, tool: str
) -> Callable[[Mapping[str, Any]], list[str]]:
    def resources(args: Mapping[str, Any]) -> list[str]:
        try:
            return [str(templates.fill(t, {"args": args}, where)) for t in tpls]
        except ConfigError as exc:
            # issue 24: said in the contract file's terms, not as a Python exception
            raise ContractError(str(exc), tool=tool) from None

    return resources
