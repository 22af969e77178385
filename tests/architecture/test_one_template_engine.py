"""One template engine (issue 22): only ``amends.contract_file.templates`` recognises
``{args.…}``-style template fields. A second module with its own pattern for them -- the way
``_toml_catalog.py`` and the MCP gateway each had one -- fails here, naming the module, so a fix
to filling, path encoding or redaction can never again be made in one copy only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "amends"
ENGINE = "amends.contract_file.templates"
SAMPLES = ("{args.record_id}", "{result.charge.id}", "{capture.old|json}", "{args.f|default:x}")
RE_FUNCTIONS = {"compile", "sub", "subn", "match", "fullmatch", "search", "finditer", "findall"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def template_patterns(source: str) -> list[str]:
    """The regular expressions in ``source`` (literal patterns given to ``re.*``) that match a
    whole template field such as ``{args.record_id}``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RE_FUNCTIONS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        try:
            pattern = re.compile(node.args[0].value)
        except re.error:
            continue
        fields = any(m.group(0) == s for s in SAMPLES for m in pattern.finditer(s))
        # a pattern for any text at all (``^[\x21-\x7e]+$``) matches the same without braces
        anything = any(m.group(0) == s[1:-1] for s in SAMPLES for m in pattern.finditer(s[1:-1]))
        if fields and not anything:
            found.append(node.args[0].value)
    return found


def engines() -> dict[str, list[str]]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        patterns = template_patterns(path.read_text(encoding="utf-8"))
        if patterns:
            out[module_name(path)] = patterns
    return out


def test_only_the_template_engine_recognises_template_fields() -> None:
    assert set(engines()) == {ENGINE}, engines()


def test_a_second_template_engine_is_caught() -> None:
    """The check itself can fail: the pattern _toml_catalog.py used to fill its own templates."""
    second = 'import re\n_FIELD = re.compile(r"\\{([A-Za-z_][A-Za-z0-9_.]*)\\}")\n'
    assert template_patterns(second) == [r"\{([A-Za-z_][A-Za-z0-9_.]*)\}"]
    mcp_style = 're.compile(r"\\{([A-Za-z_][A-Za-z0-9_.]*)(?:\\|([a-z_]+))?\\}")'
    assert template_patterns(mcp_style)
    assert template_patterns('re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")') == []
    assert template_patterns('re.compile(r"^[\\x21-\\x7e]{1,200}$")') == []
