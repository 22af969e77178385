"""LangChain / LangGraph adapter: what the shared scene (test_scene.py) does not cover."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from agent_scene import new_engine
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

import amends
from amends.integrations import _agents
from amends.integrations.langchain import (
    AmendsMiddleware,
    agent_run,
    agent_run_sync,
    amends_tool_node,
    catalog_tools,
    declare,
)


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted(*turns: list[tuple[str, dict[str, Any]]], final: str = "ok") -> Scripted:
    n = iter(range(1, 100))
    msgs = [
        AIMessage(
            content="", tool_calls=[{"name": t, "args": a, "id": f"c{next(n)}"} for t, a in turn]
        )
        for turn in turns
    ]
    return Scripted(messages=iter([*msgs, AIMessage(content=final)]))


def stage_tool(world: Any) -> Any:
    """A plain LangChain tool that records its own inverse through amends.current_call()."""

    @tool
    def set_stage(stage: str) -> str:
        """Set the ACME deal stage."""
        call = amends.current_call()
        assert call is not None, "runs inside an amends step"
        before = world.crm.read_field("acme", "stage")
        world.crm.update_field("acme", "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id="acme", field="stage", value=before)
        call.expect("crm.read_field", {"record_id": "acme", "field": "stage"}, equals=stage)
        return f"stage is {stage}"

    return set_stage


def declare_set_stage(engine: amends.Engine) -> None:
    """The contract of the LangChain tool set_stage, by its name (its code stays the tool's)."""
    declare(engine.catalog, "set_stage", reversibility="reversible")


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_langchain_tool_records_its_inverse_with_current_call(sync: bool) -> None:
    """Option A of issue 15 item 3: the tool stays a LangChain tool, its contract is in the
    catalog by name, and its body records the inverse via amends.current_call(); undo reverts."""
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine, title="Win ACME")
    agent = create_agent(
        scripted([("set_stage", {"stage": "closed_won"})]), [stage_tool(world)], middleware=[mw]
    )
    state = {"messages": [("user", "Close it")]}
    if sync:
        await asyncio.to_thread(agent.invoke, state)
    else:
        await agent.ainvoke(state)
    assert world.crm.read_field("acme", "stage") == "closed_won"
    assert mw.last_saga_id is not None
    saga = await engine.log.get_saga(mw.last_saga_id)
    assert saga is not None
    assert (saga.title, saga.state) == ("Win ACME", "completed")
    report = await engine.undo(mw.last_saga_id)
    assert report.status == "fully_reversed"
    assert [(s.tool, s.verb, s.state.value) for s in report.steps] == [
        ("set_stage", "Revert", "reverted")
    ]
    assert world.crm.read_field("acme", "stage") == "negotiation"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_tool_exception_leaves_the_step_in_doubt_and_closes_the_runs_saga(
    sync: bool,
) -> None:
    """Rule 9 through LangChain: the tool's exception ends the agent run unchanged, the step is
    in_doubt, and the saga the middleware opened is closed by the run's on_chain_error."""
    _, engine = new_engine()

    @tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise ConnectionError("processor hung up after the request was sent")

    mw = AmendsMiddleware(engine)
    agent = create_agent(
        scripted([("charge_card", {"cents": 100})]), [charge_card], middleware=[mw]
    )
    state = {"messages": [("user", "Charge 1 USD")]}
    with pytest.raises(ConnectionError, match="processor hung up"):
        if sync:
            await asyncio.to_thread(agent.invoke, state)
        else:
            await agent.ainvoke(state)
    assert mw.last_saga_id is not None
    saga = await engine.log.get_saga(mw.last_saga_id)
    assert saga is not None
    assert saga.title == "Charge 1 USD"
    assert saga.state == "failed"  # closed, not left running
    assert [(s.tool, s.state) for s in saga.steps] == [("charge_card", "in_doubt")]
    report = await engine.undo(mw.last_saga_id)
    assert report.status == "cannot_undo"
    assert report.steps[0].state == "in_doubt"
    assert report.manual_actions[0].step_id == saga.steps[0].step_id


async def test_an_error_answer_from_handle_tool_errors_is_in_doubt_and_reaches_the_model() -> None:
    """ToolNode(handle_tool_errors=True) turns the exception into an error ToolMessage: the model
    still gets it, and the step is in_doubt (the tool began; its effect is unknown)."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    _, engine = new_engine()

    @tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise ConnectionError("processor hung up")

    model = scripted([("charge_card", {"cents": 100})])

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", amends_tool_node([charge_card], engine, handle_tool_errors=True))
    graph.add_edge(START, "model")
    graph.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    graph.add_edge("tools", "model")
    async with agent_run(engine, "Charge 1 USD") as run:
        out = await graph.compile().ainvoke({"messages": [("user", "Charge 1 USD")]})
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in errors] == ["error"]
    assert "processor hung up" in str(errors[0].content)
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [(s.tool, s.state) for s in saga.steps] == [("charge_card", "in_doubt")]
    assert "processor hung up" in (saga.steps[0].error or "")


async def test_two_agent_runs_inside_agent_run_are_one_saga() -> None:
    """One user request spanning two runs: one saga; the second run depends on the first."""
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    first = create_agent(
        scripted([("set_stage", {"stage": "contract_sent"})]), [stage_tool(world)], middleware=[mw]
    )
    second = create_agent(
        scripted([("set_stage", {"stage": "closed_won"})]), [stage_tool(world)], middleware=[mw]
    )
    async with agent_run(engine, "Move ACME to won") as run:
        await first.ainvoke({"messages": [("user", "step 1")]})
        assert mw.last_saga_id == run.saga_id
        await second.ainvoke({"messages": [("user", "step 2")]})
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [(s.step_id, s.deps) for s in saga.steps] == [("s1", ()), ("s2", ("s1",))]
    report = await engine.undo(run.saga_id)
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"


def test_a_tool_node_outside_an_agent_run_is_a_clear_error() -> None:
    """amends_tool_node needs an enclosing agent_run: the error says how to add it."""
    from langgraph.graph import START, MessagesState, StateGraph

    _, engine = new_engine()

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    graph = StateGraph(MessagesState)
    graph.add_node("tools", amends_tool_node([ping], engine))
    graph.add_edge(START, "tools")
    msg = AIMessage(content="", tool_calls=[{"name": "ping", "args": {}, "id": "c1"}])
    with pytest.raises(amends.ConfigError, match="agent_run"):
        graph.compile().invoke({"messages": [msg]})
    with agent_run_sync(engine, "Ping") as run:
        out = graph.compile().invoke({"messages": [msg]})
    assert out["messages"][-1].content == "pong"
    assert run.steps[0].state == "done"


def test_the_middleware_needs_an_engine() -> None:
    with pytest.raises(amends.ConfigError, match="needs an amends.Engine"):
        AmendsMiddleware("amends.db")  # type: ignore[arg-type]


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_the_approval_gate_pauses_the_graph_with_an_interrupt(
    approve: bool, sync: bool
) -> None:
    """approval="irreversible": before a call undo cannot take back, the graph pauses with an
    interrupt carrying the question; resumed with True it runs as a step of the same saga, with
    False the model is told and nothing runs. Sibling calls are not run twice."""
    from agent_scene import TITLE, _langchain_model, _langchain_tools
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    mw = AmendsMiddleware(engine, approval="irreversible")
    agent = create_agent(
        _langchain_model(),
        _langchain_tools(engine),
        middleware=[mw],
        checkpointer=InMemorySaver(),
    )
    cfg: Any = {"configurable": {"thread_id": "t1"}}

    async def invoke(arg: Any) -> Any:
        if sync:
            return await asyncio.to_thread(agent.invoke, arg, cfg)
        return await agent.ainvoke(arg, cfg)

    out = await invoke({"messages": [("user", TITLE)]})
    [pause] = out["__interrupt__"]
    assert pause.value == {
        "amends_approval": "The agent wants to call lookup_weather(city='Paris').\n"
        "Class: irreversible (no contract). Undo CANNOT take this back: a person would have to "
        "follow up.\nAllow this call?",
        "tool": "lookup_weather",
        "args": {"city": "Paris"},
        "tool_call_id": "c4",
    }
    out = await invoke(Command(resume=approve))
    assert out["messages"][-1].content == "Done: ACME is closed."
    answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None and saga.state == "completed"
    tools = sorted(s.tool for s in saga.steps)  # parallel calls of one turn have no order
    deps = {s.tool: len(s.deps) for s in saga.steps}
    assert deps["crm.update_field"] == deps["payments.charge"] == 0  # turn 1
    assert deps["chat.post"] == 2
    if approve:
        assert deps["lookup_weather"] == 2  # resumed in its own turn (turn 2)
        assert answers["c4"].content == "sunny in Paris"
        assert tools == ["chat.post", "crm.update_field", "lookup_weather", "payments.charge"]
    else:
        assert answers["c4"].content == (
            "amends: the user did not approve lookup_weather (irreversible); the call was not made"
        )
        assert tools == ["chat.post", "crm.update_field", "payments.charge"]
    assert [e["op"] for e in world.effects()].count("post") == 1  # the sibling ran once


def test_an_unknown_approval_mode_is_refused() -> None:
    _, engine = new_engine()
    with pytest.raises(amends.ConfigError, match="approval is 'ask'; use one of 'off'"):
        AmendsMiddleware(engine, approval="ask")


async def test_a_run_while_another_is_paused_gets_its_own_saga_and_each_state_names_it() -> None:
    """Issue 25 item 4: a second run while the first is paused by an approval interrupt is
    neither refused nor mixed into the first's saga (this test replaces one that pinned the
    refusal); each run's saga id is in its own state, and the first, resumed, goes on in its
    own saga."""
    from agent_scene import TITLE, _langchain_model, _langchain_tools
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine, approval="irreversible")
    first = create_agent(
        _langchain_model(), _langchain_tools(engine), middleware=[mw], checkpointer=InMemorySaver()
    )
    second = create_agent(
        scripted([("set_stage", {"stage": "contract_sent"})]),
        [stage_tool(world)],
        middleware=[mw],
        checkpointer=InMemorySaver(),
    )
    cfg1: Any = {"configurable": {"thread_id": "1"}}
    paused = await first.ainvoke({"messages": [("user", TITLE)]}, cfg1)
    assert paused["__interrupt__"]
    out2 = await second.ainvoke(
        {"messages": [("user", "Move ACME on")]}, {"configurable": {"thread_id": "2"}}
    )
    out1 = await first.ainvoke(Command(resume=True), cfg1)
    one, two = out1["amends_saga_id"], out2["amends_saga_id"]
    assert one == paused["amends_saga_id"] and one != two
    saga1, saga2 = await engine.log.get_saga(one), await engine.log.get_saga(two)
    assert saga1 is not None and saga2 is not None
    assert (saga1.title, saga1.state) == (TITLE, "completed")
    assert sorted(s.tool for s in saga1.steps) == [
        "chat.post",
        "crm.update_field",
        "lookup_weather",
        "payments.charge",
    ]
    assert (saga2.title, saga2.state) == ("Move ACME on", "completed")
    assert [(s.tool, s.args, s.state) for s in saga2.steps] == [
        ("set_stage", {"stage": "contract_sent"}, "done")
    ]


async def test_invalid_arguments_and_unknown_tools_never_ran_so_nothing_is_in_doubt() -> None:
    """ToolNode answers arguments that fail validation and tools the agent does not have
    without running anything: the first is a failed step (no effect), the second no step; the
    model gets ToolNode's own answers."""
    _, engine = new_engine()

    @tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        raise AssertionError("never runs")

    mw = AmendsMiddleware(engine)
    agent = create_agent(
        scripted([("charge_card", {"cents": "a lot"}), ("refund_all", {})]),
        [charge_card],
        middleware=[mw],
    )
    out = await agent.ainvoke({"messages": [("user", "Charge")]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["error", "error"]
    assert str(answers[0].content).startswith("Error invoking tool 'charge_card'")
    assert "refund_all is not a valid tool" in str(answers[1].content)
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None
    assert [(s.tool, s.state) for s in saga.steps] == [("charge_card", "failed")]
    report = await engine.undo(saga.saga_id)
    assert report.status == "fully_reversed"
    assert [s.state.value for s in report.steps] == ["not_needed"]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_failing_model_call_closes_the_saga_the_middleware_opened(sync: bool) -> None:
    """The model fails after a tool call: the run ends with the model's error, the saga is
    closed (not left running with a heartbeat), and its step can be undone."""
    world, engine = new_engine()
    declare_set_stage(engine)

    class FailsSecond(Scripted):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            if getattr(self, "_calls", 0) >= 1:
                raise TimeoutError("model endpoint timed out")
            object.__setattr__(self, "_calls", 1)
            return super()._generate(*args, **kwargs)

    model = FailsSecond(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[{"name": "set_stage", "args": {"stage": "won"}, "id": "c1"}],
                )
            ]
        )
    )
    mw = AmendsMiddleware(engine)
    agent = create_agent(model, [stage_tool(world)], middleware=[mw])
    state = {"messages": [("user", "Win ACME")]}
    with pytest.raises(TimeoutError, match="model endpoint timed out"):
        if sync:
            await asyncio.to_thread(agent.invoke, state)
        else:
            await agent.ainvoke(state)
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None
    assert saga.state == "completed"  # closed; its one step is done
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    report = await engine.undo(saga.saga_id)
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"


class HoldFirstCall(AgentMiddleware):  # type: ignore[type-arg]
    """An outer middleware that holds the first-listed tool call back (or never lets it
    through): the framework's concurrent calls reach amends in the other order."""

    def __init__(self, hold: float | None) -> None:
        super().__init__()
        self.hold = hold  # seconds; None: answer it here, it never reaches amends

    def _held(self, request: Any) -> ToolMessage | None:
        if request.tool_call["id"] != "c1" or self.hold is not None:
            return None
        return ToolMessage(content="not now", tool_call_id="c1", status="error")

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        answer = self._held(request)
        if answer is not None:
            return answer
        if request.tool_call["id"] == "c1":
            time.sleep(self.hold or 0)
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        answer = self._held(request)
        if answer is not None:
            return answer
        if request.tool_call["id"] == "c1":
            await asyncio.sleep(self.hold or 0)
        return await handler(request)


ONE_TURN = [
    ("crm_update_field", {"record_id": "acme", "field": "stage", "value": "closed_won"}),
    ("payments_charge", {"customer": "cus_acme", "cents": 5000}),
    ("chat_post", {"channel": "#sales", "text": "ACME is closed"}),
]


async def run_turn(engine: amends.Engine, hold: float | None, sync: bool) -> amends.SagaRecord:
    mw = AmendsMiddleware(engine, title="Close ACME")
    tools = catalog_tools(engine.catalog, ["crm.update_field", "payments.charge", "chat.post"])
    agent = create_agent(scripted(ONE_TURN), tools, middleware=[HoldFirstCall(hold), mw])
    state = {"messages": [("user", "Close it")]}
    if sync:
        await asyncio.wait_for(asyncio.to_thread(agent.invoke, state), 30)
    else:
        await asyncio.wait_for(agent.ainvoke(state), 30)
    assert mw.last_saga_id is not None
    saga = await engine.log.get_saga(mw.last_saga_id)
    assert saga is not None
    return saga


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_steps_of_one_turn_follow_the_models_order_not_the_order_calls_arrive(
    sync: bool,
) -> None:
    """The model listed crm, charge, post in one turn; the framework runs them concurrently and
    the first reaches amends last. The saga numbers them as the model listed them, so the same
    run gives the same step ids and report every time (a CI run once printed s3/s4 swapped)."""
    world, engine = new_engine()
    saga = await run_turn(engine, 0.2, sync)
    assert [(s.step_id, s.tool, s.state) for s in saga.steps] == [
        ("s1", "crm.update_field", "done"),
        ("s2", "payments.charge", "done"),
        ("s3", "chat.post", "done"),
    ]
    report = await engine.undo(saga.saga_id)
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "compensated"),
        ("s3", "compensated"),
    ]
    assert world.crm.read_field("acme", "stage") == "negotiation"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_call_that_never_reaches_amends_delays_the_rest_of_its_turn_never_blocks_it(
    sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outer layer answers the first-listed call itself (a call limit): the calls listed
    after it wait at most PLACE_GRACE for it, then run; nothing hangs, nothing is recorded for
    the call that never ran."""
    monkeypatch.setattr(_agents, "PLACE_GRACE", 0.2)
    world, engine = new_engine()
    saga = await run_turn(engine, None, sync)
    assert [(s.step_id, s.tool, s.state) for s in saga.steps] == [
        ("s1", "payments.charge", "done"),
        ("s2", "chat.post", "done"),
    ]
    assert world.crm.read_field("acme", "stage") == "negotiation"


async def test_the_async_hook_adds_no_thread_pool_hop_to_a_tool_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 25 item 6: create_agent wraps each middleware's awrap_tool_call in a LangSmith
    span that, for a coroutine function, hops to a thread pool twice per tool call (traced or
    not). amends' hook is a plain function returning the call's coroutine, so an agent with
    AmendsMiddleware and async tools hands nothing to a thread pool, and the step is still
    recorded with its inverse (the model's own hops are counted in a run without amends)."""
    world, engine = new_engine()
    declare(engine.catalog, "set_stage", reversibility="reversible")

    @tool
    async def set_stage(stage: str) -> str:
        """Set the ACME deal stage."""
        call = amends.current_call()
        if call is None:  # the run without amends
            return "no step"
        before = world.crm.read_field("acme", "stage")
        world.crm.update_field("acme", "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id="acme", field="stage", value=before)
        call.expect("crm.read_field", {"record_id": "acme", "field": "stage"}, equals=stage)
        return f"stage is {stage}"

    hops: list[object] = []
    loop = asyncio.get_running_loop()
    run_in_executor = loop.run_in_executor

    def counted(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return run_in_executor(executor, func, *args)

    monkeypatch.setattr(loop, "run_in_executor", counted)
    turns = [[("set_stage", {"stage": "closed_won"})], [("set_stage", {"stage": "lost"})]]
    state = {"messages": [("user", "Close it")]}
    await create_agent(scripted(*turns), [set_stage]).ainvoke(state)  # the model's own hops
    without = len(hops)
    hops.clear()
    mw = AmendsMiddleware(engine, title="Win ACME")
    await create_agent(scripted(*turns), [set_stage], middleware=[mw]).ainvoke(state)
    assert len(hops) == without
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.state) for s in saga.steps] == [
        ("s1", "set_stage", "done"),
        ("s2", "set_stage", "done"),
    ]
    report = await engine.undo(saga.saga_id)
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"


class Watching(Scripted):
    """Notes the handlers LangChain gives each of its model calls."""

    seen: list[list[str]] = []

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.seen.append([type(h).__name__ for h in (run_manager.handlers if run_manager else [])])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_the_run_end_handler_rides_on_graph_runs_not_on_the_chat_models_calls(
    sync: bool,
) -> None:
    """Issue 25 item 6: amends' run-end handler is given to root and graph runs only. On every
    run it cost ~95 Python calls per tool call (the chat model checks each of its handlers
    against a runtime Protocol); a model call inside a watched run has none of amends'
    handlers, and the run's saga is still recorded and closed by the graph run's end."""
    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine, title="Win ACME")
    call = {"name": "set_stage", "args": {"stage": "closed_won"}, "id": "c1"}
    model = Watching(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage("ok")]))
    model.seen = []
    agent = create_agent(model, [stage_tool(world)], middleware=[mw])
    state = {"messages": [("user", "Close it")]}
    if sync:
        await asyncio.to_thread(agent.invoke, state)
    else:
        await agent.ainvoke(state)
    assert model.seen == [[], []]  # two model calls, no amends handler on either
    saga = await engine.log.get_saga(mw.last_saga_id or "")
    assert saga is not None and saga.state == "completed"
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    await engine.close()


def test_the_watched_request_is_the_request_the_framework_override_makes() -> None:
    """Issue 25 item 6: the tool watch swaps the request's tool without dataclasses.replace;
    the copy equals LangGraph's own ``override(tool=...)`` field for field, leaves the original
    untouched, and a request of another shape (a subclass) goes through ``override``."""
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from amends.integrations.langchain import _with_tool

    @tool
    def first(x: int) -> int:
        """One."""
        return x

    @tool
    def second(x: int) -> int:
        """Two."""
        return x

    call = {"name": "first", "args": {"x": 1}, "id": "c1", "type": "tool_call"}
    request = ToolCallRequest(tool_call=call, tool=first, state={"messages": []}, runtime=None)  # type: ignore[arg-type]
    mine, theirs = _with_tool(request, second), request.override(tool=second)
    assert type(mine) is ToolCallRequest
    assert vars(mine) == vars(theirs)
    assert mine.tool is second and request.tool is first
    assert mine.tool_call is call and mine.state is request.state

    class Special(ToolCallRequest):
        pass

    special = Special(tool_call=call, tool=first, state={}, runtime=None)  # type: ignore[arg-type]
    swapped = _with_tool(special, second)
    assert type(swapped) is Special and swapped.tool is second and special.tool is first


class AskAfterModel(AgentMiddleware):  # type: ignore[type-arg]
    """Another middleware's interrupt: after the model's first answer the graph pauses for the
    user (like LangChain's human-in-the-loop middleware), outside any amends tool call."""

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        from langgraph.types import interrupt

        if not any(isinstance(m, ToolMessage) for m in state["messages"]):
            interrupt("go on?")
        return None


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_the_run_s_own_end_closes_its_saga_and_a_pause_keeps_it_open(sync: bool) -> None:
    """Issue 25 item 6: no after-agent node (LangGraph walked its channels on every superstep);
    the graph run's end closes the saga, complete before ainvoke/invoke returns, unless the run
    paused on an interrupt: then the saga stays open, and the resumed run's end closes it,
    even when the resume makes no tool call of its own (the other middleware's pause here)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine, title="Win ACME")
    agent = create_agent(
        scripted([("set_stage", {"stage": "closed_won"})]), [stage_tool(world)], middleware=[mw]
    )
    assert sorted(n for n in agent.get_graph().nodes if "Amends" in n) == [
        "AmendsMiddleware.before_agent"
    ]

    async def invoke(graph: Any, arg: Any, cfg: Any = None) -> Any:
        if sync:
            return await asyncio.to_thread(graph.invoke, arg, cfg)
        return await graph.ainvoke(arg, cfg)

    out = await invoke(agent, {"messages": [("user", "Close it")]})
    saga = await engine.log.get_saga(out["amends_saga_id"])
    assert saga is not None and (saga.title, saga.state) == ("Win ACME", "completed")
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]

    paused_agent = create_agent(
        Scripted(messages=iter([AIMessage(content="nothing to do")])),
        [stage_tool(world)],
        middleware=[mw, AskAfterModel()],
        checkpointer=InMemorySaver(),
    )
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    out = await invoke(paused_agent, {"messages": [("user", "Anything?")]}, cfg)
    [pause] = out["__interrupt__"]
    assert pause.value == "go on?"
    paused = await engine.log.get_saga(out["amends_saga_id"])
    assert paused is not None and paused.state == "running" and list(paused.steps) == []
    out = await invoke(paused_agent, Command(resume=True), cfg)
    assert out["messages"][-1].content == "nothing to do"
    assert out["amends_saga_id"] == paused.saga_id == mw.last_saga_id
    saga = await engine.log.get_saga(paused.saga_id)
    assert saga is not None and (saga.title, saga.state) == ("Win ACME", "completed")
    assert list(saga.steps) == []
    await engine.close()
