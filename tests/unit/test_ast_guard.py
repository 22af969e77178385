"""The test process's compile wrapper (tests/_ast_guard.py) behaves as the builtin does."""

from __future__ import annotations
import __future__

import ast
import builtins
import gc
import sys
from typing import Any

import pytest

import _ast_guard

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="installed on CPython < 3.12")

ANNOTATIONS = __future__.annotations.compiler_flag


def test_the_guard_is_installed() -> None:
    assert hasattr(builtins.compile, "__wrapped__")


def test_a_wrapped_compile_inherits_its_callers_futures_as_the_builtin_does() -> None:
    # this module has `from __future__ import annotations`; the wrapper's own module has none
    inherited = compile("x: int = 1", "<t>", "exec")
    assert inherited.co_flags & ANNOTATIONS
    assert not compile("x: int = 1", "<t>", "exec", dont_inherit=True).co_flags & ANNOTATIONS


def test_an_ast_compile_runs_with_the_collector_off_and_restores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    original = _ast_guard.original_compile

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(_ast_guard, "original_compile", spy)
    tree = ast.parse("a = 1")
    compile("a = 1", "<t>", "exec")
    assert isinstance(tree, ast.Module)
    assert seen == [False, True]  # collector off for the AST-producing call only
    assert gc.isenabled()
