"""One process of a handed-off agent run (tests/integrations/test_handoff.py runs it).

``python handoff_child.py FRAMEWORK PHASE LOG WORLD STATE [approve|refuse] [sync|async]``:

* ``pause``: the agent closes the ACME deal (turn 1: stage + charge; turn 2: a chat post and
  an SMS); the SMS (irreversible) waits for a person's approval: the run pauses. The process
  writes the framework's paused state to STATE, runs ``engine.recover()`` (which must leave
  the paused saga alone) and stops without closing anything (as a worker killed after
  answering the request).
* ``resume``: another process answers the approval from STATE and finishes the run.

Prints one JSON line (what the test asserts); an amends error is printed as
``{"error": type, "message": text}`` with exit code 3.
"""

# ruff: noqa: ASYNC230  (a one-shot child process: its blocking file I/O blocks nobody)
from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import amends
from amends.sandbox import World, sandbox_catalog

TITLE = "Close the ACME deal"
TURNS: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        ("c1", "crm_update_field", {"record_id": "acme", "field": "stage", "value": "closed_won"}),
        ("c2", "payments_charge", {"customer": "cus_acme", "cents": 5000}),
    ],
    [
        ("c3", "chat_post", {"channel": "#sales", "text": "ACME is closed"}),
        ("c4", "sms_send", {"to": "+15550100", "text": "ACME closed, thanks!"}),
    ],
]
TOOLS = ["crm.update_field", "payments.charge", "chat.post", "sms.send"]
FINAL = "Done: ACME is closed."


def engine_for(log: str, world: str) -> amends.Engine:
    return amends.Engine(sandbox_catalog(World(world)), log=log)


# --- LangChain: create_agent + AmendsMiddleware(approval=...), an interrupt, a checkpointer --
def lc_model(turns: list[list[tuple[str, str, dict[str, Any]]]]) -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    msgs = [
        AIMessage(
            content="",
            id=f"turn{n}",
            tool_calls=[{"name": t, "args": a, "id": i, "type": "tool_call"} for i, t, a in turn],
        )
        for n, turn in enumerate(turns, 1)
    ]
    return Scripted(messages=iter([*msgs, AIMessage(content=FINAL)]))


def lc_saver(path: str, load: bool) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    if load:  # another process's checkpoints, as a durable checkpointer would hold them
        with open(path, "rb") as f:
            storage, writes, blobs = pickle.load(f)
        for thread, spaces in storage.items():
            for ns, cps in spaces.items():
                saver.storage[thread][ns].update(cps)
        saver.writes.update(writes)
        saver.blobs.update(blobs)
    return saver


def lc_dump(saver: Any, path: str) -> None:
    storage = {t: {ns: dict(c) for ns, c in s.items()} for t, s in saver.storage.items()}
    with open(path, "wb") as f:
        pickle.dump((storage, dict(saver.writes), dict(saver.blobs)), f)


async def langchain(
    phase: str, engine: amends.Engine, state: str, approve: bool, sync: bool
) -> Any:
    from langchain.agents import create_agent
    from langchain_core.messages import ToolMessage
    from langgraph.types import Command

    from amends.integrations.langchain import AmendsMiddleware, catalog_tools

    saver = lc_saver(state, load=phase == "resume")
    agent = create_agent(
        lc_model(TURNS if phase == "pause" else []),
        catalog_tools(engine.catalog, TOOLS),
        middleware=[AmendsMiddleware(engine, approval="irreversible")],
        checkpointer=saver,
    )
    cfg: Any = {"configurable": {"thread_id": "acme"}}
    arg: Any = {"messages": [("user", TITLE)]} if phase == "pause" else Command(resume=approve)
    out = await (asyncio.to_thread(agent.invoke, arg, cfg) if sync else agent.ainvoke(arg, cfg))
    if phase == "pause":
        lc_dump(saver, state)
        [pause] = out["__interrupt__"]
        return {"saga_id": out["amends_saga_id"], "asked": pause.value["tool"]}
    answers = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    return {
        "saga_id": out["amends_saga_id"],
        "answers": answers,
        "final": out["messages"][-1].content,
    }


# --- Pydantic AI: DeferredToolRequests, message history + DeferredToolResults --------------
async def pydantic_ai(
    phase: str, engine: amends.Engine, state: str, approve: bool, sync: bool
) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from amends.integrations.pydantic_ai import AmendsToolset, agent_run, catalog_toolset

    script = [[ToolCallPart(t, a, tool_call_id=i) for i, t, a in turn] for turn in TURNS]
    if phase == "resume":
        script = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=script.pop(0) if script else [TextPart(FINAL)])

    toolset = AmendsToolset(
        catalog_toolset(engine.catalog, TOOLS), engine=engine, approval="irreversible"
    )
    agent = Agent(
        FunctionModel(respond), toolsets=[toolset], output_type=[str, DeferredToolRequests]
    )
    if phase == "pause":
        async with agent_run(engine, TITLE) as run:
            out = await agent.run(TITLE)
            assert isinstance(out.output, DeferredToolRequests)
            await run.pause()  # the person answers later, maybe in another process
        asked = [c.tool_name for c in out.output.approvals]
        with open(state, "w") as f:
            json.dump(
                {
                    "saga_id": run.saga_id,
                    "calls": [c.tool_call_id for c in out.output.approvals],
                    "messages": json.loads(ModelMessagesTypeAdapter.dump_json(out.all_messages())),
                },
                f,
            )
        return {"saga_id": run.saga_id, "asked": asked[0]}
    with open(state) as f:
        saved = json.load(f)
    history = ModelMessagesTypeAdapter.validate_python(saved["messages"])
    results = DeferredToolResults(approvals={c: approve for c in saved["calls"]})
    async with agent_run(engine, continue_saga=saved["saga_id"]) as run:
        out = await agent.run(message_history=history, deferred_tool_results=results)
    answers = {
        p.tool_call_id: p.content if isinstance(p.content, str) else json.dumps(p.content)
        for m in out.all_messages()
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart)
    }
    return {"saga_id": run.saga_id, "answers": answers, "final": out.output}


# --- OpenAI Agents: result.to_state() -> RunState.to_json / from_json -> run again ----------
async def openai_agents(
    phase: str, engine: amends.Engine, state: str, approve: bool, sync: bool
) -> Any:
    from agents import Agent, RunState
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from amends.integrations.openai_agents import (
        agent_run,
        catalog_function_tools,
        run_agent,
        wrap_agent,
    )

    steps = [
        *(
            ModelStep(output=[function_call(t, a, call_id=i) for i, t, a in turn])
            for turn in (TURNS if phase == "pause" else [])
        ),
        ModelStep(output=[assistant_message(FINAL)]),
    ]
    agent = Agent(
        name="sales",
        model=ScriptedModel(steps),
        tools=catalog_function_tools(engine.catalog, TOOLS),
    )
    if phase == "pause":
        async with agent_run(engine, TITLE) as run:
            outcome = await run_agent(engine, agent, TITLE, approval="irreversible")
            assert outcome.result.interruptions
            saved = outcome.result.to_state().to_json()
            await run.pause()  # the person answers later, maybe in another process
        with open(state, "w") as f:
            json.dump({"saga_id": run.saga_id, "state": saved}, f)
        asked = [i.tool_name for i in outcome.result.interruptions]
        return {"saga_id": run.saga_id, "asked": asked[0]}
    with open(state) as f:
        saved = json.load(f)
    # the state names the agent that paused: the wrapped one (its tools are recorded)
    wrapped = wrap_agent(agent, engine, approval="irreversible")
    resumed = await RunState.from_json(wrapped, saved["state"])
    for item in resumed.get_interruptions():
        (resumed.approve if approve else resumed.reject)(item)
    async with agent_run(engine, continue_saga=saved["saga_id"]) as run:
        outcome = await run_agent(engine, agent, resumed, approval="irreversible")
    answers = {
        getattr(i, "raw_item", {}).get("call_id"): str(i.output)
        for i in outcome.result.new_items
        if type(i).__name__ == "ToolCallOutputItem"
    }
    return {"saga_id": run.saga_id, "answers": answers, "final": outcome.result.final_output}


FRAMEWORKS = {"langchain": langchain, "pydantic_ai": pydantic_ai, "openai_agents": openai_agents}


async def main(argv: list[str]) -> int:
    framework, phase, log, world, state = argv[:5]
    approve = "refuse" not in argv[5:]
    sync = "sync" in argv[5:]
    engine = engine_for(log, world)
    try:
        out = await FRAMEWORKS[framework](phase, engine, state, approve, sync)
    except amends.AmendsError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        return 3
    if phase == "pause":
        rec = await engine.recover()  # must not close the paused saga
        saga = await engine.log.get_saga(out["saga_id"])
        assert saga is not None
        out["recovered_in_doubt"] = list(rec.in_doubt)
        out["state_after_recover"] = saga.state
        print(json.dumps(out), flush=True)
        os._exit(0)  # a worker stopped after answering: nothing closed, nothing flushed
    await engine.close()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
