"""An OpenAI Agents SDK agent whose tool calls amends can undo (offline, scripted model).

Run: python docs/integrations/examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # offline: no trace export

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import amends
from amends.integrations.openai_agents import catalog_function_tools, declare, run_agent
from amends.sandbox import World, sandbox_catalog

world = World()  # simulated CRM, payments, chat...
catalog = sandbox_catalog(world)  # their contracts: reversible, compensable, irreversible


# Declare read-only tools first: a tool with no contract is "not declared — treated as
# irreversible", and undo would ask its owner to declare it.
declare(
    catalog, "lookup_weather", reversibility="read_only", describe="Look up the weather in {city}"
)


@function_tool
def lookup_weather(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {city}"


model = ScriptedModel(  # a fake model that plays a fixed script (no API key needed)
    [
        ModelStep(  # turn 1: two independent tool calls
            output=[
                function_call(
                    "crm_update_field",
                    {"record_id": "acme", "field": "stage", "value": "closed_won"},
                    call_id="call_1",
                ),
                function_call(
                    "payments_charge", {"customer": "cus_acme", "cents": 5000}, call_id="call_2"
                ),
            ]
        ),
        ModelStep(  # turn 2: having seen both results
            output=[
                function_call(
                    "chat_post", {"channel": "#sales", "text": "ACME is closed"}, call_id="call_3"
                ),
                function_call("lookup_weather", {"city": "Paris"}, call_id="call_4"),
            ]
        ),
        ModelStep(output=[assistant_message("Done: ACME is closed.")]),
    ]
)


async def main() -> amends.UndoReport:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    tools = [
        *catalog_function_tools(catalog, ["crm.update_field", "payments.charge", "chat.post"]),
        lookup_weather,
    ]
    agent = Agent(name="sales", model=model, tools=tools)
    outcome = await run_agent(engine, agent, "Close the ACME deal")  # <- instead of Runner.run

    world.crm.human_edit("acme", "stage", "contract_sent")  # the account owner steps in

    report = await engine.undo(outcome.saga_id)
    print(report.render("text"))
    await engine.close()  # its log's connection
    return report


if __name__ == "__main__":
    asyncio.run(main())
