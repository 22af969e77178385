"""An amends agent run inside another LangChain run (a supervisor graph's node calls it): a run
that ends by an exception closes its saga and the exception carries the saga id, wherever the
run sits (issue 25 items 4 and 7), whether the outer run fails too or catches the error and goes
on, and when the node gives the sub-agent fresh ``callbacks=`` (LangChain then starts a new
root run). Real ``create_agent`` loops and a real LangGraph ``StateGraph``, scripted models.

These pin what the run-end handler must keep when issue 25 item 6 trims where it rides.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from agent_scene import new_engine
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from test_langchain import Scripted, declare_set_stage, stage_tool

from amends.integrations.langchain import AmendsMiddleware


class Outer(TypedDict, total=False):
    request: str
    outcome: str


class FailsSecond(Scripted):
    """Asks for one set_stage call, then the model endpoint fails."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_calls", 0) >= 1:
            raise ConnectionError("model endpoint unreachable")
        object.__setattr__(self, "_calls", 1)
        return super()._generate(*args, **kwargs)


def failing_model() -> FailsSecond:
    call = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c1"}
    return FailsSecond(messages=iter([AIMessage(content="", tool_calls=[call])]))


class Seen(BaseCallbackHandler):
    """A caller's own handler, given to the sub-agent as fresh ``callbacks=``."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)


def one_node_graph(delegate: Any, **compile_kwargs: Any) -> Any:
    """An outer graph whose one node, ``delegate``, runs the sub-agent."""
    graph = StateGraph(Outer)
    graph.add_node("delegate", delegate)
    graph.add_edge(START, "delegate")
    graph.add_edge("delegate", END)
    return graph.compile(**compile_kwargs)


def supervisor(sub_agent: Any, *, catches: bool, fresh: bool, caught: list[BaseException]) -> Any:
    """A one-node graph whose node runs ``sub_agent``; it catches the sub-agent's error and goes
    on (``catches``), or lets it end the outer run too."""

    async def delegate(state: Outer, config: RunnableConfig) -> Outer:
        sub_config: Any = {"callbacks": [Seen()]} if fresh else config
        try:
            await sub_agent.ainvoke({"messages": [("user", state["request"])]}, sub_config)
        except ConnectionError as exc:
            if not catches:
                raise
            caught.append(exc)
            return {"outcome": "the sub-agent failed; asked the user"}
        return {"outcome": "done"}

    return one_node_graph(delegate)


@pytest.mark.parametrize("fresh", [False, True], ids=["inherited-callbacks", "fresh-callbacks"])
@pytest.mark.parametrize("catches", [False, True], ids=["outer-fails", "outer-catches"])
async def test_a_sub_agent_run_that_fails_inside_another_run_closes_its_saga(
    catches: bool, fresh: bool
) -> None:
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    sub_agent = create_agent(failing_model(), [stage_tool(world)], middleware=[mw])
    caught: list[BaseException] = []
    outer = supervisor(sub_agent, catches=catches, fresh=fresh, caught=caught)
    if catches:
        out = await outer.ainvoke({"request": "Win ACME"})
        assert out["outcome"] == "the sub-agent failed; asked the user"
        [failed] = caught
    else:
        with pytest.raises(ConnectionError, match="model endpoint unreachable") as info:
            await outer.ainvoke({"request": "Win ACME"})
        failed = info.value
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None
    assert saga.title == "Win ACME"
    assert saga.state == "completed"  # closed, not left running
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    assert getattr(failed, "amends_saga_id", None) == saga.saga_id
    report = await engine.undo(saga.saga_id)
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"
    await engine.close()


async def test_a_sub_agent_that_succeeds_inside_another_run_closes_its_saga_once() -> None:
    """The control: the sub-agent's run ends normally inside the outer run; its saga is closed
    by the end of its own graph run and the outer run's end touches nothing."""
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    call = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c1"}
    model = Scripted(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage("ok")]))
    sub_agent = create_agent(model, [stage_tool(world)], middleware=[mw])
    out = await supervisor(sub_agent, catches=False, fresh=False, caught=[]).ainvoke(
        {"request": "Win ACME"}
    )
    assert out["outcome"] == "done"
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None and saga.state == "completed"
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    await asyncio.sleep(0)
    await engine.close()


def sync_supervisor(sub_agent: Any, caught: list[BaseException]) -> Any:
    """``supervisor``'s sync form (``invoke``): its node catches the sub-agent's error."""

    def delegate(state: Outer) -> Outer:
        try:
            sub_agent.invoke({"messages": [("user", state["request"])]})
        except ConnectionError as exc:
            caught.append(exc)
            return {"outcome": "the sub-agent failed; asked the user"}
        return {"outcome": "done"}

    return one_node_graph(delegate)


async def test_a_sync_sub_agent_that_fails_inside_another_run_that_goes_on_closes_its_saga() -> (
    None
):
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    sub_agent = create_agent(failing_model(), [stage_tool(world)], middleware=[mw])
    caught: list[BaseException] = []
    out = await asyncio.to_thread(
        sync_supervisor(sub_agent, caught).invoke, {"request": "Win ACME"}
    )
    assert out["outcome"] == "the sub-agent failed; asked the user"
    [failed] = caught
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None and saga.state == "completed"
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    assert getattr(failed, "amends_saga_id", None) == saga.saga_id
    await engine.close()


async def test_a_sub_agent_over_its_recursion_limit_inside_a_run_that_goes_on_closes_its_saga() -> (
    None
):
    """Issue 25 item 7 one level down: the sub-agent's graph stops at its recursion limit after
    a tool call; the supervisor catches GraphRecursionError and goes on."""
    from langgraph.errors import GraphRecursionError

    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    call = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c1"}
    again = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c2"}
    model = Scripted(
        messages=iter([AIMessage(content="", tool_calls=[c]) for c in (call, again, call)])
    )
    sub_agent = create_agent(model, [stage_tool(world)], middleware=[mw])
    caught: list[BaseException] = []

    async def delegate(state: Outer) -> Outer:
        try:
            await sub_agent.ainvoke(
                {"messages": [("user", state["request"])]}, {"recursion_limit": 4}
            )
        except GraphRecursionError as exc:
            caught.append(exc)
            return {"outcome": "stopped"}
        return {"outcome": "done"}

    out = await one_node_graph(delegate).ainvoke({"request": "Win ACME"})
    assert out["outcome"] == "stopped"
    [failed] = caught
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None and saga.state == "completed"
    assert [s.state for s in saga.steps] == ["done"] * len(saga.steps) and saga.steps
    assert getattr(failed, "amends_saga_id", None) == saga.saga_id
    await engine.close()


async def test_a_sub_agent_paused_by_the_approval_gate_keeps_its_saga_open_for_the_resume() -> None:
    """An interrupt inside the sub-agent pauses the outer run too (LangGraph raises it through
    the sub-agent's run): the saga stays open, and the resumed run records into the same saga."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    mw = AmendsMiddleware(engine, approval="irreversible")  # set_stage has no contract here
    call = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c1"}
    model = Scripted(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage("ok")]))
    sub_agent = create_agent(model, [stage_tool(world)], middleware=[mw])

    async def delegate(state: Outer) -> Outer:
        await sub_agent.ainvoke({"messages": [("user", state["request"])]})
        return {"outcome": "done"}

    outer = one_node_graph(delegate, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    out = await outer.ainvoke({"request": "Win ACME"}, cfg)
    [pause] = out["__interrupt__"]
    assert pause.value["tool"] == "set_stage"
    paused = await engine.log.get_saga(mw.last_saga_id or "")
    assert paused is not None and paused.state == "running" and list(paused.steps) == []
    out = await outer.ainvoke(Command(resume=True), cfg)
    assert out["outcome"] == "done"
    saga = await engine.log.get_saga(paused.saga_id)
    assert saga is not None and saga.state == "completed"
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    assert world.crm.read_field("acme", "stage") == "closed_won"
    await engine.close()
