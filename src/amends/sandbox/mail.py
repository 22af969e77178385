"""Sandbox mail: delivered mail cannot be unsent; delayed mail is cancellable inside its window.

``send`` delivers at once (irreversible). ``send_delayed`` schedules delivery ``delay`` sandbox
seconds later (default :data:`SEND_DELAY`); until then ``cancel_scheduled`` stops it, afterwards it
is delivered and nothing stops it. Recipients read a delivered message after a random delay.
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, atomic

__all__ = ["SEND_DELAY", "Mail"]

SEND_DELAY = 30.0
"""Default send-delay window in sandbox seconds (``mail.send_delayed``)."""

_TBL = "mail.messages"


class Mail:
    """The mail vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    def _deliver(self, msg: dict[str, Any]) -> dict[str, Any]:
        w = self.world
        msg["status"] = "delivered"
        msg["delivered_at"] = w.iso()
        msg["read_due"] = w.now() + w.rng.uniform(60.0, 3600.0)
        return msg

    @atomic
    def send(
        self, to: str, subject: str, body: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Deliver a message now. Replays the first response for a known idempotency key."""
        w = self.world
        if (prior := w.replay("mail", idempotency_key)) is not None:
            return dict(prior)
        mid = w.next_id("msg")
        msg = self._deliver(
            {"id": mid, "to": to, "subject": subject, "body": body, "read_at": None}
        )
        return dict(
            w.commit(
                [(_TBL, mid, msg)],
                [{"vendor": "mail", "op": "deliver", "key": mid, "to": to, "subject": subject}],
                vendor="mail",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )

    @atomic
    def send_delayed(
        self,
        to: str,
        subject: str,
        body: str,
        *,
        delay: float = SEND_DELAY,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Schedule a message for delivery ``delay`` sandbox seconds from now."""
        w = self.world
        if (prior := w.replay("mail", idempotency_key)) is not None:
            return dict(prior)
        mid = w.next_id("msg")
        msg = {
            "id": mid,
            "to": to,
            "subject": subject,
            "body": body,
            "status": "scheduled",
            "deliver_at": w.now() + delay,
            "read_at": None,
        }
        return dict(
            w.commit(
                [(_TBL, mid, msg)],
                [{"vendor": "mail", "op": "schedule", "key": mid, "to": to}],
                vendor="mail",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )

    @atomic
    def cancel_scheduled(
        self, message_id: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Stop a scheduled message before its window elapses.

        Raises:
            PermanentError: The message is unknown, already delivered, or already cancelled.
        """
        w = self.world
        if (prior := w.replay("mail", idempotency_key)) is not None:
            return dict(prior)
        msg = self.get(message_id)
        if msg["status"] != "scheduled":
            raise PermanentError(
                f"message {message_id!r} is {msg['status']}, not scheduled; a delivered "
                f"message cannot be unsent, send a correction instead"
            )
        msg["status"] = "cancelled"
        msg["cancelled_at"] = w.iso()
        return dict(
            w.commit(
                [(_TBL, message_id, msg)],
                [{"vendor": "mail", "op": "cancel", "key": message_id, "to": msg["to"]}],
                vendor="mail",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )

    @atomic
    def get(self, message_id: str) -> dict[str, Any]:
        """The message as the vendor shows it now.

        Raises:
            PermanentError: No such message.
        """
        self.tick()
        msg = self.world.get(_TBL, message_id)
        if msg is None:
            raise PermanentError(f"mail has no message {message_id!r}; check the id")
        return dict(msg)

    @atomic
    def recipient_reads(self, message_id: str) -> None:
        """Another actor: the recipient opens a delivered message now."""
        msg = self.get(message_id)
        if msg["status"] != "delivered" or msg["read_at"]:
            return
        msg["read_at"] = self.world.iso()
        self.world.commit(
            [(_TBL, message_id, msg)],
            [{"vendor": "mail", "op": "read", "key": message_id, "actor": msg["to"]}],
        )

    @atomic
    def tick(self) -> None:
        """Deliver scheduled mail whose window elapsed; mark mail read whose reader got to it."""
        w = self.world
        now = w.now()
        puts: list[tuple[str, str, Any]] = []
        effects: list[dict[str, Any]] = []
        for mid, msg in w.items(_TBL):
            if msg["status"] == "scheduled" and now >= msg["deliver_at"]:
                self._deliver(msg)
                puts.append((_TBL, mid, msg))
                effects.append({"vendor": "mail", "op": "deliver", "key": mid, "to": msg["to"]})
            elif msg["status"] == "delivered" and not msg["read_at"] and now >= msg["read_due"]:
                msg["read_at"] = w.iso()
                puts.append((_TBL, mid, msg))
                effects.append({"vendor": "mail", "op": "read", "key": mid, "actor": msg["to"]})
        if puts:
            w.commit(puts, effects)
