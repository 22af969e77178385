"""Pydantic AI adapter: what the shared scene (test_scene.py) does not cover."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from agent_scene import new_engine
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

import amends
from amends.integrations.pydantic_ai import (
    AmendsToolset,
    agent_run,
    catalog_toolset,
    declare,
    spend,
)


def scripted(*turns: list[tuple[str, dict[str, Any]]], final: str = "ok") -> FunctionModel:
    script = [[ToolCallPart(n, a) for n, a in turn] for turn in turns]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart(final)])

    return FunctionModel(respond)


def set_stage_tool(world: Any) -> Any:
    """A plain Pydantic AI tool function that records its inverse via amends.current_call()."""

    def set_stage(stage: str) -> str:
        """Set the ACME deal stage."""
        call = amends.current_call()
        assert call is not None
        before = world.crm.read_field("acme", "stage")
        world.crm.update_field("acme", "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id="acme", field="stage", value=before)
        call.expect("crm.read_field", {"record_id": "acme", "field": "stage"}, equals=stage)
        return f"stage is {stage}"

    return set_stage


def declare_tool(engine: amends.Engine, name: str, reversibility: str) -> None:
    declare(engine.catalog, name, reversibility=reversibility)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_pydantic_ai_tool_records_its_inverse_with_current_call(sync: bool) -> None:
    """The tool stays a plain function; its contract is in the catalog by name; undo reverts."""
    world, engine = new_engine()
    declare_tool(engine, "set_stage", "reversible")
    toolset = AmendsToolset(FunctionToolset([set_stage_tool(world)]), engine=engine)
    agent = Agent(scripted([("set_stage", {"stage": "closed_won"})]), toolsets=[toolset])
    if sync:
        await asyncio.to_thread(agent.run_sync, "Win ACME")
    else:
        await agent.run("Win ACME")
    assert world.crm.read_field("acme", "stage") == "closed_won"
    assert toolset.last_saga_id is not None
    saga = await engine.log.get_saga(toolset.last_saga_id)
    assert saga is not None and (saga.title, saga.state) == ("Win ACME", "completed")
    report = await engine.undo(toolset.last_saga_id)
    assert report.status == "fully_reversed"
    assert [(s.tool, s.state.value) for s in report.steps] == [("set_stage", "reverted")]
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_model_retry_is_a_refusal_the_step_failed_and_the_retry_is_a_new_step() -> None:
    """ModelRetry means the tool refused before acting: that step is failed (nothing to undo),
    the model's retry is a new step, and the world changed once."""
    world, engine = new_engine()
    declare_tool(engine, "set_stage", "reversible")
    inner = set_stage_tool(world)

    def set_stage(stage: str) -> str:
        """Set the ACME deal stage (one of the CRM's stages)."""
        if stage != stage.lower():
            raise ModelRetry("stages are lower case, e.g. 'closed_won'")
        return str(inner(stage))

    toolset = AmendsToolset(FunctionToolset([set_stage]), engine=engine)
    agent = Agent(
        scripted(
            [("set_stage", {"stage": "CLOSED_WON"})], [("set_stage", {"stage": "closed_won"})]
        ),
        toolsets=[toolset],
    )
    await agent.run("Win ACME")
    assert toolset.last_saga_id is not None
    saga = await engine.log.get_saga(toolset.last_saga_id)
    assert saga is not None
    assert [(s.tool, s.state, s.deps) for s in saga.steps] == [
        ("set_stage", "failed", ()),
        ("set_stage", "done", ()),  # the failed step is no dependency
    ]
    assert "stages are lower case" in (saga.steps[0].error or "")
    report = await engine.undo(toolset.last_saga_id)
    assert [s.state.value for s in report.steps] == ["not_needed", "reverted"]
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_a_tool_exception_fails_the_run_the_step_is_in_doubt_and_the_saga_closed() -> None:
    """Rule 9 through Pydantic AI: the exception reaches agent.run unchanged; the toolset's
    saga is closed on the way out."""
    _, engine = new_engine()

    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise ConnectionError("processor hung up")

    toolset = AmendsToolset(FunctionToolset([charge_card]), engine=engine)
    agent = Agent(scripted([("charge_card", {"cents": 100})]), toolsets=[toolset])
    with pytest.raises(ConnectionError, match="processor hung up"):
        await agent.run("Charge 1 USD")
    assert toolset.last_saga_id is not None
    saga = await engine.log.get_saga(toolset.last_saga_id)
    assert saga is not None
    assert (saga.state, [s.state for s in saga.steps]) == ("failed", ["in_doubt"])


async def test_concurrent_runs_of_one_agent_get_separate_sagas() -> None:
    """for_run gives each run its own state: two runs at once, two sagas, one step each."""
    _, engine = new_engine()
    declare_tool(engine, "note", "irreversible")

    def note(text: str) -> str:
        """Write a note."""
        return text

    toolset = AmendsToolset(FunctionToolset([note]), engine=engine)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            prompt = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
            return ModelResponse(parts=[ToolCallPart("note", {"text": prompt})])
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(respond), toolsets=[toolset])
    await asyncio.gather(agent.run("first"), agent.run("second"))
    sagas = [await engine.log.get_saga(s.saga_id) for s in await engine.log.list_sagas()]
    got = sorted((s.title, [(st.tool, st.args) for st in s.steps]) for s in sagas if s)
    assert got == [
        ("first", [("note", {"text": "first"})]),
        ("second", [("note", {"text": "second"})]),
    ]


async def test_two_runs_inside_agent_run_are_one_saga() -> None:
    """One user request spanning two agent runs: one saga; the later run depends on the first."""
    world, engine = new_engine()
    declare_tool(engine, "set_stage", "reversible")
    toolset = AmendsToolset(FunctionToolset([set_stage_tool(world)]), engine=engine)
    first = Agent(scripted([("set_stage", {"stage": "contract_sent"})]), toolsets=[toolset])
    second = Agent(scripted([("set_stage", {"stage": "closed_won"})]), toolsets=[toolset])
    async with agent_run(engine, "Move ACME to won") as run:
        await first.run("step 1")
        await second.run("step 2")
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [(s.step_id, s.deps) for s in saga.steps] == [("s1", ()), ("s2", ("s1",))]
    assert toolset.last_saga_id == run.saga_id
    report = await engine.undo(run.saga_id)
    assert [s.state.value for s in report.steps] == ["reverted", "reverted"]
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_tokens_a_compensation_spends_through_an_agent_count_in_the_report() -> None:
    """A compensation that runs a Pydantic AI agent (to word a retraction) reports the tokens it
    used with spend(call, result): the reversal's report counts them."""
    _, engine = new_engine()
    writer = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("Sorry, ignore.")])))
    used: list[int] = []

    @engine.catalog.tool("notes.retract", reversibility="irreversible")
    async def retract(call: amends.Call, note_id: str) -> str:
        result = await writer.run(f"Word a retraction of note {note_id}")
        used.append(spend(call, result))
        return str(result.output)

    @engine.catalog.tool("notes.post", reversibility="reversible")
    async def post(call: amends.Call, text: str) -> str:
        call.inverse("notes.retract", note_id="n1")
        call.no_drift_check(reason="a note only this saga can see")
        return "n1"

    toolset = AmendsToolset(FunctionToolset([notes_post]), engine=engine)
    agent = Agent(scripted([("notes_post", {"text": "hello"})]), toolsets=[toolset])
    await agent.run("Post a note")
    assert toolset.last_saga_id is not None
    report = await engine.undo(toolset.last_saga_id)
    assert [s.state.value for s in report.steps] == ["reverted"], report.render("text")
    assert used and used[0] > 0
    assert report.tokens == used[0]


def notes_post(text: str) -> str:
    """Post a note (the framework's function; the catalog's notes.post holds the contract)."""
    call = amends.current_call()
    assert call is not None
    call.inverse("notes.retract", note_id="n1")
    call.no_drift_check(reason="a note only this saga can see")
    return "n1"


def test_the_toolset_needs_an_engine() -> None:
    with pytest.raises(amends.ConfigError, match="needs engine=amends.Engine"):
        AmendsToolset(FunctionToolset([]))


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_the_approval_gate_defers_residue_leaving_calls(approve: bool) -> None:
    """approval="residue": compensable and irreversible calls are deferred with the question as
    metadata; approved ones run as steps of the same saga, in their original turn (the charge
    does not depend on its sibling), rejected ones never run."""
    from agent_scene import CATALOG_TOOLS, FINAL_TEXT, TITLE, TURNS, lookup_weather
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    from amends.integrations.pydantic_ai import catalog_toolset

    world, engine = new_engine()
    script = [[ToolCallPart(n, a, tool_call_id=i) for i, n, a in turn] for turn in TURNS]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL_TEXT)])

    inner = FunctionToolset(
        [*catalog_toolset(engine.catalog, CATALOG_TOOLS).tools.values(), lookup_weather]
    )
    toolset = AmendsToolset(inner, engine=engine, approval="residue")
    agent = Agent(
        FunctionModel(respond), toolsets=[toolset], output_type=[str, DeferredToolRequests]
    )
    asked: list[str] = []
    async with agent_run(engine, TITLE) as run:
        out = await agent.run(TITLE)
        while isinstance(out.output, DeferredToolRequests):
            calls = out.output.approvals
            asked += [
                out.output.metadata[c.tool_call_id]["amends_approval"].splitlines()[1]
                for c in calls
            ]
            out = await agent.run(
                message_history=out.all_messages(),
                deferred_tool_results=DeferredToolResults(
                    approvals={c.tool_call_id: approve for c in calls}
                ),
            )
    assert out.output == FINAL_TEXT
    assert asked == [
        "Class: compensable. Undo can compensate this, but not without trace: residue remains.",
        "Class: compensable. Undo can compensate this, but not without trace: residue remains.",
        "Class: irreversible (no contract). Undo CANNOT take this back: a person would have to "
        "follow up.",
    ]
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    got = {s.tool: s.deps for s in saga.steps}
    ops = [e["op"] for e in world.effects()]
    if approve:
        assert got == {
            "crm.update_field": (),
            "payments.charge": (),
            "chat.post": ("s1", "s2"),
            "lookup_weather": ("s1", "s2"),
        }
        assert ops.count("charge") == 1
    else:
        assert got == {"crm.update_field": ()}
        assert "charge" not in ops and "post" not in ops


def test_an_unknown_approval_mode_is_refused() -> None:
    _, engine = new_engine()
    with pytest.raises(amends.ConfigError, match="approval is 'ask'"):
        AmendsToolset(FunctionToolset([]), engine=engine, approval="ask")


async def test_run_sync_inside_agent_run_sync_records_one_saga() -> None:
    """agent.run_sync runs its own event loop; inside agent_run_sync (whose saga lives on
    another) every call is still a step of that one saga, with the same dependencies."""
    from agent_scene import CATALOG_TOOLS, FINAL_TEXT, TITLE, TURNS, lookup_weather

    from amends.integrations.pydantic_ai import agent_run_sync, catalog_toolset

    _, engine = new_engine()
    script = [[ToolCallPart(n, a, tool_call_id=i) for i, n, a in turn] for turn in TURNS]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL_TEXT)])

    inner = FunctionToolset(
        [*catalog_toolset(engine.catalog, CATALOG_TOOLS).tools.values(), lookup_weather]
    )
    agent = Agent(FunctionModel(respond), toolsets=[AmendsToolset(inner, engine=engine)])

    def in_thread() -> str:
        with agent_run_sync(engine, TITLE) as run:
            assert agent.run_sync(TITLE).output == FINAL_TEXT
            assert agent.run_sync("again").output == FINAL_TEXT
        return run.saga_id

    saga_id = await asyncio.to_thread(in_thread)
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    tool_of = {s.step_id: s.tool for s in saga.steps}
    assert {s.tool: sorted(tool_of[d] for d in s.deps) for s in saga.steps} == {
        "crm.update_field": [],
        "payments.charge": [],
        "chat.post": ["crm.update_field", "payments.charge"],
        "lookup_weather": ["crm.update_field", "payments.charge"],
    }


@dataclasses.dataclass
class HoldFirstCall(WrapperToolset[Any]):
    """An outer toolset holding the first-listed call back: the calls reach amends reversed."""

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        if name == "crm_update_field":
            await asyncio.sleep(0.2)
        return await super().call_tool(name, tool_args, ctx, tool)


async def test_steps_of_one_turn_follow_the_models_order_not_the_order_calls_arrive() -> None:
    """Pydantic AI runs a response's tool calls concurrently; the saga numbers their steps as
    the model listed them, whichever reaches amends first."""
    world, engine = new_engine()
    inner = catalog_toolset(engine.catalog, ["crm.update_field", "payments.charge", "chat.post"])
    toolset = AmendsToolset(inner, engine=engine)
    turn = [
        ("crm_update_field", {"record_id": "acme", "field": "stage", "value": "closed_won"}),
        ("payments_charge", {"customer": "cus_acme", "cents": 5000}),
        ("chat_post", {"channel": "#sales", "text": "ACME is closed"}),
    ]
    agent = Agent(scripted(turn), toolsets=[HoldFirstCall(toolset)])
    await asyncio.wait_for(agent.run("Close ACME"), 30)
    assert toolset.last_saga_id is not None
    saga = await engine.log.get_saga(toolset.last_saga_id)
    assert saga is not None
    assert [(s.step_id, s.tool, s.state) for s in saga.steps] == [
        ("s1", "crm.update_field", "done"),
        ("s2", "payments.charge", "done"),
        ("s3", "chat.post", "done"),
    ]
    assert world.crm.read_field("acme", "stage") == "closed_won"


def test_the_logged_arguments_are_those_the_model_sent_in_every_form_of_its_call() -> None:
    """The step's arguments are the validated ones the model sent, in their validated order,
    whether the call carries them as a dict or as JSON (issue 25 items 6 and 9); a fresh dict
    each time."""
    from amends.integrations.pydantic_ai import _sent

    validated = {"a": 1, "b": 2}
    cases = [
        (None, {"a": 1, "b": 2}),
        (ToolCallPart("t", {"b": 2, "a": 1}), {"a": 1, "b": 2}),
        (ToolCallPart("t", {"b": 2}), {"b": 2}),
        (ToolCallPart("t", {}), {}),
        (ToolCallPart("t", '{"b": 2, "a": 1}'), {"a": 1, "b": 2}),
        (ToolCallPart("t", '{"a": 1}'), {"a": 1}),
        (ToolCallPart("t", ""), {}),
        (ToolCallPart("t", "{not json"), {}),
    ]
    for part, expected in cases:
        out = _sent(validated, part)
        assert out == expected
        assert list(out) == list(expected)
        assert out is not validated
    assert validated == {"a": 1, "b": 2}
