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

The activity that makes a call resolves each reference in its arguments (and its precondition)
from the saga in the log, right before the call, by digest and length: a reference resolves only
to a value of the same saga whose digest it names, so text that merely looks like one cannot bring
anything in that the saga does not already hold (rule 12). This module never does I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REF_CHARS", "expand", "has_refs", "shrink", "values_of"]

REF_CHARS = 4096
"""Strings longer than this many characters cross Temporal as references."""

_HEAD = 64
_TAG = "\u2063amends:ref:"
_REF = re.compile(rf"(?s)(.{{0,{_HEAD}}})\u2063amends:ref:([0-9a-f]{{64}}):(\d+)\u2063")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _ref(text: str) -> str:
    return f"{text[:_HEAD]}{_TAG}{_digest(text)}:{len(text)}\u2063"


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
        return _TAG in value and _REF.fullmatch(value) is not None
    if isinstance(value, Mapping):
        return any(has_refs(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_refs(v) for v in value)
    return False


def values_of(*sources: Any) -> dict[tuple[str, int], str]:
    """The long strings in ``sources`` (a saga as logged), by (digest, length)."""
    found: dict[tuple[str, int], str] = {}

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
    return found


def expand(value: Any, lookup: Callable[[str, int], str | None]) -> Any:
    """``value`` with each reference replaced by the string it names (``lookup(digest,
    length)``).

    Raises:
        LookupError: A reference names a string ``lookup`` does not know.
    """
    if isinstance(value, str):
        m = _REF.fullmatch(value) if _TAG in value else None
        if m is None:
            return value
        found = lookup(m.group(2), int(m.group(3)))
        if found is None or not found.startswith(m.group(1)):
            raise LookupError(
                f"a reference to a {m.group(3)}-character value the saga log does not hold"
            )
        return found
    if isinstance(value, dict):
        return {k: expand(v, lookup) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [expand(v, lookup) for v in value]
    return value
