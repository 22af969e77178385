"""Sandbox SMS: a text message is delivered at once and can never be taken back."""

from __future__ import annotations

from typing import Any

from ._base import VendorWorld, atomic

__all__ = ["Sms"]

_TBL = "sms.messages"


class Sms:
    """The SMS vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    @atomic
    def send(self, to: str, text: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Deliver a text message to ``to``. Replays the first response for a known key."""
        w = self.world
        if (prior := w.replay("sms", idempotency_key)) is not None:
            return dict(prior)
        sid = w.next_id("sms")
        msg = {"id": sid, "to": to, "text": text, "status": "delivered", "sent_at": w.iso()}
        return dict(
            w.commit(
                [(_TBL, sid, msg)],
                [{"vendor": "sms", "op": "deliver", "key": sid, "to": to}],
                vendor="sms",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )
