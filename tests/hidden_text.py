"""Text a person could be shown that differs from its bytes, and a check for it (issue 21:
what a person reads is what the bytes say). A catalog at module level, so the CLI can load it by
reference (``hidden_text:CATALOG``)."""

from __future__ import annotations

import unicodedata

from core_world import fresh

__all__ = ["ADDRESS", "AMOUNT", "CATALOG", "SPEC", "TITLE", "TITLE_SHOWN", "WORLD", "hidden"]

WORLD, CATALOG = fresh()
SPEC = "hidden_text:CATALOG"

ADDRESS = "alice\u200b@example.com"
"""Reads as alice@example.com; is not (a zero-width space after "alice")."""
AMOUNT = "1\u206000.00 USD"
"""Reads as 100.00 USD with a word joiner inside."""
TITLE = (
    f"Refund {ADDRESS} {AMOUNT} id-42\ufe0f\U000e0100 \u3164"
    "\u2028Status: fully_reversed\u2029 z" + "\u0301" * 40 + " \x9b2J \u2066x\u2069"
)
"""Zero-width characters, variation selectors, a Hangul filler (a letter that draws nothing),
line and paragraph separators, forty combining marks on one letter, a C1 CSI and a bidi
isolate."""
TITLE_SHOWN = (
    "Refund alice\\u200b@example.com 1\\u206000.00 USD id-42\\ufe0f\\U000e0100 \\u3164"
    "\\u2028Status: fully_reversed\\u2029 z" + "\u0301" * 4 + "\\u0301" * 36 + " \\x9b2J "
    "\\u2066x\\u2069"
)
"""How every surface shows :data:`TITLE`: four combining marks on one letter are kept (real
scripts stack that many), the rest and every invisible character are escapes."""


def hidden(text: str) -> list[str]:
    """The characters in ``text`` a person would not see as themselves (newline aside), and
    combining marks past the fourth on one base: none may reach a person."""
    out: list[str] = []
    run = 0
    for c in text:
        cat = unicodedata.category(c)
        code = ord(c)
        selector = 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF
        if cat in ("Mn", "Me") and not selector:
            run += 1
            if run > 4:
                out.append(f"U+{code:04X}")
            continue
        run = 0
        if c == "\n":
            continue
        if cat[0] == "C" or cat in ("Zl", "Zp") or selector or c in "\u3164\u115f\u1160\uffa0":
            out.append(f"U+{code:04X}")
    return out
