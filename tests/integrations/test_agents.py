"""The semantics shared by the three adapters (amends.integrations._agents), tested once directly:
one run = one saga, turn tracking, dependency rules, rule 9, catalog tools, sync runs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from agent_scene import new_engine

import amends
from amends.integrations._agent_parts import (
    catalog_tool_function,
    declare,
    resolve_tool_name,
    title_from,
)
from amends.integrations._agents import AgentRun, Answers, agent_run, agent_run_sync, current_run


async def deps_by_tool(engine: amends.Engine, saga_id: str) -> dict[str, tuple[str, ...]]:
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    tool_of = {s.step_id: s.tool for s in saga.steps}
    return {s.tool: tuple(sorted(tool_of[d] for d in s.deps)) for s in saga.steps}


async def undo_waits_by_tool(engine: amends.Engine, saga_id: str) -> dict[str, set[str]]:
    """For each step's tool, the tools whose inverses its inverse waits for (rule 3)."""
    from amends._planner import undo_waits

    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    tool_of = {s.step_id: s.tool for s in saga.steps}
    waits = undo_waits([(s.step_id, list(s.deps), []) for s in saga.steps])
    return {tool_of[k]: {tool_of[w] for w in v} for k, v in waits.items()}


def returning(value: Any) -> Any:
    async def run() -> Any:
        return value

    return run


async def test_one_turn_is_independent_and_a_later_turn_depends_on_what_the_model_saw() -> None:
    """Calls sharing a turn key do not depend on each other, even when one finished before the
    other started; the next turn depends on every step done when it began: directly on those no
    other done step depends on, through them on the rest (issue 25 item 6: one edge per step, not
    one per step seen; the undo order is the same, rule 3 follows dependencies transitively)."""
    _, engine = new_engine()
    async with agent_run(engine, "Plan the offsite") as run:
        assert current_run() is run
        assert await run.call_tool("a", {"n": 1}, returning(1), turn="t1") == 1
        assert await run.call_tool("b", {"n": 2}, returning(2), turn="t1") == 2  # same turn
        await asyncio.gather(
            run.call_tool("c", {}, returning(3), turn="t2"),
            run.call_tool("d", {}, returning(4), turn="t2"),
        )
        await run.call_tool("e", {}, returning(5), turn="t3")
    assert current_run() is None
    assert await deps_by_tool(engine, run.saga_id) == {
        "a": (),
        "b": (),
        "c": ("a", "b"),
        "d": ("a", "b"),
        "e": ("c", "d"),  # and through them on a and b
    }
    waits = await undo_waits_by_tool(engine, run.saga_id)
    assert waits["a"] == waits["b"] == {"c", "d", "e"}  # undone after every later turn's step
    assert waits["c"] == waits["d"] == {"e"}
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None and saga.title == "Plan the offsite"


async def test_overlapping_resources_in_one_turn_are_ordered_by_the_saga() -> None:
    """Two calls of one turn on the same CRM record depend on each other (catalog resources)."""
    world, engine = new_engine()
    fn = catalog_tool_function(engine.catalog, "crm.update_field")

    def update(field: str, value: str) -> Any:
        async def run() -> Any:
            return await fn(record_id="acme", field=field, value=value)

        return run

    async with agent_run(engine, "Update ACME") as run:
        await asyncio.gather(
            run.call_tool(
                "crm.update_field",
                {"record_id": "acme", "field": "stage", "value": "won"},
                update("stage", "won"),
                turn=1,
            ),
            run.call_tool(
                "crm.update_field",
                {"record_id": "acme", "field": "owner", "value": "sam"},
                update("owner", "sam"),
                turn=1,
            ),
        )
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [s.deps for s in saga.steps] == [(), (saga.steps[0].step_id,)]
    assert world.crm.read_field("acme", "owner") == "sam"


async def test_a_failed_step_is_not_a_dependency_and_the_next_turn_still_runs() -> None:
    """The model saw the error of a refused call; the next turn's call runs and does not wait
    for (or get skipped because of) the failed step."""
    _, engine = new_engine()

    async def refuse() -> None:
        raise amends.PermanentError("vendor said no")

    async with agent_run(engine, "Try twice") as run:
        with pytest.raises(amends.PermanentError, match="vendor said no"):
            await run.call_tool("flaky", {}, refuse, turn=1)
        assert await run.call_tool("other", {}, returning("ok"), turn=2) == "ok"
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [(s.tool, s.state, s.deps) for s in saga.steps] == [
        ("flaky", "failed", ()),
        ("other", "done", ()),
    ]


async def test_a_tool_exception_reaches_the_framework_unchanged_and_follows_rule_9() -> None:
    """An exception that is not PermanentError/TransientError leaves the step in_doubt and the
    framework gets the tool's own exception object."""
    _, engine = new_engine()
    boom = RuntimeError("socket closed mid-charge")

    async def fail() -> None:
        raise boom

    async with agent_run(engine, "Charge") as run:
        with pytest.raises(RuntimeError) as caught:
            await run.call_tool("charge_card", {"cents": 100}, fail, turn=1)
    assert caught.value is boom
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert saga.steps[0].state == "in_doubt"
    report = await engine.undo(run.saga_id)
    assert report.status == "cannot_undo"
    assert report.steps[0].state == "in_doubt"


async def test_an_error_answer_made_by_the_framework_is_in_doubt_and_still_returned() -> None:
    """A framework that turns the tool's exception into an error answer: the step is in_doubt
    (rule 9) and the framework's answer goes back to the model unchanged."""
    _, engine = new_engine()
    answer = {"error": "timeout talking to the CRM"}
    async with agent_run(engine, "Update") as run:
        got = await run.call_tool(
            "crm_sync",
            {},
            returning(answer),
            turn=1,
            answers=Answers(refusal=str, reported_error=lambda v: v.get("error")),
        )
    assert got is answer
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert saga.steps[0].state == "in_doubt"
    assert "timeout talking to the CRM" in (saga.steps[0].error or "")


async def test_a_refusal_before_acting_is_failed_not_in_doubt() -> None:
    """``refused`` (Pydantic AI's ModelRetry) marks the step failed: no effect, nothing to undo."""
    _, engine = new_engine()

    class Retry(Exception):
        pass

    async def ask_again() -> None:
        raise Retry("record_id must be a CRM id")

    async with agent_run(engine, "Update") as run:
        with pytest.raises(Retry):
            await run.call_tool(
                "crm_set",
                {},
                ask_again,
                turn=1,
                answers=Answers(refusal=str, refused=lambda e: isinstance(e, Retry)),
            )
    report = await engine.undo(run.saga_id)
    assert [(s.state.value, s.verb) for s in report.steps] == [("not_needed", None)] or [
        s.state.value for s in report.steps
    ] == ["cancelled"]
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None and saga.steps[0].state == "failed"


async def test_current_call_inside_the_tool_records_the_inverse() -> None:
    """Tool code the framework runs can record its inverse with amends.current_call(); the step
    is then reverted by undo (the catalog declares the contract by tool name)."""
    world, engine = new_engine()
    declare(engine.catalog, "crm_set_stage", reversibility="reversible")  # contract only

    def set_stage(value: str) -> str:
        call = amends.current_call()
        assert call is not None
        before = world.crm.read_field("acme", "stage")
        world.crm.update_field("acme", "stage", value, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id="acme", field="stage", value=before)
        call.expect("crm.read_field", {"record_id": "acme", "field": "stage"}, equals=value)
        return "ok"

    async def tool() -> str:
        return await asyncio.to_thread(set_stage, "won")

    async with agent_run(engine, "Win ACME") as run:
        await run.call_tool("crm_set_stage", {"value": "won"}, tool, turn=1)
    assert world.crm.read_field("acme", "stage") == "won"
    report = await engine.undo(run.saga_id)
    assert report.status == "fully_reversed"
    assert [(s.tool, s.state.value) for s in report.steps] == [("crm_set_stage", "reverted")]
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_a_saga_passed_in_spans_several_runs() -> None:
    """One user request spanning several runs: agent_run(saga=...) adds them to one saga."""
    _, engine = new_engine()
    async with engine.saga("One request, two runs") as saga:
        async with agent_run(engine, saga=saga) as first:
            await first.call_tool("a", {}, returning(1), turn=("run1", 1))
        async with agent_run(engine, saga=saga) as second:
            await second.call_tool("b", {}, returning(2), turn=("run2", 1))
    assert first.saga_id == second.saga_id == saga.id
    assert await deps_by_tool(engine, saga.id) == {"a": (), "b": ("a",)}


def test_sync_run_records_calls_from_plain_threads() -> None:
    """agent_run_sync: synchronous framework code (its own threads, no event loop) records
    steps; the caller's context variables are visible inside the tool."""
    import contextvars

    _, engine = new_engine()
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("framework_config")
    marker.set("from the framework")
    seen: list[Any] = []

    def tool() -> str:
        seen.append((marker.get(None), amends.current_call() is not None))
        return "ok"

    with agent_run_sync(engine, "Sync run") as run:
        assert run.call_tool_sync("t", {"x": 1}, tool, turn=1) == "ok"
        assert run.call_tool_sync("u", {}, tool, turn=2) == "ok"
    assert seen == [("from the framework", True), ("from the framework", True)]
    report = engine.undo_sync(run.saga_id)
    assert [(s.tool, s.state.value) for s in report.steps] == [
        ("t", "acknowledged"),
        ("u", "acknowledged"),
    ]


async def test_sync_call_on_the_sagas_own_loop_is_a_clear_error() -> None:
    """A synchronous tool call on the loop the saga runs on would deadlock: refused, with a fix."""
    _, engine = new_engine()
    async with agent_run(engine, "Async run") as run:
        with pytest.raises(amends.ConfigError, match="use the framework's async API"):
            run.call_tool_sync("t", {}, lambda: 1)


async def test_bad_input_gets_clear_errors() -> None:
    """No engine or no title: ConfigError naming the fix."""
    _, engine = new_engine()
    with pytest.raises(amends.ConfigError, match="needs an amends.Engine"):
        async with agent_run("not an engine", "t"):  # type: ignore[arg-type]
            pass
    with pytest.raises(amends.ConfigError, match="needs a title"):
        async with agent_run(engine, "  "):
            pass
    with pytest.raises(amends.ConfigError, match="needs a title"):
        agent_run_sync(engine, "").__enter__()
    fn = catalog_tool_function(engine.catalog, "crm.update_field")
    with pytest.raises(amends.ConfigError, match="outside an amends step"):
        await fn(record_id="acme", field="stage", value="won")


def test_tool_names_resolve_to_catalog_names() -> None:
    """Exact name, then dots written as underscores, then the explicit map; else the name itself
    (no contract: irreversible)."""
    _, engine = new_engine()
    cat = engine.catalog
    assert resolve_tool_name(cat, "crm.update_field") == "crm.update_field"
    assert resolve_tool_name(cat, "crm_update_field") == "crm.update_field"
    assert resolve_tool_name(cat, "set_stage", {"set_stage": "crm.update_field"}) == (
        "crm.update_field"
    )
    assert resolve_tool_name(cat, "lookup_weather") == "lookup_weather"


def test_catalog_tool_function_has_the_tools_signature_without_call() -> None:
    """The function handed to frameworks takes the catalog tool's parameters minus ``call``."""
    import inspect

    _, engine = new_engine()
    fn = catalog_tool_function(engine.catalog, "payments.charge")
    assert fn.__name__ == "payments_charge"
    params = inspect.signature(fn).parameters
    own = list(inspect.signature(engine.catalog.get("payments.charge").fn).parameters)
    assert list(params) == own[1:]  # the catalog function's, minus `call`
    assert list(params)[:2] == ["customer", "cents"]
    assert params["cents"].annotation is int


def test_titles_come_from_the_prompts_first_line() -> None:
    assert title_from("Close the ACME deal\nand tell the team") == "Close the ACME deal"
    assert title_from("", "Agent run") == "Agent run"
    assert title_from(None, "Agent run") == "Agent run"
    assert len(title_from("x" * 200)) == 80


@pytest.mark.slow  # a subprocess: a fresh interpreter is the only honest check
def test_import_amends_never_imports_a_framework() -> None:
    """Frameworks are imported lazily: only the adapter modules import them."""
    code = (
        "import sys, amends, amends.integrations\n"
        "bad = [m for m in ('langchain', 'langgraph', 'langchain_core', 'pydantic_ai', 'agents')"
        " if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_agent_run_is_exported_by_each_adapter() -> None:
    """Users import the run context manager from the adapter they use."""
    from amends.integrations import langchain, openai_agents, pydantic_ai

    for mod in (langchain, pydantic_ai, openai_agents):
        assert mod.agent_run is agent_run
        assert mod.agent_run_sync is agent_run_sync
    assert AgentRun.__module__ == "amends.integrations._agents"


async def test_a_declared_contract_is_never_run_by_amends_itself() -> None:
    """declare() registers a contract only; calling it from amends (not through an adapter) is a
    clear error naming the fix."""
    _, engine = new_engine()
    spec = declare(engine.catalog, "set_stage", reversibility="reversible")
    assert spec.reversibility == "reversible"
    async with engine.saga("direct") as saga:
        step = saga.call("set_stage", stage="won")
        with pytest.raises(amends.StepFailedError):
            await step
    got = await engine.log.get_saga(saga.id)
    assert got is not None
    assert "runs only through its adapter" in (got.steps[0].error or "")


async def test_a_tool_slower_than_its_contracts_timeout_is_in_doubt_and_says_so() -> None:
    """The catalog's timeout bounds the framework's tool: the step is in_doubt (it may still
    act) and the framework gets amends' StepFailedError naming the timeout, not a cancellation."""
    _, engine = new_engine()
    declare(engine.catalog, "slow_sync", reversibility="irreversible", timeout=0.05)

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    async with agent_run(engine, "Slow") as run:
        with pytest.raises(amends.StepFailedError, match="in_doubt") as caught:
            await run.call_tool("slow_sync", {}, slow, turn=1)
    assert caught.value.state == "in_doubt"
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None and saga.steps[0].state == "in_doubt"
    assert "0.05" in (saga.steps[0].error or "")


def test_tokens_of_reads_each_frameworks_usage_record() -> None:
    """spend()/tokens_of() read LangChain's usage_metadata, Pydantic AI's RunUsage and result,
    and OpenAI Agents' Usage and RunResult; anything else is a clear error."""
    from agents.usage import Usage
    from langchain_core.messages import AIMessage
    from pydantic_ai.usage import RunUsage

    from amends.integrations._agent_parts import tokens_of

    msg = AIMessage(
        content="x", usage_metadata={"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}
    )
    assert tokens_of(msg) == 12
    assert tokens_of({"input_tokens": 3, "output_tokens": 4}) == 7
    assert tokens_of(RunUsage(input_tokens=10, output_tokens=2)) == 12
    assert tokens_of(Usage(input_tokens=1, output_tokens=2, total_tokens=3)) == 3

    class OpenAIResult:  # RunResult's shape: result.context_wrapper.usage
        class context_wrapper:
            usage = Usage(input_tokens=4, output_tokens=4, total_tokens=8)

    assert tokens_of(OpenAIResult()) == 8
    with pytest.raises(amends.ConfigError, match="no token count in 'lots'"):
        tokens_of("lots")


def test_the_async_check_of_a_run_agrees_with_inspect_for_every_kind_of_callable() -> None:
    """call_tool answers "is ``run`` async?" for a plain ``async def`` from its code flags
    (issue 25 item 6); for every other callable it asks inspect, so the answer is the same."""
    import functools
    import inspect

    from amends.integrations._agents import _is_async

    async def coro(x: int = 0) -> int:
        return x

    def plain(x: int = 0) -> int:
        return x

    async def agen() -> Any:
        yield 1

    class Obj:
        async def method(self) -> None:
            return None

        def sync_method(self) -> None:
            return None

        async def __call__(self) -> None:
            return None

    runs: list[Any] = [
        coro,
        plain,
        functools.partial(coro, 1),
        functools.partial(plain, 1),
        Obj().method,
        Obj().sync_method,
        Obj(),
        agen,
        lambda: coro(),
    ]
    assert [_is_async(r) for r in runs] == [
        True,
        False,
        True,
        False,
        True,
        False,
        False,
        False,
        False,
    ]
    assert [_is_async(r) for r in runs] == [inspect.iscoroutinefunction(r) for r in runs]


def test_each_tool_calls_box_starts_empty_and_keeps_its_own_outcome() -> None:
    """The box's defaults are its class's: setting one call's outcome leaves another's empty."""
    from amends.integrations._agents import _Box

    first, second = _Box(), _Box()
    first.value, first.answered, first.exc = 7, True, ValueError("x")
    first.running, first.cancelled = True, True
    assert (second.value, second.answered, second.exc, second.running, second.cancelled) == (
        None,
        False,
        None,
        False,
        False,
    )
    assert (first.value, first.answered, first.running, first.cancelled) == (7, True, True, True)
