"""Every Python and TOML example in README.md and docs/ runs (issue 17, item 6).

A fenced ``python`` or ``toml`` block in a page is one of:

- an include (``--8<-- "docs/examples/x.py"``, pymdownx.snippets): the file is run;
- a copy of a file (``<!-- example: path -->`` just above it): the block must equal the file,
  and the file is run;
- marked ``<!-- not-runnable: reason -->`` just above it, with a reason (a fragment of a larger
  example, or it needs a PostgreSQL server or a model key);
- anything else: run as it is written. Python runs in a fresh namespace (top-level ``await``
  allowed) in an empty directory; TOML is loaded by the loader its tables name (HTTP tool
  catalog, MCP gateway config, MCP contracts), with every ``${env:NAME}`` set.

So an example that does not work as written fails this test, and so does a new unmarked
fragment.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import re
import runpy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from amends._dates import settles_at

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!--\s*(not-runnable|example):\s*(.*?)\s*-->\s*$")
INCLUDE = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.M)
RUNNABLE = {"python", "py", "toml"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    mark: tuple[str, str] | None
    """("not-runnable", reason) or ("example", path) from the comment just above the fence."""

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            lang = m.group(1).lower()
            if lang not in RUNNABLE:
                continue
            line = text.count("\n", 0, m.start()) + 1
            above = [ln for ln in text[: m.start()].splitlines()[-3:] if ln.strip()]
            mark = MARK.search(above[-1]) if above else None
            found.append(
                Block(
                    page, line, lang, m.group(2), (mark.group(1), mark.group(2)) if mark else None
                )
            )
    return found


BLOCKS = blocks()


def run_python_file(path: Path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name="__main__")
    return out.getvalue()


def run_python_text(text: str, name: str) -> str:
    """Run ``text`` as a module; top-level ``await`` is allowed, as in a notebook or REPL."""
    code = compile(text, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = eval(code, namespace)  # a coroutine when the block awaits at top level
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return out.getvalue()


def load_toml(path: Path) -> int:
    """Load a TOML example with the loader its tables name; returns how many tools it declared."""
    import tomllib

    text = path.read_text()
    data = tomllib.loads(text)
    environ = {name: "test-value" for name in re.findall(r"\$\{env:([^}]*)\}", text)}
    if "upstream" in data or "gateway" in data:
        from amends.integrations.mcp import load_config

        return len(load_config(path).upstreams)
    tools = data.get("tool", [])
    if "errors" in data or any("http" not in t for t in tools):
        from amends.integrations.mcp import load_contracts

        return len(load_contracts(path).tools)
    import amends

    return len(amends.load_toml_catalog(path, environ=environ))


def run_file(path: Path) -> None:
    assert path.is_file(), f"{path} is included by a page but does not exist"
    if path.suffix == ".py":
        run_python_file(path)
    elif path.suffix == ".toml":
        assert load_toml(path) > 0
    else:
        pytest.fail(f"{path}: an example must be a .py or .toml file")


def test_the_pages_have_examples_to_run() -> None:
    """The collector finds the README example and the pages' includes (not silently nothing)."""
    ids = {b.id.split(":")[0] for b in BLOCKS}
    assert "README.md" in ids
    assert "docs/getting-started.md" in ids
    assert "docs/contracts.md" in ids
    assert sum(1 for b in BLOCKS if INCLUDE.search(b.text)) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_every_python_and_toml_example_runs_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block runs (or loads) as written, is an include/copy of a file that does, or says
    why it cannot run alone."""
    monkeypatch.chdir(tmp_path)  # examples that write amends.db write it here
    if block.mark and block.mark[0] == "not-runnable":
        assert len(block.mark[1]) >= 10, f"{block.id}: say why the block cannot run"
        return
    includes = INCLUDE.findall(block.text)
    if includes:
        for inc in includes:
            run_file(ROOT / inc)
        return
    if block.mark and block.mark[0] == "example":
        path = block.page.parent / block.mark[1]
        assert block.text == path.read_text(), f"{block.id} differs from {path}"
        run_file(path)
        return
    if block.lang == "toml":
        path = tmp_path / "example.toml"
        path.write_text(block.text)
        assert load_toml(path) > 0
    else:
        run_python_text(block.text, block.id)


def neutral(text: str) -> str:
    """Text with what changes between runs replaced: ids, dates, timings."""
    text = re.sub(r"\b(saga|rev)_[0-9a-f]+…?", r"\1_<id>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d", "<date>", text)
    text = re.sub(r"\b\d{1,2} [A-Z][a-z]{2} \d{4}\b", "<date>", text)  # "settles 8 Dec 2026"
    return re.sub(r"\d+\.\d\ds\b", "<s>s", text).strip()


def test_the_readme_example_is_complete_and_prints_the_report_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's example is docs/examples/quickstart.py verbatim (every tool it needs, the
    probes and the refund included); run as a script it prints exactly the report the README
    shows: s1 drifted and left alone, s2 compensated with residue, s3 acknowledged, each step
    and inverse as the sentence its describe= template gives."""
    monkeypatch.chdir(tmp_path)
    readme = (ROOT / "README.md").read_text()
    example = ROOT / "docs" / "examples" / "quickstart.py"
    marker = "<!-- example: docs/examples/quickstart.py -->\n```python\n"
    at = readme.index(marker) + len(marker)
    assert readme[at : readme.index("```", at)] == example.read_text()

    printed = run_python_file(example)
    shown = re.search(r"```text\n(Undo of saga .*?)```", readme, re.S)
    assert shown is not None, "the README shows the report the example prints"
    assert neutral(printed) == neutral(shown.group(1))
    # the refund settles 3 business days from the day the example runs (not the day the README
    # was written): the date is checked against the calendar, not against the README's copy
    expected = set()
    for minutes in (-5, 0):  # the example ran a moment ago: either side of midnight
        iso = settles_at(datetime.now(UTC) + timedelta(minutes=minutes), None, 3)
        assert iso is not None
        day = datetime.fromisoformat(iso)
        expected.add(f"{day.day} {day:%b %Y}")
    found = re.search(r"settles (\d{1,2} [A-Z][a-z]{2} \d{4})", printed)
    assert found is not None and found[1] in expected, (printed, expected)
    assert "Status: cannot_undo (1 of 3 taken back (1 compensated, leaving a trace)" in printed
    # the steps are sentences from describe= (issue 17), the inverse too
    assert re.search(
        r"s1 +Acknowledge drifted +Set stage of r1 to 'won'\n +undo: Set stage", printed
    )
    # issue 26: money formatted ({cents:cents})
    assert re.search(r"s2 +Compensate +compensated +Charge 50.00 USD to c1\n", printed)
    assert "undo: Refund 50.00 USD of ch_1" in printed


def test_the_toml_example_in_the_toml_catalog_docstring_loads(tmp_path: Path) -> None:
    """The module docstring the API reference shows is a TOML file that loads (it once used a
    multi-line inline table, which TOML 1.0 refuses)."""
    from amends import _toml_catalog as toml_catalog

    blocks = re.findall(r"```toml\n(.*?)```", toml_catalog.__doc__ or "", re.S)
    assert blocks
    for block in blocks:
        path = tmp_path / "doc.toml"
        path.write_text(block)
        assert "crm.update_field" in amends_load(path)


def amends_load(path: Path) -> Any:
    import amends

    return amends.load_toml_catalog(path, environ={"CRM_TOKEN": "t"})
