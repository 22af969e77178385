"""The house is one-way: no module imports from a layer above it, and no import cycles.

Layers, lowest first (docs/architecture.md draws them). A module may import from its own layer or
below; ``if TYPE_CHECKING:`` imports are annotations only and are not counted for layers; imports
inside functions are (they run). Cycles are checked over the whole graph, whatever the layers,
and ``if TYPE_CHECKING:`` imports count there (issue 22 item 3): two modules that name each
other's types are one module split in two, and a reader cannot understand either alone. Break
such a pair with a Protocol in the lower module (``sandbox/_base.VendorWorld``,
``integrations/mcp/ports.GatewayView``) or by moving the shared type down.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "amends"

# Lowest first. A module's layer is the first prefix that matches its dotted name.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "amends._errors",
        "amends._fields",
        "amends._jsondata",
        "amends._native",
        "amends._arguments",
        "amends._money",
        "amends._visible",
    ),
    ("amends._secrets", "amends._describe", "amends._telemetry", "amends._dates"),
    ("amends._contracts", "amends._budget"),
    ("amends._calls", "amends._catalog_ref", "amends._joins"),
    ("amends._log", "amends._report", "amends._manual", "amends._follow_up_state"),
    ("amends._saga", "amends._outcome", "amends._planner", "amends._observe", "amends._resolution"),
    (
        "amends._reversal",
        "amends._toml_catalog",
        "amends.contract_file",
        "amends._selection",
        "amends._engine_api",
        "amends._handoff",
    ),
    ("amends._engine",),
    ("amends",),  # the package face: re-exports the public API
    ("amends.sandbox",),
    ("amends.evals",),
    ("amends.testing", "amends.server", "amends.integrations"),
    ("amends.cli", "amends.__main__"),  # `python -m amends` is the command line
)


def layer_of(module: str) -> int:
    best = (-1, -1)  # (prefix length, layer)
    for i, names in enumerate(LAYERS):
        for name in names:
            matches = module == name or module.startswith(name + ".")
            if matches and len(name) > best[0]:
                best = (len(name), i)
    if best[1] < 0:
        raise AssertionError(
            f"module {module} is in no layer; add it to LAYERS here and to docs/architecture.md"
        )
    return best[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``tree``; those under ``if TYPE_CHECKING:`` only with
    ``type_checking``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for sub in node.orelse:
                yield from _imports(ast.Module(body=[sub], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node, type_checking)


def imports_of(path: Path, type_checking: bool = False) -> set[str]:
    """The amends modules ``path`` imports (resolved, relative imports included; with
    ``type_checking``, those under ``if TYPE_CHECKING:`` too)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "amends")
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] != "amends":
            continue
        for alias in node.names:  # `from . import x` may name a submodule
            candidate = f"{target}.{alias.name}"
            sub = SRC.parent / Path(*candidate.split("."))
            if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                found.add(candidate)
            else:
                found.add(target)
    found.discard(me)
    return found


def graph(type_checking: bool = False) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, type_checking) for p in sorted(SRC.rglob("*.py"))}


def test_no_module_imports_from_a_layer_above_it() -> None:
    """An import from a higher layer (e.g. contracts -> engine) fails here, naming both ends."""
    upward = [
        f"{src} (layer {layer_of(src)}) imports {dst} (layer {layer_of(dst)})"
        for src, targets in graph().items()
        for dst in sorted(targets)
        if layer_of(dst) > layer_of(src)
    ]
    assert upward == []


def cycles_in(g: dict[str, set[str]]) -> list[list[str]]:
    """Every loop of imports found by a depth-first walk of ``g`` (a -> b -> a)."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if nxt == node.rpartition(".")[0] or node == nxt.rpartition(".")[0]:
                continue  # a package and its own __init__ face are one room
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    """Modules that import each other in a loop (a -> b -> a) fail here, with the loop; an
    import under ``if TYPE_CHECKING:`` is part of a loop too."""
    assert cycles_in(graph(type_checking=True)) == []


def test_a_type_only_cycle_is_caught() -> None:
    """The check itself can fail: the sandbox's world and vendors named each other's types
    under ``if TYPE_CHECKING:`` (issue 22)."""
    world = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .mail import Mail\n"
    tree = ast.parse(world)
    assert [n.module for n in _imports(tree)] == ["typing"]  # the layer check skips it
    assert [n.module for n in _imports(tree, type_checking=True)] == ["typing", "mail"]
    g = {"amends.sandbox.world": {"amends.sandbox.mail"}, "amends.sandbox.mail": set()}
    assert cycles_in(g) == []
    g["amends.sandbox.mail"].add("amends.sandbox.world")
    assert cycles_in(g) == [["amends.sandbox.mail", "amends.sandbox.world", "amends.sandbox.mail"]]


@pytest.mark.parametrize(
    ("source", "imported", "upward"),
    [
        ("amends._contracts", "amends._engine", True),
        ("amends._engine", "amends._contracts", False),
        ("amends._log.sql", "amends._log.base", False),
        ("amends._reversal", "amends.cli._common", True),
        ("amends.sandbox.catalog", "amends", False),
    ],
)
def test_the_layer_rule_itself(source: str, imported: str, upward: bool) -> None:
    """The check above can fail: an import from a higher layer is seen as upward."""
    assert (layer_of(imported) > layer_of(source)) is upward
