"""Sandbox calendar: creating an event invites its attendees; cancelling notifies each of them.

The invitation and the cancellation notice are both externally visible effects: a cancelled event
still left a notice in every attendee's inbox (the residue of compensation).
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, atomic

__all__ = ["Calendar"]

_TBL = "calendar.events"


class Calendar:
    """The calendar vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    @atomic
    def create_event(
        self,
        title: str,
        start: str,
        attendees: list[str],
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create a confirmed event and send an invitation to every attendee."""
        w = self.world
        if (prior := w.replay("calendar", idempotency_key)) is not None:
            return dict(prior)
        eid = w.next_id("evt")
        event = {
            "id": eid,
            "title": title,
            "start": start,
            "status": "confirmed",
            "attendees": {a: "invited" for a in attendees},
            "notices": [{"to": a, "kind": "invitation", "at": w.iso()} for a in attendees],
        }
        effects = [{"vendor": "calendar", "op": "invite", "key": eid, "to": a} for a in attendees]
        return dict(
            w.commit(
                [(_TBL, eid, event)],
                effects,
                vendor="calendar",
                idempotency_key=idempotency_key,
                response=event,
            )
        )

    @atomic
    def cancel_event(self, event_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Cancel an event; a cancellation notice goes to every attendee.

        Raises:
            PermanentError: The event is unknown or already cancelled.
        """
        w = self.world
        if (prior := w.replay("calendar", idempotency_key)) is not None:
            return dict(prior)
        event = self.get(event_id)
        if event["status"] == "cancelled":
            raise PermanentError(f"event {event_id!r} is already cancelled; nothing to do")
        event["status"] = "cancelled"
        event["notices"] += [
            {"to": a, "kind": "cancellation", "at": w.iso()} for a in event["attendees"]
        ]
        effects = [
            {"vendor": "calendar", "op": "cancellation_notice", "key": event_id, "to": a}
            for a in event["attendees"]
        ]
        return dict(
            w.commit(
                [(_TBL, event_id, event)],
                effects,
                vendor="calendar",
                idempotency_key=idempotency_key,
                response=event,
            )
        )

    @atomic
    def get(self, event_id: str) -> dict[str, Any]:
        """The event as the vendor shows it now.

        Raises:
            PermanentError: No such event.
        """
        event = self.world.get(_TBL, event_id)
        if event is None:
            raise PermanentError(f"calendar has no event {event_id!r}; check the id")
        return dict(event)

    @atomic
    def attendee_decline(self, event_id: str, who: str) -> None:
        """Another actor: attendee ``who`` declines the invitation.

        Raises:
            PermanentError: The event is unknown or ``who`` was not invited.
        """
        event = self.get(event_id)
        if who not in event["attendees"]:
            raise PermanentError(f"{who!r} is not an attendee of event {event_id!r}")
        event["attendees"][who] = "declined"
        self.world.commit(
            [(_TBL, event_id, event)],
            [{"vendor": "calendar", "op": "decline", "key": event_id, "actor": who}],
        )
