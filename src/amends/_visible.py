"""What a person reads is what the bytes say: the one rule for showing text amends did not write.

Titles, arguments, tool names, step ids, details, drafts and descriptions come from agents,
vendors, upstream servers and TOML files. Every surface that shows them to a person -- the CLI,
the text/HTML reports, the web page, approval questions, the follow-up agent's text, JSON log
lines, span attributes, metrics labels, MCP tool listings -- passes them through :func:`visible`:
every character a person cannot see, or that moves, hides or repaints other text, is shown as a
visible escape (``\\x1b``, ``\\u202e``, ``\\U000e0100``), so two different values never look the
same and a value never rearranges the words amends wrote around it (rule 8: the report is the
truth; rule 12: what is shown is what is sent).

Display only: nothing stored, sent or returned as data (the log, a tool call, the HTTP JSON
API's values) ever passes through this module; the bytes stay exactly as written.

This module imports nothing from amends (layer 0): every layer may use it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_MARKS", "PAGE_PATTERN", "clean", "visible", "without_terminal_sequences"]

MAX_MARKS = 4
"""Combining marks kept on one base character. Real text stacks a few (Vietnamese two,
Hebrew points and cantillation three or four); the rest of a longer run ("Zalgo" text, drawn
over the lines above and below) is shown as escapes."""

_HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
"""Controls (C0, DEL, C1: terminal commands, CR), format characters (bidi overrides and
isolates, zero-width space/joiners, word joiner, BOM, soft hyphen, tag characters), lone
surrogates, private-use and unassigned code points, and the line and paragraph separators
(U+2028/2029, a line break to many readers)."""

_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5")
"""Printable in name only: the Hangul fillers, the Braille blank, the combining grapheme
joiner and the Khmer inherent vowels draw nothing, so they hide inside an id or an address."""

_MARKS = frozenset(("Mn", "Me"))

_SELECTORS = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF), (0x180B, 0x180F))
"""Variation selectors (standard, supplementary, Mongolian): they change nothing a person can
point at, so ``id-42`` and ``id-42\\ufe0f`` read the same."""


def _js(code: int) -> str:
    return f"\\u{{{code:x}}}"


PAGE_PATTERN = (
    "["
    + "".join(f"\\p{{{cat}}}" for cat in sorted(_HIDDEN_CATEGORIES))
    + "".join(_js(ord(c)) for c in sorted(_BLANK_LETTERS))
    + "".join(f"{_js(lo)}-{_js(hi)}" for lo, hi in _SELECTORS)
    + "]"
)
"""The same characters as a JavaScript regular expression (flag ``u``), for the web page's
script: text it receives as JSON (an error's detail, a follow-up's outcome) is shown by the
same rule as the text the server renders (``server/static/app.js``, ``shown``)."""

_TERMINAL_SEQUENCE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
)
"""A whole terminal escape sequence: CSI (``ESC [ ... m``), OSC (``ESC ] ... BEL``) or a
two-byte one."""


def _escape(c: str) -> str:
    code = ord(c)
    if c in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _variation_selector(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in _SELECTORS)


def _shown(text: str, keep: str) -> str:
    out: list[str] = []
    marks = MAX_MARKS  # a mark with no base of its own would combine with the text before it
    for c in text:
        if c.isascii():
            if c.isprintable() or c in keep:
                out.append(c)
                marks = 0
            else:
                out.append(_escape(c))
                marks = MAX_MARKS
            continue
        cat = unicodedata.category(c)
        if cat in _MARKS and not _variation_selector(ord(c)) and c not in _BLANK_LETTERS:
            marks += 1
            out.append(c if marks <= MAX_MARKS else _escape(c))
            continue
        if cat in _HIDDEN_CATEGORIES or c in _BLANK_LETTERS or _variation_selector(ord(c)):
            out.append(_escape(c))
            marks = MAX_MARKS
        else:
            out.append(c)
            marks = 0
    return "".join(out)


def visible(text: str, *, keep: str = "") -> str:
    """``text`` as a person may be shown it: every character they could not see, or that moves
    other text, as a visible escape; everything else unchanged.

    Escaped: C0/C1 controls, DEL and CR (``\\x1b``, ``\\r``), bidi overrides and isolates
    (U+202A-202E, U+2066-2069, U+200E/200F, U+061C), zero-width characters (U+200B-200D,
    U+2060, U+FEFF), variation selectors, tag and other format characters, U+2028/2029, lone
    surrogates, private-use and unassigned code points, blank letters (Hangul fillers), a
    combining mark with no base and the marks past :data:`MAX_MARKS` on one base. The
    characters in ``keep`` (e.g. ``"\\n"`` for a draft's lines) pass through.
    """
    if text.isascii() and text.isprintable():
        return text
    return _shown(text, keep)


def without_terminal_sequences(text: str) -> str:
    """``text`` with whole terminal escape sequences removed (not only their ESC): for a
    description shown to a model, where a visible ``\\x1b[2J`` would only be noise. What is
    left still goes through :func:`visible`."""
    return _TERMINAL_SEQUENCE.sub("", text)


def clean(value: Any) -> Any:
    """``value`` -- text, or JSON-like data holding text -- with :func:`visible` applied to
    every text in it, keys too (a log line or a span attribute is read by people and tools that
    render it). Numbers, booleans and ``None`` stay; anything else is shown as its ``str``."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, Mapping):
        return {clean(str(k)): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return clean(str(value))
