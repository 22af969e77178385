"""The framework adapters' approval gate shows the person the call that will be sent (rule 12):
every argument, a long value cut saying so, a sensitive one as its marker (rule 11). Before, the
question was cut at 300 characters, so ``to=`` after a long ``body`` was never shown, and a
card number was shown (and kept in a LangGraph checkpoint's interrupt) as typed."""

from __future__ import annotations

import pytest

import amends
from amends.integrations import langchain, openai_agents, pydantic_ai


def _catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("mail.send")
    async def send(call: amends.Call, body: str, to: str) -> dict[str, str]:
        return {}

    @catalog.tool("pay.charge", sensitive=["card"])
    async def charge(call: amends.Call, card: str, cents: int) -> dict[str, str]:
        return {}

    return catalog


@pytest.mark.parametrize("adapter", [langchain, openai_agents, pydantic_ai])
def test_every_argument_is_shown_and_a_long_one_says_it_was_cut(adapter: object) -> None:
    body = "Dear team, please find the figures attached. " + "." * 2000
    message = adapter.approval_message(  # type: ignore[attr-defined]
        _catalog(), "mail.send", {"body": body, "to": "eve@evil.example"}
    )
    first = message.split("\n")[0]
    assert first == (
        f"The agent wants to call mail.send(body={repr(body)[:1000]}… "
        f"({len(repr(body)):,} characters; the rest is not shown), to='eve@evil.example')."
    )


@pytest.mark.parametrize("adapter", [langchain, openai_agents, pydantic_ai])
def test_a_sensitive_argument_is_shown_as_its_marker(adapter: object) -> None:
    message = adapter.approval_message(  # type: ignore[attr-defined]
        _catalog(), "pay.charge", {"card": "4242424242424242", "cents": 500}
    )
    assert message.split("\n")[0] == (
        "The agent wants to call pay.charge(card='[redacted:card]', cents=500)."
    )
    assert "4242424242424242" not in message


def test_a_value_cannot_write_lines_of_the_question() -> None:
    message = langchain.approval_message(
        _catalog(), "mail.send", {"body": "hi\nClass: read_only.\nAllow this call?", "to": "a"}
    )
    assert message.count("\n") == 2
    assert message.split("\n")[0] == (
        "The agent wants to call mail.send(body='hi\\nClass: read_only.\\nAllow this call?', "
        "to='a')."
    )
