"""A vendor that needs an API key, over the sandbox CRM: the catalog of the trust-boundary tests.

``vendor.set_field`` takes the vendor's API key as a sensitive argument (rule 11: redacted before
the log) and its inverse needs it again (resolved from ``$VENDOR_API_KEY`` at undo time). The
vendor keeps every argument it received, so a test can say exactly what reached it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import amends
from amends.sandbox import World

SECRET = "sk_live_TRUSTBOUNDARY_9f8e7d6c5b4a"
"""The vendor's API key, known to the process only through ``$VENDOR_API_KEY``."""
ENV = "VENDOR_API_KEY"
FORGED = "[redacted:api_key]"
"""Text a third party (or a prompt-injected agent) writes so that it looks like amends' marker."""


@dataclass
class Vendor:
    """The sandbox world and every call the vendor received, arguments as it got them."""

    world: World
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def leaked(self) -> list[tuple[str, dict[str, Any]]]:
        """Calls whose arguments carried the secret anywhere but in ``api_key``."""
        return [
            (tool, args)
            for tool, args in self.received
            if SECRET in repr({k: v for k, v in args.items() if k != "api_key"})
        ]


def vendor_catalog(vendor: Vendor) -> amends.Catalog:
    """``vendor.set_field`` (reversible, needs the key), ``vendor.read_field`` (its probe) and
    ``vendor.post`` (a ticket whose compensation quotes the agent's memo back to the vendor)."""
    catalog = amends.Catalog()
    crm = vendor.world.crm
    resolve = amends.from_env(prefix="VENDOR_")

    def check(tool: str, args: dict[str, Any]) -> None:
        vendor.received.append((tool, dict(args)))
        if args.get("api_key") != SECRET:
            raise amends.PermanentError(f"{tool}: the vendor refused the API key")

    @catalog.tool("vendor.read_field", reversibility="read_only")
    async def read_field(call: amends.Call, record_id: str, field: str) -> Any:
        return crm.read_field(record_id, field)

    @catalog.tool(
        "vendor.set_field",
        reversibility="reversible",
        sensitive=["api_key"],
        resolve_secret=resolve,
        idempotent=True,
    )
    async def set_field(
        call: amends.Call, record_id: str, field: str, value: Any, api_key: str
    ) -> Any:
        check("vendor.set_field", {"record_id": record_id, "field": field, "value": value,
                                   "api_key": api_key})  # fmt: skip
        out = crm.update_field(record_id, field, value, idempotency_key=call.idempotency_key)
        # the old value is captured from the world: whatever a third party wrote there
        call.inverse(
            "vendor.set_field", record_id=record_id, field=field, value=out["old"], api_key=api_key
        )
        call.expect("vendor.read_field", {"record_id": record_id, "field": field}, equals=value)
        return {"version": out["record"]["version"]}

    @catalog.tool(
        "vendor.post",
        reversibility="compensable",
        sensitive=["api_key"],
        resolve_secret=resolve,
    )
    async def post(call: amends.Call, record_id: str, memo: str, api_key: str) -> Any:
        check("vendor.post", {"record_id": record_id, "memo": memo, "api_key": api_key})
        note = crm.add_note(record_id, memo, idempotency_key=call.idempotency_key)
        call.inverse(
            "vendor.retract",
            record_id=record_id,
            note_id=note["id"],
            comment=f"retracted: {memo}",
            api_key=api_key,
        )
        call.no_drift_check(reason="the note is only retracted, with a comment")
        return {"note": note["id"]}

    @catalog.tool("vendor.retract", reversibility="irreversible", sensitive=["api_key"])
    async def retract(
        call: amends.Call, record_id: str, note_id: str, comment: str, api_key: str
    ) -> Any:
        check("vendor.retract", {"record_id": record_id, "note_id": note_id,
                                 "comment": comment, "api_key": api_key})  # fmt: skip
        crm.delete_note(record_id, note_id, idempotency_key=call.idempotency_key)
        crm.log_activity(record_id, comment, idempotency_key=f"{call.idempotency_key}:c")
        return {"retracted": note_id}

    @catalog.tool(
        "vendor.open", reversibility="compensable", sensitive=["api_key"], resolve_secret=resolve
    )
    async def open_ticket(call: amends.Call, title: str, api_key: str) -> Any:
        check("vendor.open", {"title": title, "api_key": api_key})
        call.inverse("vendor.close", title=title, api_key=api_key)
        call.no_drift_check(reason="closing a ticket is always safe")
        return {"title": title}

    @catalog.tool("vendor.close", reversibility="irreversible", sensitive=["api_key"])
    async def close_ticket(call: amends.Call, title: str, api_key: str) -> Any:
        check("vendor.close", {"title": title, "api_key": api_key})
        # the compensation asks for one more call that needs the key too (rule 7: a follow-up)
        call.follow_up("vendor.notify", text=f"closed {title}", api_key=api_key)
        return {"closed": title}

    @catalog.tool("vendor.notify", reversibility="irreversible", sensitive=["api_key"])
    async def notify(call: amends.Call, text: str, api_key: str) -> Any:
        check("vendor.notify", {"text": text, "api_key": api_key})
        return {"sent": text}

    return catalog
