"""Modules outside the core use the public API, as a user's code would (issue 22 item 3).

The sandbox, evals, integrations, the server, the CLI and ``amends.testing`` import ``amends`` and
its public sub-packages (``amends.sandbox``, ``amends.integrations.temporal``, ...), never an
implementation module (``amends._engine``) nor a private name (``_factory``) of another package.
Where one of them needs more, the public API grows deliberately (exported in ``amends.__all__``,
documented, frozen in tests/unit/test_cli_and_exports.py) or the code moves. Inside its own
package a module may use that package's private parts (``amends.integrations.temporal._runner`` from
``amends.integrations.temporal``).

``PRIVATE_IMPORT_DEBT`` lists the few justified exceptions, each with its reason (as
``OVERSIZE_DEBT`` does for long modules): recorded, not a licence; an entry nobody needs any more
fails here too, so the list can only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "amends"

OUTSIDE_THE_CORE = (
    "amends.sandbox",
    "amends.evals",
    "amends.testing",
    "amends.server",
    "amends.integrations",
    "amends.cli",
)
"""The packages that sit above the public API (docs/architecture.md, layers 9-12)."""

_TEMPORAL = (
    "the Temporal integration is a second executor of the core's own reversal: its workflow "
    "implements the reversal's ports and runs the same run_plan, per-step decision, report "
    "builder and secret handling (issue 22 item 2: one runner, not a copy)"
)
_PROCESS_LOGGING = (
    "the processes amends ships (the CLI, `amends serve`, the MCP gateway, the Temporal worker) "
    "set up logging and JSON log lines the one way issue 28 defines; an operator's concern, not "
    "a library user's"
)
_OPERATOR_CATALOGS = (
    "rule 12: the operator names the catalogs a process may load and a saga's recorded "
    "reference only selects among them; the CLI and the server share the engine's one check"
)
_ONE_DISPLAY_RULE = (
    "rule 8/12, issue 21: every surface shows text an agent or a vendor wrote by one rule "
    "(every character a person cannot see or that moves other text as an escape), not a copy"
)

PRIVATE_IMPORT_DEBT: dict[tuple[str, str], str] = {
    ("amends.integrations.temporal", "amends._reversal"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._report"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._secrets"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._observe"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._calls"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._budget"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._describe"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._telemetry"): _TEMPORAL,
    ("amends.integrations.temporal", "amends._selection"): _TEMPORAL,
    ("amends.cli", "amends._telemetry"): _PROCESS_LOGGING,
    ("amends.integrations.mcp", "amends._telemetry"): _PROCESS_LOGGING,
    ("amends.cli", "amends._catalog_ref"): _OPERATOR_CATALOGS,
    ("amends.server.api", "amends._catalog_ref"): _OPERATOR_CATALOGS,
    ("amends.server.metrics", "amends._observe"): (
        "issue 28: /metrics shows the figures the engine's own spans and log records derive "
        "from one place (_observe), not a second derivation"
    ),
    ("amends.server.metrics", "amends._log"): (
        "rule 12: /metrics reads a record it cannot decode (a report, a reversal.done) as the "
        "log's own readers do, by the one translation to HistoryAlteredError (_log.unreadable)"
    ),
    ("amends.server.api", "amends._resolution"): (
        "the HTTP retry answers with the engine's one check of which steps can be retried"
    ),
    ("amends.cli._common", "amends._resolution"): (
        "issue 23: the CLI prints `--retry STEP` under the steps engine.retry accepts, a drift "
        "check that could not run told by the detail the engine writes (`UNCHECKED`), not a copy"
    ),
    ("amends.cli._common", "amends._report"): (
        "issue 26 item 2: the CLI's step list says a step's state in the reports' own words "
        "(`state_label`: 'not checked' where nothing drifted), not a copy of the rule"
    ),
    ("amends.cli._hints", "amends._log"): (
        "rule 11: a printed hint's --db hides a password by the log's one function, the one its "
        "error messages use (not a second parser that could miss a form the other catches)"
    ),
    ("amends.cli.ops", "amends._log"): (
        "`amends doctor` inspects the log's own files, schema version and tamper-evident chain"
    ),
    ("amends.cli.core", "amends._selection"): (
        "`amends undo` says 'already undone' only when the finished reversal covers the "
        "selection asked for (issue 27): the closure the engine itself computes"
    ),
    ("amends.server.api", "amends._selection"): (
        "the HTTP undo answers 'already done' only when the finished reversal covers the "
        "selection asked for (issue 27), as the CLI does"
    ),
    ("amends.cli.core", "amends._describe"): (
        "`amends show` prints the same plain-language sentence of a step the report uses"
    ),
    ("amends.server.web", "amends._report"): (
        "issue 26 item 2: the web page says a step's state and detail in the reports' own words "
        "(`state_label`, `people_detail`), not a copy of them"
    ),
    ("amends.cli", "amends._visible"): _ONE_DISPLAY_RULE,
    ("amends.integrations", "amends._visible"): _ONE_DISPLAY_RULE,
    ("amends.server", "amends._visible"): _ONE_DISPLAY_RULE,
    ("amends.sandbox.world", "amends._log"): (
        "a world file is shared between processes like the saga log, and switches to WAL the "
        "log's one way (switch_to_wal: SQLite skips its busy handler there), not a copy of it"
    ),
    ("amends.evals.naive", "amends._calls"): (
        "the naive baseline calls tools exactly as the engine does (current_call set, plain "
        "functions in a thread), so the eval compares undo strategies and nothing else"
    ),
}
"""(importer, private module) -> why. An importer names a module or package; an entry covers the
private module and everything under it."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _owner(full: str) -> str:
    """The package that owns a private thing: the public path before its first private part
    (``amends.integrations`` for ``amends.integrations._agents.wrap``; ``amends`` -- the core --
    for ``amends._engine.Engine``); a module's private name belongs to the module's package
    (``amends.server`` for ``amends.server.state._State``)."""
    parts = full.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if _private(part):
            owner = ".".join(parts[:i])
            if (SRC.parent / Path(*parts[:i])).with_suffix(".py").exists():
                owner = owner.rpartition(".")[0]  # a private name of a module: its package's
            return owner
    return full


def imported(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str, str]]:
    """(line, module imported from, name) for every amends import in ``source`` (imports under
    ``if TYPE_CHECKING:`` and inside functions included: they name the same private things)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "amends":
                    yield node.lineno, alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "amends":
                for alias in node.names:
                    yield node.lineno, target, alias.name


def private_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The private things ``module`` (outside the core) imports from outside its own package."""
    found = []
    for line, target, name in imported(source, module, is_package):
        full = f"{target}.{name}" if name else target
        owner = _owner(full)
        if owner == full:
            continue  # public
        if owner != "amends" and (module == owner or module.startswith(owner + ".")):
            continue  # a private part of a package the module belongs to
        found.append(f"{module}:{line} imports {full}")
    return found


def _debt_for(finding: str) -> tuple[str, str] | None:
    module, _, rest = finding.partition(":")
    full = rest.split(" imports ", 1)[1]
    for importer, private in PRIVATE_IMPORT_DEBT:
        mine = module == importer or module.startswith(importer + ".")
        if mine and (full == private or full.startswith(private + ".")):
            return importer, private
    return None


def findings() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        module = module_name(path)
        if module.startswith(OUTSIDE_THE_CORE):
            out += private_imports(path.read_text(), module, path.name == "__init__.py")
    return out


def test_no_module_outside_the_core_imports_a_private_name() -> None:
    """An ``from amends._engine import Engine`` in the sandbox, an integration, the server or the
    CLI fails here, naming the line: import it from ``amends`` (or make it public)."""
    unjustified = [f for f in findings() if _debt_for(f) is None]
    assert unjustified == []


def test_every_recorded_exception_is_still_needed() -> None:
    """The debt list only shrinks: an entry no import needs any more must be removed."""
    used = {_debt_for(f) for f in findings()}
    assert set(PRIVATE_IMPORT_DEBT) - used == set()


def test_the_check_itself_can_fail() -> None:
    """A private module, a private name of another package and a ``TYPE_CHECKING`` import are
    each seen; the module's own package and the public API are not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from amends import Engine, __version__\n"
        "from ..._engine import Engine\n"
        "from amends.evals.suite import _factory\n"
        "from ._runner import connect\n"
        "from amends.integrations.temporal import connect\n"
        "if TYPE_CHECKING:\n"
        "    from amends._log.base import SagaRecord\n"
        "def later():\n"
        "    import amends._calls\n"
    )
    assert private_imports(source, "amends.integrations.temporal._workflow") == [
        "amends.integrations.temporal._workflow:3 imports amends._engine.Engine",
        "amends.integrations.temporal._workflow:4 imports amends.evals.suite._factory",
        "amends.integrations.temporal._workflow:8 imports amends._log.base.SagaRecord",
        "amends.integrations.temporal._workflow:10 imports amends._calls",
    ]
    # another package's private module is not "its own": the CLI reaching into temporal's
    worker = "from ..integrations.temporal._runner import connect\n"
    assert private_imports(worker, "amends.cli.worker") == [
        "amends.cli.worker:1 imports amends.integrations.temporal._runner.connect"
    ]
    assert private_imports("from ._agents import wrap\n", "amends.integrations.langchain") == []
