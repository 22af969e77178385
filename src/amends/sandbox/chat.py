"""Sandbox chat: a post notifies every channel member; deleting it cannot unsee the notification.

``edit`` changes a message's text and can be reverted with another edit. Members read messages.
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, atomic

__all__ = ["Chat"]

_CHANNELS, _MSGS = "chat.channels", "chat.messages"


class Chat:
    """The chat vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    def seed(self) -> None:
        """The channels a fresh world starts with."""
        self.world.commit(
            [
                (_CHANNELS, "#sales", {"id": "#sales", "members": ["dana", "sam", "lee"]}),
                (_CHANNELS, "#finance", {"id": "#finance", "members": ["kim", "lee"]}),
            ]
        )

    @atomic
    def members(self, channel: str) -> list[str]:
        """Who is in ``channel``.

        Raises:
            PermanentError: No such channel.
        """
        ch = self.world.get(_CHANNELS, channel)
        if ch is None:
            known = ", ".join(k for k, _ in self.world.items(_CHANNELS))
            raise PermanentError(f"chat has no channel {channel!r} (known: {known})")
        return list(ch["members"])

    @atomic
    def post(
        self, channel: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Post a message; every member of the channel is notified."""
        w = self.world
        if (prior := w.replay("chat", idempotency_key)) is not None:
            return dict(prior)
        members = self.members(channel)
        mid = w.next_id("chat")
        msg = {
            "id": mid,
            "channel": channel,
            "text": text,
            "status": "posted",
            "notified": members,
            "seen_by": [],
            "edits": 0,
        }
        effects = [{"vendor": "chat", "op": "notify", "key": mid, "to": m} for m in members]
        return dict(
            w.commit(
                [(_MSGS, mid, msg)],
                [{"vendor": "chat", "op": "post", "key": mid, "channel": channel}, *effects],
                vendor="chat",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )

    @atomic
    def get(self, message_id: str) -> dict[str, Any]:
        """The message as members see it now.

        Raises:
            PermanentError: No such message.
        """
        msg = self.world.get(_MSGS, message_id)
        if msg is None:
            raise PermanentError(f"chat has no message {message_id!r}; check the id")
        return dict(msg)

    @atomic
    def edit(
        self, message_id: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Change a message's text; returns ``{"message": ..., "old": previous text}``.

        Raises:
            PermanentError: The message is unknown or deleted.
        """
        w = self.world
        if (prior := w.replay("chat", idempotency_key)) is not None:
            return dict(prior)
        msg = self.get(message_id)
        if msg["status"] != "posted":
            raise PermanentError(f"chat message {message_id!r} is deleted; it cannot be edited")
        old = msg["text"]
        msg["text"] = text
        msg["edits"] += 1
        out = {"message": msg, "old": old}
        return dict(
            w.commit(
                [(_MSGS, message_id, msg)],
                [{"vendor": "chat", "op": "edit", "key": message_id}],
                vendor="chat",
                idempotency_key=idempotency_key,
                response=out,
            )
        )

    @atomic
    def delete(self, message_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Delete a message. The notifications it sent were already delivered.

        Raises:
            PermanentError: The message is unknown or already deleted.
        """
        w = self.world
        if (prior := w.replay("chat", idempotency_key)) is not None:
            return dict(prior)
        msg = self.get(message_id)
        if msg["status"] == "deleted":
            raise PermanentError(f"chat message {message_id!r} is already deleted")
        msg["status"] = "deleted"
        return dict(
            w.commit(
                [(_MSGS, message_id, msg)],
                [{"vendor": "chat", "op": "delete", "key": message_id}],
                vendor="chat",
                idempotency_key=idempotency_key,
                response=msg,
            )
        )

    @atomic
    def member_reads(self, message_id: str, who: str) -> None:
        """Another actor: channel member ``who`` reads the message."""
        msg = self.get(message_id)
        if who in msg["seen_by"]:
            return
        msg["seen_by"].append(who)
        self.world.commit(
            [(_MSGS, message_id, msg)],
            [{"vendor": "chat", "op": "seen", "key": message_id, "actor": who}],
        )
