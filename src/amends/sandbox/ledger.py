"""Sandbox ledger: a legacy accounting system that ignores idempotency keys.

Every request it receives is applied: posting twice books two entries, and reversing an entry
twice books two reversing entries (the account is credited twice). It accepts no key and keeps no
replay table, like many older APIs, so a call that was in flight at a crash must never simply be
sent again (rule 5): the catalog declares its tools ``idempotent=False`` and names a probe that
shows whether a reversal landed.
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, atomic

__all__ = ["Ledger"]

_TBL = "ledger.entries"


class Ledger:
    """The ledger vendor of a :class:`World` (no idempotency keys: every request applies)."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    @atomic
    def post(self, account: str, cents: int, memo: str = "") -> dict[str, Any]:
        """Book an entry of ``cents`` on ``account``; returns it (``status`` ``posted``).

        Raises:
            PermanentError: ``cents`` is not a non-zero int.
        """
        if not isinstance(cents, int) or cents == 0:
            raise PermanentError(f"ledger entry must be a non-zero int of cents, got {cents!r}")
        w = self.world
        eid = w.next_id("le")
        entry = {"id": eid, "account": account, "cents": cents, "memo": memo,
                 "status": "posted", "reversals": [], "posted_at": w.iso()}  # fmt: skip
        return dict(
            w.commit(
                [(_TBL, eid, entry)],
                [{"vendor": "ledger", "op": "post", "key": eid, "cents": cents}],
                response=entry,
            )
        )

    @atomic
    def reverse(self, entry_id: str) -> dict[str, Any]:
        """Book a reversing entry for ``entry_id`` and mark it ``reversed``. Not idempotent: a
        second request books a second reversing entry.

        Raises:
            PermanentError: No such entry, or it is itself a reversing entry.
        """
        w = self.world
        entry = self.get_entry(entry_id)
        if entry.get("reverses"):
            raise PermanentError(f"ledger entry {entry_id!r} is a reversal; it cannot be reversed")
        rid = w.next_id("le")
        rev = {"id": rid, "account": entry["account"], "cents": -entry["cents"],
               "memo": f"reversal of {entry_id}", "status": "posted", "reverses": entry_id,
               "reversals": [], "posted_at": w.iso()}  # fmt: skip
        entry["status"] = "reversed"
        entry["reversals"].append(rid)
        return dict(
            w.commit(
                [(_TBL, entry_id, entry), (_TBL, rid, rev)],
                [{"vendor": "ledger", "op": "reverse_entry", "key": entry_id, "reversal": rid}],
                response=rev,
            )
        )

    @atomic
    def get_entry(self, entry_id: str) -> dict[str, Any]:
        """The entry now: ``posted`` or ``reversed`` (with the ids of its reversing entries).

        Raises:
            PermanentError: No such entry.
        """
        entry = self.world.get(_TBL, entry_id)
        if entry is None:
            raise PermanentError(f"ledger has no entry {entry_id!r}; check the id")
        return dict(entry)

    @atomic
    def balance(self, account: str) -> int:
        """The sum of every entry booked on ``account``."""
        return sum(e["cents"] for _, e in self.world.items(_TBL) if e["account"] == account)
