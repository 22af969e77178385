# Run from the repository root with the schema-v3 amends first on the path:
#   git archive 9c8e857 src | tar -x -C /tmp/amends_v3 && PYTHONPATH=/tmp/amends_v3/src \
#       .venv/bin/python tests/conformance/data/make_log_v3.py tests/conformance/data/log_v3.db
"""Writes tests/conformance/data/log_v3.db with schema-v3 amends (run with the v3 source first on
sys.path): an undone and continued deal (a resolution, an idempotency key), a kept saga, and an
interrupted step."""

import asyncio
import sys

import amends
from amends._log.sql import SCHEMA_VERSION

assert SCHEMA_VERSION == 3, SCHEMA_VERSION
OUT = sys.argv[1]


def catalog() -> amends.Catalog:
    cat = amends.Catalog()
    world = {"stage": "lead", "charged": 0}

    @cat.tool("crm.read_field", reversibility="read_only")
    async def read(call, field):
        return world[field]

    @cat.tool("crm.update_field", reversibility="reversible")
    async def update(call, field, value):
        before = world[field]
        world[field] = value
        call.inverse("crm.update_field", field=field, value=before)
        call.expect("crm.read_field", {"field": field}, equals=value)
        return {"old": before}

    @cat.tool("pay.charge", reversibility="compensable", sensitive=["card"])
    async def charge(call, cents, card):
        world["charged"] += cents
        call.inverse("pay.refund", cents=cents)
        call.no_drift_check(reason="fixture")
        call.residue("refund settles later", parties=["c1"], settles_in_days=3)
        return {"ok": True}

    @cat.tool("pay.refund", reversibility="irreversible")
    async def refund(call, cents):
        world["charged"] -= cents

    @cat.tool("mail.send")
    async def send(call, to):
        call.acknowledge(who="the sender", parties=[to], draft="sorry")

    return cat


async def main() -> None:
    cat = catalog()
    engine = amends.Engine(cat, log=amends.SqliteLog(OUT, signing_key=None))
    async with engine.saga("Close the deal", tenant="acme", actor="agent:x", saga_id="deal") as s:
        a = s.call("crm.update_field", field="stage", value="won")
        s.call("pay.charge", cents=500, card="4242424242424242", after=[a])
        s.call("mail.send", to="c@example.com")
    await engine.undo("deal", budget=amends.Budget(tool_calls=2))
    await engine.resolve("deal", "s3", by="alice", note="sent the draft")
    await engine.resume("deal", budget=amends.Budget(tool_calls=20))
    async with engine.saga("Kept", tenant="acme", saga_id="kept") as s:
        s.call("crm.update_field", field="stage", value="lost")
    await engine.log.idem_put("acme", "k1", "h1", {"status": 200}, 2e9, now=1.7e9)
    await engine.log.create_saga(
        "crashed", "Crashed", tenant=None, actor=None, owner="dead", lease_until=0.0, now=1.7e9
    )
    await engine.log.begin_step(
        "crashed",
        "s1",
        seq=1,
        tool="pay.charge",
        args={"cents": 1, "card": "[redacted:card]"},
        deps=[],
        resources=[],
        declared="compensable",
        now=1.7e9,
    )
    await engine.log.mark_in_doubt(1.8e9)
    assert await engine.log.verify() == []
    await engine.close()


asyncio.run(main())
