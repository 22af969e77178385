"""The one template engine of the contract language: fills, encodes and redacts.

Every ``{args.x}``-style template of a contract file -- an inverse's arguments, an expectation,
a residue, a resource, an HTTP URL -- is filled here and nowhere else (a test in
``tests/architecture`` fails when a second module formats such templates), so a fix to filling,
path encoding or redaction is made once for every transport.

A field is ``{root.path}`` with optional filters, ``{root.path|filter|filter:argument}``:

- a string that is exactly one field keeps the value's type (a number stays a number); other
  strings are formatted as text;
- paths are dotted; a digit indexes a list (``{result.items.0}``);
- a table of exactly the keys ``each`` and ``as`` maps a list to a list:
  ``{ each = "{result.entities}", as = "{item.name}" }`` fills ``as`` (a string, list or table)
  once per element of ``each``, the element under ``{item...}`` (issue 24 item 8);
- filters: ``join`` (a list as ``a, b``), ``money`` (cents as ``12,000.00 USD``; ``money:JPY``:
  minor units of that currency, its own decimals), ``json``, and
  ``default:TEXT`` -- the value when the path is missing or null (``{args.folder|default:inbox}``),
  so a template over an optional argument does not refuse the calls that omit it (issue 24).

In a URL (:class:`UrlTemplate`) each field fills **exactly one path segment** (or one query
value): it is percent-encoded, separators included, and a segment that would be empty, ``.`` or
``..`` is refused before anything is sent, so an argument can never change the path's shape
(issue 21 item 10). ``${env:NAME}`` (read from the environment when the file is loaded) is
allowed only in a URL or a header, never in an argument template, which is logged; every value
substituted from the environment, and every value of a sensitive argument, is redacted from what
a transport says back (:class:`Redactor`, issue 21 item 9).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from .._errors import ConfigError, ContractError
from .._money import CURRENCY, money

__all__ = [
    "FILTERS",
    "Redactor",
    "SegmentError",
    "UrlTemplate",
    "check",
    "check_names",
    "dig",
    "env_names",
    "expand_env",
    "fill",
    "has_fields",
    "quoted",
]

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)((?:\|[a-z_]+(?::[^|{}]*)?)*)\}")
_FILTER = re.compile(r"\|([a-z_]+)(?::([^|{}]*))?")
_ENV = re.compile(r"\$\{env:([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(f"{_ENV.pattern}|{_FIELD.pattern}")
_MISSING = object()
_INDEX = re.compile(r"[0-9]{1,18}")
"""A list index in a path: a few ASCII digits (``"²".isdigit()`` is true and ``int`` refuses it;
``int`` refuses 5,000 digits too): anything else is a key, missing from a list."""


def _money(value: Any, currency: str | None = None) -> str:
    """``|money`` (cents as USD) or ``|money:JPY``: minor units of that ISO 4217 currency,
    with its own decimals (JPY 0, KWD 3), never an assumed two."""
    return money(int(value), currency or "USD")


def _join(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


FILTERS: dict[str, Callable[..., str]] = {"join": _join, "money": _money, "json": _json}
"""Text filters, by name; ``default:TEXT`` is handled by the lookup itself."""
_ALL_FILTERS = sorted([*FILTERS, "default"])


class _Missing(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _filters(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in _FILTER.finditer(text)]


def quoted(value: Any, limit: int = 200) -> str:
    """``value`` as a message quotes it: whole, or -- when longer than ``limit`` -- by its shape
    only, never cut. A value cut in the middle of a secret it holds (an API key a vendor echoed)
    would leave the secret's first characters where no redaction recognises them (rule 11)."""
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    if isinstance(value, Mapping):
        keys = [repr(k) for k in value if isinstance(k, str) and len(k) <= 40][:10]
        more = ", ..." if len(keys) < len(value) else ""
        return f"a table of {len(value)} keys ({', '.join(keys)}{more})"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"a number of {len(text):,} digits"
    return f"a text of {len(text):,} characters"


def _key(key: str) -> str:
    return repr(key) if len(key) <= 80 else f"key of {len(key):,} characters"


def has_fields(text: str) -> bool:
    """Whether ``text`` holds at least one template field."""
    return _FIELD.search(text) is not None


def _walk(value: Any, path: tuple[str, ...], shown: str) -> Any:
    for key in path:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list | tuple) and _INDEX.fullmatch(key) and int(key) < len(value):
            value = value[int(key)]
        else:
            raise _Missing(f"template '{shown}' found no {_key(key)} in {quoted(value)}")
    return value


@dataclass(frozen=True)
class _Field:
    """One parsed field: ``{root.key.key|filter|default:x}``."""

    shown: str
    root: str
    keys: tuple[str, ...]
    filters: tuple[tuple[str, str | None], ...]
    default: Any  # _MISSING, or the default's text


def _field(m: re.Match[str]) -> _Field:
    root, *keys = m.group(1).split(".")
    filters = tuple(_filters(m.group(2) or ""))
    default = next((arg for name, arg in filters if name == "default"), _MISSING)
    return _Field(m.group(0), root, tuple(keys), filters, default)


@lru_cache(maxsize=4096)
def _parse(text: str) -> _Field | tuple[str | _Field, ...] | None:
    """``text`` parsed once (issue 12: templates are filled on every step): one field that is
    the whole string, the literal and field parts of a string, or ``None`` without fields."""
    whole = _FIELD.fullmatch(text)
    if whole:
        return _field(whole)
    parts: list[str | _Field] = []
    at = 0
    for m in _FIELD.finditer(text):
        parts += [text[at : m.start()], _field(m)]
        at = m.end()
    return (*parts, text[at:]) if parts else None


def _lookup(f: _Field, scope: Mapping[str, Any]) -> Any:
    if f.root not in scope:
        raise _Missing(
            f"template '{f.shown}' uses {f.root!r}, which is not available here (available: "
            f"{', '.join(sorted(scope))})"
        )
    if f.root == "args" and f.keys and f.keys[0] not in scope["args"]:
        name = f.keys[0]
        raise _Missing(
            f"template '{f.shown}' needs the argument {name!r}, which this call did not pass; "
            f"pass it, or give the template a default, e.g. '{{args.{name}|default:...}}'"
        )
    return _walk(scope[f.root], f.keys, f.shown)


def _value(f: _Field, scope: Mapping[str, Any], where: str) -> Any:
    """The value of one field, its filters applied (text once a text filter ran)."""
    try:
        value = _lookup(f, scope)
    except _Missing as miss:
        if f.default is _MISSING:
            raise ConfigError(f"{where}: {miss.message}") from None
        value = f.default
    if value is None and f.default is not _MISSING:
        value = f.default
    for name, arg in f.filters:
        if name == "default":
            continue
        try:
            value = FILTERS[name](value) if arg is None else FILTERS[name](value, arg)
        except KeyError:
            raise ConfigError(
                f"{where}: unknown filter {name!r} in '{f.shown}'; use one of "
                f"{', '.join(_ALL_FILTERS)}"
            ) from None
        except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            # a value too large for money (10**400 cents) or nested too deep for json: said in
            # the contract's words, never an exception that leaves a done call in doubt
            shown = quoted(value, 80)  # the error's own text may quote a cut of a long value
            why = str(exc) if shown.startswith(("'", '"')) else type(exc).__name__
            raise ConfigError(
                f"{where}: filter {name!r} in '{f.shown}' cannot format {shown}: {why}"
            ) from None
    return value


def fill(template: Any, scope: Mapping[str, Any], where: str, *, call: bool = False) -> Any:
    """Fill ``template`` (a string, list or table of them) from ``scope``.

    Args:
        template: The template; anything that is not a string, list or table is returned as is.
        scope: The roots and their values (``{"args": {...}, "result": ...}``).
        where: Names the file, tool and key in error messages.
        call: The template is a call's arguments (an inverse, a probe, a capture, a follow-up):
            a null written into text is refused, as a missing value is -- ``"notes/{result.id}"``
            would address ``notes/None``, another thing than the step touched.

    Raises:
        ConfigError: A field's value is missing and has no ``default``, or a filter cannot
            format its value, or (``call``) a field inside text is null (the message names the
            template and the fix).
    """
    if isinstance(template, str):
        parsed = _parse(template)
        if parsed is None:
            return template
        if isinstance(parsed, _Field):
            return _value(parsed, scope, where)  # keeps the value's type
        return "".join(
            p if isinstance(p, str) else _text(p, scope, where, template, call) for p in parsed
        )
    if isinstance(template, list):
        return [fill(t, scope, where, call=call) for t in template]
    if isinstance(template, dict):
        if _is_each(template):
            return _each(template, scope, where, call)
        return {k: fill(v, scope, where, call=call) for k, v in template.items()}
    return template


def _text(f: _Field, scope: Mapping[str, Any], where: str, template: str, call: bool) -> str:
    value = _value(f, scope, where)
    if value is None:
        if call:
            raise ConfigError(
                f"{where}: template {template!r} found null at '{f.shown}', which would be "
                f"written as 'None'; give the field a default if one is right, e.g. "
                f"'{f.shown[:-1]}|default:...}}'"
            )
        return EMPTY  # words for people (residue, acknowledgement): never Python's "None"
    return str(value)


EMPTY = "(empty)"
"""How a null reads inside the text of residue or an acknowledgement, as a step's sentence
writes an argument without a value (``key=(empty)``)."""


EACH_KEYS = frozenset({"each", "as"})
"""A table of exactly these keys maps a list: ``{ each = "{result.entities}", as = "{item.name}" }``
fills ``as`` once per element of ``each``, with the element as ``{item...}`` (issue 24 item 8:
an inverse that takes back a list of things names each of them)."""


def _is_each(template: Mapping[str, Any]) -> bool:
    return template.keys() == EACH_KEYS


def _each(
    template: Mapping[str, Any], scope: Mapping[str, Any], where: str, call: bool = False
) -> list[Any]:
    items = fill(template["each"], scope, where, call=call)
    if items is None:
        items = []
    if not isinstance(items, list | tuple):
        raise ConfigError(
            f"{where}: each = {template['each']!r} must give a list to map, but gave "
            f"{quoted(items)}; point it at a list, e.g. each = '{{result.entities}}'"
        )
    return [fill(template["as"], {**scope, "item": item}, where, call=call) for item in items]


def _strings(template: Any, roots: frozenset[str]) -> Iterator[tuple[str, frozenset[str]]]:
    """Each string of ``template``, with the roots available to it (``item`` inside ``as``)."""
    if isinstance(template, str):
        yield template, roots
    elif isinstance(template, list):
        for t in template:
            yield from _strings(t, roots)
    elif isinstance(template, dict) and _is_each(template):
        yield from _strings(template["each"], roots)
        yield from _strings(template["as"], roots | {"item"})
    elif isinstance(template, dict):
        for t in template.values():
            yield from _strings(t, roots)


def check(template: Any, roots: set[str] | frozenset[str], where: str) -> None:
    """Validate a template when its file is loaded: known roots and filters, no environment.

    Raises:
        ConfigError: A field uses a root not available here, an unknown filter, a filter
            argument where none is taken, or the template reads ``${env:...}`` (arguments are
            logged; credentials must not be).
    """
    for text, available in _strings(template, frozenset(roots)):
        if _ENV.search(text):
            raise ConfigError(
                f"{where}: {text!r} reads the environment; ${{env:...}} is allowed only in "
                f"http.url and http.headers (arguments are logged, credentials must not be)"
            )
        _check_openings(text, where)
        for m in _FIELD.finditer(text):
            root = m.group(1).split(".")[0]
            if root not in available:
                raise ConfigError(
                    f"{where}: template '{m.group(0)}' uses {root!r}; use one of "
                    f"{', '.join(sorted(available))}"
                    + ("" if root != "item" else " ('item' is the element inside an 'as')")
                )
            for name, arg in _filters(m.group(2) or ""):
                if name != "default" and name not in FILTERS:
                    raise ConfigError(
                        f"{where}: unknown filter {name!r} in '{m.group(0)}'; use one of "
                        f"{', '.join(_ALL_FILTERS)}"
                    )
                if name == "money" and arg is not None and not CURRENCY.fullmatch(arg):
                    raise ConfigError(
                        f"{where}: in '{m.group(0)}', money takes an ISO 4217 currency code "
                        f"after its colon (minor units with that currency's decimals), e.g. "
                        f"'|money:JPY', not {arg!r}"
                    )
                if (name == "default") != (arg is not None) and name != "money":
                    raise ConfigError(
                        f"{where}: in '{m.group(0)}', "
                        + (
                            "default needs its value after a colon, e.g. '|default:inbox'"
                            if name == "default"
                            else f"filter {name!r} takes no ':' argument"
                        )
                    )


def check_names(template: Any, names: Mapping[str, Collection[str]], where: str) -> None:
    """Every ``{capture.NAME}`` / ``{observed.NAME}`` of ``template`` names a read the tool
    declares (``names``: root -> declared names): a typo would be found only after the write,
    when the contract can no longer be applied.

    Raises:
        ConfigError: A field names a capture or observation the tool does not declare.
    """
    for text, _available in _strings(template, frozenset()):
        for m in _FIELD.finditer(text):
            root, *keys = m.group(1).split(".")
            if root in names and keys and keys[0] not in names[root]:
                declared = ", ".join(sorted(names[root])) or "none"
                raise ConfigError(
                    f"{where}: template '{m.group(0)}' reads {root} {keys[0]!r}, which this tool "
                    f"does not declare (declared: {declared}); fix the name or declare it in "
                    f"[[tool.{'capture' if root == 'capture' else 'observe'}]]"
                )


_OPENING = re.compile(r"(?<!\$)\{(?=\s*[A-Za-z_])")
"""Where a field seems to start: ``{`` then a name (``${env:...}`` is the environment's)."""


def _check_openings(text: str, where: str) -> None:
    """Every ``{name`` of ``text`` starts a well-formed field: a field with a typo
    (``{args.record-id}``, ``{args.to|Join}``, ``{result.id``) is not filled but sent as it is
    written, so it is refused when the file is loaded, like an unknown root or filter."""
    for m in _OPENING.finditer(text):
        if _FIELD.match(text, m.start()):
            continue
        end = text.find("}", m.start())
        shown = text[m.start() : end + 1] if end >= 0 else text[m.start() :]
        raise ConfigError(
            f"{where}: {shown[:80]!r} in {text[:200]!r} is not a template field, so it would be "
            f"sent as written; a field is {{root.path}} with optional filters "
            f"({', '.join(_ALL_FILTERS)}), e.g. '{{args.record_id}}' or '{{args.to|join}}'"
            + ("" if end >= 0 else "; it has no closing '}'")
        )


def dig(value: Any, path: tuple[str, ...], where: str) -> Any:
    """Follow ``path`` (keys; digits index lists) into ``value``.

    Raises:
        ConfigError: A key is missing (the message shows what was there).
    """
    for key in path:
        try:
            value = _walk(value, (key,), key)
        except _Missing:
            raise ConfigError(f"{where}: no {_key(key)} in {quoted(value)}") from None
    return value


# --- the environment (credentials) -------------------------------------------------------------
def env_names(text: str) -> list[str]:
    """The ``${env:NAME}`` names in ``text``, in order."""
    return _ENV.findall(text)


def expand_env(text: str, where: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The values of the ``${env:NAME}`` variables ``text`` names, read when a file is loaded.

    Raises:
        ConfigError: A name is not a valid variable name, or the variable is not set.
    """
    values: dict[str, str] = {}
    for name in env_names(text):
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: ${{env:{name}}} is not a valid variable name; use letters, digits "
                f"and _ (e.g. ${{env:CRM_TOKEN}})"
            )
        if name not in environ:
            raise ConfigError(
                f"{where}: environment variable {name!r} is not set; export {name}=... before "
                f"loading the catalog (credentials are read from the environment, never "
                f"written in the file)"
            )
        values[name] = environ[name]
    return values


def substitute_env(text: str, env: Mapping[str, str]) -> str:
    """``text`` with each ``${env:NAME}`` replaced by its value (read at load)."""
    return _ENV.sub(lambda m: env[m.group(1)], text)


def _url_text(value: Any, m: re.Match[str], where: str) -> str:
    """What one field puts in a URL: text or a number, as JSON writes it. A null, a list or a
    table has no one spelling in a URL ("None", "['a', 'b']" would address another record), so
    the call is refused before anything is sent."""
    if isinstance(value, str) and _encodable(value):
        return value
    if isinstance(value, str):
        raise ValueFieldError(
            f"{where}: http.url field '{m.group(0)}' is text that is not valid Unicode (a lone "
            f"surrogate such as '\\ud800'), which no URL can carry; pass valid text"
        )
    if isinstance(value, bool) or (isinstance(value, int | float) and value == value):
        return json.dumps(value)
    kind = "null" if value is None else f"a {type(value).__name__} ({quoted(value, 80)})"
    raise ValueFieldError(
        f"{where}: http.url field '{m.group(0)}' is {kind}; a URL takes text or a number: pass "
        + (
            f"one, or give the field a default, e.g. '{m.group(0)[:-1]}|default:...}}'"
            if value is None
            else "one (a list can be joined into text with '|join')"
        )
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ValueFieldError(ContractError):
    """An argument cannot be written into a URL (a null, a list or a table)."""


class SegmentError(ContractError):
    """An argument would change a URL's shape (an empty, ``.`` or ``..`` path segment)."""


@dataclass(frozen=True)
class UrlTemplate:
    """An HTTP tool's URL: fixed scheme and host, then path segments and a query whose fields
    are filled from the call's arguments, each into exactly one segment or query value."""

    origin: str
    """``scheme://host[:port]`` as written (it may read the environment, never an argument)."""
    segments: tuple[str, ...]
    """The path's segments after the first ``/``, as templates."""
    query: str | None
    """The query after ``?``, as a template (``None``: no ``?``)."""
    fragment: str | None
    env: Mapping[str, str] = field(default_factory=dict)
    """Values of the ``${env:NAME}`` variables the URL names, read at load."""

    @classmethod
    def parse(cls, text: str, env: Mapping[str, str], where: str) -> UrlTemplate:
        """Split a validated URL template (:func:`amends._toml_catalog` checks it first).

        Raises:
            ConfigError: A field outside the path and query, or one not over ``args``.
        """
        parts = urlsplit(text)
        origin = f"{parts.scheme}://{parts.netloc}"
        for piece, name in ((origin, "host"), (parts.fragment, "fragment")):
            if _FIELD.search(piece):
                raise ConfigError(
                    f"{where}: http.url {text!r} has a template in its {name}; templates may "
                    f"fill the path and query only, so a tool's arguments can never choose the "
                    f"server"
                )
        fields = _ENV.sub("", parts.path + "?" + parts.query)
        for m in _FIELD.finditer(fields):
            if m.group(1).split(".")[0] != "args":
                raise ConfigError(f"{where}: http.url template '{m.group(0)}' must start with args")
        check(fields, {"args"}, f"{where}: http.url")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            origin,
            tuple(path.split("/")) if parts.path else (),
            parts.query if "?" in text else None,
            parts.fragment or None,
            dict(env),
        )

    def fill(self, args: Mapping[str, Any], where: str) -> str:
        """The URL for one call.

        Raises:
            SegmentError: An argument would make a path segment empty, ``.`` or ``..``.
            ConfigError: A field's argument is missing and has no ``default``.
        """
        scope = {"args": args}
        segments = [self._segment(s, scope, where) for s in self.segments]
        url = substitute_env(self.origin, self.env)
        if self.segments:
            url += "/" + "/".join(segments)
        if self.query is not None:
            url += "?" + self._piece(self.query, scope, where)
        if self.fragment is not None:
            url += "#" + self.fragment
        return url

    def null_field(self, arg: str) -> str | None:
        """The field (as written) that would write argument ``arg`` into this URL when it is
        null, which is refused before anything is sent (``None``: no such field, or it has a
        default)."""
        for text in (*self.segments, self.query or ""):
            for m in _FIELD.finditer(text):
                f = _field(m)
                if f.root == "args" and f.keys == (arg,) and f.default is _MISSING:
                    return f.shown
        return None

    def _piece(self, text: str, scope: Mapping[str, Any], where: str) -> str:
        def one(m: re.Match[str]) -> str:
            if m.group(1) is not None:  # ${env:NAME}: the operator's own value, as written
                return self.env[m.group(1)]
            field_match = _FIELD.fullmatch(m.group(0))
            assert field_match is not None
            return quote(_url_text(_value(_field(field_match), scope, where), m, where), safe="")

        return _TOKEN.sub(one, text)

    def _segment(self, text: str, scope: Mapping[str, Any], where: str) -> str:
        filled = self._piece(text, scope, where)
        if _FIELD.search(text) and unquote(filled) in ("", ".", ".."):
            # issue 21 item 10: '..' would let an argument climb out of its place in the path
            # (clients and servers normalise dot segments, even percent-encoded ones).
            raise SegmentError(
                f"{where}: the argument(s) of path segment {text!r} make it "
                f"{unquote(filled)!r}, which would change the URL's path; an argument fills "
                f"exactly one path segment, so '', '.' and '..' are refused (nothing was sent)"
            )
        return filled


# --- redaction of what a transport says back ------------------------------------------------
_MIN_SUBSTRING = 4
"""Shorter secrets are replaced only where they are a whole value."""


def _forms(value: str) -> set[str]:
    """The ways a value may be echoed back: as is, percent-encoded, form-encoded, JSON-escaped."""
    sp = "surrogatepass"  # a lone surrogate ("\ud800") has no UTF-8: never raise here
    return {
        value,
        quote(value, safe="", errors=sp),
        quote(value, errors=sp),
        quote_plus(value, errors=sp),
        json.dumps(value)[1:-1],
    }


@dataclass(frozen=True)
class Redactor:
    """Replaces secret values (and their encoded forms) by a label in text and data.

    Labels say where the value came from, never what it is: ``${env:VENDOR_KEY}`` for a value
    read from the environment, ``[redacted:api_key]`` for a sensitive argument.
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    """Secret text -> the label shown instead."""

    @classmethod
    def of_env(cls, env: Mapping[str, str]) -> Redactor:
        """Redacts each environment value by its ``${env:NAME}``."""
        return cls({}).adding({v: f"${{env:{k}}}" for k, v in env.items()})

    def adding(self, labels: Mapping[Any, str]) -> Redactor:
        """A redactor that also replaces ``labels`` (value -> label; non-text values as text)."""
        out = dict(self.labels)
        for value, label in labels.items():
            if value is None or isinstance(value, bool) or value == "":
                continue
            for form in _forms(value if isinstance(value, str) else str(value)):
                out.setdefault(form, label)
        return Redactor(out)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its label."""
        if not self.labels or not text:
            return text
        whole = self.labels.get(text)
        if whole is not None:
            return whole
        for secret in sorted(self.labels, key=len, reverse=True):  # longest first
            if len(secret) >= _MIN_SUBSTRING and secret in text:
                text = text.replace(secret, self.labels[secret])
        return text

    def data(self, value: Any) -> Any:
        """``value`` (JSON data) with every secret replaced by its label."""
        if not self.labels:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return self.labels.get(str(value), value)
        if isinstance(value, Mapping):  # a vendor may echo a secret as a key, too
            return {
                (self.text(k) if isinstance(k, str) else k): self.data(v) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value
