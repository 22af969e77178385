"""The tools list the agent sees: each upstream tool in its own shape, with amends' label.

What the agent reads of an upstream tool is text the upstream wrote, and an upstream is not
trusted (docs/security.md, "an attacker controls an upstream MCP server"). So (issue 21, item 15;
issue 24, item 2):

- The upstream's shape is kept: its input and output schemas, title, icons and annotations, so
  a client validates ``structuredContent`` as the upstream declared it.
- amends' own label comes first in the description, as ``[amends: <class>; <what undo does>]``,
  and that prefix is unspoofable: the upstream's text can never contain ``[amends:`` (any such
  text, in any Unicode compatibility form, is defused to ``(amends:``), so the first label is the
  only one.
- Terminal escape sequences are stripped from every description and title the upstream wrote,
  and every other character a person cannot see (bidirectional overrides, zero-width
  characters, C1 controls...) is shown as a visible escape (``amends._visible``, the one rule
  every surface uses).
- Hints that would make a client *less* careful come from the contract only: ``readOnlyHint``
  is true only for a ``read_only`` contract, ``idempotentHint`` only for ``idempotent = true``,
  ``destructiveHint`` is false only where a contract says undo can take the call back. Hints that
  make it *more* careful (``destructiveHint: true``) and informational ones (``openWorldHint``,
  ``title``) are the upstream's.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

from amends._visible import visible, without_terminal_sequences

if TYPE_CHECKING:
    import mcp_types

    from amends import Catalog

__all__ = ["LABEL_PREFIX", "agent_tool", "clean_text", "label"]

LABEL_PREFIX = "[amends:"
"""How amends' label starts; no text an upstream wrote can contain it."""

_VERB = {
    "read_only": "nothing to undo (read-only)",
    "reversible": "undo reverts it",
    "compensable": "undo compensates it, leaving residue",
    "irreversible": "undo cannot take it back; a person must follow up",
}
_SPOOF = re.compile(r"\[(\s*amends\s*:)", re.IGNORECASE)
_OPENERS = re.escape("[\u2045\u27e6\u3010\u3014\u301a\u2772\u2987\u298b\u298d\u298f\u2e22\u2e24")
"""``[`` and the brackets that look like it (the fullwidth one is folded to ``[`` first)."""
_COLONS = re.escape(":\u02d0\u02f8\ua789\u2236\u05c3\u0703\u0704\u1804\u205a\u16ec\u0589\u2982")
"""``:`` and the characters that look like it (fullwidth and small forms are folded first)."""
_LABEL_LIKE = re.compile(f"[{_OPENERS}](?=\\s*[^\\]\\[\\n{_COLONS}]{{1,40}}\\s*[{_COLONS}])")
"""An opening bracket that starts a ``[word: ...`` label, whatever the word's letters: a label
spelled with look-alike letters (Cyrillic a, e, dze, komi de: U+0430, U+0435, U+0455, U+0501;
small capitals) or a look-alike colon reads as amends' own to a person or a model, so any label
shape is defused, not only the ASCII spelling (issue 21 item 15)."""


def clean_text(text: str) -> str:
    """``text`` as a person or a model may be shown it, with no ``[amends:`` label in it.

    Terminal escape sequences go whole (not only their ESC byte); every other character a
    person cannot see or that moves other text (C0/C1 controls, bidi overrides, zero-width
    characters, line separators...) is shown as a visible escape
    (:func:`amends._visible.visible`); tabs and newlines stay.
    """
    cleaned = visible(without_terminal_sequences(text), keep="\n\t")
    # compatibility forms (fullwidth brackets and letters) are folded before looking for the
    # prefix, and every spelling found is defused in the original text
    folded = unicodedata.normalize("NFKC", cleaned)
    text = _SPOOF.sub(r"(\1", cleaned if folded == cleaned else folded)
    return _LABEL_LIKE.sub("(", text)


def label(cls: str, explicit: bool) -> str:
    """amends' label for a tool of class ``cls`` (``explicit``: a contract declared it)."""
    shown = cls if explicit else "irreversible (no contract)"
    return f"{LABEL_PREFIX} {shown}; {_VERB[cls]}]"


def _clean_schema(value: Any) -> Any:
    """A JSON schema with its ``description`` and ``title`` strings cleaned (agents read them)."""
    if isinstance(value, dict):
        return {
            k: clean_text(v)
            if k in ("description", "title") and isinstance(v, str)
            else (_clean_schema(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_clean_schema(v) for v in value]
    return value


def agent_tool(
    src: mcp_types.Tool,
    *,
    name: str,
    catalog: Catalog,
    catalog_name: str,
    idempotent: bool,
) -> mcp_types.Tool:
    """The upstream tool ``src`` as the agent sees it under ``name`` (module docstring)."""
    import mcp_types as types

    spec = catalog.get(catalog_name)
    cls = spec.reversibility.value
    upstream_text = clean_text(src.description or "").strip()
    desc = label(cls, spec.explicit) + (f"\n\n{upstream_text}" if upstream_text else "")
    given = src.annotations
    careful = bool(given is not None and given.destructive_hint)
    annotations = (given or types.ToolAnnotations()).model_copy(
        update={
            "title": clean_text(given.title) if given and given.title else None,
            "read_only_hint": cls == "read_only",
            "destructive_hint": cls == "irreversible" or careful,
            "idempotent_hint": idempotent,
        }
    )
    return src.model_copy(
        update={
            "name": name,
            "title": clean_text(src.title) if src.title else None,
            "description": desc,
            "input_schema": _clean_schema(src.input_schema),
            "output_schema": _clean_schema(src.output_schema) if src.output_schema else None,
            "annotations": annotations,
            # the upstream's own _meta is not passed on (issue 14): only amends' own
            "meta": {"amends/reversibility": cls, "amends/contract": spec.explicit},
        }
    )
