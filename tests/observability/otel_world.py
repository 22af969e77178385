"""A small world for the observability tests: the core world's CRM, payments and mail, plus a
card hold whose card number is a declared secret (rule 11), and whose release can be made to
fail with a message that quotes the card (what a careless vendor SDK does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import amends
from core_world import CoreWorld, fresh

CARD = "4111111111111111"
"""The secret: it must appear in no span, no attribute, no metric and no log line."""


@dataclass
class CardWorld:
    core: CoreWorld
    holds: dict[str, int] = field(default_factory=dict)
    release_error: str | None = None
    """When set, the release fails with this message (``{card}`` becomes the card)."""


def otel_world() -> tuple[CardWorld, amends.Catalog]:
    core, catalog = fresh()
    world = CardWorld(core)

    def resolver(request: amends.SecretRequest) -> str:
        return CARD

    @catalog.tool("card.status", reversibility="read_only")
    async def status(call: amends.Call, card: str) -> int | None:
        return world.holds.get(card)

    @catalog.tool(
        "card.hold", reversibility="reversible", sensitive=["card"], resolve_secret=resolver
    )
    async def hold(call: amends.Call, card: str, cents: int) -> dict[str, Any]:
        world.holds[card] = cents
        call.inverse("card.release", card=card)
        call.expect("card.status", {"card": card}, equals=cents)
        return {"held": cents}

    @catalog.tool("card.release", sensitive=["card"], resolve_secret=resolver)
    async def release(call: amends.Call, card: str) -> None:
        if world.release_error is not None:
            raise amends.PermanentError(world.release_error.format(card=card))
        world.holds.pop(card)

    return world, catalog


async def scene(engine: amends.Engine, title: str = "Close the ACME deal") -> str:
    """Five steps: two CRM edits, a card hold (secret), a charge (residue), an email."""
    async with engine.saga(title, tenant="acme", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("crm.update_field", record_id="r2", field="owner", value="zoe")
        saga.call("card.hold", card=CARD, cents=700, after=[a])
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
        saga.call("mail.send", to="c1@acme.test", subject="Welcome")
    return saga.id
