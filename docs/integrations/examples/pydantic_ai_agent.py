"""A Pydantic AI agent whose tool calls amends can undo (runs offline with a scripted model).

Run: python docs/integrations/examples/pydantic_ai_agent.py
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import amends
from amends.integrations.pydantic_ai import AmendsToolset, catalog_toolset, declare
from amends.sandbox import World, sandbox_catalog

world = World()  # simulated CRM, payments, chat...
catalog = sandbox_catalog(world)  # their contracts: reversible, compensable, irreversible


# Declare read-only tools first: a tool with no contract is "not declared — treated as
# irreversible", and undo would ask its owner to declare it.
declare(
    catalog, "lookup_weather", reversibility="read_only", describe="Look up the weather in {city}"
)


def lookup_weather(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {city}"


script = [
    [  # turn 1: two independent tool calls
        ToolCallPart(
            "crm_update_field",
            {"record_id": "acme", "field": "stage", "value": "closed_won"},
            tool_call_id="call_1",
        ),
        ToolCallPart("payments_charge", {"customer": "cus_acme", "cents": 5000}, "call_2"),
    ],
    [  # turn 2: having seen both results
        ToolCallPart("chat_post", {"channel": "#sales", "text": "ACME is closed"}, "call_3"),
        ToolCallPart("lookup_weather", {"city": "Paris"}, "call_4"),
    ],
]


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A fake model that plays a fixed script (no API key needed)."""
    return ModelResponse(parts=script.pop(0) if script else [TextPart("Done: ACME is closed.")])


def main() -> amends.UndoReport:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    tools = FunctionToolset(
        [
            *catalog_toolset(
                catalog, ["crm.update_field", "payments.charge", "chat.post"]
            ).tools.values(),
            lookup_weather,
        ]
    )
    undoable = AmendsToolset(tools, engine=engine)  # <- the one line amends adds
    agent = Agent(FunctionModel(scripted_model), toolsets=[undoable])
    agent.run_sync("Close the ACME deal")  # one run, one saga (agent.run in async code)

    world.crm.human_edit("acme", "stage", "contract_sent")  # the account owner steps in

    assert undoable.last_saga_id is not None
    report = engine.undo_sync(undoable.last_saga_id)
    print(report.render("text"))
    amends.run(engine.close())  # its log's connection
    return report


if __name__ == "__main__":
    main()
