"""Every field of the objects a user reads (the report and what it holds) says what it means to
a user (issue 9 item 7; STYLE.md: "Backoff interval for the first retry. Default 1s.")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "amends"

USER_FACING = {
    "_report.py": ("UndoReport", "StepOutcome"),
    "_contracts.py": (
        "Residue",
        "ManualAction",
        "Inverse",
        "Expectation",
        "Acknowledgement",
        "FollowUp",
    ),
}


def undocumented(path: Path, classes: tuple[str, ...]) -> list[str]:
    missing = []
    tree = ast.parse(path.read_text())
    found = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in classes:
        body = found[name].body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                nxt = body[i + 1] if i + 1 < len(body) else None
                doc = (
                    isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                    and nxt.value.value.strip()
                )
                if not doc:
                    missing.append(f"{name}.{stmt.target.id}")
    return missing


@pytest.mark.parametrize(("module", "classes"), sorted(USER_FACING.items()))
def test_every_field_a_user_reads_has_a_docstring(module: str, classes: tuple[str, ...]) -> None:
    assert undocumented(SRC / module, classes) == []


def test_the_check_sees_a_missing_field_docstring(tmp_path: Path) -> None:
    """The check itself can fail."""
    bad = tmp_path / "m.py"
    bad.write_text('class R:\n    a: int\n    """Documented."""\n    b: str\n')
    assert undocumented(bad, ("R",)) == ["R.b"]
