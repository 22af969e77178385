"""Property tests over random dependency graphs, and golden files for the report and log format."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amends
from amends import StepState
from amends._contracts import ManualAction, Residue
from amends._report import StepOutcome
from core_world import fresh

GOLDEN = Path(__file__).with_name("golden")


def run_fresh(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in its own thread, leaving the test runner's event loop alone."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


T = TypeVar("T")
UPDATE = os.environ.get("AMENDS_UPDATE_GOLDEN") == "1"


@st.composite
def dags(draw: st.DrawFn) -> list[list[int]]:
    """A random DAG: step i may depend on any earlier steps."""
    n = draw(st.integers(1, 12))
    return [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=dags(), failing=st.integers(-1, 11))
def test_reversal_respects_every_dependency_and_blocks_exactly_the_gated(
    graph: list[list[int]], failing: int
) -> None:
    """For any DAG: each inverse runs after its dependents' inverses; if one inverse fails, exactly
    the steps that (transitively) wait for it are blocked and their notes are still there."""
    world, catalog = fresh()

    async def go() -> amends.UndoReport:
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        async with engine.saga("dag") as saga:
            steps: list[amends.Step] = []
            for i, deps in enumerate(graph):
                steps.append(
                    saga.call(
                        "crm.note", record_id="r1", text=f"n{i}", after=[steps[d] for d in deps]
                    )
                )
        if 0 <= failing < len(graph):
            # the inverse of step `failing` (deleting note n{failing}) fails permanently
            spec = catalog.get("crm.delete_note")
            real = spec.fn

            async def refuse_one(call: amends.Call, record_id: str, text: str) -> None:
                if text == f"n{failing}":
                    raise amends.PermanentError("vendor refused")
                await real(call, record_id=record_id, text=text)

            object.__setattr__(spec, "fn", refuse_one)  # ToolSpec is frozen; this is a test
        report = await engine.undo(saga.id)
        await engine.close()
        return report

    report = run_fresh(go())
    undone = [e[1] for e in world.effects if e[0] == "crm.delete_note"]
    position = {text: i for i, text in enumerate(undone)}
    dependents: dict[int, set[int]] = {i: set() for i in range(len(graph))}
    for i, deps in enumerate(graph):
        for d in deps:
            dependents[d].add(i)

    def closure(i: int) -> set[int]:
        out: set[int] = set()
        todo = list(dependents[i])
        while todo:
            j = todo.pop()
            if j not in out:
                out.add(j)
                todo.extend(dependents[j])
        return out

    for i in range(len(graph)):
        state = report.step(f"s{i + 1}").state
        gated_by_failure = 0 <= failing < len(graph) and failing in closure(i)
        if i == failing:
            assert state is StepState.FAILED
        elif gated_by_failure:
            assert state is StepState.BLOCKED
            assert f"n{i}" in world.crm["r1"]["notes"]
        else:
            assert state is StepState.REVERTED
            for j in closure(i):
                assert position[f"n{j}"] < position[f"n{i}"]
    remaining = sorted(world.crm["r1"]["notes"])
    assert remaining == sorted(
        f"n{i}"
        for i in range(len(graph))
        if report.step(f"s{i + 1}").state is not StepState.REVERTED
    )


@st.composite
def declared_dags(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]], list[float]]:
    """A random DAG, undo-order declarations (step i's inverse waits for an earlier step's) and
    how long each step's inverse takes to answer (0 to 4 ms), so that an order the plan does not
    enforce shows in the order the inverses land."""
    graph = draw(dags())
    n = len(graph)
    declared = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=1))) if i else [] for i in range(n)
    ]
    delays = [draw(st.sampled_from([0.0, 0.0, 0.001, 0.004])) for _ in range(n)]
    return graph, declared, delays


def _must_precede(graph: list[list[int]], declared: list[list[int]]) -> set[tuple[int, int]]:
    """Rule 3 read pair by pair, independently of the planner: ``(b, a)`` when b's inverse must
    land before a's. b depends on a (directly or through other steps): b first, unless b
    declared ``undo_after=[a]``, which swaps that pair alone; and every declared pair."""
    n = len(graph)
    reach = [set(deps) for deps in graph]  # i -> every step i depends on, transitively
    for i in range(n):
        for d in graph[i]:
            reach[i] |= reach[d]
    swapped = {(i, a) for i in range(n) for a in declared[i]}
    out = {(b, a) for b in range(n) for a in reach[b] if (b, a) not in swapped}
    return out | {(a, b) for b, a in swapped}


def _has_cycle(n: int, before: set[tuple[int, int]]) -> bool:
    indeg = [0] * n
    for _, a in before:
        indeg[a] += 1
    todo = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while todo:
        b = todo.pop()
        seen += 1
        for x, a in before:
            if x == b:
                indeg[a] -= 1
                if indeg[a] == 0:
                    todo.append(a)
    return seen < n


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=declared_dags())
def test_every_inverse_lands_in_an_order_rule_3_allows_with_undo_order_declarations(
    drawn: tuple[list[list[int]], list[list[int]], list[float]],
) -> None:
    """For any DAG with ``undo_after=`` declarations and inverses slow to answer: a saga whose
    declarations leave rule 3's pairs without a cycle is accepted and undone with every pair in
    order (each inverse after those of the steps depending on it, a declared pair swapped); one
    whose pairs form a cycle is refused when the step is called, before it runs."""
    graph, declared, delays = drawn
    n = len(graph)
    before = _must_precede(graph, declared)
    cyclic = _has_cycle(n, before)
    world, catalog = fresh()
    spec = catalog.get("crm.delete_note")
    real = spec.fn

    async def slow(call: amends.Call, record_id: str, text: str) -> None:
        wait = delays[int(text[1:])]
        if wait:
            await asyncio.sleep(wait)
        await real(call, record_id=record_id, text=text)

    object.__setattr__(spec, "fn", slow)  # ToolSpec is frozen; this is a test

    async def go() -> amends.UndoReport | None:
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        refused = False
        async with engine.saga("declared dag") as saga:
            steps: list[amends.Step] = []
            for i, deps in enumerate(graph):
                try:
                    steps.append(
                        saga.call(
                            "crm.note",
                            record_id="r1",
                            text=f"n{i}",
                            after=[steps[d] for d in deps],
                            undo_after=[steps[a] for a in declared[i]],
                        )
                    )
                except amends.ContractError:
                    refused = True
                    break
        report = None if refused else await engine.undo(saga.id)
        await engine.close()
        return report

    report = run_fresh(go())
    if cyclic:
        assert report is None  # refused when called: a cycle has no safe order
        return
    assert report is not None and report.status == "fully_reversed"
    undone = [e[1] for e in world.effects if e[0] == "crm.delete_note"]
    position = {int(text[1:]): k for k, text in enumerate(undone)}
    assert sorted(position) == list(range(n))
    late = sorted((b, a) for b, a in before if position[b] > position[a])
    assert late == [], f"inverse of s{late[0][0] + 1} landed after s{late[0][1] + 1}'s"


def golden_report() -> amends.UndoReport:
    return amends.UndoReport(
        saga_id="saga_golden",
        reversal_id="rev_golden",
        title="Close the ACME deal",
        steps=(
            StepOutcome(
                "s1",
                "crm.update_field",
                "Revert",
                StepState.DRIFTED,
                "someone changed it since the agent acted: expected 'won', found "
                "'lost'; left as it is",
                "reversible",
                0,
                manual_action=ManualAction(
                    "s1", "Review crm.update_field(...)", "the account owner", ("ann@acme.test",)
                ),
            ),
            StepOutcome(
                "s2",
                "payments.charge",
                "Compensate",
                StepState.COMPENSATED,
                "compensated with payments.refund",
                "compensable",
                1,
                residue=(Residue("Refund of 50.00 to c1 <ACME & co>", ("c1",), "2026-12-07"),),
            ),
            StepOutcome(
                "s3",
                "email.send",
                "Acknowledge",
                StepState.ACKNOWLEDGED,
                "irreversible: no call can take it back",
                "irreversible",
                manual_action=ManualAction(
                    "s3",
                    "email.send(...) cannot be taken back",
                    "the sender",
                    ("bob@acme.test",),
                    "Please disregard my earlier message.",
                ),
            ),
            StepOutcome(
                "s4",
                "crm.read_field",
                None,
                StepState.NOT_NEEDED,
                "read-only: nothing to undo",
                "read_only",
            ),
        ),
        tool_calls=4,
        tokens=0,
        seconds=0.125,
        budget={"tool_calls": 50},
        requested_at=1796000000.0,
        finished_at=1796000000.125,
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; if intended, AMENDS_UPDATE_GOLDEN=1"


def test_rendered_reports_match_golden_files() -> None:
    report = golden_report()
    check_golden("report.txt", report.render("text"))
    check_golden("report.html", report.render("html"))
    check_golden("report.json", report.to_json() + "\n")
    assert amends.UndoReport.from_dict(report.to_dict()) == report


def test_log_schema_matches_golden_file(tmp_path: Path) -> None:
    run_fresh(amends.SqliteLog(tmp_path / "g.db").close())
    conn = sqlite3.connect(tmp_path / "g.db")
    ddl = "\n".join(
        row[0]
        for row in conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY type DESC, name"
        )
    )
    conn.close()
    from amends._log.sql import SCHEMA_VERSION

    check_golden(f"schema_v{SCHEMA_VERSION}.sql", ddl + "\n")
