"""Sensitive arguments are redacted before they reach the log, the report, the CLI or the web
page; an inverse that needs one gets it again at undo time from the tool's resolver (rule 11)."""
import asyncio

import amends
from amends._secrets import SecretRequest

VAULT = {"acct-7": "sk_live_123"}  # your secret store
KEYS_USED: list[str] = []

catalog = amends.Catalog()


def from_vault(request: SecretRequest) -> str:
    return VAULT[request.args["account"]]


@catalog.tool("billing.set_plan", reversibility="reversible", sensitive=["api_key"],
              resolve_secret=from_vault)
async def set_plan(call: amends.Call, account: str, plan: str, api_key: str) -> None:
    KEYS_USED.append(api_key)
    call.inverse("billing.set_plan", account=account, plan="basic", api_key=api_key)
    call.no_drift_check(reason="the plan is only changed through this agent")


async def main() -> None:
    log = amends.SqliteLog(":memory:")
    engine = amends.Engine(catalog, log=log)
    async with engine.saga("Upgrade acct-7") as saga:
        saga.call("billing.set_plan", account="acct-7", plan="pro", api_key="sk_live_123")
    report = await engine.undo(saga.id)
    print(report.status, KEYS_USED)
    assert KEYS_USED == ["sk_live_123", "sk_live_123"]  # the inverse got the key again
    assert "sk_live_123" not in report.to_json()
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
