"""A catalog with plain-language steps (``describe=``) for ``test_show_before_undo``:
``show_tools:CATALOG``, loaded by the CLI from ``--catalog``/``AMENDS_CATALOGS`` (rule 12).
Its world is this module's: a stage, charges, an outbox."""

from __future__ import annotations

from typing import Any

import amends

STAGE = {"r1": "lead"}
CHARGES: dict[str, dict[str, int]] = {}
OUTBOX: list[str] = []
CATALOG = amends.Catalog()


def reset() -> None:
    STAGE["r1"] = "lead"
    CHARGES.clear()
    OUTBOX.clear()


@CATALOG.tool("crm.get_stage", reversibility="read_only")
async def get_stage(call: amends.Call, deal: str) -> str:
    return STAGE[deal]


@CATALOG.tool("crm.set_stage", reversibility="reversible", describe="Move deal {deal} to {stage}")
async def set_stage(call: amends.Call, deal: str, stage: str) -> None:
    call.inverse("crm.set_stage", deal=deal, stage=STAGE[deal])
    STAGE[deal] = stage
    call.expect("crm.get_stage", {"deal": deal}, equals=stage)


@CATALOG.tool("pay.get_refunded", reversibility="read_only")
async def get_refunded(call: amends.Call, charge: str) -> int:
    return CHARGES[charge]["refunded"]


@CATALOG.tool("pay.charge", reversibility="compensable", describe="Charge {customer} {cents} cents")
async def charge(call: amends.Call, customer: str, cents: int) -> dict[str, Any]:
    cid = f"ch_{len(CHARGES) + 1}"
    CHARGES[cid] = {"cents": cents, "refunded": 0}
    call.inverse("pay.refund", charge=cid, cents=cents)
    call.expect("pay.get_refunded", {"charge": cid}, equals=0)
    call.residue(f"A refund to {customer}", parties=[customer], settles_at="2026-12-07")
    return {"id": cid}


@CATALOG.tool("pay.refund", reversibility="irreversible", describe="Refund {cents} cents")
async def refund(call: amends.Call, charge: str, cents: int) -> None:
    CHARGES[charge]["refunded"] += cents


@CATALOG.tool("mail.send", reversibility="irreversible", describe="Email '{subject}' to {to}")
async def send(call: amends.Call, to: str, subject: str) -> None:
    OUTBOX.append(to)
    call.acknowledge(who="the sales team", parties=[to], draft="Please disregard it.")
