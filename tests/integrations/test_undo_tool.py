"""The undo tool the agent can call (issue 15 item 4), in each framework, sync and async."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_scene import new_engine

import amends

CRM = {"record_id": "acme", "field": "stage", "value": "closed_won"}
CHARGE = {"customer": "cus_acme", "cents": 5000}
FINAL = "Undone, as far as it goes."


async def via_langchain(
    engine: amends.Engine, sync: bool, undo: dict[str, Any] | None = None
) -> tuple[str, str]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    from amends.integrations.langchain import AmendsMiddleware, catalog_tools, undo_tool

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    calls = [
        {"name": "crm_update_field", "args": CRM, "id": "c1"},
        {"name": "payments_charge", "args": CHARGE, "id": "c2"},
    ]
    turns = [[calls[0]], [calls[1]]] if undo is not None else [calls]  # selective: one a turn
    model = Scripted(
        messages=iter(
            [
                *(AIMessage(content="", tool_calls=t) for t in turns),  # type: ignore[misc]
                AIMessage(
                    content="", tool_calls=[{"name": "amends_undo", "args": undo or {}, "id": "c3"}]
                ),
                AIMessage(content=FINAL),
            ]
        )
    )
    tools = [*catalog_tools(engine.catalog, ["crm.update_field", "payments.charge"]), undo_tool()]
    mw = AmendsMiddleware(engine)
    agent = create_agent(model, tools, middleware=[mw])
    state = {"messages": [("user", "Close ACME, then think better of it")]}
    out = await (asyncio.to_thread(agent.invoke, state) if sync else agent.ainvoke(state))
    assert out["messages"][-1].content == FINAL
    answer = next(
        m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c3"
    )
    assert mw.last_saga_id is not None
    return str(answer.content), mw.last_saga_id


async def via_pydantic_ai(
    engine: amends.Engine, sync: bool, undo: dict[str, Any] | None = None
) -> tuple[str, str]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset, catalog_toolset, undo_tool

    first = [
        ToolCallPart("crm_update_field", CRM, "c1"),
        ToolCallPart("payments_charge", CHARGE, "c2"),
    ]
    turns = [[first[0]], [first[1]]] if undo is not None else [first]  # selective: one a turn
    script = [*turns, [ToolCallPart("amends_undo", undo or {}, "c3")]]
    answers: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for m in messages:
            if isinstance(m, ModelRequest):
                answers.extend(
                    str(p.content)
                    for p in m.parts
                    if isinstance(p, ToolReturnPart) and p.tool_call_id == "c3"
                )
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL)])

    tools = catalog_toolset(engine.catalog, ["crm.update_field", "payments.charge"])
    toolset = AmendsToolset(FunctionToolset([*tools.tools.values(), undo_tool()]), engine=engine)
    agent = Agent(FunctionModel(respond), toolsets=[toolset])
    prompt = "Close ACME, then think better of it"
    out = await (asyncio.to_thread(agent.run_sync, prompt) if sync else agent.run(prompt))
    assert out.output == FINAL
    assert toolset.last_saga_id is not None
    return answers[-1], toolset.last_saga_id


async def via_openai_agents(
    engine: amends.Engine, sync: bool, undo: dict[str, Any] | None = None
) -> tuple[str, str]:
    from agents import Agent
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import (
        catalog_function_tools,
        run_agent,
        run_agent_sync,
        undo_tool,
    )

    first = [
        function_call("crm_update_field", CRM, call_id="c1"),
        function_call("payments_charge", CHARGE, call_id="c2"),
    ]
    turns = [[first[0]], [first[1]]] if undo is not None else [first]  # selective: one a turn
    model = ScriptedModel(
        [
            *(ModelStep(output=t) for t in turns),
            ModelStep(output=[function_call("amends_undo", undo or {}, call_id="c3")]),
            ModelStep(output=[assistant_message(FINAL)]),
        ]
    )
    tools = [
        *catalog_function_tools(engine.catalog, ["crm.update_field", "payments.charge"]),
        undo_tool(),
    ]
    agent = Agent(name="a", model=model, tools=tools)
    prompt = "Close ACME, then think better of it"
    if sync:
        outcome = await asyncio.to_thread(run_agent_sync, engine, agent, prompt)
    else:
        outcome = await run_agent(engine, agent, prompt)
    assert outcome.result.final_output == FINAL
    answer = next(
        i.output
        for i in outcome.result.new_items
        if getattr(i, "raw_item", None) is not None
        and (i.raw_item.get("call_id") if isinstance(i.raw_item, dict) else None) == "c3"
    )
    return str(answer), outcome.saga_id


DRIVERS = {
    "langchain": via_langchain,
    "pydantic_ai": via_pydantic_ai,
    "openai_agents": via_openai_agents,
}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("framework", DRIVERS)
async def test_the_agent_can_undo_its_own_run_and_gets_the_honest_report(
    framework: str, sync: bool
) -> None:
    """The model calls amends_undo after two tool calls: it gets the report as text, the world
    is restored as far as the contracts allow, the undo call is no step, and a later
    engine.undo joins the same reversal (rule 6)."""
    world, engine = new_engine()
    answer, saga_id = await DRIVERS[framework](engine, sync)
    assert "Status: partially_reversed" in answer
    # issue 17: the steps are sentences (the sandbox's describe= templates)
    assert "Revert      reverted     Set stage of CRM record acme to" in answer
    assert "Compensate  compensated  Charge 50.00 USD to cus_acme" in answer
    assert world.crm.read_field("acme", "stage") == "negotiation"
    assert world.snapshot()["payments"]["charges"]["ch_1"]["refunded"] == 5000
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    assert sorted(s.tool for s in saga.steps) == ["crm.update_field", "payments.charge"]
    report = await engine.undo(saga_id)
    assert report.reversal_id in answer
    refunds = [e for e in world.effects() if e["op"] == "refund"]
    assert len(refunds) == 1, json.dumps(refunds)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("framework", DRIVERS)
async def test_the_agent_can_undo_only_some_of_its_calls(framework: str, sync: bool) -> None:
    """Issue 27: the model calls amends_undo {"steps": ["s2"]} after a CRM update (s1) and a
    charge (s2, a later turn: it depends on s1): only the charge is refunded, the CRM keeps the
    agent's value, and the report says what was kept; a later whole undo reverts the CRM and
    never refunds twice."""
    world, engine = new_engine()
    answer, saga_id = await DRIVERS[framework](engine, sync, {"steps": ["s2"]})
    assert "Status: partially_reversed" in answer, answer
    assert "Selected: s2 (only these and what depends on them)" in answer
    assert "Kept as they are: s1" in answer
    assert "Compensate  compensated  Charge 50.00 USD to cus_acme" in answer
    assert world.crm.read_field("acme", "stage") == "closed_won"
    assert world.snapshot()["payments"]["charges"]["ch_1"]["refunded"] == 5000
    report = await engine.undo(saga_id)
    assert report.reversal_id in answer and report.selection is None
    assert world.crm.read_field("acme", "stage") == "negotiation"
    refunds = [e for e in world.effects() if e["op"] == "refund"]
    assert len(refunds) == 1, json.dumps(refunds)
