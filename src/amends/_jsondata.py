"""JSON data the log can keep whole, and what stands in for data it cannot (issue 21, rule 12).

A tool's result and an agent's arguments are someone else's data. Nested deeper than
:data:`MAX_DEPTH`, or holding an integer longer than Python will print
(``sys.get_int_max_str_digits()``), such data would crash the encoder, the hash chain, or the
reader of the record later (in a deeper stack); it is kept as ``{"repr": ...}`` instead, cut and
saying so, never silently dropped. Data amends must use again (an inverse's arguments, an
expectation) cannot be replaced that way: :func:`problem` names why it cannot be kept, and the
caller reports a contract violation.

This module is the lowest floor: it imports nothing from amends.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_DETAIL",
    "MAX_PARTIES",
    "MAX_REPR",
    "as_repr",
    "bounded",
    "bounded_words",
    "may_not_keep",
    "problem",
    "unstorable_words",
    "wordy",
]

MAX_DEPTH = 100
"""How deeply lists and objects may nest in one value the log keeps. JSON APIs rarely pass 20;
the decoder of whoever reads the record back needs stack for every level."""
MAX_REPR = 1000
"""How many characters of an unkeepable value's ``repr`` are kept in its place."""
_INT_BITS = 2000
"""An int of at most this many bits (602 digits) always prints, whatever Python's digit limit
(4300 by default, 640 at least): only a longer one is printed to find out."""


def may_not_keep(text: str) -> bool:
    """Whether a record's encoded ``text`` could hold a value nested deeper than
    :data:`MAX_DEPTH` (cheap: only a text opening that many lists or objects can; the hot path
    walks nothing for ordinary records)."""
    return len(text) > 2 * MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH


def problem(value: Any) -> str | None:
    """Why ``value`` (JSON data) cannot be kept whole, or ``None`` when it can."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        kind = type(v)
        if kind is dict or kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            items = v.values() if kind is dict else v
            stack.extend((item, depth + 1) for item in items)
        elif kind is int and v.bit_length() > _INT_BITS:
            try:
                str(v)
            except ValueError:
                digits = int(v.bit_length() * 0.30103) + 1
                return (
                    f"an integer of about {digits:,} digits, longer than Python prints "
                    f"({sys.get_int_max_str_digits():,})"
                )
    return None


def as_repr(value: Any, why: str) -> dict[str, str]:
    """What the log keeps in place of ``value``: the start of its ``repr`` and why."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a long int, a deep list: repr fails too
        text = f"<{type(value).__name__}>"
    cut = text if len(text) <= MAX_REPR else text[:MAX_REPR] + "…"
    return {"repr": cut, "amends_note": f"not kept as data: {why}"}


MAX_DETAIL = 4000
"""The most characters of a sentence amends keeps from what a tool said (an error message, a
compensation's detail): a tool that raises with a 20 MB message gets its first characters in
the log and the report, never all of it (rule 12: what amends reads is bounded)."""


def bounded(text: str, limit: int = MAX_DETAIL) -> str:
    """``text``, or its first ``limit`` characters and how long it was. Cut only after secrets
    were scrubbed (rule 11): a cut through a secret would leave part of it unmatched. A text
    cut already is kept as it is (a Temporal worker bounds what crosses the workflow's history,
    and the workflow bounds it again: the note keeps the first length, never "4,045")."""
    if len(text) <= limit or _cut_already(text, limit):
        return text
    return f"{text[:limit]}… ({len(text):,} characters; the rest was not kept)"


_CUT_NOTE = re.compile(r"… \([0-9,]{1,32} characters; the rest was not kept\)\Z")
_MORE_NOTE = re.compile(r"… and [0-9,]{1,32} more \(not kept\)\Z")


def _cut_already(text: str, limit: int) -> bool:
    return len(text) <= limit + 64 and _CUT_NOTE.match(text, limit) is not None


def _long(text: Any) -> bool:
    return isinstance(text, str) and len(text) > MAX_DETAIL and not _cut_already(text, MAX_DETAIL)


def _too_many(parties: Sequence[Any]) -> bool:
    """More parties than :func:`bounded_words` keeps (its own "… and N more" entry aside)."""
    if len(parties) <= MAX_PARTIES:
        return False
    last = parties[-1]
    counted = isinstance(last, str) and _MORE_NOTE.fullmatch(last) is not None
    return not (len(parties) == MAX_PARTIES + 1 and counted)


MAX_PARTIES = 100
"""The most parties a residue or an acknowledgement keeps (each one bounded like a sentence);
the rest are counted in one last entry."""
_WORDS = ("what", "who", "draft", "settles", "settles_at")


def wordy(data: Any) -> bool:
    """Whether residue or an acknowledgement (as data) says more than :func:`bounded_words`
    keeps: cheap, for every step that records one."""
    if not isinstance(data, Mapping):
        return False
    if any(_long(data.get(key)) for key in _WORDS):
        return True
    parties = data.get("parties")
    if isinstance(parties, list | tuple):
        return _too_many(parties) or any(_long(p) for p in parties)
    return False


def bounded_words(data: Mapping[str, Any]) -> dict[str, Any]:
    """Residue or an acknowledgement (as data) with its words bounded (rule 12): a contract
    fills them from a vendor's answer (``{result.notified|join}``), and a vendor that answers
    megabytes would have them written to the log, the report and every screen. Each sentence
    keeps its first :data:`MAX_DETAIL` characters and says how long it was; at most
    :data:`MAX_PARTIES` parties are kept and the rest counted. Cut only after the scrub."""
    out = dict(data)
    for key in _WORDS:
        text = out.get(key)
        if isinstance(text, str):
            out[key] = bounded(text)
    parties = out.get("parties")
    if isinstance(parties, list | tuple):
        kept = [bounded(p) if isinstance(p, str) else p for p in parties[:MAX_PARTIES]]
        if len(parties) > MAX_PARTIES:  # counted here, or already (its own count stays)
            n = len(parties) - MAX_PARTIES
            kept.append(f"… and {n:,} more (not kept)" if _too_many(parties) else parties[-1])
        out["parties"] = kept
    return out


def unstorable_words(**words: object) -> str | None:
    """Why one of a saga's words (its title, tenant, actor) cannot be stored alike on every log,
    or ``None``: PostgreSQL cannot store a NUL, and no log can store a lone surrogate (SQLite
    raised a bare UnicodeEncodeError)."""
    for what, text in words.items():
        if text is None:
            continue
        if not isinstance(text, str) or _unstorable(text):
            return (
                f"a saga's {what} must be text without NUL (\\x00) characters or lone "
                f"surrogates (\\ud800-\\udfff, not UTF-8), got {text!r:.200}; remove them "
                f"(an agent's words are data, rule 12)"
            )
    return None


def _unstorable(text: str) -> bool:
    """Whether ``text`` holds a NUL or a lone surrogate (text no UTF-8 log can store)."""
    if "\x00" in text:
        return True
    return not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text)
