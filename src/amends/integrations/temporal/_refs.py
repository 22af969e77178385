"""Large values travel by reference to the saga log, never inside Temporal's payloads (issue 25).

Temporal refuses a payload over 2 MB ("[TMPRL1103] payloads exceeded the error limit"): three
inverses restoring 800 KB documents failed every workflow task that carried the saga. So before
a saga (or a tool's answer) crosses into the workflow, every string longer than
:data:`REF_CHARS` becomes a *reference*: the string's first 64 characters, then a tag with the
SHA-256 of the whole string and its length. The workflow never needs the content itself:

* it plans from the contracts and passes arguments through as data;
* a drift check compares the probe's answer with the expected value, and two references are
  equal exactly when the strings are (the probe's answer is referenced the same way);
* a step's sentence shows at most 60 characters of a value, which the reference keeps.

A tool's argument that is a large list or object of short values (a roster of 70,000 names)
goes the same way when its JSON is longer than :data:`REF_JSON_CHARS`: a step's, its inverse's
and its expectation's arguments are data the workflow only hands on to the activity that makes
the call (:func:`shrink_saga`); such a reference names the SHA-256 of the value's canonical JSON.

The activity that makes a call resolves each reference in its arguments (and its precondition)
from the saga in the log, right before the call, by digest and length: a reference resolves only
to a value of the same saga whose digest it names, so text that merely looks like one cannot bring
anything in that the saga does not already hold (rule 12). This module never does I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "REF_CHARS",
    "REF_JSON_CHARS",
    "expand",
    "has_refs",
    "shrink",
    "shrink_answer",
    "shrink_saga",
    "values_of",
]

REF_CHARS = 4096
"""Strings longer than this many characters cross Temporal as references."""

REF_JSON_CHARS = 64 * 1024
"""A tool's list or object argument whose JSON is longer than this crosses as a reference."""

_HEAD = 64
_TAG = "\u2063amends:ref:"
_REF = re.compile(rf"(?s)(.{{0,{_HEAD}}})\u2063amends:ref:([0-9a-f]{{64}}):(\d+)\u2063")
_JTAG = "\u2063amends:json:"
_JREF = re.compile(rf"(?s)(.{{0,{_HEAD}}})\u2063amends:json:([0-9a-f]{{64}}):(\d+)\u2063")
_DATA_ARGS = ("inverse", "expectation")
"""The parts of a logged step whose ``args`` the workflow only hands on to an activity."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _ref(text: str) -> str:
    return f"{text[:_HEAD]}{_TAG}{_digest(text)}:{len(text)}\u2063"


def _json(value: Any) -> str | None:
    """``value``'s canonical JSON (the text its reference names), or ``None`` if not JSON."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _big(value: Any) -> str | None:
    """The canonical JSON of a list or object argument too long to cross Temporal, else None."""
    if not isinstance(value, Mapping | list | tuple):
        return None
    text = _json(value)
    return text if text is not None and len(text) > REF_JSON_CHARS else None


def shrink_answer(value: Any) -> Any:
    """A call's answer the workflow does not compare (an inverse's, a follow-up's: it reads at
    most a follow-up's id, ``_reference``), with each list or object in it, or the answer
    itself, whose JSON is longer than :data:`REF_JSON_CHARS` by reference: an inverse that
    answered a 4 MB list failed its workflow task with TMPRL1103. Nothing resolves these."""
    text = _big(value)
    if text is None:
        return value
    if isinstance(value, Mapping):
        out = _args_by_ref(value)
        if _big(out) is None:
            return out
    return f"{text[:_HEAD]}{_JTAG}{_digest(text)}:{len(text)}\u2063"


def _args_by_ref(args: Any) -> Any:
    """``args`` with each argument :func:`_big` names replaced by its reference."""
    if not isinstance(args, Mapping):
        return args
    out: dict[str, Any] | None = None
    for name, value in args.items():
        text = _big(value)
        if text is not None:
            out = dict(args) if out is None else out
            out[name] = f"{text[:_HEAD]}{_JTAG}{_digest(text)}:{len(text)}\u2063"
    return args if out is None else out


def _data_args(step: Mapping[str, Any]) -> list[Any]:
    """The argument mappings of one logged step that the workflow only hands on."""
    found = [step.get("args")]
    for part in _DATA_ARGS:
        if isinstance(step.get(part), Mapping):
            found.append(step[part].get("args"))
    return found


def shrink_saga(saga: dict[str, Any]) -> dict[str, Any]:
    """A saga (as :func:`to_dict` gives it) as it crosses into the workflow: every long string
    by reference (:func:`shrink`), and before that every list or object argument of a step, its
    inverse or its expectation whose JSON is longer than :data:`REF_JSON_CHARS` (three 1 MB
    rosters failed the workflow task with TMPRL1103 as long strings did)."""
    steps = saga.get("steps")
    if isinstance(steps, list) and any(
        _big(v) is not None
        for s in steps
        if isinstance(s, Mapping)
        for args in _data_args(s)
        if isinstance(args, Mapping)
        for v in args.values()
    ):
        new_steps = []
        for s in steps:
            if isinstance(s, Mapping):
                s = {**s, "args": _args_by_ref(s.get("args"))}
                for part in _DATA_ARGS:
                    if isinstance(s.get(part), Mapping):
                        s[part] = {**s[part], "args": _args_by_ref(s[part].get("args"))}
            new_steps.append(s)
        saga = {**saga, "steps": new_steps}
    return shrink(saga)  # type: ignore[no-any-return]


def shrink(value: Any) -> Any:
    """``value`` with every string longer than :data:`REF_CHARS` replaced by its reference (a
    new structure where something was replaced; shared otherwise)."""
    return _shrink(value) if _any_long(value) else value


def _any_long(value: Any) -> bool:
    """Whether ``value`` holds a string longer than :data:`REF_CHARS` (one pass, no copies:
    a 100-step saga is scanned in a fraction of what rebuilding it would cost)."""
    stack = [value]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is str:
            if len(x) > REF_CHARS:
                return True
        elif t is dict:
            stack.extend(x.values())
        elif t is list or t is tuple:
            stack.extend(x)
        elif isinstance(x, str):
            if len(x) > REF_CHARS:
                return True
        elif isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
    return False


def _shrink(value: Any) -> Any:
    if isinstance(value, str):
        return _ref(value) if len(value) > REF_CHARS else value
    if isinstance(value, Mapping):
        out = {k: _shrink(v) for k, v in value.items()}
        return out if any(out[k] is not value[k] for k in value) else value
    if isinstance(value, list | tuple):
        items = [_shrink(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def has_refs(value: Any) -> bool:
    """Whether ``value`` holds a reference anywhere."""
    if isinstance(value, str):
        if _TAG in value:
            return _REF.fullmatch(value) is not None
        return _JTAG in value and _JREF.fullmatch(value) is not None
    if isinstance(value, Mapping):
        return any(has_refs(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_refs(v) for v in value)
    return False


def values_of(*sources: Any) -> dict[tuple[str, int], Any]:
    """The values ``sources`` (a saga as logged) may be referred to by, by (digest, length):
    every long string, and every list or object argument :func:`shrink_saga` sends by
    reference (by the digest and length of its canonical JSON)."""
    found: dict[tuple[str, int], Any] = {}

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if len(v) > REF_CHARS:
                found[(_digest(v), len(v))] = v
        elif isinstance(v, Mapping):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    for s in sources:
        walk(s)
        steps = s.get("steps") if isinstance(s, Mapping) else None
        for step in steps if isinstance(steps, list) else ():
            for args in _data_args(step) if isinstance(step, Mapping) else ():
                for value in args.values() if isinstance(args, Mapping) else ():
                    text = _big(value)
                    if text is not None:
                        found[(_digest(text), len(text))] = value
    return found


def expand(value: Any, lookup: Callable[[str, int], Any]) -> Any:
    """``value`` with each reference replaced by the value it names (``lookup(digest,
    length)``).

    Raises:
        LookupError: A reference names a value ``lookup`` does not know.
    """
    if isinstance(value, str):
        m = _REF.fullmatch(value) if _TAG in value else None
        if m is not None:
            found = lookup(m.group(2), int(m.group(3)))
            if isinstance(found, str) and found.startswith(m.group(1)):
                return found
        else:
            m = _JREF.fullmatch(value) if _JTAG in value else None
            if m is None:
                return value
            found = lookup(m.group(2), int(m.group(3)))
            text = _json(found) if isinstance(found, Mapping | list | tuple) else None
            if text is not None and text.startswith(m.group(1)):
                return found
        raise LookupError(
            f"a reference to a {m.group(3)}-character value the saga log does not hold"
        )
    if isinstance(value, dict):
        return {k: expand(v, lookup) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [expand(v, lookup) for v in value]
    return value
