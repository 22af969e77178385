"""Contracts for MCP tools, declared in TOML: what undo can do about each upstream tool.

A contract file describes the tools of one upstream MCP server, by the upstream's own tool names.
It never talks to a server: the gateway (:mod:`.gateway`) turns each contract into a catalog entry
whose function forwards to the upstream. A tool with no contract is irreversible (DESIGN.md).

```toml
[errors]                       # how this server's isError results read (rule 9)
refused = "^Error: Access denied"   # the server refused: the call had no effect
transient = "^Error: busy"          # try again (forward and during undo)
drift = "^PreconditionFailed"       # a compensation's compare-and-set saw drift

[[tool]]
name = "write_file"
reversibility = "compensable"
resources = ["file:{args.path}"]

[[tool.capture]]                # read-only calls made *before* the write (write-ahead, rule 1)
name = "old"
tool = "read_text_file"
args = { path = "{args.path}" }
path = "content"                # keys into the capture's result
absent_when = "ENOENT"          # an error matching this means "it did not exist before"

[tool.inverse]
tool = "write_file"
args = { path = "{args.path}", content = "{capture.old}" }

[tool.expect]                   # rule 4: what undo must still find
probe = "read_text_file"
args = { path = "{args.path}" }
path = "content"
equals = "{args.content}"

[tool.if_absent]                # used instead when capture 'old' found nothing
capture = "old"
inverse = { tool = "move_file", args = { source = "{args.path}", destination = "..." } }
```

Templates are those of :mod:`amends._toml_catalog` (``"{args.x}"`` keeps the value's type; other
strings are formatted) over ``args``, ``capture``, ``observed`` and ``result`` (the upstream's
``structured_content``, or its text), plus filters for text: ``{result.notified|join}``,
``{args.cents|money}``, ``{result|json}``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from amends import ConfigError
from amends._secrets import SecretResolver
from amends._toml_catalog import fill, secret_contract

__all__ = [
    "BUILTIN_CONTRACTS",
    "Capture",
    "ContractFile",
    "Effects",
    "ErrorRules",
    "ToolContract",
    "builtin_contract_path",
    "load_contracts",
    "render",
]

BUILTIN_CONTRACTS = ("filesystem", "sandbox")
"""Contract files shipped in the package, usable as ``"builtin:<name>"``."""

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)(?:\|([a-z_]+))?\}")
_ROOTS = {"args", "capture", "result"}
_CLASSES = {"read_only", "reversible", "compensable", "irreversible"}
_TOOL_KEYS = {
    "name",
    "reversibility",
    "description",
    "resources",
    "idempotent",
    "sensitive",
    "secret_env",
    "timeout",
    "capture",
    "inverse",
    "expect",
    "residue",
    "acknowledge",
    "no_drift_check",
    "if_absent",
    "undo_after",
    "errors",
    "compensate_residue",
    "observe",
    "landed",
    "compensate_follow_up",
    "describe",
}
_EFFECT_KEYS = {"inverse", "expect", "residue", "acknowledge", "no_drift_check", "landed"}


def _money(value: Any) -> str:
    return f"{int(value) / 100:,.2f} USD"


def _join(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


_FILTERS: dict[str, Callable[[Any], str]] = {"join": _join, "money": _money, "json": _json}


def render(template: Any, scope: Mapping[str, Any], where: str) -> Any:
    """Fill ``template`` (str, list or table) from ``scope``, with the text filters above.

    Raises:
        ConfigError: A path is missing from the scope, or a filter is unknown.
    """
    if isinstance(template, str):
        whole = _FIELD.fullmatch(template)
        if whole and whole.group(2) is None:
            return fill(template, scope, where)  # keeps the value's type

        def one(m: re.Match[str]) -> str:
            value = fill("{" + m.group(1) + "}", scope, where)
            name = m.group(2)
            if name is None:
                return str(value)
            try:
                return str(_FILTERS[name](value))
            except KeyError:
                raise ConfigError(
                    f"{where}: unknown filter {name!r} in '{m.group(0)}'; use one of "
                    f"{', '.join(sorted(_FILTERS))}"
                ) from None
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"{where}: filter {name!r} cannot format {value!r}: {exc}"
                ) from exc

        return _FIELD.sub(one, template)
    if isinstance(template, list):
        return [render(t, scope, where) for t in template]
    if isinstance(template, dict):
        return {k: render(v, scope, where) for k, v in template.items()}
    return template


def _check_template(template: Any, allowed: set[str], where: str) -> None:
    if isinstance(template, str):
        for m in _FIELD.finditer(template):
            root = m.group(1).split(".")[0]
            if root not in allowed:
                raise ConfigError(
                    f"{where}: template '{m.group(0)}' uses {root!r}; available here: "
                    f"{', '.join(sorted(allowed))}"
                )
            if m.group(2) is not None and m.group(2) not in _FILTERS:
                raise ConfigError(
                    f"{where}: unknown filter {m.group(2)!r} in '{m.group(0)}'; use one of "
                    f"{', '.join(sorted(_FILTERS))}"
                )
    elif isinstance(template, list):
        for t in template:
            _check_template(t, allowed, where)
    elif isinstance(template, dict):
        for t in template.values():
            _check_template(t, allowed, where)


def _regex(value: Any, where: str) -> re.Pattern[str] | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a regular expression string, got {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ConfigError(f"{where}: {value!r} is not a valid regular expression: {exc}") from exc


@dataclass(frozen=True)
class ErrorRules:
    """How an upstream's ``isError`` results read; an error matching none is an unknown outcome
    (rule 9: the forward step is ``in_doubt``)."""

    refused: re.Pattern[str] | None = None
    """Text of an error that means the server refused: the call had no effect."""
    transient: re.Pattern[str] | None = None
    """Text of an error worth retrying (within the retry policy and budget)."""
    drift: re.Pattern[str] | None = None
    """Text of an error that means a compensation's precondition failed (drift, rule 4)."""

    @classmethod
    def parse(cls, data: Any, where: str, base: ErrorRules | None = None) -> ErrorRules:
        base = base or cls()
        if data is None:
            return base
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: 'errors' must be a table, got {data!r}")
        unknown = set(data) - {"refused", "transient", "drift"}
        if unknown:
            raise ConfigError(
                f"{where}: 'errors' has unknown key(s) {', '.join(sorted(unknown))}; "
                f"known: drift, refused, transient"
            )
        return cls(
            refused=_regex(data["refused"], f"{where} errors.refused")
            if "refused" in data
            else base.refused,
            transient=_regex(data["transient"], f"{where} errors.transient")
            if "transient" in data
            else base.transient,
            drift=_regex(data["drift"], f"{where} errors.drift") if "drift" in data else base.drift,
        )


@dataclass(frozen=True)
class Capture:
    """A read-only upstream call made before the write; its result feeds the templates."""

    name: str
    """Name under ``{capture.<name>}``."""
    tool: str
    """Upstream tool to call (by the upstream's name)."""
    args: Mapping[str, Any]
    """Argument templates over ``args``."""
    path: tuple[str, ...] = ()
    """Keys into the capture's result."""
    absent_when: re.Pattern[str] | None = None
    """An error whose text matches means "it did not exist before" (the capture is absent)."""


@dataclass(frozen=True)
class Effects:
    """What a forward call records, as templates (one set for the usual case, one for
    ``if_absent``)."""

    inverse: Mapping[str, Any] | None = None
    expect: Mapping[str, Any] | None = None
    residue: Mapping[str, Any] | None = None
    acknowledge: Mapping[str, Any] | None = None
    no_drift_check: str | None = None
    """Why no expectation is needed (rule 4), e.g. "a draft only this saga can see"."""
    landed: Mapping[str, Any] | None = None
    """For a server that ignores idempotency keys: how to see that the inverse took effect,
    so a compensation in flight at a crash is never sent twice (rule 5)."""


@dataclass(frozen=True)
class ToolContract:
    """The contract of one upstream tool."""

    name: str
    """The upstream's tool name."""
    reversibility: str
    description: str = ""
    describe: str | None = None
    """The step in a sentence, a ``str.format`` template over the arguments
    (``"Email '{subject}' to {to}"``), shown by the report and the web page."""
    resources: tuple[str, ...] = ()
    idempotent: bool = False
    """Whether the upstream honours the idempotency key sent in ``_meta`` (rule 5)."""
    sensitive: tuple[str, ...] = ()
    """Arguments redacted everywhere amends shows or stores them (rule 11)."""
    resolve_secret: SecretResolver | None = None
    """Where an inverse or probe gets a sensitive argument back at undo time (rule 11): from
    ``secret_env = { api_key = "KV_API_KEY" }``, else ``$API_KEY``; read in the process that
    runs undo (the gateway, ``amends undo``, ``amends serve``)."""
    timeout: float | None = None
    captures: tuple[Capture, ...] = ()
    observes: tuple[Capture, ...] = ()
    """Read-only calls made right *after* a successful write, under ``{observed.<name>}``: the
    state the write left (an edit's new content), for the expectation. A person's change in
    the instant between the write and this read would be taken for the agent's."""
    effects: Effects = field(default_factory=Effects)
    if_absent: tuple[str, Effects] | None = None
    """(capture name, effects used instead when that capture found nothing)."""
    undo_after: tuple[str, ...] = ()
    """Upstream tool names: this step's inverse waits for the inverse of the latest earlier step
    of one of these tools (rule 3)."""
    errors: ErrorRules = field(default_factory=ErrorRules)
    compensate_follow_ups: tuple[Mapping[str, Any], ...] = ()
    """Calls this tool asks for when it runs as an inverse (``{when, tool, args}``, templates over
    ``args`` and ``result``); each spends budget (rule 7)."""
    compensate_residue: Mapping[str, Any] | None = None
    """Residue this tool leaves when it runs *as an inverse* (a refund that settles later),
    templates over ``args`` and ``result``."""


@dataclass(frozen=True)
class ContractFile:
    """The contracts of one file."""

    source: str
    tools: Mapping[str, ToolContract]


def builtin_contract_path(name: str) -> Path:
    """The path of a contract file shipped in the package (``filesystem``, ``sandbox``).

    Raises:
        ConfigError: No such built-in contract file.
    """
    if name not in BUILTIN_CONTRACTS:
        raise ConfigError(
            f"no built-in contract file {name!r}; use one of "
            f"{', '.join('builtin:' + n for n in BUILTIN_CONTRACTS)} or a path to a TOML file"
        )
    ref = importlib_resources.files("amends.integrations.mcp") / "contracts" / f"{name}.toml"
    return Path(str(ref))


def _table(value: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table, got {value!r}")
    missing = required - set(value)
    unknown = set(value) - required - optional
    if missing:
        raise ConfigError(f"{where} needs {', '.join(sorted(missing))}")
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted(required | optional))}"
        )
    return value


def _effects(entry: Mapping[str, Any], where: str, roots: set[str]) -> Effects:
    inverse = expect = residue = ack = None
    if "inverse" in entry:
        inverse = _table(entry["inverse"], f"{where} inverse", {"tool"}, {"args"})
        _check_template(inverse.get("args", {}), roots, f"{where} inverse")
    if "expect" in entry:
        expect = _table(entry["expect"], f"{where} expect", {"probe", "equals"}, {"args", "path"})
        _check_template(expect, roots, f"{where} expect")
    if "residue" in entry:
        residue = _table(
            entry["residue"],
            f"{where} residue",
            {"what"},
            {"parties", "settles_in_days", "settles_in_business_days", "settles_at", "when"},
        )
        _check_template(residue, roots, f"{where} residue")
    if "acknowledge" in entry:
        ack = _table(
            entry["acknowledge"], f"{where} acknowledge", {"who"}, {"parties", "draft", "what"}
        )
        _check_template(ack, roots, f"{where} acknowledge")
    landed = None
    if "landed" in entry:
        landed = _table(entry["landed"], f"{where} landed", {"probe", "equals"}, {"args", "path"})
        _check_template(landed, roots, f"{where} landed")
    reason = entry.get("no_drift_check")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise ConfigError(
            f"{where}: no_drift_check must say why no expectation is needed, got {reason!r}"
        )
    if expect is not None and reason is not None:
        raise ConfigError(f"{where}: give either expect or no_drift_check, not both")
    return Effects(inverse, expect, residue, ack, reason, landed)


def _path(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # may be a template, filled when the step runs
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
        return tuple(str(v) for v in value)
    raise ConfigError(f"{where}: path must be a key or a list of keys, got {value!r}")


def _captures(raw: Any, where: str, roots: set[str]) -> tuple[Capture, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where} must be an array of tables ([[tool.capture]])")
    out: list[Capture] = []
    for c in raw:
        c = _table(c, where, {"name", "tool"}, {"args", "path", "absent_when"})
        _check_template(c.get("args", {}), roots, f"{where} {c['name']!r}")
        out.append(
            Capture(
                c["name"],
                c["tool"],
                dict(c.get("args", {})),
                _path(c.get("path"), where),
                _regex(c.get("absent_when"), f"{where} absent_when"),
            )
        )
    return tuple(out)


def _describe(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{where}: describe must be a sentence with {{argument}} fields, e.g. "
            f"describe = \"Email '{{subject}}' to {{to}}\", got {value!r}"
        )
    return value


def _tool(entry: Any, i: int, src: str, errors: ErrorRules) -> ToolContract:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ConfigError(f"{src}: tool #{i} needs a name (the upstream's tool name)")
    name = entry["name"]
    where = f"{src}: tool {name!r}"
    unknown = set(entry) - _TOOL_KEYS
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted(_TOOL_KEYS))}"
        )
    cls = entry.get("reversibility")
    if cls not in _CLASSES:
        raise ConfigError(
            f"{where}: reversibility {cls!r} is not one of {', '.join(sorted(_CLASSES))}; "
            f"say what undo can do (a tool without a contract is irreversible)"
        )
    captures = _captures(entry.get("capture", []), f"{where} capture", {"args"})
    observes = _captures(entry.get("observe", []), f"{where} observe", {"args", "result"})
    roots = (
        {"args", "result"}
        | ({"capture"} if captures else set())
        | ({"observed"} if observes else set())
    )
    effects = _effects(entry, where, roots)
    if_absent = None
    if "if_absent" in entry:
        ia = _table(entry["if_absent"], f"{where} if_absent", {"capture"}, _EFFECT_KEYS)
        if ia["capture"] not in {c.name for c in captures}:
            raise ConfigError(
                f"{where} if_absent: capture {ia['capture']!r} is not declared; declare it in "
                f"[[tool.capture]] with absent_when"
            )
        if_absent = (ia["capture"], _effects(ia, f"{where} if_absent", roots))
    resources = entry.get("resources", [])
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ConfigError(f"{where}: resources must be a list of template strings")
    _check_template(resources, {"args"}, f"{where} resources")
    # rule 11: the same keys, checks and resolver as the TOML HTTP catalog (toml_catalog)
    sensitive, resolve_secret = secret_contract(entry, where)
    undo_after = entry.get("undo_after", [])
    if not isinstance(undo_after, list) or not all(isinstance(s, str) for s in undo_after):
        raise ConfigError(f"{where}: undo_after must be a list of tool names")
    comp_residue = None
    if "compensate_residue" in entry:
        comp_residue = _table(
            entry["compensate_residue"],
            f"{where} compensate_residue",
            {"what"},
            {"parties", "settles_in_days", "settles_in_business_days", "settles_at", "when"},
        )
        _check_template(comp_residue, {"args", "result"}, f"{where} compensate_residue")
    raw_fu = entry.get("compensate_follow_up", [])
    if not isinstance(raw_fu, list):
        raise ConfigError(f"{where}: compensate_follow_up must be an array of tables")
    follow_ups = []
    for fu in raw_fu:
        fu = _table(fu, f"{where} compensate_follow_up", {"tool"}, {"args", "when"})
        _check_template(fu, {"args", "result"}, f"{where} compensate_follow_up")
        follow_ups.append(fu)
    idem = entry.get("idempotent", False)
    if not isinstance(idem, bool):
        raise ConfigError(f"{where}: idempotent must be true or false, got {idem!r}")
    timeout = entry.get("timeout")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise ConfigError(f"{where}: timeout must be a positive number of seconds, got {timeout!r}")
    if cls in ("reversible", "compensable"):
        has_inverse = effects.inverse is not None
        if not has_inverse:
            raise ConfigError(
                f"{where} is {cls!r} but declares no [tool.inverse]; add one or declare it "
                f"'irreversible' (rule 2)"
            )
        if effects.expect is None and effects.no_drift_check is None:
            raise ConfigError(
                f"{where} is {cls!r} but declares neither [tool.expect] nor no_drift_check; "
                f"undo never overwrites blindly (rule 4): say what undo must still find"
            )
    return ToolContract(
        name=name,
        reversibility=cls,
        description=str(entry.get("description", "")),
        describe=_describe(entry.get("describe"), where),
        resources=tuple(resources),
        idempotent=idem,
        sensitive=sensitive,
        resolve_secret=resolve_secret,
        timeout=float(timeout) if timeout is not None else None,
        captures=captures,
        observes=observes,
        effects=effects,
        if_absent=if_absent,
        undo_after=tuple(undo_after),
        errors=ErrorRules.parse(entry.get("errors"), where, errors),
        compensate_residue=comp_residue,
        compensate_follow_ups=tuple(follow_ups),
    )


def load_contracts(source: str | Path) -> ContractFile:
    """Read a contract file: a path, or ``"builtin:filesystem"`` / ``"builtin:sandbox"``.

    Raises:
        ConfigError: The file is missing, not TOML, or an entry is malformed (the message names
            the file, the tool and the key, and what to write instead).
    """
    text_source = str(source)
    path = (
        builtin_contract_path(text_source.removeprefix("builtin:"))
        if text_source.startswith("builtin:")
        else Path(source)
    )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"contract file {str(path)!r} does not exist; check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"contract file {str(path)!r} is not valid TOML: {exc}; fix the syntax at that line"
        ) from exc
    if data.get("reviewed") is False:
        raise ConfigError(
            f"contract file {str(path)!r} is a draft written by `amends audit --suggest` and "
            f"is not used until reviewed: check every entry, then delete the line "
            f"'reviewed = false'"
        )
    unknown = set(data) - {"tool", "errors", "reviewed"}
    if unknown:
        raise ConfigError(
            f"contract file {str(path)!r} has unknown top-level key(s) "
            f"{', '.join(sorted(unknown))}; only [errors] and [[tool]] are read"
        )
    errors = ErrorRules.parse(data.get("errors"), str(path))
    tools: dict[str, ToolContract] = {}
    raw = data.get("tool", [])
    if not isinstance(raw, list):
        raise ConfigError(f"contract file {str(path)!r}: 'tool' must be [[tool]] tables")
    for i, entry in enumerate(raw, 1):
        contract = _tool(entry, i, str(path), errors)
        if contract.name in tools:
            raise ConfigError(
                f"contract file {str(path)!r} declares tool {contract.name!r} twice; keep one"
            )
        tools[contract.name] = contract
    return ContractFile(text_source, tools)
