"""Sandbox payments: idempotent charges, refunds that settle in 3 business days, wires.

Rules a real processor keeps, kept here too: a charge's idempotency key replays the first charge;
a refund never exceeds what was charged, and a second refund of the same charge is refused; a
refund fails permanently on a closed card or a disputed charge (a rate limit is a transient fault,
see :meth:`World.faults`); a refund is ``pending`` until it settles 3 business days later. A wire
can be recalled only inside its recall window; after that it is final.
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, add_business_days, atomic

__all__ = ["REFUND_SETTLE_BUSINESS_DAYS", "WIRE_RECALL_WINDOW", "Payments"]

REFUND_SETTLE_BUSINESS_DAYS = 3
"""A refund lands on the customer's card this many business days after it is issued."""
WIRE_RECALL_WINDOW = 600.0
"""Sandbox seconds during which a wire can still be recalled."""

_CUS, _CH, _RE, _WI = (
    "payments.customers",
    "payments.charges",
    "payments.refunds",
    "payments.wires",
)


class Payments:
    """The payment processor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    def seed(self) -> None:
        """The customers a fresh world starts with (each with an open card)."""
        self.world.commit(
            [
                (_CUS, "cus_acme", {"id": "cus_acme", "name": "ACME Corp", "card": "open"}),
                (_CUS, "cus_globex", {"id": "cus_globex", "name": "Globex", "card": "open"}),
            ]
        )

    def _customer(self, customer: str) -> dict[str, Any]:
        cus = self.world.get(_CUS, customer)
        if cus is None:
            known = ", ".join(k for k, _ in self.world.items(_CUS))
            raise PermanentError(f"no customer {customer!r} (known: {known}); check the id")
        return dict(cus)

    @atomic
    def charge(
        self,
        customer: str,
        cents: int,
        *,
        description: str = "",
        deal: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Charge the customer's card. A known idempotency key replays the first charge.

        A charge booked against ``deal`` (a CRM record) is under the finance lock: the
        processor refunds it only while that deal is not ``closed_won``.

        Raises:
            PermanentError: Unknown customer, closed card, or a non-positive amount.
        """
        w = self.world
        if (prior := w.replay("payments", idempotency_key)) is not None:
            return dict(prior)
        if not isinstance(cents, int) or cents <= 0:
            raise PermanentError(f"charge amount must be a positive int of cents, got {cents!r}")
        if self._customer(customer)["card"] != "open":
            raise PermanentError(f"card of {customer!r} is closed; ask for another card")
        cid = w.next_id("ch")
        ch = {
            "id": cid,
            "customer": customer,
            "cents": cents,
            "description": description,
            "deal": deal,
            "status": "succeeded",
            "refunded": 0,
            "refunds": [],
            "created_at": w.iso(),
        }
        return dict(
            w.commit(
                [(_CH, cid, ch)],
                [{"vendor": "payments", "op": "charge", "key": cid, "cents": cents}],
                vendor="payments",
                idempotency_key=idempotency_key,
                response=ch,
            )
        )

    @atomic
    def get_charge(self, charge_id: str) -> dict[str, Any]:
        """The charge as the processor shows it now.

        Raises:
            PermanentError: No such charge.
        """
        ch = self.world.get(_CH, charge_id)
        if ch is None:
            raise PermanentError(f"no charge {charge_id!r}; check the id")
        return dict(ch)

    @atomic
    def get_refund(self, refund_id: str) -> dict[str, Any]:
        """The refund as the processor shows it now (``pending`` until it settles).

        Raises:
            PermanentError: No such refund.
        """
        self.tick()
        re = self.world.get(_RE, refund_id)
        if re is None:
            raise PermanentError(f"no refund {refund_id!r}; check the id")
        return dict(re)

    @atomic
    def refund(
        self, charge_id: str, cents: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Refund (part of) a charge. A known idempotency key replays the first refund.

        Raises:
            PermanentError: Unknown charge, disputed charge, closed card, more than was
                charged, or the charge was already refunded once.
        """
        w = self.world
        if (prior := w.replay("payments", idempotency_key)) is not None:
            return dict(prior)
        ch = self.get_charge(charge_id)
        if ch["status"] == "disputed":
            raise PermanentError(
                f"charge {charge_id!r} is disputed; the card network decides the money now, "
                f"answer the dispute instead of refunding"
            )
        if self._customer(ch["customer"])["card"] != "open":
            raise PermanentError(
                f"card of {ch['customer']!r} is closed; a refund cannot land, pay the customer "
                f"another way"
            )
        deal = ch.get("deal")
        if deal and w.crm.get(deal)["fields"].get("stage") == "closed_won":
            raise PermanentError(
                f"finance lock: charge {charge_id!r} belongs to deal {deal!r}, which is "
                f"closed_won; reopen the deal before refunding"
            )
        if ch["refunds"]:
            raise PermanentError(
                f"charge {charge_id!r} was already refunded ({', '.join(ch['refunds'])}); "
                f"a second refund is refused"
            )
        if not isinstance(cents, int) or cents <= 0 or ch["refunded"] + cents > ch["cents"]:
            raise PermanentError(
                f"refund of {cents!r} cents exceeds what charge {charge_id!r} can return "
                f"({ch['cents'] - ch['refunded']} cents)"
            )
        rid = w.next_id("re")
        settles_on = add_business_days(w.today(), REFUND_SETTLE_BUSINESS_DAYS).isoformat()
        re = {
            "id": rid,
            "charge_id": charge_id,
            "customer": ch["customer"],
            "cents": cents,
            "status": "pending",
            "settles_on": settles_on,
            "created_at": w.iso(),
        }
        ch["refunded"] += cents
        ch["refunds"].append(rid)
        return dict(
            w.commit(
                [(_CH, charge_id, ch), (_RE, rid, re)],
                [
                    {
                        "vendor": "payments",
                        "op": "refund",
                        "key": charge_id,
                        "refund_id": rid,
                        "cents": cents,
                    }
                ],
                vendor="payments",
                idempotency_key=idempotency_key,
                response=re,
            )
        )

    @atomic
    def dispute(self, charge_id: str) -> None:
        """Another actor: the cardholder disputes the charge (refunds are refused from now)."""
        ch = self.get_charge(charge_id)
        ch["status"] = "disputed"
        self.world.commit(
            [(_CH, charge_id, ch)],
            [{"vendor": "payments", "op": "dispute", "key": charge_id, "actor": ch["customer"]}],
        )

    @atomic
    def close_card(self, customer: str) -> None:
        """Another actor: the customer's bank closes the card (refunds fail permanently)."""
        cus = self._customer(customer)
        cus["card"] = "closed"
        self.world.commit(
            [(_CUS, customer, cus)],
            [{"vendor": "payments", "op": "close_card", "key": customer, "actor": "bank"}],
        )

    @atomic
    def settle(self, charge_or_refund_id: str) -> None:
        """Another actor: the network settles a refund (or a charge) now.

        Raises:
            PermanentError: No such refund or charge.
        """
        w = self.world
        for tbl in (_RE, _CH):
            obj = w.get(tbl, charge_or_refund_id)
            if obj is not None:
                obj["settled_at"] = w.iso()
                if tbl == _RE:
                    obj["status"] = "settled"
                w.commit(
                    [(tbl, charge_or_refund_id, obj)],
                    [{"vendor": "payments", "op": "settle", "key": charge_or_refund_id}],
                )
                return
        raise PermanentError(f"no charge or refund {charge_or_refund_id!r} to settle")

    @atomic
    def wire(
        self,
        to_account: str,
        cents: int,
        *,
        recall_window: float = WIRE_RECALL_WINDOW,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Send a wire; it can be recalled for ``recall_window`` sandbox seconds, then is final."""
        w = self.world
        if (prior := w.replay("payments", idempotency_key)) is not None:
            return dict(prior)
        wid = w.next_id("wire")
        wire = {
            "id": wid,
            "to_account": to_account,
            "cents": cents,
            "status": "in_flight",
            "recall_until": w.now() + recall_window,
            "sent_at": w.iso(),
        }
        return dict(
            w.commit(
                [(_WI, wid, wire)],
                [{"vendor": "payments", "op": "wire", "key": wid, "cents": cents}],
                vendor="payments",
                idempotency_key=idempotency_key,
                response=wire,
            )
        )

    @atomic
    def get_wire(self, wire_id: str) -> dict[str, Any]:
        """The wire now: ``in_flight`` (recallable), ``completed`` or ``recalled``.

        Raises:
            PermanentError: No such wire.
        """
        self.tick()
        wire = self.world.get(_WI, wire_id)
        if wire is None:
            raise PermanentError(f"no wire {wire_id!r}; check the id")
        return dict(wire)

    @atomic
    def recall_wire(self, wire_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Recall a wire inside its recall window.

        Raises:
            PermanentError: The wire is unknown, already completed (final) or recalled.
        """
        w = self.world
        if (prior := w.replay("payments", idempotency_key)) is not None:
            return dict(prior)
        wire = self.get_wire(wire_id)
        if wire["status"] != "in_flight":
            raise PermanentError(
                f"wire {wire_id!r} is {wire['status']}; its recall window has closed, ask the "
                f"receiving bank to return the money"
            )
        wire["status"] = "recalled"
        return dict(
            w.commit(
                [(_WI, wire_id, wire)],
                [{"vendor": "payments", "op": "recall_wire", "key": wire_id}],
                vendor="payments",
                idempotency_key=idempotency_key,
                response=wire,
            )
        )

    @atomic
    def tick(self) -> None:
        """Settle refunds that are due; make wires past their recall window final."""
        w = self.world
        today = w.today().isoformat()
        now = w.now()
        puts: list[tuple[str, str, Any]] = []
        effects: list[dict[str, Any]] = []
        for rid, re in w.items(_RE):
            if re["status"] == "pending" and re["settles_on"] <= today:
                re["status"] = "settled"
                re["settled_at"] = w.iso()
                puts.append((_RE, rid, re))
                effects.append({"vendor": "payments", "op": "settle", "key": rid})
        for wid, wire in w.items(_WI):
            if wire["status"] == "in_flight" and now >= wire["recall_until"]:
                wire["status"] = "completed"
                puts.append((_WI, wid, wire))
                effects.append({"vendor": "payments", "op": "wire_final", "key": wid})
        if puts:
            w.commit(puts, effects)
