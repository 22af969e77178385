"""Plain-language steps (issue 17): a tool's ``describe=`` template, filled from a call's arguments.

``@catalog.tool("mail.send", describe="Email '{subject}' to {to}")`` makes every screen say
"Email 'Won' to bob@acme.test" instead of ``mail.send``; the inverse is described by its own
tool's template ("Refund 50.00 of charge ch_1"). Without a template the default is the tool's
description (its docstring's first line) or its name, followed by the arguments.

This module only formats text. It never raises at render time: a template that does not fit the
arguments falls back to the default sentence, and sensitive arguments are always shown as their
redaction marker (rule 11), whatever the template says.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

from ._errors import ContractError
from ._money import CURRENCY, money, scaled

__all__ = ["DONE_WORDS", "check_template", "left_out", "named", "people_detail", "sentence"]

_MAX_VALUE = 60
"""Longest argument value shown in a default sentence, in characters (longer ones are cut)."""


def check_template(tool: str, template: Any) -> str | None:
    """Validate ``describe=`` of ``tool`` when it is registered.

    Raises:
        ContractError: ``template`` is not a non-empty string, or is not valid
            ``str.format`` syntax with named fields only.
    """
    if template is None:
        return None
    example = "e.g. describe=\"Email '{subject}' to {to}\""
    if not isinstance(template, str) or not template.strip():
        raise ContractError(
            f"describe= of tool {tool!r} must be a sentence with {{argument}} fields, got "
            f"{template!r}; {example}",
            tool=tool,
        )
    try:
        list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ContractError(
            f"describe= of tool {tool!r} is not a valid template ({exc}): {template!r}; "
            f"write literal braces as {{{{ and }}}}; {example}",
            tool=tool,
        ) from None
    for _, name, spec, conv in string.Formatter().parse(template):
        if name is None:
            continue
        if (spec or conv) and ((spec not in _SPECS and not CURRENCY.fullmatch(spec or "")) or conv):
            raise ContractError(
                f"describe= of tool {tool!r} has the field {{{name}{'!' + conv if conv else ''}"
                f"{':' + spec if spec else ''}}}; the formats are :cents (an amount in "
                f"cents shown as money, {{cents:cents}} -> 2,400.00) and :when (an ISO time "
                f"for people, {{start:when}} -> 10 Dec 2026 16:00 UTC); {example}",
                tool=tool,
            )
        if not name.isidentifier():
            raise ContractError(
                f"describe= of tool {tool!r} has the field {{{name}}}; fields name arguments "
                f"({{to}}, {{subject}}), without indexes or attributes; {example}",
                tool=tool,
            )
    return template.strip()


def _cents(value: Any) -> str:
    """``{cents:cents}``: an amount in cents as money, "2,400.00" (issue 26: people read money,
    not "240000 cents")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _cut(scaled(value, 2))  # exact: a float showed 10**17 + 1 cents as ...000.00
    return _show(value)


def when_words(value: Any) -> str:
    """``{start:when}``: an ISO 8601 time for people, in UTC, saying so: "10 Dec 2026 16:00
    UTC"; a date alone reads "10 Dec 2026" (issue 26: people never read raw ISO timestamps). A
    value that is neither is shown as it is."""
    text = str(value)
    try:
        if len(text) == 10:  # a calendar date ("2026-12-10"): a day, not an instant
            day = date.fromisoformat(text)
            return f"{day.day} {day:%b %Y}"
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _show(value)
    if when.tzinfo is None:  # no zone given: shown as written, without claiming one
        return f"{when.day} {when:%b %Y %H:%M}"
    when = when.astimezone(UTC)
    return f"{when.day} {when:%b %Y %H:%M} UTC"


_SPECS = {"cents": _cents, "when": when_words}


def _spec(spec: str) -> Callable[[Any], str]:
    """The formatter of a field's spec: :cents, :when, or an ISO 4217 code (``{amount:JPY}``:
    minor units of that currency, with its own decimals, "1,200 JPY")."""
    found = _SPECS.get(spec)
    if found is not None:
        return found
    return lambda value: _money(value, spec)


def _money(value: Any, currency: str) -> str:
    """``{amount:JPY}``: ``value`` minor units of ``currency``; a value that is no amount (or
    one past any real amount, 10**400: ``money`` raises for a filter's sake) as it is."""
    if not isinstance(value, int) or isinstance(value, bool):
        return _show(value)
    try:
        return _cut(money(value, currency))
    except OverflowError:
        return _show(value)


"""The format specs a ``describe=`` field may carry."""

EMPTY = "an empty value"
"""How an empty argument reads in a sentence (issue 26: never "to 'None'")."""


class _Sentence(string.Formatter):
    """Fills a template: each value shown for people (:func:`_show`), its spec applied."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec:
            return _spec(format_spec)(value)
        return _show(value)


def _empty(value: Any) -> bool:
    return value is None or value == ""


def _unquoted(template: str, args: Mapping[str, Any]) -> str:
    """``template`` with the quotes around each empty field dropped: "to '{value}'" with no
    value reads "to an empty value", not "to 'None'" (issue 26)."""
    for name, value in args.items():
        if _empty(value):
            for q in ("'", '"'):
                template = template.replace(f"{q}{{{name}}}{q}", f"{{{name}}}")
    return template


_Pieces = tuple[tuple[str, str | None, str], ...]


@functools.lru_cache(maxsize=512)
def _compiled(template: str, empty: tuple[str, ...]) -> _Pieces | None:
    """``template``, its quotes around the ``empty`` arguments dropped (:func:`_unquoted`),
    parsed once into (literal text, argument name, spec) pieces: issue 29, a template was parsed
    again by ``string.Formatter`` for every sentence. ``None`` when a field is not a plain
    argument name with a known spec (the formatter handles it, and says why it does not fit)."""
    text = _unquoted(template, dict.fromkeys(empty))
    pieces: list[tuple[str, str | None, str]] = []
    for literal, name, spec, conv in _PARSER.parse(text):
        odd = spec and spec not in _SPECS and not CURRENCY.fullmatch(spec)
        if name is not None and (conv or not name.isidentifier() or odd):
            return None
        pieces.append((literal, name, spec or ""))
    return tuple(pieces)


def _fill(pieces: _Pieces, args: Mapping[str, Any]) -> str:
    """Compiled ``pieces`` filled from ``args``: the text ``_Sentence().vformat`` gives.

    Raises:
        KeyError: The template names an argument ``args`` does not have.
    """
    out: list[str] = []
    for literal, name, spec in pieces:
        out.append(literal)
        if name is not None:
            value = args[name]
            out.append(_spec(spec)(value) if spec else _show(value))
    return "".join(out)


_PARSER = string.Formatter()

_SHORT_INT = 10 ** (_MAX_VALUE - 1)
"""An ``int`` strictly between minus this and this has a repr short enough to show whole."""


@functools.lru_cache(maxsize=512)
def _quoted_names(template: str) -> frozenset[str]:
    """The names :func:`_unquoted` may act on in ``template``: every field name written between
    quotes ("'{subject}'"), the quotes right against its braces. Only an empty argument of such
    a name changes the template (issue 29: the others need no look at their values).

    Raises:
        ValueError: ``template`` is not valid ``str.format`` syntax.
    """
    return frozenset(
        name
        for _, name, _, _ in _PARSER.parse(template)
        if name is not None and any(f"{q}{{{name}}}{q}" in template for q in ("'", '"'))
    )


def _show(value: Any) -> str:
    if type(value) is str:  # issue 29: most values; the same text as the general path below
        if not value:
            return EMPTY
        return value if len(value) <= _MAX_VALUE else value[: _MAX_VALUE - 1] + "…"
    if _empty(value):
        return EMPTY
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        value = ", ".join(value)  # attendees, people: "ann@acme.test, bob@acme.test"
    return _cut(value if isinstance(value, str) else repr(value))


def _cut(text: str) -> str:
    """``text`` within a sentence's bound for one value."""
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def _safe_args(args: Mapping[str, Any], sensitive: Sequence[str]) -> Mapping[str, Any]:
    if not sensitive:  # only read from here on: the arguments as they are
        return args
    from ._secrets import marker

    return {k: marker(k) if k in sensitive else v for k, v in args.items()}


def sentence(
    tool: str,
    args: Mapping[str, Any],
    *,
    template: str | None = None,
    description: str = "",
    sensitive: Sequence[str] = (),
) -> str:
    """One step (or inverse) in a sentence, from its arguments.

    Args:
        tool: The catalog name, used when there is neither a template nor a description.
        args: The call's arguments (as logged: sensitive values are already markers).
        template: The tool's ``describe=`` template, e.g. ``"Email '{subject}' to {to}"``.
        description: The tool's one-line description, for the default sentence.
        sensitive: Argument names shown only as their redaction marker (rule 11).
    """
    safe = _safe_args(args, sensitive) if sensitive else args
    if template:
        try:
            quoted = _quoted_names(template)
            # issue 29: only an empty argument whose field is quoted changes the template
            # (_unquoted); the names kept in the arguments' order, as _unquoted replaces them
            empty = tuple(k for k, v in safe.items() if k in quoted and _empty(v)) if quoted else ()
            pieces = _compiled(template, empty)
            if pieces is None:
                return _Sentence().vformat(_unquoted(template, safe), (), safe)
            return _fill(pieces, safe)
        except (KeyError, ValueError, IndexError, AttributeError):
            pass  # an argument the template names was not passed: the default says it all
    if len(safe) == 1:  # issue 29: one argument (many inverses): nothing to sort or join
        for k, v in safe.items():
            shown = _argument(k, v)
    else:
        shown = ", ".join([_argument(k, v) for k, v in sorted(safe.items())])
    head = description.strip().rstrip(".") if description else ""
    return f"{head} ({shown})" if head else f"{tool}({shown})"


def _argument(name: str, value: Any) -> str:
    """One argument of a default sentence (no template): ``name=value``."""
    if value is None:
        return f"{name}=(empty)"
    if isinstance(value, str):
        return f"{name}={_show(value)!r}"
    if type(value) is int and -_SHORT_INT < value < _SHORT_INT:
        return f"{name}={value!r}"  # issue 29: _show of a short int is its repr
    return f"{name}={_show(value)}"


DONE_WORDS = {"reverted": "Taken back", "compensated": "Compensated", "cancelled": "Cancelled"}
"""How an undone step's outcome begins for people, by its state (issue 26 item 2)."""

# the gate's detail (reversal runner, rule 3): the step waited for, by id and tool
_WAITED = re.compile(
    r"not attempted: it must wait for \S+ \([^()]*\) to be undone first, and that step is "
    r"(?P<state>[a-z_]+)$"
)


def people_detail(state: str, detail: str, inverse_description: str) -> str:
    """:attr:`StepOutcome.outcome_text` of a step in this state (issue 26 item 2): an undone
    step says what undo did, in its inverse's sentence; a blocked step says it waited for
    another step's undo, without that step's id and tool (the engineers' details name them);
    any other, its detail."""
    done = DONE_WORDS.get(state)
    if done is None:
        waited = _WAITED.match(detail) if state == "blocked" else None
        if waited is None:
            return detail
        other = waited["state"].replace("_", " ")
        return f"not attempted: it must wait for another step's undo, and that step is {other}"
    return f"{done}: {inverse_description}" if inverse_description else done


def left_out(spec: Any, args: Mapping[str, Any], names: Sequence[str]) -> str:
    """Arguments ``names`` of a call of tool ``spec`` (a ``ToolSpec``) that its ``describe=``
    template leaves out (:func:`named`), as ``name=value``, a sensitive one as its marker: for
    a sentence about a call amends is about to *send* (an inverse). Rule 12: what a person is
    shown before undo is what undo sends; "Refund 12500 cents" hid which charge, and "Cancel
    event evt_1" a channel the cancellation is then posted to."""
    safe = _safe_args(args, spec.sensitive)
    return ", ".join(_argument(k, safe[k]) for k in sorted(names))


@functools.lru_cache(maxsize=512)
def named(template: str) -> frozenset[str]:
    """The argument names ``template`` fills (``""`` when it does not parse: none)."""
    try:
        fields = [name for _, name, _, _ in _PARSER.parse(template) if name]
    except ValueError:
        return frozenset()
    return frozenset(f.split(".", 1)[0].split("[", 1)[0] for f in fields)
