"""A test reads its directory's ``conftest`` only at module level.

Every test directory's ``conftest.py`` is imported under the one name ``conftest``; pytest
imports each directory's before collecting its tests, so a module-level ``from conftest import``
gets its own directory's. Inside a test function the import runs later, when the name may hold
the conftest of the last directory collected (in the whole suite, ``tests/faults``'s): the test
then fails only when run with the others (``cannot import name 'free_port'``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _late_conftest_imports(path: Path, root: Path = TESTS.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.ImportFrom) and node.module == "conftest") or (
                isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} in {fn.name}()")
    return found


def test_no_test_imports_conftest_inside_a_function() -> None:
    late = [hit for path in sorted(TESTS.rglob("*.py")) for hit in _late_conftest_imports(path)]
    assert late == [], "move these imports to the top of their module: " + ", ".join(late)


def test_the_check_finds_an_import_inside_a_function(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("def test_x():\n    from conftest import free_port\n", encoding="utf-8")
    assert _late_conftest_imports(sample, tmp_path) == ["test_sample.py:2 in test_x()"]
