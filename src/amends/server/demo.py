"""``amends demo --serve``: serve the demo's saga log on the web page, without tokens.

Issue 17: the page opens on a saga that is *ready* to undo -- its honest preview and the button
visible -- while the demo's already-undone saga is listed beside it, so a first-time user sees
the preview, the confirmation and the report turn up in that order.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["READY_TITLE", "seed_ready_saga", "serve_demo"]

READY_TITLE = "Upgrade ACME to the premium plan"
"""Title of the saga ``amends demo --serve`` leaves ready to undo."""


async def seed_ready_saga(db: str) -> str:
    """Run a second sandbox saga in the demo's log and world, and leave it not undone.

    Five steps, one of each kind the screen groups: a CRM write (Revert), a card charge and a
    meeting invitation (Compensate, with a refund and cancellation notices as residue), a draft
    (Revert, no drift check needed) and an email (Acknowledge: a person must follow up).
    """
    from amends import Engine

    from ..sandbox import demo_catalog

    engine = Engine(demo_catalog(db), log=db)
    try:
        async with engine.saga(READY_TITLE, tenant="acme", actor="agent:sales") as saga:
            plan = saga.call(
                "crm.update_field", step_id="crm_plan", record_id="acme", field="plan",
                value="premium",
            )  # fmt: skip
            charge = saga.call(
                "payments.charge", step_id="upgrade_charge", after=[plan], customer="cus_acme",
                cents=240_000, description="ACME premium upgrade",
            )  # fmt: skip
            saga.call(
                "calendar.create_event", step_id="onboarding", after=[plan],
                title="Premium onboarding", start="2026-12-10T16:00:00Z",
                attendees=["buyer@acme.example", "sam@example.com"],
            )  # fmt: skip
            saga.call(
                "docs.create_draft", step_id="upgrade_doc", title="Premium plan terms",
                text="ACME moves to the premium plan.",
            )  # fmt: skip
            saga.call(
                "mail.send", step_id="upgrade_mail", after=[charge], to="buyer@acme.example",
                subject="Welcome to premium", body="Your plan is now premium.",
            )  # fmt: skip
    finally:
        await engine.close()
    return saga.id


def serve_demo(result: Any, *, db: str, host: str = "127.0.0.1", port: int = 8765) -> int:
    """Serve ``db`` (the demo's saga log) in ``--no-auth`` mode until interrupted.

    Args:
        result: The :class:`amends.sandbox.demo.DemoResult` (its saga is the undone one).
        db: The demo's saga log; its world file is ``db + ".world"``.
        host: Address to listen on.
        port: Port to listen on.
    """
    import uvicorn

    from amends import Engine

    from ..sandbox import demo_catalog
    from .app import ServerSettings, create_app
    from .connections import ConnectionLimits, uvicorn_config

    ready = asyncio.run(seed_ready_saga(db))
    catalog = demo_catalog(db)
    app = create_app(lambda: Engine(catalog, log=db), ServerSettings(no_auth=True))
    undone = getattr(result, "saga_id", "")
    print(f"amends: ready to undo:  http://{host}:{port}/ui/sagas/{ready}")
    print(f"amends: already undone: http://{host}:{port}/ui/sagas/{undone}")
    partly = getattr(result, "selective_saga_id", "")
    if partly:  # issue 27: the demo's second request, only its charge taken back
        print(f"amends: partly undone:  http://{host}:{port}/ui/sagas/{partly}")
    print(f"amends: every saga:     http://{host}:{port}/   (Ctrl-C stops)")
    # the same connection bounds and proxy handling as `amends serve` (issue 21.8, 21.14)
    config = uvicorn_config(app, ConnectionLimits(), host=host, port=port, log_level="warning")
    uvicorn.Server(config).run()
    return 0
