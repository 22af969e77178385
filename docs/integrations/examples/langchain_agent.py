"""A LangChain agent whose tool calls amends can undo (runs offline with a scripted model).

Run: python docs/integrations/examples/langchain_agent.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

import amends
from amends.integrations.langchain import AmendsMiddleware, catalog_tools, declare
from amends.sandbox import World, sandbox_catalog

world = World()  # simulated CRM, payments, chat...
catalog = sandbox_catalog(world)  # their contracts: reversible, compensable, irreversible


# Declare read-only tools first: a tool with no contract is "not declared — treated as
# irreversible", and undo would ask its owner to declare it.
declare(
    catalog, "lookup_weather", reversibility="read_only", describe="Look up the weather in {city}"
)


@tool
def lookup_weather(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {city}"


class ScriptedModel(GenericFakeChatModel):
    """A fake chat model that plays a fixed script (no API key needed)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


model = ScriptedModel(
    messages=iter(
        [
            AIMessage(  # turn 1: two independent tool calls
                content="",
                tool_calls=[
                    {
                        "name": "crm_update_field",
                        "args": {"record_id": "acme", "field": "stage", "value": "closed_won"},
                        "id": "call_1",
                    },
                    {
                        "name": "payments_charge",
                        "args": {"customer": "cus_acme", "cents": 5000},
                        "id": "call_2",
                    },
                ],
            ),
            AIMessage(  # turn 2: having seen both results
                content="",
                tool_calls=[
                    {
                        "name": "chat_post",
                        "args": {"channel": "#sales", "text": "ACME is closed"},
                        "id": "call_3",
                    },
                    {"name": "lookup_weather", "args": {"city": "Paris"}, "id": "call_4"},
                ],
            ),
            AIMessage(content="Done: ACME is closed."),
        ]
    )
)


async def main() -> amends.UndoReport:
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    tools = [
        *catalog_tools(catalog, ["crm.update_field", "payments.charge", "chat.post"]),
        lookup_weather,
    ]
    undoable = AmendsMiddleware(engine)  # <- the one line amends adds
    agent = create_agent(model, tools, middleware=[undoable])
    await agent.ainvoke({"messages": [("user", "Close the ACME deal")]})  # one run, one saga

    world.crm.human_edit("acme", "stage", "contract_sent")  # the account owner steps in

    report = await engine.undo(undoable.last_saga_id)
    print(report.render("text"))
    await engine.close()  # its log's connection
    return report


if __name__ == "__main__":
    asyncio.run(main())
