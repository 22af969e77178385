"""The contract file format: one key set for every tool outside Python, HTTP and MCP alike.

A contract file is TOML: ``[[tool]]`` tables (one per tool), an optional ``[errors]`` table (how
the tools' errors read) and, in drafts, ``reviewed = false``. This module reads and validates it
into frozen :class:`ToolContract` records; it never talks to a tool (the transports do) and
never fills a template (:mod:`.templates` does, when a step runs). Every message names the file,
the tool, the key and the value, and says what to write instead.

The keys of a ``[[tool]]`` (docs/toml-catalog.md is the reference):

- what the tool is: ``name``, ``reversibility`` (default: irreversible), ``description``,
  ``describe``, ``resources``, ``timeout``, ``idempotent``, ``sensitive``, ``secret_env``;
- how it is reached: ``http`` (HTTP tools only; an MCP tool is served by its upstream);
- reads around the call: ``[[tool.capture]]`` (before the write), ``[tool.before]`` (one capture
  named ``before``, read as ``{before}``), ``[[tool.observe]]`` (right after the write);
- what a forward call records: ``inverse``, ``expect``, ``landed``, ``residue``,
  ``acknowledge``, ``no_drift_check``, ``if_absent`` (the same, when a capture found nothing),
  ``undo_after``;
- how its errors read: ``errors``; what it does as an inverse: ``compensate_residue``,
  ``compensate_follow_up``.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Literal

from .._dates import deadline_iso
from .._errors import ConfigError, ContractError
from .._secrets import SecretResolver
from . import templates
from .transport import ErrorRules

__all__ = [
    "MAX_TIMEOUT",
    "TOOL_KEYS",
    "Capture",
    "ContractFile",
    "Effects",
    "ToolContract",
    "parse_errors",
    "probe_problems",
    "read_file",
]

Transport = Literal["http", "mcp"]

MAX_TIMEOUT = 600.0
"""Largest ``timeout`` a contract may declare, in seconds."""
CLASSES = ("compensable", "irreversible", "read_only", "reversible")

TOOL_KEYS = frozenset(
    {
        "name",
        "reversibility",
        "description",
        "describe",
        "resources",
        "timeout",
        "idempotent",
        "sensitive",
        "secret_env",
        "http",
        "before",
        "capture",
        "observe",
        "inverse",
        "expect",
        "landed",
        "residue",
        "acknowledge",
        "no_drift_check",
        "if_absent",
        "undo_after",
        "errors",
        "compensate_residue",
        "compensate_follow_up",
    }
)
"""Every key a ``[[tool]]`` may have, whatever its transport."""
EFFECT_KEYS = frozenset({"inverse", "expect", "residue", "acknowledge", "no_drift_check", "landed"})
_RESIDUE_KEYS = {"parties", "settles_in_days", "settles_in_business_days", "settles_at", "when"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Capture:
    """A read-only call made before the write (or right after it, for ``observe``); its result
    feeds the templates under ``{capture.<name>}`` (``{observed.<name>}``)."""

    name: str
    """Name under ``{capture.<name>}``."""
    tool: str
    """The tool to call, by its name in the contract file (the upstream's name for MCP)."""
    args: Mapping[str, Any]
    """Argument templates over ``args`` (and ``result`` for an observation)."""
    path: tuple[str, ...] = ()
    """Keys into the result (templates); digits index lists."""
    absent_when: re.Pattern[str] | None = None
    """An error whose text matches means "it did not exist before" (the capture is absent)."""
    match: re.Pattern[str] | None = None
    """For a tool that answers in prose: the value is this pattern's first group (or whole
    match) in the text at ``path`` (``"^On branch (\\S+)"``); no match refuses the write."""


@dataclass(frozen=True)
class Effects:
    """What a forward call records, as templates (one set for the usual case, one for
    ``if_absent``)."""

    inverse: Mapping[str, Any] | None = None
    """``{tool, args, deadline}``: the call that takes the step back."""
    expect: Mapping[str, Any] | None = None
    """``{probe, args, path, equals}``: what undo must still find (rule 4)."""
    residue: Mapping[str, Any] | None = None
    """``{what, parties, settles_in_days | settles_in_business_days | settles_at, when}``."""
    acknowledge: Mapping[str, Any] | None = None
    """``{who, parties, draft, what}``: for an irreversible effect, who must follow up."""
    no_drift_check: str | None = None
    """Why no expectation is needed (rule 4), e.g. "a draft only this saga can see"."""
    landed: Mapping[str, Any] | None = None
    """For a tool that ignores idempotency keys: how to see that the inverse took effect, so a
    compensation in flight at a crash is never sent twice (rule 5)."""


@dataclass(frozen=True)
class ToolContract:
    """The contract of one tool of a contract file."""

    name: str
    """The tool's name in the file (the upstream's own name for MCP)."""
    source: str
    """The file that declares it, as given (a path or ``builtin:<name>``)."""
    reversibility: str | None
    """``read_only``, ``reversible``, ``compensable``, ``irreversible``; ``None``: not declared
    (treated as irreversible, and ``amends audit`` flags it)."""
    description: str = ""
    """One line, shown by ``amends audit``."""
    describe: str | None = None
    """The step in a sentence, a ``str.format`` template over the arguments
    (``"Email '{subject}' to {to}"``), shown by the report and the web page."""
    resources: tuple[str, ...] = ()
    """Templates over ``args``; steps sharing a resource are ordered, forward and in reverse."""
    idempotent: bool = False
    """Whether the tool honours the idempotency key amends sends (rule 5)."""
    sensitive: tuple[str, ...] = ()
    """Arguments redacted everywhere amends shows or stores them (rule 11)."""
    secret_env: Mapping[str, str] = field(default_factory=dict)
    """Sensitive argument -> the environment variable an inverse reads it from at undo time."""
    resolve_secret: SecretResolver | None = None
    """Where an inverse or probe gets a sensitive argument back at undo time (rule 11), with
    this file's precedence (:mod:`.secret_env`); ``None`` when the tool has no sensitive
    argument."""
    timeout: float | None = None
    """Seconds one call may take (0 < timeout <= 600)."""
    captures: tuple[Capture, ...] = ()
    """Read-only calls made before the write (``[tool.before]`` is the one named ``before``)."""
    observes: tuple[Capture, ...] = ()
    """Read-only calls made right *after* a successful write, under ``{observed.<name>}``: the
    state the write left (an edit's new content), for the expectation. A person's change in
    the instant between the write and this read would be taken for the agent's."""
    effects: Effects = field(default_factory=Effects)
    """What a forward call records."""
    if_absent: tuple[str, Effects] | None = None
    """(capture name, effects used instead when that capture found nothing)."""
    undo_after: tuple[str, ...] = ()
    """Tool names: this step's inverse waits for the inverse of the latest earlier step of one
    of these tools (rule 3)."""
    errors: ErrorRules = field(default_factory=ErrorRules)
    """How this tool's errors read (the file's ``[errors]``, overridden per tool)."""
    compensate_follow_ups: tuple[Mapping[str, Any], ...] = ()
    """Calls this tool asks for when it runs as an inverse (``{when, tool, args}``, templates over
    ``args`` and ``result``); each spends budget (rule 7)."""
    compensate_residue: Mapping[str, Any] | None = None
    """Residue this tool leaves when it runs *as an inverse* (a refund that settles later),
    templates over ``args`` and ``result``."""
    http: Mapping[str, Any] | None = None
    """``{url, method, headers}`` of an HTTP tool, as written (checked by its transport)."""
    before: bool = False
    """Whether ``[tool.before]`` declared the capture named ``before`` (read as ``{before}``)."""

    def references(self) -> list[tuple[str, str, bool]]:
        """The tools this contract names: ``(key, tool, is_probe)``, e.g.
        ``("expect.probe", "crm.read_field", True)``; a probe must be read-only (rule 4)."""
        out: list[tuple[str, str, bool]] = []
        for c in self.captures:
            key = "before" if self.before and c.name == "before" else "capture"
            out.append((f"{key}.tool", c.tool, True))
        out += [("observe.tool", c.tool, True) for c in self.observes]
        for eff in (self.effects, self.if_absent[1] if self.if_absent else None):
            if eff is None:
                continue
            if eff.inverse is not None:
                out.append(("inverse.tool", eff.inverse["tool"], False))
            for key in ("expect", "landed"):
                table = getattr(eff, key)
                if table is not None:
                    out.append((f"{key}.probe", table["probe"], True))
        out += [("compensate_follow_up.tool", f["tool"], False) for f in self.compensate_follow_ups]
        out += [("undo_after", name, False) for name in self.undo_after]  # a typo: no order
        return out


@dataclass(frozen=True)
class ContractFile:
    """The contracts of one file."""

    source: str
    """Where the file came from, as given (a path or ``builtin:<name>``)."""
    tools: Mapping[str, ToolContract]
    """Contract name -> contract, in the file's order."""


# --- small checks -----------------------------------------------------------------------------
def _table(
    value: Any, where: str, key: str, required: set[str], optional: set[str] | frozenset[str]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' must be a table, got {value!r}")
    missing = required - set(value)
    unknown = set(value) - required - set(optional)
    if missing:
        raise ConfigError(f"{where}: '{key}' needs {', '.join(sorted(missing))}")
    if unknown:
        raise ConfigError(
            f"{where}: '{key}' has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(required | set(optional)))}"
        )
    for name in ("tool", "probe"):
        if name in value and (not isinstance(value[name], str) or not value[name]):
            raise ConfigError(
                f"{where}: {key}.{name} must be a tool name, got {value[name]!r}; e.g. "
                f'{name} = "crm.read_field"'
            )
    if "args" in value and not isinstance(value["args"], dict):
        raise ConfigError(
            f"{where}: {key}.args must be a table of argument templates, got "
            f'{value["args"]!r}; e.g. args = {{ record_id = "{{args.record_id}}" }}'
        )
    return value


def _regex(value: Any, where: str) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a regular expression string, got {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ConfigError(f"{where}: {value!r} is not a valid regular expression: {exc}") from exc


def parse_errors(data: Any, where: str, base: ErrorRules | None = None) -> ErrorRules:
    """An ``[errors]`` table (``refused``, ``transient``, ``drift``, ``refused_answer``
    patterns) over ``base``.

    Raises:
        ConfigError: Not a table, an unknown key, or a pattern that is not a regular expression.
    """
    base = base or ErrorRules()
    if data is None:
        return base
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: 'errors' must be a table, got {data!r}")
    unknown = set(data) - {"refused", "transient", "drift", "refused_answer"}
    if unknown:
        raise ConfigError(
            f"{where}: 'errors' has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: drift, refused, refused_answer, transient"
        )
    got = {k: _regex(v, f"{where} errors.{k}") for k, v in data.items()}
    return ErrorRules(
        refused=got.get("refused", base.refused),
        transient=got.get("transient", base.transient),
        drift=got.get("drift", base.drift),
        refused_answer=got.get("refused_answer", base.refused_answer),
    )


def _timeout(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{where}: timeout must be a number of seconds, got {value!r}; e.g. timeout = 10"
        )
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT:
        raise ConfigError(
            f"{where}: timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds, "
            f"got {value!r}; e.g. timeout = 10"
        )
    return float(value)


def _path(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # may be a template, filled when the step runs
        return (value,)
    if isinstance(value, list) and all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        return tuple(str(v) for v in value)
    raise ConfigError(f"{where}: path must be a key or a list of keys, got {value!r}")


def _strings(value: Any, where: str, key: str, example: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of {example}, got {value!r}")
    return tuple(value)


def _reason(value: Any, where: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(
            f"{where}: no_drift_check must say why no expectation is needed, e.g. no_drift_check "
            f'= "a draft only this saga can see"; got {value!r}'
        )
    return value


_TEXT = "a sentence"
_TEXTS = "a list of names"
_NUMBER = "a number of days"
_WHOLE = "a whole number of days"
_DEADLINE = "an ISO-8601 time with an offset or seconds since the epoch"
_DATE = "a date as text"
_WHO = "who can act, as text"
_KINDS: dict[str, dict[str, str]] = {
    "inverse": {"deadline": _DEADLINE},
    "residue": {
        "what": _TEXT,
        "parties": _TEXTS,
        "settles_in_days": _NUMBER,
        "settles_in_business_days": _WHOLE,
        "settles_at": _DATE,
    },
    "acknowledge": {"who": _WHO, "parties": _TEXTS, "draft": _TEXT, "what": _TEXT},
}
_KINDS["compensate_residue"] = _KINDS["residue"]
_EXAMPLES = {
    _TEXT: '"Refund of {args.cents|money} to {args.customer}"',
    _TEXTS: '["{args.customer}"]',
    _NUMBER: "3",
    _WHOLE: "3",
    _DEADLINE: '"{result.refundable_until}" or "2030-01-01T12:00:00+00:00"',
    _DATE: '"2030-01-05"',
    _WHO: '"the sender"',
}


def _fits(value: Any, kind: str) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind in (_TEXT, _WHO):
        return isinstance(value, str) and bool(value.strip())
    if kind == _DATE:
        return isinstance(value, str)
    if kind == _TEXTS:
        return isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
    if kind == _NUMBER:
        return number and math.isfinite(value) and value >= 0
    if kind == _WHOLE:
        return number and value == int(value) and value >= 0
    try:  # a deadline: what the engine will accept when the step runs (rule 10)
        deadline_iso(value, "")
    except ContractError:
        return False
    return True


def _check_kinds(table: Mapping[str, Any], key: str, where: str) -> None:
    """The literal values of an effect table have the type the engine records: a file whose
    ``settles_in_days = "three"`` would have every step's contract refused *after* its effect
    (the step irreversible), so it is refused when it is loaded. A string holding a field is
    filled when the step runs, and checked then."""
    for name, kind in _KINDS[key].items():
        value = table.get(name)
        if value is None or (isinstance(value, str) and templates.has_fields(value)):
            continue
        if not _fits(value, kind):
            raise ConfigError(
                f"{where}: {key}.{name} must be {kind}, got {value!r}; e.g. {name} = "
                f"{_EXAMPLES[kind]}"
            )
    _check_json(table, where, key)


def _check_json(value: Any, where: str, key: str) -> None:
    """No TOML date or time inside a template table: arguments and values are JSON data, which
    has none (write the time as a string)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not (key == "inverse" and k == "deadline"):
                _check_json(v, where, f"{key}.{k}")
    elif isinstance(value, list):
        for v in value:
            _check_json(v, where, key)
    elif isinstance(value, datetime | date | time):
        raise ConfigError(
            f"{where}: {key} is the TOML date/time {value!r}, which is not JSON data; write it "
            f'as a string, e.g. "{value.isoformat()}"'
        )


# --- the parts of a tool ----------------------------------------------------------------------
def _effects(entry: Mapping[str, Any], where: str, roots: set[str]) -> Effects:
    """The effect tables of a tool (or of its ``if_absent``), their templates checked."""
    inverse = expect = residue = ack = landed = None
    if "inverse" in entry:
        inverse = _table(entry["inverse"], where, "inverse", {"tool"}, {"args", "deadline"})
        templates.check(inverse, roots, f"{where} inverse")
        _check_kinds(inverse, "inverse", where)
    if "expect" in entry:
        expect = _observation(entry["expect"], where, "expect", roots)
    if "landed" in entry:
        landed = _observation(entry["landed"], where, "landed", roots)
    if "residue" in entry:
        residue = _table(entry["residue"], where, "residue", {"what"}, _RESIDUE_KEYS)
        templates.check(residue, roots, f"{where} residue")
        _check_kinds(residue, "residue", where)
    if "acknowledge" in entry:
        ack = _table(
            entry["acknowledge"], where, "acknowledge", {"who"}, {"parties", "draft", "what"}
        )
        templates.check(ack, roots, f"{where} acknowledge")
        _check_kinds(ack, "acknowledge", where)
    reason = _reason(entry.get("no_drift_check"), where)
    if expect is not None and reason is not None:
        raise ConfigError(
            f"{where}: has both [tool.expect] and no_drift_check; keep the expectation (rule 4: "
            f"drift is checked) or say why none is needed, not both"
        )
    return Effects(inverse, expect, residue, ack, reason, landed)


def _observation(raw: Any, where: str, key: str, roots: set[str]) -> dict[str, Any]:
    """An ``expect`` or ``landed`` table: a probe, its arguments, a path and a value."""
    table = _table(raw, where, key, {"probe", "equals"}, {"args", "path"})
    templates.check(table, roots, f"{where} {key}")
    _path(table.get("path"), f"{where} {key}")
    _check_json(table, where, key)
    return table


def _captures(raw: Any, where: str, key: str, roots: set[str]) -> tuple[Capture, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: '{key}' must be an array of tables ([[tool.{key}]])")
    out: list[Capture] = []
    for c in raw:
        c = _table(c, where, key, {"name", "tool"}, {"args", "path", "absent_when", "match"})
        if not isinstance(c["name"], str) or not c["name"].isidentifier():
            raise ConfigError(
                f"{where}: {key}.name must be a name of letters, digits and _, got "
                f'{c["name"]!r}; e.g. name = "old"'
            )
        out.append(_capture(c, c["name"], f"{where} {key} {c['name']!r}", roots))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: two [[tool.{key}]] tables have the same name; rename one")
    return tuple(out)


def _capture(c: Mapping[str, Any], name: str, where: str, roots: set[str]) -> Capture:
    templates.check(c.get("args", {}), roots, where)
    _check_json(c.get("args", {}), where, "args")
    path = _path(c.get("path"), where)
    templates.check(list(path), roots, where)
    absent = c.get("absent_when")
    match = c.get("match")
    return Capture(
        name,
        c["tool"],
        dict(c.get("args", {})),
        path,
        None if absent is None else _regex(absent, f"{where} absent_when"),
        None if match is None else _regex(match, f"{where} match"),
    )


def _reads(entry: Mapping[str, Any], where: str) -> tuple[tuple[Capture, ...], bool]:
    """``[[tool.capture]]`` plus ``[tool.before]`` (one capture named ``before``)."""
    captures = _captures(entry.get("capture", []), where, "capture", {"args"})
    if "before" not in entry:
        return captures, False
    b = _table(entry["before"], where, "before", {"tool"}, {"args", "path", "absent_when", "match"})
    if any(c.name == "before" for c in captures):
        raise ConfigError(
            f"{where}: [tool.before] and a [[tool.capture]] named 'before' both declare "
            f"{{before}}; keep one"
        )
    return (*captures, _capture(b, "before", f"{where} before", {"args"})), True


def _follow_ups(raw: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(raw, list):
        raise ConfigError(
            f"{where}: compensate_follow_up must be an array of tables, e.g. "
            f'compensate_follow_up = [{{ tool = "chat.announce", args = {{ ... }} }}]'
        )
    out = []
    for fu in raw:
        fu = _table(fu, where, "compensate_follow_up", {"tool"}, {"args", "when"})
        templates.check(fu, {"args", "result"}, f"{where} compensate_follow_up")
        _check_json(fu, where, "compensate_follow_up")
        out.append(fu)
    return tuple(out)


def _secret_env(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """``sensitive = ["api_key"]`` and ``secret_env = { api_key = "CRM_API_KEY" }``."""
    sensitive = entry.get("sensitive", [])
    if not isinstance(sensitive, list) or not all(isinstance(n, str) and n for n in sensitive):
        raise ConfigError(
            f'{where}: sensitive must be a list of argument names, e.g. sensitive = ["api_key"]; '
            f"got {sensitive!r}"
        )
    table = entry.get("secret_env", {})
    if not isinstance(table, dict) or not all(
        isinstance(v, str) and _ENV_NAME.fullmatch(v) for v in table.values()
    ):
        raise ConfigError(
            f"{where}: secret_env must map argument names to variable names, e.g. secret_env = "
            f'{{ api_key = "CRM_API_KEY" }}; got {table!r}'
        )
    unknown = sorted(set(table) - set(sensitive))
    if unknown:
        raise ConfigError(
            f"{where}: secret_env names {', '.join(unknown)}, which sensitive does not list; "
            f"add them to sensitive"
        )
    return tuple(sensitive), dict(table)


def _class(entry: Mapping[str, Any], where: str) -> str | None:
    cls = entry.get("reversibility")
    if cls is not None and cls not in CLASSES:
        raise ConfigError(
            f"{where} has reversibility {cls!r}; use one of {', '.join(CLASSES)} (omitted: "
            f"irreversible, and amends audit flags it)"
        )
    return cls


_UNDO_KEYS = ("inverse", "expect", "landed", "no_drift_check")
"""What only a reversible or compensable tool's undo uses."""
_FORWARD_KEYS = ("residue", "acknowledge", "if_absent", "undo_after")
"""What a tool with an effect records; a read_only tool has none."""


def _check_contradictions(cls: str | None, entry: Mapping[str, Any], where: str) -> None:
    """A tool whose class says undo never calls anything does not declare how undo would call
    it: such a file says two things, and amends would silently act on one of them (a
    ``read_only`` tool with an inverse is reported "nothing to take back" while its effect
    stands)."""
    if cls in ("reversible", "compensable"):
        return
    declared = [k for k in _UNDO_KEYS if k in entry]
    ia = entry.get("if_absent")
    if isinstance(ia, dict):
        declared += [f"if_absent.{k}" for k in _UNDO_KEYS if k in ia]
    if cls == "read_only":
        declared += [k for k in _FORWARD_KEYS if k in entry]
    if not declared:
        return
    shown = "not declared (treated as irreversible)" if cls is None else repr(cls)
    fix = (
        "a read_only tool changes nothing, so there is nothing to take back"
        if cls == "read_only"
        else "undo never calls anything for an irreversible tool"
    )
    raise ConfigError(
        f"{where} is {shown} but declares {', '.join(declared)}; {fix}: declare "
        f'reversibility = "reversible" or "compensable" if a call can take it back, or '
        f"remove {', '.join(declared)}"
    )


def _check_read_names(
    effects: Effects,
    if_absent: tuple[str, Effects] | None,
    reads: tuple[Capture, ...],
    n_captures: int,
    where: str,
) -> None:
    """``{capture.NAME}`` and ``{observed.NAME}`` name reads the tool declares: a typo is
    found when the file loads, not after a write whose contract then cannot be applied."""
    names = {"capture": {c.name for c in reads[:n_captures]}}
    names["observed"] = {o.name for o in reads[n_captures:]}
    for eff in (effects, if_absent[1] if if_absent else None):
        if eff is not None:
            tables = (eff.inverse, eff.expect, eff.landed, eff.residue, eff.acknowledge)
            templates.check_names([t for t in tables if t is not None], names, where)


def _check_claim(cls: str | None, effects: Effects, where: str) -> None:
    """A reversible or compensable tool records an inverse (rule 2) and an expectation or a
    reason for none (rule 4): a file that cannot keep its claim is refused before any call."""
    if cls not in ("reversible", "compensable"):
        return
    if effects.inverse is None:
        raise ConfigError(
            f"{where} is {cls!r} but declares no [tool.inverse]; add one or declare it "
            f"'irreversible' (rule 2: an inverse is recorded when the step runs)"
        )
    if effects.expect is None and effects.no_drift_check is None:
        raise ConfigError(
            f"{where} is {cls!r} but declares neither [tool.expect] nor no_drift_check; "
            f"undo never overwrites blindly (rule 4): say what undo must still find"
        )


def _scalars(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    for key in ("description", "describe"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            example = (
                "describe = \"Email '{subject}' to {to}\""
                if key == "describe"
                else 'description = "Set one field of a CRM record"'
            )
            raise ConfigError(
                f"{where}: {key} must be a sentence, e.g. {example}; got {entry[key]!r}"
            )
    idempotent = entry.get("idempotent", False)
    if not isinstance(idempotent, bool):
        raise ConfigError(
            f"{where}: idempotent must be true or false (does the tool honour the idempotency "
            f"key amends sends?), got {idempotent!r}"
        )
    return {
        "description": entry.get("description", ""),
        "describe": entry.get("describe"),
        "idempotent": idempotent,
        "timeout": _timeout(entry.get("timeout"), where),
        "resources": _strings(entry.get("resources"), where, "resources", "template strings"),
        "undo_after": _strings(entry.get("undo_after"), where, "undo_after", "tool names"),
    }


def _tool(entry: Any, i: int, src: str, errors: ErrorRules, transport: Transport) -> ToolContract:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ConfigError(f'{src}: tool #{i} needs a name, e.g. name = "crm.update_field"')
    name = entry["name"]
    where = f"{src}: tool {name!r}"
    unknown = set(entry) - TOOL_KEYS
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(TOOL_KEYS))}"
        )
    cls = _class(entry, where)
    http = _transport_table(entry, where, transport)
    scalars = _scalars(entry, where)
    templates.check(list(scalars["resources"]), {"args"}, f"{where} resources")
    captures, before = _reads(entry, where)
    observes = _captures(entry.get("observe", []), where, "observe", {"args", "result"})
    roots = {"args", "result"} | ({"capture"} if captures else set())
    roots |= ({"observed"} if observes else set()) | ({"before"} if before else set())
    effects = _effects(entry, where, roots)
    if_absent = None
    if "if_absent" in entry:
        ia = _table(entry["if_absent"], where, "if_absent", {"capture"}, EFFECT_KEYS)
        if ia["capture"] not in {c.name for c in captures}:
            raise ConfigError(
                f"{where} if_absent: capture {ia['capture']!r} is not declared; declare it in "
                f"[[tool.capture]] with absent_when"
            )
        if_absent = (ia["capture"], _effects(ia, f"{where} if_absent", roots))
    _check_read_names(effects, if_absent, captures + observes, len(captures), where)
    _check_contradictions(cls, entry, where)
    _check_claim(cls, effects, where)
    comp_residue = None
    if "compensate_residue" in entry:
        comp_residue = _table(
            entry["compensate_residue"], where, "compensate_residue", {"what"}, _RESIDUE_KEYS
        )
        templates.check(comp_residue, {"args", "result"}, f"{where} compensate_residue")
        _check_kinds(comp_residue, "compensate_residue", where)
    sensitive, secret_env = _secret_env(entry, where)
    return ToolContract(
        name=name,
        source=src,
        reversibility=cls,
        sensitive=sensitive,
        secret_env=secret_env,
        captures=captures,
        observes=observes,
        effects=effects,
        if_absent=if_absent,
        errors=parse_errors(entry.get("errors"), where, errors),
        compensate_residue=comp_residue,
        compensate_follow_ups=_follow_ups(entry.get("compensate_follow_up", []), where),
        http=http,
        before=before,
        **scalars,
    )


def _transport_table(
    entry: Mapping[str, Any], where: str, transport: Transport
) -> Mapping[str, Any] | None:
    if transport == "mcp":
        if "http" in entry:
            raise ConfigError(
                f"{where}: 'http' says how to reach an HTTP tool; this file is an MCP gateway's "
                f"contract file, whose tools are served by their upstream: remove it"
            )
        return None
    if "http" not in entry:
        raise ConfigError(f'{where}: tool {entry["name"]!r} needs http = {{ url = "..." }}')
    return _table(entry["http"], where, "http", {"url"}, {"method", "headers"})


def _load_text(path: Path, kind: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{kind} file {str(path)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{kind} file {str(path)!r} cannot be read: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{kind} file {str(path)!r} is not valid TOML: {exc}; fix the syntax at that line"
        ) from exc


def read_file(
    path: Path, *, transport: Transport, source: str | None = None, kind: str = "contract"
) -> ContractFile:
    """Read and validate a contract file.

    Args:
        path: The TOML file.
        transport: ``"http"`` (every tool has an ``http`` table) or ``"mcp"`` (none has).
        source: What to record as the file's source (default: the path).
        kind: How messages name the file (``"catalog"`` for ``load_toml_catalog``).

    Raises:
        ConfigError: The file is missing, not TOML, a draft not yet reviewed, or an entry is
            malformed (the message names the file, the tool, the key and the fix).
    """
    data = _load_text(path, kind)
    where = f"{kind} file {str(path)!r}"
    reviewed = data.get("reviewed", True)
    if reviewed is False:
        raise ConfigError(
            f"{where} is a draft written by `amends audit --suggest` and is not used until "
            f"reviewed: check every entry, then delete the line 'reviewed = false'"
        )
    if reviewed is not True:
        raise ConfigError(f"{where}: reviewed must be true or false, got {reviewed!r}")
    unknown = set(data) - {"tool", "errors", "reviewed"}
    if unknown:
        raise ConfigError(
            f"{where} has unknown top-level key(s) {', '.join(sorted(unknown))}; only [errors], "
            f"[[tool]] tables and reviewed are read"
        )
    errors = parse_errors(data.get("errors"), str(path))
    raw = data.get("tool")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            f"{where} declares no tools; add [[tool]] tables with a name and a reversibility"
        )
    tools: dict[str, ToolContract] = {}
    for i, entry in enumerate(raw, 1):
        contract = _tool(entry, i, str(path), errors, transport)
        if contract.name in tools:
            raise ConfigError(f"{where} declares tool {contract.name!r} twice; keep one")
        tools[contract.name] = contract
    _check_probes(tools, str(path))
    from .secret_env import with_resolvers

    return ContractFile(source if source is not None else str(path), with_resolvers(tools))


def probe_problems(tools: Mapping[str, ToolContract]) -> list[str]:
    """Each probe among ``tools`` (every contract one MCP upstream has, whatever its file) that
    names a tool without a ``read_only`` contract among them: a tool with no contract is
    irreversible, and a probe never changes the world (rule 4)."""
    out: list[str] = []
    for c in tools.values():
        for key, name, probe in c.references():
            other = tools.get(name)
            if probe and (other is None or other.reversibility != "read_only"):
                shown = "has no contract" if other is None else f"is {other.reversibility!r}"
                out.append(
                    f"the contract of {c.name!r}: {key} {name!r} must be a read_only tool (a "
                    f"probe never changes the world), and {name!r} {shown}; give it a contract "
                    f'with reversibility = "read_only"'
                )
    return out


def _check_probes(tools: Mapping[str, ToolContract], src: str) -> None:
    """A probe this file declares is read-only: checking the world never changes it (rule 4)."""
    for c in tools.values():
        for key, name, probe in c.references():
            other = tools.get(name)
            if probe and other is not None and other.reversibility != "read_only":
                raise ConfigError(
                    f"{src}: tool {c.name!r}: {key} {name!r} must be a read_only tool (a probe "
                    f'never changes the world); declare it with reversibility = "read_only"'
                )
