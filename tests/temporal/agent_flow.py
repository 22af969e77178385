"""An agent workflow whose activities are tool calls (for the interceptor tests).

The workflow knows activities by name only; the activities delegate to the ledger catalog's tool
functions, recording their inverse through ``amends.current_call()`` as a user's activity would.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    @workflow.run
    async def run(self, keys: list[str], wait: float) -> str:
        opts = {"start_to_close_timeout": timedelta(seconds=30)}
        for i, k in enumerate(keys):
            await workflow.execute_activity("kv.put", args=[k, f"agent{i}"], **opts)  # type: ignore[call-overload]
        await workflow.execute_activity(
            "pay.charge",
            args=["c0@acme.test", 1500],
            **opts,  # type: ignore[call-overload]
        )
        await asyncio.sleep(wait)  # the agent thinks; a person may cancel it meanwhile
        return "done"


@workflow.defn(name="AgentChargesSlowly")
class AgentChargesSlowly:
    """A tool activity is still running (the charge made, the vendor's answer awaited) when a
    person cancels the agent's workflow (issue 25 item 11)."""

    @workflow.run
    async def run(self, key: str) -> str:
        opts = {"start_to_close_timeout": timedelta(seconds=60)}
        await workflow.execute_activity("kv.put", args=[key, "agent0"], **opts)  # type: ignore[call-overload]
        await workflow.execute_activity(
            "pay.charge",
            args=["c0@acme.test", 1500],
            heartbeat_timeout=timedelta(seconds=2),
            **opts,  # type: ignore[call-overload]
        )
        return "done"
