"""Which saga a call belongs to, which agent may act on which saga, and who is asking.

Rule 12 (issue 21, item 5): agents on one gateway are isolated. A saga belongs to the agent
connection that opened it (for a ``2026-07-28`` stateless client, which has no connection, to the
gateway's principal: such clients are told apart only by their saga keys). An agent reads,
previews, undoes and resolves only its own sagas, unless the operator sets ``share_sagas =
true``. A saga key in ``_meta`` names a saga *within* the asking connection, so one agent's key
can never join or redirect another's saga. The identity recorded for approvals and resolutions is
the gateway's principal (``[gateway] principal``), never a name the agent typed.

Ownership is kept in the gateway's memory: after a restart an agent starts new sagas; its older
ones are undone from ``amends undo``, the web page, or a gateway with ``share_sagas = true``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from amends import AmendsError, ConfigError, Saga

if TYPE_CHECKING:
    from .ports import GatewayView

__all__ = ["META_SAGA", "META_STEP", "META_TITLE", "Sessions", "Slot"]

META_SAGA = "amends/saga"
"""Request ``_meta`` key: a saga key; calls of one connection carrying the same key share one
saga."""
META_TITLE = "amends/title"
"""Request ``_meta`` key: the title of the saga a new saga key opens."""
META_STEP = "amends/step"
"""Set on results to the agent: the saga, the step and the tool's reversibility."""


class Slot:
    """The open saga of one agent connection, or of one saga key within it."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.saga: Saga | None = None
        self.last_id: str | None = None
        self.lock = asyncio.Lock()


class Sessions:
    """The slots and saga ownership of one gateway."""

    def __init__(self, gw: GatewayView) -> None:
        self.gw = gw
        self.slots: dict[str, Slot] = {}
        self._owned: dict[str, set[str]] = {}
        self._connections: dict[int, Any] = {}  # keeps connections alive while their id is a key

    def principal(self, ctx: Any) -> str:
        """Who is asking, as recorded in approvals and resolutions (module docstring)."""
        return self.gw.config.principal

    def owner(self, ctx: Any) -> str:
        """The agent behind a request: its connection (a stdio gateway has exactly one), or, for
        a stateless HTTP request, the principal."""
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        # A handshake-era connection (stdio, stateful HTTP) is one agent; the SDK builds a
        # session object per request, so the connection it belongs to is the identity.
        conn = getattr(ctx.session, "_connection", None)
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS and conn is not None:
            self._connections[id(conn)] = conn
            return f"connection:{id(conn)}"
        if getattr(ctx, "request", None) is None:
            return "stdio"  # not HTTP: the one client that started this gateway process
        return f"stateless:{self.principal(ctx)}"

    @staticmethod
    def saga_key(ctx: Any) -> str | None:
        meta = ctx.meta or {}
        key = meta.get(META_SAGA) if isinstance(meta, dict) else None
        return key if isinstance(key, str) and key else None

    def slot(self, ctx: Any) -> Slot:
        owner = self.owner(ctx)
        key = self.saga_key(ctx)
        name = f"{owner}/key:{key}" if key is not None else owner
        slot = self.slots.get(name)
        if slot is None:  # issue 29: a new Slot (and its lock) only for a new name
            slot = self.slots[name] = Slot(owner)
        return slot

    def title(self, ctx: Any) -> str | None:
        meta = ctx.meta if isinstance(ctx.meta, dict) else {}
        title = meta.get(META_TITLE)
        return title if isinstance(title, str) and title else None

    async def open_saga(self, slot: Slot, title: str | None = None) -> Saga:
        async with slot.lock:
            if slot.saga is None:
                saga = self.gw.engine.saga(
                    title or self.gw.config.title,
                    actor=self.gw.config.actor,
                    tenant=self.gw.config.tenant,
                )
                await saga.__aenter__()
                slot.saga = saga
                slot.last_id = saga.id
                self._owned.setdefault(slot.owner, set()).add(saga.id)
            return slot.saga

    async def close_saga(self, slot: Slot) -> None:
        async with slot.lock:
            saga, slot.saga = slot.saga, None
        if saga is not None:
            try:
                await saga.__aexit__(None, None, None)
            except AmendsError:
                pass  # a step's failure was already answered to the agent and is in the log

    async def close_saga_id(self, saga_id: str) -> None:
        for slot in list(self.slots.values()):
            if slot.saga is not None and slot.saga.id == saga_id:
                await self.close_saga(slot)

    async def close_all(self) -> None:
        for slot in list(self.slots.values()):
            await self.close_saga(slot)

    def saga_for(self, ctx: Any, given: Any) -> str:
        """The saga an amends tool acts on: ``given`` if this agent may act on it, else this
        connection's current saga.

        Raises:
            AmendsError: ``given`` is not one of this agent's sagas (the same words whether or
                not it exists, so ids of other agents are not confirmed), or there is no saga yet.
        """
        if given is not None and given != "" and not isinstance(given, str):
            # rule 12: a malformed id is refused, never read as "this connection's saga" (an
            # undo of the wrong saga)
            raise ConfigError(
                f"saga_id must be a saga id (text), got {type(given).__name__} "
                f"{str(given)[:100]!r}; pass the id amends_status shows, or omit saga_id for "
                f"this connection's saga"
            )
        if isinstance(given, str) and given:
            if self.gw.config.share_sagas or given in self._owned.get(self.owner(ctx), ()):
                return given
            raise AmendsError(
                f"no saga {given[:200]!r} among the sagas this connection started; an agent "
                f"acts only on its own sagas (the gateway's operator can set share_sagas = true)"
            )
        slot = self.slot(ctx)
        if slot.last_id is None:
            raise ConfigError("no saga yet on this connection; call a tool first, or pass saga_id")
        return slot.last_id
