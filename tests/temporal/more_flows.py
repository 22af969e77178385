"""More agent workflows for the interceptor tests (issue 25): one that continues as new between
tool calls, one that makes a single tool call given by name, one that runs its tools as local
activities, one whose first run fails (and is retried), one that catches its cancellation."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError


@workflow.defn(name="AgentContinues")
class AgentContinues:
    """Each run writes one key, then continues as new with the rest; the last run calls no tool
    and waits (the agent thinks): a person may cancel it then. A tool call is tried once, so a
    call amends refuses fails the workflow."""

    @workflow.run
    async def run(self, keys: list[str], wait: float) -> str:
        opts = {
            "start_to_close_timeout": timedelta(seconds=30),
            "retry_policy": RetryPolicy(maximum_attempts=1),
        }
        if keys:
            await workflow.execute_activity("kv.put", args=[keys[0], "agent"], **opts)  # type: ignore[call-overload]
            workflow.continue_as_new(args=[keys[1:], wait])
        await asyncio.sleep(wait)
        return "done"


@workflow.defn(name="AgentCallsOne")
class AgentCallsOne:
    """One tool activity, by name, with the given positional arguments, tried once."""

    @workflow.run
    async def run(self, tool: str, args: list[Any]) -> Any:
        return await workflow.execute_activity(
            tool,
            args=args,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


@workflow.defn(name="AgentCallsLocally")
class AgentCallsLocally:
    """Writes two keys and charges, each tool call a local activity, then waits (the agent
    thinks): a person may cancel it then."""

    @workflow.run
    async def run(self, keys: list[str], wait: float) -> str:
        opts = {"start_to_close_timeout": timedelta(seconds=30)}
        for i, k in enumerate(keys):
            await workflow.execute_local_activity("kv.put", args=[k, f"agent{i}"], **opts)  # type: ignore[call-overload]
        await workflow.execute_local_activity(
            "pay.charge",
            args=["c0@acme.test", 1500],
            **opts,  # type: ignore[call-overload]
        )
        await asyncio.sleep(wait)
        return "done"


@workflow.defn(name="AgentRetried")
class AgentRetried:
    """The first run writes the keys, then fails (the agent crashed); the workflow's retry
    policy runs it again, and that run calls no tool and waits: a person may cancel it then."""

    @workflow.run
    async def run(self, keys: list[str], wait: float) -> str:
        if workflow.info().attempt == 1:
            for k in keys:
                await workflow.execute_activity(
                    "kv.put",
                    args=[k, "agent"],
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
            raise ApplicationError("the agent crashed")
        await asyncio.sleep(wait)
        return "done"


@workflow.defn(name="AgentCatchesCancel")
class AgentCatchesCancel:
    """Writes the keys, then waits; a cancellation it catches ends it normally ("stopped")."""

    @workflow.run
    async def run(self, keys: list[str], wait: float) -> str:
        for k in keys:
            await workflow.execute_activity(
                "kv.put", args=[k, "agent"], start_to_close_timeout=timedelta(seconds=30)
            )
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            return "stopped"
        return "done"
