"""Issue 28: with an agent framework's own OpenTelemetry tracing on (Pydantic AI's
``Instrumentation`` capability, as Logfire turns on), the saga span is a child of the agent
run's span, and the reversal span links to it: one click from the agent run to its undo."""

from __future__ import annotations

from otel_capture import Spans, span_id
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import amends
from amends.integrations.pydantic_ai import AmendsToolset, declare
from amends.sandbox import World, sandbox_catalog


async def test_a_pydantic_ai_run_with_instrumentation_holds_the_saga_span(spans: Spans) -> None:
    world = World()
    engine = amends.Engine(sandbox_catalog(world), log=amends.SqliteLog(":memory:"))

    def set_stage(stage: str) -> str:
        """Set the ACME deal stage."""
        call = amends.current_call()
        assert call is not None
        before = world.crm.read_field("acme", "stage")
        world.crm.update_field("acme", "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id="acme", field="stage", value=before)
        call.expect("crm.read_field", {"record_id": "acme", "field": "stage"}, equals=stage)
        return f"stage is {stage}"

    declare(engine.catalog, "set_stage", reversibility="reversible")
    script = [[ToolCallPart("set_stage", {"stage": "closed_won"})]]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart("done")])

    toolset = AmendsToolset(FunctionToolset([set_stage]), engine=engine)
    agent = Agent(FunctionModel(respond), toolsets=[toolset], capabilities=[Instrumentation()])
    await agent.run("Win ACME")
    assert toolset.last_saga_id is not None
    report = await engine.undo(toolset.last_saga_id)
    await engine.close()
    assert report.status == "fully_reversed"

    (run,) = [s for s in spans.all() if s.name.startswith("invoke_agent")]  # Pydantic AI's
    saga = spans.one("amends.saga", saga_id=toolset.last_saga_id)
    assert saga.parent is not None and saga.parent.span_id == span_id(run)
    (step,) = spans.children(saga)
    assert (step.name, (step.attributes or {})["amends.tool"]) == ("amends.step", "set_stage")
    rev = spans.one("amends.reversal", reversal_id=report.reversal_id)
    assert [(link.context.trace_id, link.context.span_id) for link in rev.links] == [
        (run.context.trace_id, span_id(saga))  # type: ignore[union-attr]
    ]  # the agent run's trace
