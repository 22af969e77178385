"""One request of my agent, run as a saga: python -m myproj.agent"""

from __future__ import annotations

import asyncio

import amends
from myproj.tools import catalog


async def main() -> None:
    engine = amends.Engine(catalog, log=amends.SqliteLog("amends.db"))
    async with engine.saga("Turn on the beta for ACME", tenant="acme", actor="agent:ops") as saga:
        saga.call("settings.set", key="beta", value="on")
    await engine.close()
    print(saga.id)


if __name__ == "__main__":
    asyncio.run(main())
