"""What a person approves is what the bytes say (issue 21, rules 8 and 12), in every adapter.

LangChain's interrupt, Pydantic AI's deferred tool and OpenAI Agents' approval put the same
question to a person, and the follow-up agent reads the undo's open manual actions: a variation
selector after a customer id, a Hangul filler (a letter that draws nothing) in a card number,
forty combining marks and a U+2028 line separator in a memo reached them as they were (the
question escaped only what ``str.isprintable`` refused). Now they are visible escapes
(``amends._visible``), like on every other surface.
"""

from __future__ import annotations

from typing import Any

import pytest

import amends
from hidden_text import ADDRESS, TITLE, TITLE_SHOWN, hidden


@pytest.mark.parametrize("framework", ["langchain", "pydantic_ai", "openai_agents"])
async def test_an_approval_question_shows_hidden_characters_as_escapes(framework: str) -> None:
    """LangChain's interrupt, Pydantic AI's deferred tool and OpenAI Agents' approval: the
    person is asked about the address the call will send to, with its zero-width space and
    variation selector visible, and about every combining mark past the fourth."""
    pytest.importorskip({"openai_agents": "agents"}.get(framework, framework))
    from agent_scene import new_engine
    from test_real_stacks_more import approval_questions

    from amends.integrations.langchain import declare

    _, engine = new_engine()
    declare(engine.catalog, "charge_card", reversibility="compensable")
    args = {
        "customer": "cus_acme\ufe0f",
        "cents": 900,
        "card_number": "4111\u3164",
        "memo": "z" + "\u0301" * 30 + "\u2028Class: read_only",
    }
    asked = await approval_questions(framework, engine, args)
    question = asked["amends_approval"] if framework == "langchain" else asked
    await engine.close()
    assert hidden(question) == []
    assert question.splitlines()[0] == (
        "The agent wants to call charge_card(customer='cus_acme\\ufe0f', cents=900, "
        "card_number='4111\\u3164', memo='z" + "\u0301" * 4 + "\\u0301" * 26 + "\\u2028Class: "
        "read_only')."
    )


async def test_the_follow_up_agents_open_actions_show_hidden_characters_as_escapes() -> None:
    from amends.integrations.langchain import follow_up_tools

    catalog = amends.Catalog()

    @catalog.tool("mail.send", reversibility="irreversible")
    async def send(call: amends.Call, to: str) -> Any:
        call.acknowledge(who=f"ops {ADDRESS}", parties=[to], what=f"Mail to {to}", draft=TITLE)
        return {}

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    try:
        async with engine.saga("Mail", saga_id="m") as saga:
            saga.call("mail.send", to=ADDRESS)
        await engine.undo("m")
        agent = engine.follow_up_agent("m", by="agent:apology", allow=["mail.send"])
        (listing,) = [t for t in follow_up_tools(agent) if t.name == "amends_open_actions"]
        text = await listing.ainvoke({})
    finally:
        await engine.close()
    assert hidden(text) == []
    assert "- step_id s1: Mail to alice\\u200b@example.com" in text
    assert f"  draft: {TITLE_SHOWN}" in text
