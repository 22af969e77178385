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
        "ToolSpec",
    ),
    # issue 22 item 3: what the public planner, preview and SagaLog hand back
    "_planner.py": ("Plan", "PlannedStep", "Preview", "PreviewStep"),
    "_log/base.py": (
        "StepRecord",
        "Resolution",
        "SagaRecord",
        "ReversalRecord",
        "ReversalHead",
        "CompensationRecord",
        "Event",
        "Claim",
        "IdemRecord",
        "ChainProblem",
        "StepFinish",
        "StepIntent",
        "CompensationWrite",
        "LogHealth",
    ),
    "_secrets.py": ("Redaction",),
}

DOCUMENTED_METHODS = {"_log/base.py": ("SagaLog",)}
"""Classes whose every public method says what it does (the log interface a backend implements)."""


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


def undocumented_methods(path: Path, classes: tuple[str, ...]) -> list[str]:
    tree = ast.parse(path.read_text())
    found = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return [
        f"{name}.{stmt.name}"
        for name in classes
        for stmt in found[name].body
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
        and not stmt.name.startswith("_")
        and not ast.get_docstring(stmt)
    ]


@pytest.mark.parametrize(("module", "classes"), sorted(DOCUMENTED_METHODS.items()))
def test_every_public_method_of_the_log_interface_has_a_docstring(
    module: str, classes: tuple[str, ...]
) -> None:
    assert undocumented_methods(SRC / module, classes) == []


@pytest.mark.parametrize(("module", "classes"), sorted(USER_FACING.items()))
def test_every_field_a_user_reads_has_a_docstring(module: str, classes: tuple[str, ...]) -> None:
    assert undocumented(SRC / module, classes) == []


def test_the_check_sees_a_missing_field_docstring(tmp_path: Path) -> None:
    """The check itself can fail."""
    bad = tmp_path / "m.py"
    bad.write_text(
        'class R:\n    a: int\n    """Documented."""\n    b: str\n'
        '    def f(self) -> None:\n        """Documented."""\n'
        "    async def g(self) -> None: ...\n"
    )
    assert undocumented(bad, ("R",)) == ["R.b"]
    assert undocumented_methods(bad, ("R",)) == ["R.g"]
