"""``scripts/compile.py`` (lane mypyc, issue 29): its module sets name modules that exist, and
leave out the ones the compiled build cannot run as the interpreter does."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compile_script", ROOT / "scripts" / "compile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_module_of_every_set_exists_once() -> None:
    for name, modules in _script().SETS.items():
        assert len(set(modules)) == len(modules), name
        for rel in modules:
            assert (ROOT / "src" / rel).is_file(), (name, rel)


def test_the_modules_left_interpreted_are_in_no_set() -> None:
    every = {rel for modules in _script().SETS.values() for rel in modules}
    for rel in (
        "amends/_contracts.py",
        "amends/_engine.py",
        "amends/_planner.py",
        "amends/_native.py",
        "amends/_reversal/runner.py",
        "amends/_reversal/inline.py",
        "amends/sandbox/catalog.py",
        "amends/sandbox/world.py",
    ):
        assert rel not in every, rel


def test_the_copy_takes_the_trees_files(tmp_path: Path) -> None:
    script = _script()
    script.copy_tree(ROOT, tmp_path)
    assert (tmp_path / "src" / "amends" / "_saga.py").is_file()
    assert (tmp_path / "benchmarks" / "ab_cpu.py").is_file()
    assert not list(tmp_path.rglob("*.so"))
