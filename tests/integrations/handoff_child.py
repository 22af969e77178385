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


FRAMEWORKS = {"langchain": langchain}


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
