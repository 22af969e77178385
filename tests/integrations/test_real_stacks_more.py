"""Issue 25, held in more shapes: the three adapters driven by real agent loops with scripted
models (stacks.py), for tools, runs and failures the first tests did not try."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from agent_scene import new_engine
from pydantic import BaseModel, Field
from stacks import FINAL, FRAMEWORKS, play


class Order(BaseModel):
    sku: str
    qty: int = 1
    when: str | None = None


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_pydantic_model_argument_is_logged_as_the_json_the_model_sent(
    framework: str,
) -> None:
    """Item 9's class: a tool taking a Pydantic model logs the model's JSON under the tool's
    parameter name in every framework. Pydantic AI logged ``{}`` for a tool whose one argument
    is a model (its schema lets the model send the fields unwrapped, and those names were taken
    for defaults never sent) and ``{"repr": "..."}`` beside another argument."""
    _, engine = new_engine()
    got: list[Any] = []

    def place_order(order: Order) -> str:
        """Place an order."""
        got.append(order)
        return f"placed {order.sku} x{order.qty}"

    def gift_order(order: Order, note: str, wrap: bool = False) -> str:
        """Place an order as a gift."""
        got.append((order, note, wrap))
        return f"gift {order.sku}"

    sent = {"sku": "A1", "when": "2026-12-10"}
    # Pydantic AI's schema for a tool whose one argument is a model is the model's own fields
    first = sent if framework == "pydantic_ai" else {"order": sent}
    turns = [
        [("c1", "place_order", first), ("c2", "gift_order", {"order": sent, "note": "hi"})],
    ]
    played = await play(framework, engine, turns, [place_order, gift_order])
    assert played.output == FINAL
    assert played.answers == {"c1": "placed A1 x1", "c2": "gift A1"}
    assert got == [
        Order(sku="A1", when="2026-12-10"),
        (Order(sku="A1", when="2026-12-10"), "hi", False),
    ]
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.args, s.state) for s in saga.steps] == [
        ("s1", "place_order", {"order": sent}, "done"),
        ("s2", "gift_order", {"order": sent, "note": "hi"}, "done"),
    ]


async def test_pydantic_ai_an_argument_sent_under_its_alias_is_logged() -> None:
    """Item 9's class: an argument the model sends under its alias (``dealId``) is logged under
    the parameter's name, and a default the model never sent still is not (it logged ``{}``)."""
    _, engine = new_engine()
    got: list[tuple[str, str]] = []

    def tag_deal(deal_id: Annotated[str, Field(alias="dealId")], label: str = "hot") -> str:
        """Tag a deal."""
        got.append((deal_id, label))
        return "tagged"

    played = await play(
        "pydantic_ai", engine, [[("c1", "tag_deal", {"dealId": "acme"})]], [tag_deal]
    )
    assert got == [("acme", "hot")]
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.tool, s.args, s.state) for s in saga.steps] == [
        ("tag_deal", {"deal_id": "acme"}, "done")
    ]
