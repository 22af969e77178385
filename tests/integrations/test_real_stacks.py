"""Issue 25: the three adapters driven as users drive them (real agent loops, scripted models):
every tool keeps its shape, an undo is told to the agent, not crashed into it, and a failed run
still has a handle. Each behaviour is stated once and held in every framework (stacks.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_scene import new_engine
from stacks import FINAL, FRAMEWORKS, play

import amends
from amends.integrations.langchain import declare
from amends.sandbox import World


def undo_tool_for(framework: str) -> Any:
    if framework == "langchain":
        from amends.integrations.langchain import undo_tool
    elif framework == "pydantic_ai":
        from amends.integrations.pydantic_ai import undo_tool
    else:
        from amends.integrations.openai_agents import undo_tool
    return undo_tool()


def world_tools(world: World) -> list[Any]:
    """Plain framework tools over the sandbox world, as an agent team writes them: they act,
    then tell amends their inverse through amends.current_call()."""

    def set_stage(deal: str, stage: str) -> str:
        """Set the stage of a deal in the CRM."""
        call = amends.current_call()
        assert call is not None, "runs inside an amends step"
        before = world.crm.read_field(deal, "stage")
        world.crm.update_field(deal, "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id=deal, field="stage", value=before)
        call.expect("crm.read_field", {"record_id": deal, "field": "stage"}, equals=stage)
        return f"{deal} is {stage}"

    def charge_card(customer: str, cents: int, card_number: str, deal: str) -> str:
        """Charge the customer's card for a deal."""
        call = amends.current_call()
        assert call is not None
        ch = world.payments.charge(customer, cents, deal=deal, idempotency_key=call.idempotency_key)
        call.inverse("payments.refund", charge_id=ch["id"], cents=cents)
        call.expect("payments.get_charge", {"charge_id": ch["id"]}, equals=0, path="refunded")
        return str(ch["id"])

    def post_message(channel: str, text: str) -> str:
        """Post a message to a chat channel (no contract: irreversible)."""
        return str(world.chat.post(channel, text)["id"])

    return [set_stage, charge_card, post_message]


def declare_set_stage(engine: amends.Engine) -> None:
    declare(engine.catalog, "set_stage", reversibility="reversible")


def declare_world_tools(engine: amends.Engine, *, undo_order: bool = True) -> None:
    declare_set_stage(engine)
    declare(
        engine.catalog,
        "charge_card",
        reversibility="compensable",
        sensitive=["card_number"],
        describe="Charge {cents} cents to {customer}",
        undo_after=["set_stage"] if undo_order else [],
    )


CARD = "4111 1111 1111 1111"
WIN_THEN_CHARGE = [
    [("c1", "set_stage", {"deal": "acme", "stage": "closed_won"})],
    [
        (
            "c2",
            "charge_card",
            {"customer": "cus_acme", "cents": 900, "card_number": CARD, "deal": "acme"},
        )
    ],
]


# --- item 1: a tool keeps its own parameters ------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_tool_parameter_named_after_or_step_id_is_the_tools_own(framework: str) -> None:
    """Item 1: a tool whose parameters are named ``after`` and ``step_id`` runs with its own
    arguments (it crashed LangChain and Pydantic AI runs with ConfigError and never ran under
    OpenAI Agents); the step records them as the tool's arguments."""
    _, engine = new_engine()
    got: list[tuple[str, str, str]] = []

    def schedule_follow_up(after: str, step_id: str, note: str) -> str:
        """Schedule a follow-up task after a date."""
        got.append((after, step_id, note))
        return f"scheduled {step_id} after {after}"

    args = {"after": "2026-12-10", "step_id": "fu-7", "note": "call ACME"}
    played = await play(
        framework, engine, [[("c1", "schedule_follow_up", args)]], [schedule_follow_up]
    )
    assert played.output == FINAL
    assert got == [("2026-12-10", "fu-7", "call ACME")]
    assert played.answers["c1"] == "scheduled fu-7 after 2026-12-10"
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.args, s.state) for s in saga.steps] == [
        ("s1", "schedule_follow_up", args, "done")
    ]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_tool_parameter_named_like_any_amends_internal_is_the_tools_own(
    framework: str,
) -> None:
    """Item 1's class: parameters named like the adapters' and the engine's own internals
    (``call``, the name the step's forward function gave amends' Call, crashed the step in
    every framework: "got multiple values for argument 'call'") reach the tool as given."""
    _, engine = new_engine()
    got: list[tuple[str, ...]] = []

    def book_room(
        call: str, saga: str, run: str, tool: str, budget: str, approval: str, undo_after: str
    ) -> str:
        """Book a meeting room."""
        got.append((call, saga, run, tool, budget, approval, undo_after))
        return f"booked {call}"

    args = {
        "call": "kickoff",
        "saga": "s",
        "run": "r",
        "tool": "t",
        "budget": "b",
        "approval": "a",
        "undo_after": "u",
    }
    played = await play(framework, engine, [[("c1", "book_room", args)]], [book_room])
    assert played.output == FINAL
    assert got == [("kickoff", "s", "r", "t", "b", "a", "u")]
    assert played.answers["c1"] == "booked kickoff"
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.args, s.state) for s in saga.steps] == [
        ("s1", "book_room", args, "done")
    ]


async def test_the_plain_api_takes_a_tools_arguments_as_one_mapping() -> None:
    """Item 1 in the plain API: ``saga.call(tool, {...})`` gives the tool arguments named like
    amends' own options (``after``, ``step_id``, ``undo_after``); amends' options still work
    beside it, and an argument given twice is a clear error."""
    _, engine = new_engine()
    seen: list[dict[str, Any]] = []

    @engine.catalog.tool("tasks.schedule", reversibility="irreversible")
    async def schedule(
        call: amends.Call, after: str, step_id: str, undo_after: str, note: str = ""
    ) -> str:
        seen.append({"after": after, "step_id": step_id, "undo_after": undo_after})
        return "ok"

    args = {"after": "2026-12-10", "step_id": "fu-7", "undo_after": "never"}
    async with engine.saga("Schedule") as saga:
        a = saga.call("crm.update_field", record_id="acme", field="stage", value="won")
        b = saga.call("tasks.schedule", args, after=[a], step_id="sched")
        await b
        with pytest.raises(amends.ContractError, match="argument 'note' of 'tasks.schedule'"):
            saga.call("tasks.schedule", {**args, "note": "a"}, note="b")
        with pytest.raises(amends.ContractError, match="must be a mapping of names"):
            saga.call("tasks.schedule", ["after"])  # type: ignore[arg-type]
    assert seen == [args]
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None
    assert [(s.step_id, s.args, s.deps) for s in logged.steps] == [
        ("s1", {"record_id": "acme", "field": "stage", "value": "won"}, ()),
        ("sched", args, ("s1",)),
    ]


# --- item 2: declare() matches @catalog.tool ------------------------------------------------


async def plain_win_then_charge(undo_order: bool) -> tuple[str, list[str]]:
    """The reference: the same two effects through the plain API and the sandbox catalog."""
    _, engine = new_engine(World())
    async with engine.saga("Win ACME, then charge it") as saga:
        win = saga.call("crm.update_field", record_id="acme", field="stage", value="closed_won")
        await win
        saga.call(
            "payments.charge",
            customer="cus_acme",
            cents=900,
            deal="acme",
            after=[win],
            undo_after=[win] if undo_order else [],
        )
    report = await engine.undo(saga.id)
    return report.status.value, [s.state.value for s in report.steps]


@pytest.mark.parametrize("undo_order", [True, False], ids=["undo_after", "undeclared"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_declare_gives_native_tools_undo_order_secrets_and_sentences(
    framework: str, undo_order: bool
) -> None:
    """Item 2: "win the deal, then charge it" with framework-native tools declared with
    ``undo_after=["set_stage"]``, ``sensitive=["card_number"]`` and ``describe=``: undo reopens
    the deal, then refunds (partially_reversed, as the plain API with undo_after); without the
    declaration the processor refuses the refund and the reopening is blocked, as in the plain
    API. The card number reaches neither the log nor the report; the step reads as its
    sentence."""
    world, engine = new_engine()
    declare_world_tools(engine, undo_order=undo_order)
    played = await play(framework, engine, WIN_THEN_CHARGE, world_tools(world), prompt="Win ACME")
    assert played.output == FINAL
    report = await engine.undo(played.saga_id or "")
    status, states = await plain_win_then_charge(undo_order)
    assert (report.status.value, [s.state.value for s in report.steps]) == (status, states)
    if undo_order:
        assert states == ["reverted", "compensated"]
        assert world.payments.get_charge("ch_1")["refunded"] == 900
        assert world.crm.read_field("acme", "stage") == "negotiation"
    else:
        assert states == ["blocked", "failed"]
        assert world.payments.get_charge("ch_1")["refunded"] == 0
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert saga.steps[1].args["card_number"] != CARD
    logged = json.dumps([s.args for s in saga.steps]) + report.to_json() + report.render("text")
    assert CARD not in logged and "1111 1111" not in logged  # (a timestamp may hold "4111")
    assert report.steps[1].description == "Charge 900 cents to cus_acme"


def test_declare_refuses_a_bad_undo_order_with_the_fix() -> None:
    """Item 2: a bad ``undo_after`` is a ContractError naming the value and the fix."""
    _, engine = new_engine()
    with pytest.raises(amends.ContractError, match="must be a list of tool names"):
        declare(engine.catalog, "refund_x", reversibility="compensable", undo_after="set_stage")
    with pytest.raises(amends.ContractError, match="names the tool itself"):
        declare(engine.catalog, "refund_y", reversibility="compensable", undo_after=["refund_y"])
    assert "refund_x" not in engine.catalog and "refund_y" not in engine.catalog


# --- item 3: after an undo, the agent is told, not crashed ----------------------------------

AFTER_UNDO = "Ask the user before acting again."


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_after_the_agents_own_undo_its_next_call_is_refused_and_the_run_goes_on(
    framework: str,
) -> None:
    """Item 3: the agent calls amends_undo, then another tool: that call is refused with a tool
    error the model reads (nothing reaches the vendor, no step is recorded) and the run ends
    normally; before, LangChain and Pydantic AI runs crashed with StepFailedError."""
    world, engine = new_engine()
    declare_set_stage(engine)
    turns = [
        [("c1", "set_stage", {"deal": "acme", "stage": "closed_won"})],
        [("c2", "amends_undo", {})],
        [("c3", "post_message", {"channel": "#sales", "text": "ACME is won!"})],
    ]
    played = await play(
        framework, engine, turns, world_tools(world), extra_tools=[undo_tool_for(framework)]
    )
    assert played.output == FINAL
    assert "Status: fully_reversed" in played.answers["c2"]
    refused = played.answers["c3"]
    assert refused.startswith(
        "amends: this request was undone by this agent (its amends_undo call) at "
    ), refused
    assert refused.endswith(f"so post_message was not called and nothing was done. {AFTER_UNDO}")
    assert [e["op"] for e in world.effects() if e["vendor"] == "chat"] == []
    assert world.crm.read_field("acme", "stage") == "negotiation"
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_after_an_undo_from_outside_the_next_calls_are_refused_and_the_run_goes_on(
    framework: str,
) -> None:
    """Item 3: a person undoes the request between two model turns; the agent's next calls are
    refused with the message the model reads (who, when, ask the user), nothing reaches the
    vendor, and the run goes on to its end."""
    world, engine = new_engine()
    declare_set_stage(engine)

    async def undo_from_outside(n: int) -> None:
        if n == 1:
            [saga] = await engine.log.list_sagas()
            await engine.undo(saga.saga_id)

    turns = [
        [("c1", "set_stage", {"deal": "acme", "stage": "closed_won"})],
        [("c2", "post_message", {"channel": "#sales", "text": "ACME is won!"})],
        [("c3", "set_stage", {"deal": "acme", "stage": "contract_sent"})],
    ]
    played = await play(framework, engine, turns, world_tools(world), between=undo_from_outside)
    assert played.output == FINAL
    for call_id, tool in (("c2", "post_message"), ("c3", "set_stage")):
        text = played.answers[call_id]
        assert text.startswith(
            "amends: this request was undone by a request from outside this agent run at "
        ), text
        assert text.endswith(f"so {tool} was not called and nothing was done. {AFTER_UNDO}")
    assert [e for e in world.effects() if e["vendor"] == "chat"] == []
    assert world.crm.read_field("acme", "stage") == "negotiation"
    report = await engine.report(played.saga_id or "")
    assert report is not None and report.status == "fully_reversed"


# --- items 4 and 7: a failed run still has a handle, and closes its saga ---------------------


def note_of(exc: BaseException, saga_id: str) -> None:
    assert exc.amends_saga_id == saga_id  # type: ignore[attr-defined]
    assert (
        f"amends: the tool calls this run made are saga {saga_id}; see it with "
        f"`amends show {saga_id}`, undo it with engine.undo({saga_id!r})"
    ) in getattr(exc, "__notes__", [])


async def undo_the_failed_run(engine: amends.Engine, exc: BaseException, world: World) -> None:
    """The handle works: the saga is closed, holds the run's step, and undo restores the CRM."""
    saga_id = exc.amends_saga_id  # type: ignore[attr-defined]
    note_of(exc, saga_id)
    saga = await engine.log.get_saga(saga_id)
    assert saga is not None
    assert saga.state == "completed"  # closed, not left running
    assert [(s.tool, s.state) for s in saga.steps][:1] == [("set_stage", "done")]
    report = await engine.undo(saga_id)
    assert report.status == "fully_reversed"
    assert world.crm.read_field("acme", "stage") == "negotiation"


def looping_turns(n: int) -> list[Any]:
    return [[(f"c{i}", "set_stage", {"deal": "acme", "stage": "closed_won"})] for i in range(n)]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_langgraph_recursion_limit_closes_the_saga_and_the_error_names_it(
    sync: bool,
) -> None:
    """Items 4 and 7: GraphRecursionError ends the run where no middleware hook runs; the saga
    is closed anyway, the error carries its id, and the same middleware records the next run
    (it refused every later run: "already recording another agent run")."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.errors import GraphRecursionError
    from test_langchain import scripted

    from amends.integrations.langchain import AmendsMiddleware

    world, engine = new_engine()
    declare_set_stage(engine)
    mw = AmendsMiddleware(engine)
    set_stage = tool(world_tools(world)[0])
    loop = scripted(*([("set_stage", {"deal": "acme", "stage": "closed_won"})] for _ in range(9)))
    agent = create_agent(loop, [set_stage], middleware=[mw])
    state = {"messages": [("user", "Win ACME")]}
    with pytest.raises(GraphRecursionError) as caught:
        if sync:
            await asyncio.to_thread(agent.invoke, state, {"recursion_limit": 5})
        else:
            await agent.ainvoke(state, {"recursion_limit": 5})
    await undo_the_failed_run(engine, caught.value, world)
    again = create_agent(
        scripted([("set_stage", {"deal": "acme", "stage": "won"})]), [set_stage], middleware=[mw]
    )
    out = await again.ainvoke({"messages": [("user", "Once more")]})
    assert out["amends_saga_id"] not in (None, caught.value.amends_saga_id)  # type: ignore[attr-defined]
    assert world.crm.read_field("acme", "stage") == "won"


async def test_openai_agents_max_turns_exceeded_carries_the_saga_and_closes_it() -> None:
    """Item 4: MaxTurnsExceeded from run_agent carries the saga id (attribute and note); the
    saga is closed and undo takes back what the run did."""
    from agents.exceptions import MaxTurnsExceeded

    world, engine = new_engine()
    declare_set_stage(engine)
    with pytest.raises(MaxTurnsExceeded) as caught:
        await play("openai_agents", engine, looping_turns(9), world_tools(world), max_turns=2)
    await undo_the_failed_run(engine, caught.value, world)


async def test_openai_agents_output_guardrail_carries_the_saga() -> None:
    """Item 4: a guardrail that trips after the tools ran: its exception carries the saga."""
    from agents import Agent, GuardrailFunctionOutput, OutputGuardrail, function_tool
    from agents.exceptions import OutputGuardrailTripwireTriggered
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import run_agent

    world, engine = new_engine()
    declare_set_stage(engine)

    async def no_final(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="blocked", tripwire_triggered=True)

    win = function_call("set_stage", {"deal": "acme", "stage": "won"}, call_id="c1")
    agent = Agent(
        name="a",
        model=ScriptedModel([ModelStep(output=[win]), ModelStep(output=[assistant_message("ok")])]),
        tools=[function_tool(world_tools(world)[0])],
        output_guardrails=[OutputGuardrail(guardrail_function=no_final)],
    )
    with pytest.raises(OutputGuardrailTripwireTriggered) as caught:
        await run_agent(engine, agent, "Win ACME")
    await undo_the_failed_run(engine, caught.value, world)


@pytest.mark.parametrize("form", ["capabilities", "toolsets"])
async def test_pydantic_ai_usage_limit_and_model_error_carry_the_saga(form: str) -> None:
    """Item 4: a run that raises (usage limits; the model's own error) carries its saga, given
    as ``Agent(capabilities=[toolset.capability])`` or as ``Agent(toolsets=[toolset])`` (which
    Pydantic AI leaves from the handler of the run's error without telling it: until
    2026-12-05 that form's exception carried nothing)."""
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import UsageLimits

    from amends.integrations.pydantic_ai import AmendsToolset

    def agent_for(engine: amends.Engine, world: World, respond: Any) -> Any:
        toolset = AmendsToolset(FunctionToolset(world_tools(world)), engine=engine)
        if form == "capabilities":
            return Agent(FunctionModel(respond), capabilities=[toolset.capability])
        return Agent(FunctionModel(respond), toolsets=[toolset])

    def respond(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("set_stage", {"deal": "acme", "stage": "won"})])

    world, engine = new_engine()
    declare_set_stage(engine)
    with pytest.raises(UsageLimitExceeded) as caught:
        await agent_for(engine, world, respond).run(
            "Win", usage_limits=UsageLimits(request_limit=2)
        )
    await undo_the_failed_run(engine, caught.value, world)

    world, engine = new_engine()
    declare_set_stage(engine)

    def fails_second(messages: Any, info: Any) -> ModelResponse:
        if len(messages) > 1:
            raise ConnectionError("model endpoint hung up")
        return respond(messages, info)

    with pytest.raises(ConnectionError) as failed:
        await agent_for(engine, world, fails_second).run("Win")
    await undo_the_failed_run(engine, failed.value, world)

    # streamed (agent.run_stream): the model fails after the tool call, mid-run
    from pydantic_ai.models.function import DeltaToolCall

    world, engine = new_engine()
    declare_set_stage(engine)

    async def streams(messages: Any, info: Any) -> Any:
        if len(messages) > 1:
            raise ConnectionError("model endpoint hung up mid-stream")
        args = '{"deal": "acme", "stage": "won"}'
        yield {0: DeltaToolCall(name="set_stage", json_args=args, tool_call_id="c1")}

    toolset = AmendsToolset(FunctionToolset(world_tools(world)), engine=engine)
    streamed = (
        Agent(FunctionModel(stream_function=streams), capabilities=[toolset.capability])
        if form == "capabilities"
        else Agent(FunctionModel(stream_function=streams), toolsets=[toolset])
    )
    with pytest.raises(ConnectionError) as broke:
        async with streamed.run_stream("Win") as result:
            async for _ in result.stream_text():
                pass
    await undo_the_failed_run(engine, broke.value, world)


@pytest.mark.parametrize("form", ["capabilities", "toolsets"])
async def test_pydantic_ai_a_run_inside_an_except_block_is_judged_by_its_own_end(
    form: str,
) -> None:
    """A run started while the caller handles an exception: that exception is not the run's
    failure (a clean run's result carries no note, the caller's exception no saga id), and a
    run that fails there still gets its own saga id on its own exception."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from amends.integrations.pydantic_ai import AmendsToolset

    world, engine = new_engine()
    declare_set_stage(engine)
    toolset = AmendsToolset(FunctionToolset(world_tools(world)), engine=engine)

    def once(messages: Any, info: Any) -> ModelResponse:
        if len(messages) > 1:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("set_stage", {"deal": "acme", "stage": "won"})])

    def fails_second(messages: Any, info: Any) -> ModelResponse:
        if len(messages) > 1:
            raise ConnectionError("model endpoint hung up")
        return once(messages, info)

    def agent_for(respond: Any) -> Any:
        if form == "capabilities":
            return Agent(FunctionModel(respond), capabilities=[toolset.capability])
        return Agent(FunctionModel(respond), toolsets=[toolset])

    outer = KeyError("the caller's own trouble")
    try:
        raise outer
    except KeyError:
        result = await agent_for(once).run("Win")
        with pytest.raises(ConnectionError) as failed:
            await agent_for(fails_second).run("Win again")
    assert result.output == "done"
    assert getattr(outer, "amends_saga_id", None) is None
    assert not getattr(outer, "__notes__", [])
    clean = toolset.saga_id_of(result)
    assert clean is not None and failed.value.amends_saga_id not in (None, clean)  # type: ignore[attr-defined]
    saga = await engine.log.get_saga(clean)
    assert saga is not None and saga.state == "completed"
    assert [(s.tool, s.state) for s in saga.steps] == [("set_stage", "done")]
    await engine.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_concurrent_runs_each_give_their_own_saga(framework: str) -> None:
    """Item 4: two runs at once through one adapter: each run's saga is obtainable (the state's
    amends_saga_id, toolset.saga_id_of(result), outcome.saga_id), each holds its own step."""
    _, engine = new_engine()
    gate = asyncio.Event()
    arrived: list[str] = []

    async def note(deal: str, text: str) -> str:
        """Note something on a deal."""
        arrived.append(deal)
        if len(arrived) == 2:
            gate.set()
        await asyncio.wait_for(gate.wait(), 10)  # both runs are inside a tool at once
        return f"noted on {deal}"

    runs = [
        play(framework, engine, [[("c1", "note", {"deal": d, "text": "hi"})]], [note], prompt=d)
        for d in ("acme", "globex")
    ]
    one, two = await asyncio.gather(*runs)
    assert one.saga_id and two.saga_id and one.saga_id != two.saga_id
    for played, deal in ((one, "acme"), (two, "globex")):
        saga = await engine.log.get_saga(played.saga_id or "")
        assert saga is not None
        assert (saga.title, saga.state) == (deal, "completed")
        assert [s.args for s in saga.steps] == [{"deal": deal, "text": "hi"}]


# --- item 5: cancellation reaches the tool ---------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_cancelling_a_run_reaches_the_tool_and_its_step_is_in_doubt_at_once(
    framework: str,
) -> None:
    """Item 5: cancelling the agent's run while a tool waits on its vendor cancels the tool, as
    without amends (LangChain's ainvoke left it running inside amends; Pydantic AI's cancel
    blocked until the tool finished); its step is in_doubt when the cancel returns, and the
    run's saga is closed."""
    _, engine = new_engine()
    started, reached = asyncio.Event(), asyncio.Event()

    async def place_order(order: str) -> str:
        """Place an order with a slow vendor."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            reached.set()
            raise
        return "placed"

    turns = [[("c1", "place_order", {"order": "o1"})]]
    task = asyncio.create_task(play(framework, engine, turns, [place_order], prompt="Order"))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(BaseException) as ended:  # each framework words it its own way
        await asyncio.wait_for(task, 10)  # the tool sleeps 60 s: a cancel that waits for it fails
    assert not isinstance(ended.value, TimeoutError), "the cancel waited for the tool"
    assert reached.is_set(), "the cancellation did not reach the tool"
    [listed] = await engine.log.list_sagas()
    saga = await engine.log.get_saga(listed.saga_id)
    assert saga is not None
    assert [(s.tool, s.state) for s in saga.steps] == [("place_order", "in_doubt")]
    assert "cancelled while the tool was running" in (saga.steps[0].error or "")
    assert saga.state == "failed"  # closed: its step is in doubt


# --- item 8: arguments a ToolNode rejects never ran --------------------------------------------


@pytest.mark.parametrize(
    "handler",
    [True, "Bad arguments, try again.", lambda exc: f"could not call: {exc}"],
    ids=["true", "text", "function"],
)
async def test_arguments_a_tool_node_rejects_never_ran_whatever_handles_the_error(
    handler: Any,
) -> None:
    """Item 8: with ``handle_tool_errors`` set, arguments ToolNode rejects before the tool runs
    are a failed step (nothing ran: not in_doubt, no "check whether it happened"), while an
    exception from the running tool stays in_doubt (rule 9)."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from test_langchain import scripted

    from amends.integrations.langchain import agent_run, amends_tool_node

    _, engine = new_engine()
    ran: list[int] = []

    @tool
    def charge_card(cents: int) -> str:
        """Charge the card."""
        ran.append(cents)
        raise ConnectionError("processor hung up after the request was sent")

    model = scripted([("charge_card", {"cents": "a lot"})], [("charge_card", {"cents": 5})])

    def call_model(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", amends_tool_node([charge_card], engine, handle_tool_errors=handler))
    graph.add_edge(START, "model")
    graph.add_conditional_edges(
        "model",
        lambda s: (
            "tools"
            if isinstance(s["messages"][-1], AIMessage) and s["messages"][-1].tool_calls
            else END
        ),
        ["tools", END],
    )
    graph.add_edge("tools", "model")
    async with agent_run(engine, "Charge") as run:
        out = await graph.compile().ainvoke({"messages": [("user", "Charge")]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["error", "error"]
    assert ran == [5]
    saga = await engine.log.get_saga(run.saga_id)
    assert saga is not None
    assert [(s.tool, s.args, s.state) for s in saga.steps] == [
        ("charge_card", {"cents": "a lot"}, "failed"),
        ("charge_card", {"cents": 5}, "in_doubt"),
    ]
    assert (saga.steps[0].error or "").startswith("charge_card did not run: ")
    report = await engine.undo(run.saga_id)
    assert [s.state.value for s in report.steps] == ["not_needed", "in_doubt"]
    assert [m.step_id for m in report.manual_actions] == [saga.steps[1].step_id]


# --- item 9: Pydantic AI turns are responses; defaults the model never sent are not logged ----


async def test_pydantic_ai_turns_are_responses_even_when_tool_call_ids_repeat() -> None:
    """Item 9: FunctionModel scripts restart their tool-call ids; the second response reuses the
    first's id, yet it is a later turn: its step depends on the first, so undo refunds the
    charge before it reverts the deal (the charge read the deal's state). Defaults the model
    never sent are not logged: the step's arguments are what LangChain logs for the same call."""
    world, engine = new_engine()
    declare(engine.catalog, "set_stage", reversibility="reversible")

    def charge(customer: str, cents: int, note: str | None = None) -> str:
        """Charge the customer (a catalog tool's signature: note has a default)."""
        call = amends.current_call()
        assert call is not None
        ch = world.payments.charge(customer, cents, idempotency_key=call.idempotency_key)
        call.inverse("payments.refund", charge_id=ch["id"], cents=cents)
        call.expect("payments.get_charge", {"charge_id": ch["id"]}, equals=0, path="refunded")
        return str(ch["id"])

    declare(engine.catalog, "charge", reversibility="compensable")
    reused = [
        [("call_0", "set_stage", {"deal": "acme", "stage": "closed_won"})],
        [("call_0", "charge", {"customer": "cus_acme", "cents": 900})],
    ]
    tools = [world_tools(world)[0], charge]
    played = await play("pydantic_ai", engine, reused, tools)
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.tool, s.deps) for s in saga.steps] == [
        ("s1", "set_stage", ()),
        ("s2", "charge", ("s1",)),
    ]
    assert saga.steps[1].args == {"customer": "cus_acme", "cents": 900}
    world2, engine2 = new_engine()
    declare(engine2.catalog, "set_stage", reversibility="reversible")
    declare(engine2.catalog, "charge", reversibility="compensable")
    lc = await play("langchain", engine2, reused, [world_tools(world2)[0], charge])
    lc_saga = await engine2.log.get_saga(lc.saga_id or "")
    assert lc_saga is not None
    assert [s.args for s in saga.steps] == [s.args for s in lc_saga.steps]
    await engine.undo(saga.saga_id)
    undo_ops = [
        (e["vendor"], e["op"])
        for e in world.effects()
        if e.get("tag", "").endswith(":compensate")
        or e["op"] in ("refund",)
        or (e["vendor"] == "crm" and e.get("value") == "negotiation")
    ]
    assert undo_ops.index(("payments", "refund")) < undo_ops.index(("crm", "update_field"))


# --- item 10: OpenAI Agents passes approval on and words the contract truthfully ------------


def mail_and_charge_agent(world: World) -> Any:
    from agents import Agent, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    def send_mail(to: str, subject: str) -> str:
        """Send an email."""
        world.mail.send(to, subject, "body")
        return "sent"

    def charge_card(customer: str, cents: int) -> str:
        """Charge the customer."""
        return "charged"

    model = ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call(
                        "send_mail", {"to": "bob@acme.test", "subject": "Won"}, call_id="c1"
                    ),
                    function_call(
                        "charge_card", {"customer": "cus_acme", "cents": 900}, call_id="c2"
                    ),
                ]
            ),
            ModelStep(output=[assistant_message(FINAL)]),
        ]
    )
    return Agent(
        name="a", model=model, tools=[function_tool(send_mail), function_tool(charge_card)]
    )


async def test_run_agent_sync_passes_approval_on_and_nothing_irreversible_runs() -> None:
    """Item 10: run_agent_sync(..., approval="irreversible") stops before the irreversible mail
    (it was sent with no interruption): nothing is sent, nothing is recorded."""
    from amends.integrations.openai_agents import run_agent_sync

    world, engine = new_engine()
    names = {"charge_card": "payments.charge"}
    outcome = await asyncio.to_thread(
        run_agent_sync,
        engine,
        mail_and_charge_agent(world),
        "Mail Bob",
        approval="irreversible",
        names=names,
    )
    assert [i.tool_name for i in outcome.result.interruptions] == ["send_mail"]
    assert [e for e in world.effects() if e["vendor"] == "mail"] == []
    saga = await engine.log.get_saga(outcome.saga_id)
    assert saga is not None
    assert "send_mail" not in [s.tool for s in saga.steps]


@pytest.mark.parametrize("pass_names", [True, False], ids=["names", "from_the_wrapped_tool"])
async def test_approval_requests_words_each_call_with_its_own_contract(pass_names: bool) -> None:
    """Item 10: approval_requests honours names= (and, without it, the name the wrapped tool
    records under): a compensable charge is "compensable", not "irreversible (no contract)"."""
    from amends.integrations.openai_agents import approval_requests, run_agent

    world, engine = new_engine()
    names = {"charge_card": "payments.charge"}
    outcome = await run_agent(
        engine, mail_and_charge_agent(world), "Mail Bob", approval="residue", names=names
    )
    asked = approval_requests(engine, outcome.result, **({"names": names} if pass_names else {}))
    assert [q.splitlines()[:2] for _, q in asked] == [
        [
            "The agent wants to call send_mail(to='bob@acme.test', subject='Won').",
            "Class: irreversible (no contract). Undo CANNOT take this back: a person would have "
            "to follow up.",
        ],
        [
            "The agent wants to call payments.charge(customer='cus_acme', cents=900).",
            "Class: compensable. Undo can compensate this, but not without trace: residue remains.",
        ],
    ]


# --- an agent's retry after a refused call --------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_retry_after_a_refused_call_on_the_same_record_runs_and_is_undone(
    framework: str,
) -> None:
    """The tool refuses the model's first call in the framework's own way (LangChain's ToolNode
    rejects its arguments; a Pydantic AI tool raises ModelRetry; an OpenAI Agents tool raises
    amends.PermanentError): nothing happened, so the step is failed and the model's retry on the
    same record (a shared resource) runs, where it was skipped. Undo reverts the retry and the
    record is as before the run."""
    world, engine = new_engine()
    declare(
        engine.catalog,
        "set_stage",
        reversibility="reversible",
        resources=lambda a: [f"crm:{a['deal']}"],
    )
    calls: list[str] = []

    def set_stage(deal: str, stage: str) -> str:
        """Set the stage of a deal in the CRM."""
        call = amends.current_call()
        assert call is not None
        calls.append(stage)
        if len(calls) == 1 and framework == "pydantic_ai":
            from pydantic_ai import ModelRetry

            raise ModelRetry(f"{deal} is locked by another edit; try again")
        if len(calls) == 1 and framework == "openai_agents":
            raise amends.PermanentError(f"{deal} is locked by another edit; try again")
        before = world.crm.read_field(deal, "stage")
        world.crm.update_field(deal, "stage", stage, idempotency_key=call.idempotency_key)
        call.inverse("crm.update_field", record_id=deal, field="stage", value=before)
        call.expect("crm.read_field", {"record_id": deal, "field": "stage"}, equals=stage)
        return f"{deal} is {stage}"

    won = {"deal": "acme", "stage": "closed_won"}
    first = {"deal": "acme"} if framework == "langchain" else won  # the ToolNode rejects it
    turns = [[("c1", "set_stage", first)], [("c2", "set_stage", won)]]
    played = await play(framework, engine, turns, [set_stage])
    assert played.output == FINAL
    assert played.answers["c2"] == "acme is closed_won"
    assert calls == (["closed_won"] if framework == "langchain" else ["closed_won"] * 2)
    assert world.crm.read_field("acme", "stage") == "closed_won"
    saga = await engine.log.get_saga(played.saga_id or "")
    assert saga is not None
    assert [(s.step_id, s.state, s.deps) for s in saga.steps] == [
        ("s1", "failed", ()),
        ("s2", "done", ("s1",)),
    ]
    report = await engine.undo(played.saga_id or "")
    assert report.status == "fully_reversed"
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "not_needed"),
        ("s2", "reverted"),
    ]
    assert world.crm.read_field("acme", "stage") == "negotiation"
    assert [e["op"] for e in world.effects() if e["vendor"] == "crm"] == [
        "update_field",
        "update_field",
    ]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_after_the_agents_own_selective_undo_its_next_call_is_refused_in_those_words(
    framework: str,
) -> None:
    """Issue 27 re-checked: the agent undoes only one of its calls (amends_undo with steps),
    then calls another tool. The saga's one reversal has begun, so that call is refused — in
    words naming the agent's own selection, not "a request from outside this agent run" —
    nothing reaches the vendor, and the step the selection kept stands."""
    world, engine = new_engine()
    declare_set_stage(engine)
    turns = [
        [  # one turn: the two calls are independent
            ("c1", "set_stage", {"deal": "acme", "stage": "closed_won"}),
            ("c2", "post_message", {"channel": "#sales", "text": "ACME is won!"}),
        ],
        [("c3", "amends_undo", {"steps": ["s1"]})],
        [("c4", "post_message", {"channel": "#sales", "text": "Undone, sorry"})],
    ]
    played = await play(
        framework, engine, turns, world_tools(world), extra_tools=[undo_tool_for(framework)]
    )
    assert played.output == FINAL
    assert "Kept as they are: s2" in played.answers["c3"], played.answers["c3"]
    refused = played.answers["c4"]
    assert refused.startswith(
        "amends: this request was undone by this agent in part (its amends_undo call of s1) at "
    ), refused
    assert refused.endswith(f"so post_message was not called and nothing was done. {AFTER_UNDO}")
    posted = [e["key"] for e in world.effects() if e["vendor"] == "chat" and e["op"] == "post"]
    assert len(posted) == 1, "only the kept message, never the refused one"
    assert world.crm.read_field("acme", "stage") == "negotiation"
