"""OpenAI Agents SDK adapter: what the shared scene (test_scene.py) does not cover."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_scene import TITLE, new_engine, openai_agent
from agents import Agent, RunHooks, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import amends
from amends.integrations.openai_agents import (
    agent_run,
    approval_requests,
    catalog_function_tools,
    run_agent,
    wrap_agent,
    wrap_tools,
)

DEFAULT_ERROR_TEXT = "An error occurred while running the tool"


def one_call_agent(tool: Any, args: dict[str, Any]) -> Agent[Any]:
    model = ScriptedModel(
        [
            ModelStep(output=[function_call(tool.name, args, call_id="c1")]),
            ModelStep(output=[assistant_message("ok")]),
        ]
    )
    return Agent(name="a", model=model, tools=[tool])


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_tool_exception_is_in_doubt_and_the_model_sees_the_sdks_own_error_text(
    sync: bool,
) -> None:
    """Rule 9 through the SDK: the step is in_doubt, and the tool's failure handler still
    words the error for the model exactly as without amends."""
    _, engine = new_engine()

    @function_tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise ConnectionError("processor hung up")

    agent = one_call_agent(charge_card, {"cents": 100})
    if sync:
        from amends.integrations.openai_agents import run_agent_sync

        outcome = await asyncio.to_thread(run_agent_sync, engine, agent, "Charge 1 USD")
    else:
        outcome = await run_agent(engine, agent, "Charge 1 USD")
    outputs = [getattr(i, "output", None) for i in outcome.result.new_items]
    assert any(isinstance(o, str) and o.startswith(DEFAULT_ERROR_TEXT) for o in outputs)
    saga = await engine.log.get_saga(outcome.saga_id)
    assert saga is not None
    assert (saga.title, saga.state) == ("Charge 1 USD", "failed")
    assert [(s.tool, s.state) for s in saga.steps] == [("charge_card", "in_doubt")]
    assert "processor hung up" in (saga.steps[0].error or "")


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_the_approval_gate_asks_before_residue_leaving_calls(approve: bool) -> None:
    """approval="residue": the run stops before each compensable or irreversible call with the
    question to ask; approved calls run as steps of the same saga, rejected ones never run."""
    world, engine = new_engine()
    agent = openai_agent(engine)
    asked: list[str] = []
    async with agent_run(engine, TITLE) as run:
        outcome = await run_agent(engine, agent, TITLE, approval="residue")
        while outcome.result.interruptions:
            state = outcome.result.to_state()
            for item, question in approval_requests(engine, outcome.result):
                asked.append(question.splitlines()[0])
                (state.approve if approve else state.reject)(item)
            outcome = await run_agent(engine, agent, state, approval="residue")
    assert outcome.result.final_output == "Done: ACME is closed."
    assert outcome.saga_id == run.saga_id
    assert asked == [
        "The agent wants to call payments.charge(customer='cus_acme', cents=5000).",
        "The agent wants to call chat.post(channel='#sales', "
        "text='ACME is closed: 50.00 USD charged').",
        "The agent wants to call lookup_weather(city='Paris').",
    ]
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    steps = {s.tool: tuple(sorted(d for d in s.deps)) for s in saga.steps}
    ops = [e["op"] for e in world.effects()]
    if approve:
        assert steps == {
            "crm.update_field": (),
            "payments.charge": (),  # approved and run in turn 1: no dependency on its sibling
            "chat.post": ("s1", "s2"),
            "lookup_weather": ("s1", "s2"),
        }
        assert ops.count("charge") == 1 and ops.count("post") == 1
    else:
        assert steps == {"crm.update_field": ()}  # reversible: not gated
        assert "charge" not in ops and "post" not in ops


async def test_without_the_hooks_every_call_depends_on_every_step_done_before_it() -> None:
    """wrap_agent + Runner.run without AmendsRunHooks: turns are unknown, so each call depends
    on every step done when it started (more order than needed, never less)."""
    _, engine = new_engine()
    agent = wrap_agent(openai_agent(engine), engine)
    async with agent_run(engine, TITLE) as run:
        result = await Runner.run(agent, TITLE)
    assert result.final_output == "Done: ACME is closed."
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    tool_of = {s.step_id: s.tool for s in saga.steps}
    deps = {s.tool: {tool_of[d] for d in s.deps} for s in saga.steps}
    assert deps["chat.post"] >= {"crm.update_field", "payments.charge"}
    assert deps["lookup_weather"] >= {"crm.update_field", "payments.charge"}


async def test_the_hooks_pass_every_event_to_the_users_hooks() -> None:
    """AmendsRunHooks only observe, and the user's own hooks still get every event."""
    from agents import RunHooks

    _, engine = new_engine()
    seen: list[str] = []

    class Mine(RunHooks[Any]):
        async def on_llm_start(self, *args: Any) -> None:
            seen.append("llm_start")

        async def on_tool_end(self, *args: Any) -> None:
            seen.append("tool_end")

        async def on_agent_end(self, *args: Any) -> None:
            seen.append("agent_end")

    outcome = await run_agent(engine, openai_agent(engine), TITLE, hooks=Mine())
    assert outcome.result.final_output == "Done: ACME is closed."
    assert seen.count("llm_start") == 3 and seen.count("tool_end") == 4
    assert seen[-1] == "agent_end"


def test_only_function_tools_are_wrapped_and_bad_input_is_refused() -> None:
    """Other tools pass through unchanged; no engine or an unknown approval mode: ConfigError."""
    _, engine = new_engine()

    @function_tool
    def ping() -> str:
        """Ping."""
        return "pong"

    other = object()
    wrapped = wrap_tools([ping, other], engine)  # type: ignore[list-item]
    assert wrapped[1] is other
    assert wrapped[0] is not ping and wrapped[0].name == "ping"
    with pytest.raises(amends.ConfigError, match="needs an amends.Engine"):
        wrap_tools([ping], "amends.db")  # type: ignore[arg-type]
    with pytest.raises(amends.ConfigError, match="approval is 'always'"):
        wrap_tools([ping], engine, approval="always")


def test_a_wrapped_tools_hints_are_objects_the_sdk_reads_without_compiling() -> None:
    """Issue 25 item 6: the SDK reads on_invoke_tool's signature and type hints on every call
    to choose the context it passes; written as strings they were compiled and evaluated anew
    each time (half of the adapter's own Python calls). They are objects, and they still say
    the tool takes the SDK's ToolContext (the context the SDK passes is unchanged)."""
    import typing

    from agents.tool_context import ToolContext

    _, engine = new_engine()

    @function_tool
    def ping() -> str:
        """Ping."""
        return "pong"

    (wrapped,) = wrap_tools([ping], engine)
    invoke = wrapped.on_invoke_tool  # type: ignore[union-attr]
    raw = invoke.__annotations__
    assert [k for k, v in raw.items() if isinstance(v, str)] == []
    assert typing.get_type_hints(invoke) == {
        "ctx": ToolContext[Any],
        "args_json": str,
        "return": Any,
    }


async def test_a_wrapped_tool_outside_an_agent_run_is_a_clear_error() -> None:
    """A wrapped agent run without run_agent/agent_run: the tool call says how to fix it."""
    _, engine = new_engine()

    @function_tool(failure_error_function=None)
    def ping() -> str:
        """Ping."""
        return "pong"

    from agents.exceptions import UserError

    agent = wrap_agent(one_call_agent(ping, {}), engine)
    with pytest.raises(UserError, match="outside an agent run; use run_agent") as caught:
        await Runner.run(agent, "ping")
    assert isinstance(caught.value.__cause__, amends.ConfigError)


async def test_arguments_the_sdk_rejects_are_a_failed_step_not_in_doubt() -> None:
    """Invalid arguments: the SDK refuses before calling the function (ModelBehaviorError), so
    the step is failed (no effect) and the model gets the SDK's own error text."""
    _, engine = new_engine()

    @function_tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise AssertionError("never runs")

    outcome = await run_agent(engine, one_call_agent(charge_card, {"cents": "a lot"}), "Charge")
    outputs = [getattr(i, "output", None) for i in outcome.result.new_items]
    assert any(isinstance(o, str) and o.startswith(DEFAULT_ERROR_TEXT) for o in outputs)
    saga = await engine.log.get_saga(outcome.saga_id)
    assert saga is not None
    assert [(s.tool, s.state) for s in saga.steps] == [("charge_card", "failed")]
    assert "Invalid JSON input for tool charge_card" in (saga.steps[0].error or "")


async def test_runner_run_sync_inside_agent_run_sync_records_one_saga() -> None:
    """Runner.run_sync runs its own event loop; inside agent_run_sync every call is a step of
    that run's saga, with turns from AmendsRunHooks."""
    from amends.integrations.openai_agents import AmendsRunHooks, agent_run_sync

    _, engine = new_engine()
    agent = wrap_agent(openai_agent(engine), engine)

    def in_thread() -> str:
        with agent_run_sync(engine, TITLE) as run:
            result = Runner.run_sync(agent, TITLE, hooks=AmendsRunHooks())
        assert result.final_output == "Done: ACME is closed."
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


class HoldFirstCall(RunHooks[Any]):
    """The user's own hooks, slow for the first-listed call (say, they log it somewhere): the
    SDK's concurrent calls reach amends in the other order."""

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if tool.name == "crm_update_field":
            await asyncio.sleep(0.2)


async def test_steps_of_one_turn_follow_the_models_order_not_the_order_calls_arrive() -> None:
    """The SDK runs a response's function calls concurrently; the saga numbers their steps as
    the model listed them, whichever reaches amends first."""
    world, engine = new_engine()
    tools = catalog_function_tools(
        engine.catalog, ["crm.update_field", "payments.charge", "chat.post"]
    )
    model = ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call(
                        "crm_update_field",
                        {"record_id": "acme", "field": "stage", "value": "closed_won"},
                        call_id="c1",
                    ),
                    function_call(
                        "payments_charge", {"customer": "cus_acme", "cents": 5000}, call_id="c2"
                    ),
                    function_call(
                        "chat_post", {"channel": "#sales", "text": "ACME is closed"}, call_id="c3"
                    ),
                ]
            ),
            ModelStep(output=[assistant_message("ok")]),
        ]
    )
    agent = Agent(name="a", model=model, tools=tools)
    outcome = await asyncio.wait_for(
        run_agent(engine, agent, "Close ACME", hooks=HoldFirstCall()), 30
    )
    saga = await engine.log.get_saga(outcome.saga_id)
    assert saga is not None
    assert [(s.step_id, s.tool, s.state) for s in saga.steps] == [
        ("s1", "crm.update_field", "done"),
        ("s2", "payments.charge", "done"),
        ("s3", "chat.post", "done"),
    ]
    assert world.crm.read_field("acme", "stage") == "closed_won"
