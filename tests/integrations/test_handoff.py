"""An approval that outlives the process: a run paused for a person's approval is resumed by
ANOTHER process (another worker, after a deploy), and the approved call is the next step of the
SAME saga, with the saga's guarantees: one process holds it at a time, numbering continues from
the log, recovery leaves the paused saga alone, an undo while it is paused refuses the resume,
and undo takes back the steps of both processes. Real separate processes
(``handoff_child.py``), a SQLite file log and PostgreSQL, the sandbox world in a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import amends
from amends.sandbox import World, sandbox_catalog

CHILD = Path(__file__).with_name("handoff_child.py")
SLOW = [pytest.mark.slow]  # each child process starts a framework (~4 s): the fast tier runs few
FRAMEWORKS = [pytest.param(f, marks=SLOW) for f in ("langchain", "pydantic_ai", "openai_agents")]
ASKED = {"langchain": "sms.send", "pydantic_ai": "sms_send", "openai_agents": "sms_send"}
REFUSED = {  # each framework's own words for a call the person did not approve
    "langchain": "amends: the user did not approve sms.send (irreversible); the call was not made",
    "pydantic_ai": "The tool call was denied.",
    "openai_agents": "Tool execution was not approved.",
}
SRC = Path(amends.__file__).resolve().parents[1]

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[pytest.mark.postgres, pytest.mark.slow]),
]


@pytest.fixture(params=BACKENDS)
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'log.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


class Scene:
    def __init__(self, tmp_path: Path, log: str, framework: str) -> None:
        self.log, self.framework = log, framework
        self.world = str(tmp_path / "w.world")
        self.state = str(tmp_path / "paused.state")

    def start(self, phase: str, *extra: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
        cmd = [sys.executable, str(CHILD), self.framework, phase, self.log, self.world, self.state]
        return subprocess.Popen(
            [*cmd, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def run(self, phase: str, *extra: str, rc: int = 0) -> dict[str, Any]:
        return finish(self.start(phase, *extra), rc)

    def engine(self) -> amends.Engine:
        return amends.Engine(sandbox_catalog(World(self.world)), log=self.log)


def finish(proc: subprocess.Popen[str], rc: int | None = 0) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert rc is None or proc.returncode == rc, (proc.returncode, out, err)
    out_json: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    out_json["rc"] = proc.returncode
    return out_json


def steps_of(saga: amends.SagaRecord) -> list[tuple[str, str, tuple[str, ...], str]]:
    return [(s.step_id, s.tool, s.deps, s.state) for s in saga.steps]


FORWARD = [
    ("s1", "crm.update_field", (), "done"),
    ("s2", "payments.charge", (), "done"),
    ("s3", "chat.post", ("s1", "s2"), "done"),
]
SMS = ("s4", "sms.send", ("s1", "s2"), "done")  # in turn 2: it saw turn 1's results, not s3's


async def kinds(engine: amends.Engine, saga_id: str) -> list[str]:
    return [e.kind for e in await engine.log.events(saga_id) if e.kind.startswith("saga.")]


@pytest.mark.parametrize(
    ("framework", "mode"),
    [("langchain", "async"), pytest.param("langchain", "sync", marks=SLOW),
     ("pydantic_ai", "async"), ("openai_agents", "async")],
)  # fmt: skip
async def test_an_approval_answered_in_another_process_is_the_next_step_of_the_same_saga(
    tmp_path: Path, log_url: str, framework: str, mode: str
) -> None:
    """Process A runs turn 1 and half of turn 2, pauses for the SMS, survives its own
    ``engine.recover()`` and stops without closing anything; process B answers yes: the SMS is
    s4 of the same saga (depending on what its turn had seen), the run finishes there, and an
    undo takes back the steps of both processes."""
    scene = Scene(tmp_path, log_url, framework)
    paused = scene.run("pause")
    assert (paused["asked"], paused["recovered_in_doubt"]) == (ASKED[framework], [])
    assert paused["state_after_recover"] == "running"  # recovery left the paused saga alone
    resumed = scene.run("resume", "approve", mode)
    sid = paused["saga_id"]
    assert resumed["saga_id"] == sid
    assert resumed["final"] == "Done: ACME is closed."
    assert "delivered" in resumed["answers"]["c4"]
    engine = scene.engine()
    try:
        saga = await engine.log.get_saga(sid)
        assert saga is not None and saga.state == "completed"
        assert steps_of(saga) == [*FORWARD, SMS]
        assert await kinds(engine, sid) == ["saga.started", "saga.paused", "saga.continued",
                                            "saga.completed"]  # fmt: skip
        assert await engine.log.verify(sid) == []
        report = await engine.undo(sid)
        assert report.status == "cannot_undo"
        assert [(s.step_id, s.tool, s.verb, s.state) for s in report.steps] == [
            ("s1", "crm.update_field", "Revert", "reverted"),
            ("s2", "payments.charge", "Compensate", "compensated"),
            ("s3", "chat.post", "Compensate", "compensated"),
            ("s4", "sms.send", "Acknowledge", "acknowledged"),
        ]
        [action] = report.manual_actions
        assert action.what == (
            "Text message to +15550100 was delivered (7 Dec 2026 09:00 UTC by the sandbox "
            "vendor's clock) and cannot be unsent"
        )
        world = World(scene.world)
        assert world.crm.read_field("acme", "stage") == "negotiation"
        assert world.payments.get_charge("ch_1")["refunded"] == 5000
        assert world.chat.get("chat_1")["status"] == "deleted"
        assert [m["to"] for _, m in world.items("sms.messages")] == ["+15550100"]
        world.close()
    finally:
        await engine.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_refusal_answered_in_another_process_is_no_step_and_closes_the_saga(
    tmp_path: Path, log_url: str, framework: str
) -> None:
    scene = Scene(tmp_path, log_url, framework)
    sid = scene.run("pause")["saga_id"]
    resumed = scene.run("resume", "refuse")
    assert resumed["answers"]["c4"] == REFUSED[framework]
    assert resumed["final"] == "Done: ACME is closed."
    engine = scene.engine()
    try:
        saga = await engine.log.get_saga(sid)
        assert saga is not None and saga.state == "completed"
        assert steps_of(saga) == FORWARD
        world = World(scene.world)
        assert world.items("sms.messages") == []
        world.close()
    finally:
        await engine.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_an_undo_while_the_run_is_paused_refuses_the_resumed_call(
    tmp_path: Path, log_url: str, framework: str
) -> None:
    """Rule: a saga being undone takes no new step. The person undoes the request while the
    SMS waits for approval; the approval arrives later in another process: the SMS is not
    sent, and the saga's steps and report are what the undo did. LangChain tells the model
    (the run goes on); Pydantic AI and OpenAI Agents are refused before the run starts
    (``agent_run(continue_saga=...)`` raises SagaClosedError naming the saga)."""
    scene = Scene(tmp_path, log_url, framework)
    sid = scene.run("pause")["saga_id"]
    engine = scene.engine()
    try:
        report = await engine.undo(sid)
        assert [(s.step_id, s.state) for s in report.steps] == [
            ("s1", "reverted"),
            ("s2", "compensated"),
            ("s3", "compensated"),
        ]
        resumed = scene.run("resume", "approve", rc=0 if framework == "langchain" else 3)
        if framework == "langchain":
            answer = resumed["answers"]["c4"]
            assert answer.startswith("amends: ")
        else:
            assert resumed["error"] == "SagaClosedError"
            answer = resumed["message"]
        assert answer.removeprefix("amends: ").startswith(
            f"saga '{sid}' is being undone (undo asked at "
        )
        assert answer.endswith(
            "a saga being undone takes no new step, so the call is not made; ask the user "
            "before acting again (a new request is a new saga)"
        )
        saga = await engine.log.get_saga(sid)
        assert saga is not None and steps_of(saga) == FORWARD
        world = World(scene.world)
        assert world.items("sms.messages") == []  # nothing reached the vendor
        world.close()
        again = await engine.undo(sid)
        assert again.reversal_id == report.reversal_id and again.status == report.status
    finally:
        await engine.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_two_processes_resuming_one_pause_make_one_step(
    tmp_path: Path, log_url: str, framework: str
) -> None:
    """Two workers get the same approval at once: one continues the saga and sends the SMS
    as s4; the other is told the saga is not paused (or already closed), and sends nothing.
    Never two s4, never a step lost."""
    scene = Scene(tmp_path, log_url, framework)
    sid = scene.run("pause")["saga_id"]
    procs = [scene.start("resume", "approve"), scene.start("resume", "approve", "sync")]
    outs = [finish(p, rc=None) for p in procs]
    assert sorted(o["rc"] for o in outs) == [0, 3], outs
    [loser] = [o for o in outs if o["rc"] == 3]
    assert loser["error"] == "SagaStateError"
    assert loser["message"].startswith(f"saga '{sid}' is ")
    assert ("is not paused: another process" in loser["message"]) or (
        "is closed (completed)" in loser["message"]
    )
    engine = scene.engine()
    try:
        saga = await engine.log.get_saga(sid)
        assert saga is not None and saga.state == "completed"
        assert steps_of(saga) == [*FORWARD, SMS]
        world = World(scene.world)
        assert len(world.items("sms.messages")) == 1
        world.close()
    finally:
        await engine.close()
