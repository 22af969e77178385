"""A small world for the core engine's tests: a versioned CRM, a payment ledger, a mailbox.

Deliberately tiny and independent of ``amends.sandbox`` so the engine's rules are pinned by tests
that do not move when the sandbox does. Every applied effect is appended to ``effects`` with its
idempotency key; a replayed key applies nothing (like a real vendor).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import amends


@dataclass
class CoreWorld:
    crm: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    effects: list[tuple[str, str, str]] = field(default_factory=list)
    """(op, key, idempotency_key) for every effect actually applied, in order."""
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    """(tool, phase, attempt) for every tool call, effect or not."""
    seen_keys: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, list[BaseException]] = field(default_factory=dict)
    hooks: dict[str, Callable[[], Any]] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)

    def record(self, call: amends.Call) -> None:
        self.calls.append((call.tool, call.phase, call.attempt))

    async def fault(self, tool: str) -> None:
        if tool in self.delay:
            await asyncio.sleep(self.delay[tool])
        hook = self.hooks.get(tool)
        if hook is not None:
            result = hook()
            if asyncio.iscoroutine(result):
                await result
        queue = self.faults.get(tool)
        if queue:
            raise queue.pop(0)

    def human_edit(self, record_id: str, field_name: str, value: Any) -> None:
        rec = self.crm[record_id]
        rec[field_name] = value
        rec["version"] += 1


def make_catalog(world: CoreWorld) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("crm.read_field", reversibility="read_only")
    async def read_field(call: amends.Call, record_id: str, field: str) -> Any:
        world.record(call)
        await world.fault("crm.read_field")
        return world.crm[record_id][field]

    @catalog.tool(
        "crm.update_field",
        reversibility="reversible",
        resources=lambda a: [f"crm:{a['record_id']}"],
        idempotent=True,  # a replayed key applies nothing (seen_keys)
    )
    async def update_field(call: amends.Call, record_id: str, field: str, value: Any) -> Any:
        world.record(call)
        await world.fault("crm.update_field")
        if call.idempotency_key in world.seen_keys:
            return world.seen_keys[call.idempotency_key]
        rec = world.crm[record_id]
        pre = call.precondition
        if pre is not None and rec.get(pre.args["field"]) != pre.equals:
            raise amends.PreconditionFailed(
                f"{record_id}.{field} is {rec.get(field)!r}, expected {pre.equals!r}"
            )
        before = rec[field]
        rec[field] = value
        rec["version"] += 1
        world.effects.append(
            ("crm.update_field", f"{record_id}.{field}={value}", call.idempotency_key)
        )
        call.inverse("crm.update_field", record_id=record_id, field=field, value=before)
        call.expect("crm.read_field", {"record_id": record_id, "field": field}, equals=value)
        out = dict(rec)
        world.seen_keys[call.idempotency_key] = out
        return out

    @catalog.tool("pay.charge", reversibility="compensable", idempotent=True)
    async def charge(call: amends.Call, customer: str, cents: int) -> dict[str, Any]:
        world.record(call)
        await world.fault("pay.charge")
        if call.idempotency_key in world.seen_keys:
            return dict(world.seen_keys[call.idempotency_key])
        cid = f"ch_{len(world.charges) + 1}"
        world.charges[cid] = {"customer": customer, "cents": cents, "refunded": 0}
        world.effects.append(("pay.charge", cid, call.idempotency_key))
        call.inverse("pay.refund", charge_id=cid, cents=cents)
        call.expect("pay.get_charge", {"charge_id": cid}, equals=0, path="refunded")
        call.residue(
            f"Refund of {cents / 100:.2f} to {customer}",
            parties=[customer],
            settles_at="2026-12-07",
        )
        out = {"id": cid, "cents": cents}
        world.seen_keys[call.idempotency_key] = out
        return out

    @catalog.tool("pay.get_charge", reversibility="read_only")
    async def get_charge(call: amends.Call, charge_id: str) -> dict[str, Any]:
        world.record(call)
        await world.fault("pay.get_charge")
        return dict(world.charges[charge_id])

    @catalog.tool("pay.refund", reversibility="irreversible", idempotent=True)
    async def refund(call: amends.Call, charge_id: str, cents: int) -> dict[str, Any]:
        world.record(call)
        await world.fault("pay.refund")
        if call.idempotency_key in world.seen_keys:
            return dict(world.seen_keys[call.idempotency_key])
        ch = world.charges[charge_id]
        if ch["refunded"] + cents > ch["cents"]:
            raise amends.PermanentError(f"refund of {cents} exceeds charge {charge_id}")
        ch["refunded"] += cents
        world.effects.append(("pay.refund", charge_id, call.idempotency_key))
        out = {"refund_of": charge_id, "cents": cents}
        world.seen_keys[call.idempotency_key] = out
        return out

    @catalog.tool("mail.send")  # no class given: irreversible
    async def send(call: amends.Call, to: str, subject: str) -> dict[str, Any]:
        world.record(call)
        await world.fault("mail.send")
        world.outbox.append({"to": to, "subject": subject})
        world.effects.append(("mail.send", to, call.idempotency_key))
        call.acknowledge(
            who="the sender",
            parties=[to],
            draft=f"Please disregard my earlier message '{subject}'.",
        )
        return {"sent": True}

    @catalog.tool("crm.note", reversibility="reversible")
    async def note(call: amends.Call, record_id: str, text: str) -> dict[str, Any]:
        world.record(call)
        await world.fault("crm.note")
        notes = world.crm[record_id].setdefault("notes", [])
        notes.append(text)
        world.effects.append(("crm.note", text, call.idempotency_key))
        call.inverse("crm.delete_note", record_id=record_id, text=text)
        call.no_drift_check(reason="a note only this saga wrote; deleting it removes nothing else")
        return {"note": text}

    @catalog.tool("crm.delete_note", reversibility="irreversible")
    async def delete_note(call: amends.Call, record_id: str, text: str) -> None:
        world.record(call)
        await world.fault("crm.delete_note")
        notes = world.crm[record_id].setdefault("notes", [])
        if text in notes:
            notes.remove(text)
            world.effects.append(("crm.delete_note", text, call.idempotency_key))

    @catalog.tool("crm.forgetful", reversibility="reversible")
    async def forgetful(call: amends.Call, record_id: str) -> None:
        """A broken tool: declares reversible but records no inverse (rule 2)."""
        world.record(call)
        world.crm[record_id]["touched"] = True

    return catalog


def fresh() -> tuple[CoreWorld, amends.Catalog]:
    world = CoreWorld(
        crm={
            "r1": {"stage": "lead", "owner": "ann", "version": 1},
            "r2": {"stage": "lead", "owner": "bob", "version": 1},
        }
    )
    return world, make_catalog(world)


def without(catalog: amends.Catalog, name: str) -> amends.Catalog:
    """``catalog`` as an upgrade left it: tool ``name`` renamed away (issue 23)."""
    out = amends.Catalog()
    for t in catalog:
        if t.name != name:
            out.register(
                t.name, t.fn, reversibility=t.reversibility.value if t.explicit else None,
                resources=t.resources, timeout=t.timeout, idempotent=t.idempotent,
            )  # fmt: skip
    return out


async def close_deal(engine: amends.Engine) -> amends.Saga:
    """The deal saga the issue 23 tests undo: a CRM write, then a charge that waits for it."""
    async with engine.saga("Close the ACME deal", actor="agent:sales") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        saga.call("pay.charge", customer="c1", cents=5000, after=[a])
    return saga


def refunds(world: CoreWorld) -> int:
    """How many refunds the payment vendor made."""
    return sum(1 for e in world.effects if e[0] == "pay.refund")
