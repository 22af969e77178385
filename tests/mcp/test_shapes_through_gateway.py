"""What an ordinary server's tools look like through the gateway, and what a client may do to
a call (issue 24, variations the issue did not list): arguments named like amends' own
options, an argument named ``deadline`` in an inverse, a call the client cancels mid-flight,
progress notifications, and a tool list that changes while the gateway runs. A real
``mcp.Client`` talks to ``amends mcp serve`` (stdio and streamable HTTP), which runs
``upstream_shapes.py`` as users run their servers."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import HERE, TREE_ENV, free_port, gateway_params, text_of

pytestmark = pytest.mark.slow

SHAPES_SERVER = HERE / "upstream_shapes.py"
SHAPES_CONTRACTS = HERE / "shapes_contracts.toml"


@dataclass
class ShapesSetup:
    dir: Path
    config: Path
    state: Path

    def world(self) -> dict[str, Any]:
        """The upstream's keys as it wrote them."""
        if not self.state.exists():
            return {}
        data: dict[str, Any] = json.loads(self.state.read_text())
        return data

    def gateway(self) -> Any:
        return gateway_params(self.config, self.dir)


def write_shapes(tmp_path: Path, *contracts: Path) -> ShapesSetup:
    """A gateway config over upstream_shapes.py with ``contracts`` (default: the shared file)."""
    files = [str(c) for c in contracts or (SHAPES_CONTRACTS,)]
    state = tmp_path / "shapes.json"
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"
title = "shapes session"

[[upstream]]
name = "sh"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SHAPES_SERVER))}]
env = {{ SHAPES_STATE = {json.dumps(str(state))} }}
contracts = {json.dumps(files)}
"""
    )
    return ShapesSetup(tmp_path, config, state)


@pytest.fixture
def shapes(tmp_path: Path) -> ShapesSetup:
    return write_shapes(tmp_path)


def _states(undo: Any) -> list[tuple[str, str]]:
    return [(s["tool"], s["state"]) for s in undo.structured_content["steps"]]


async def test_arguments_named_like_amends_options_reach_the_upstream_as_given(
    shapes: ShapesSetup, connect: Any
) -> None:
    """``call``, ``after``, ``step_id``, ``undo_after`` and ``tool`` are the server's own
    argument names: the tool is listed, its call reaches the server with every argument as
    given, and undo reverts it (it used to be hidden from the agent, or fail with "got
    multiple values for argument 'call'")."""
    args = {"call": "c1", "after": "9:00", "step_id": "x", "undo_after": "y", "tool": "phone"}
    async with connect(shapes) as c:
        listed = {t.name for t in (await c.list_tools()).tools}
        assert "sh_schedule" in listed
        r = await c.call_tool("sh_schedule", args)
        assert not r.is_error, text_of(r)
        assert r.meta["amends/step"]["state"] == "done"
        assert shapes.world() == {"slot:c1": ["9:00", "x", "y", "phone"]}
        undo = await c.call_tool("amends_undo", {})
    assert _states(undo) == [("sh.schedule", "reverted")]
    assert undo.structured_content["status"] == "fully_reversed"
    assert shapes.world() == {}


async def test_an_inverse_argument_named_deadline_is_the_tools_own(
    tmp_path: Path, connect: Any
) -> None:
    """A contract's ``inverse.args.deadline`` is the server's argument, not the undo window: the
    file loads, and undo moves the deadline back (the file used to be refused at start-up,
    "rename the tool's argument", which a user cannot do to someone else's server)."""
    shapes = write_shapes(tmp_path, SHAPES_CONTRACTS, HERE / "shapes_due_contracts.toml")
    shapes.state.write_text(json.dumps({"due:t1": "2026-01-01"}))
    async with connect(shapes) as c:
        r = await c.call_tool("sh_set_due", {"task": "t1", "deadline": "2026-02-02"})
        assert not r.is_error, text_of(r)
        assert shapes.world() == {"due:t1": "2026-02-02"}
        undo = await c.call_tool("amends_undo", {})
    assert _states(undo) == [("sh.set_due", "reverted")]
    assert shapes.world() == {"due:t1": "2026-01-01"}


async def _until(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(path.exists):
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


async def test_a_call_the_client_cancels_is_cancelled_upstream_and_in_doubt(
    shapes: ShapesSetup, connect: Any
) -> None:
    """The client cancels a call mid-flight (``notifications/cancelled``): the gateway cancels
    the upstream call too, rather than let it land unseen minutes later, and the step is in
    doubt, never reverted as if its outcome were known; undo leaves it to a person."""
    async with connect(shapes) as c:
        call = asyncio.create_task(
            c.call_tool("sh_slow_put", {"key": "k", "value": "v", "seconds": 6})
        )
        await _until(Path(f"{shapes.state}.inside"))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(8)  # past the time the upstream would have written
        assert shapes.world() == {}  # the upstream stopped
        undo = await c.call_tool("amends_undo", {})
    (step,) = undo.structured_content["steps"]
    assert step["tool"] == "sh.slow_put"
    assert step["state"] == "in_doubt"
    assert "cancelled while the tool was running" in step["detail"]
    assert undo.structured_content["status"] == "cannot_undo"
    (action,) = undo.structured_content["manual_actions"]
    assert action["what"].startswith("Check whether sh.slow_put(key='k'")
    assert shapes.world() == {}


async def test_the_upstreams_progress_reaches_the_agent(shapes: ShapesSetup, connect: Any) -> None:
    """Progress the upstream reports for a call reaches the agent that asked for it (a client
    that resets its timeout on progress would otherwise give up on a long call)."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(shapes) as c:
        r = await c.call_tool(
            "sh_progress_put", {"key": "k", "value": "v"}, progress_callback=on_progress
        )
    assert not r.is_error, text_of(r)
    assert seen == [(1, 3, "part 1 of 3"), (2, 3, "part 2 of 3"), (3, 3, "part 3 of 3")]
    assert shapes.world() == {"k": "v"}


async def test_a_tool_list_that_changes_mid_session_is_what_the_agent_sees(
    shapes: ShapesSetup, connect: Any
) -> None:
    """The upstream adds a tool and drops one while the gateway runs: the agent's next list
    shows the new tool, labelled irreversible (it has no contract), and not the dropped one;
    the new tool can be called at once, even before a list; undo still reverts a step of the
    tool that was dropped and acknowledges the new one."""
    async with connect(shapes) as c:
        before = await c.call_tool("sh_progress_put", {"key": "p", "value": "1"})
        assert not before.is_error, text_of(before)
        r = await c.call_tool("sh_deploy", {"add": "fresh", "drop": "progress_put"})
        assert not r.is_error, text_of(r)
        fresh = await c.call_tool("sh_fresh", {"value": "new"})
        assert not fresh.is_error, text_of(fresh)
        assert fresh.meta["amends/step"]["reversibility"] == "irreversible"
        listed = {t.name: t for t in (await c.list_tools()).tools}
        undo = await c.call_tool("amends_undo", {})
    assert "sh_fresh" in listed and "sh_progress_put" not in listed
    assert listed["sh_fresh"].description.startswith("[amends: irreversible (no contract);")
    assert shapes.world() == {"fresh": "new"}
    assert _states(undo) == [
        ("sh.progress_put", "reverted"),
        ("sh.deploy", "acknowledged"),
        ("sh.fresh", "acknowledged"),
    ]


def test_two_upstream_tools_listed_under_one_name_are_refused_at_start(tmp_path: Path) -> None:
    """Upstream ``sh`` lists ``slow_put`` and upstream ``sh_slow`` lists ``put``: both would be
    ``sh_slow_put`` to the agent (their catalog names differ). The gateway refuses to start and
    names both, instead of listing one and silently hiding the other."""
    import subprocess

    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nlog = "saga.db"\n'
        + "".join(
            f"\n[[upstream]]\nname = {json.dumps(name)}\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(str(SHAPES_SERVER))}]\n"
            f"env = {{ SHAPES_STATE = {json.dumps(str(tmp_path / (name + '.json')))} }}\n"
            for name in ("sh", "sh_slow")
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "amends.integrations.mcp", "serve", "--config", str(config)],
        cwd=tmp_path,
        env={**os.environ, **TREE_ENV},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "tool 'put' of upstream 'sh_slow' and tool 'slow_put' of upstream 'sh' would both be "
        "listed to the agent as 'sh_slow_put'; rename one of the upstreams"
    ) in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_failed_step_is_retried_from_mcp_once_its_cause_is_fixed(
    shapes: ShapesSetup, connect: Any
) -> None:
    """The inverse is refused (the key is locked): the step is ``failed``. Asked to continue,
    the gateway's answer says how to retry *in MCP* (it used to name only the CLI, ``amends undo
    SAGA --retry STEP``, and amends_undo had no way to retry); once a person unlocks the key,
    ``amends_undo {"retry": ["s1"]}`` reverts it through the drift check, in the same
    reversal."""
    lock = Path(f"{shapes.state}.locked")
    async with connect(shapes) as c:
        r = await c.call_tool("sh_put", {"key": "k", "value": "v"})
        assert not r.is_error, text_of(r)
        saga_id = r.meta["amends/step"]["saga_id"]
        await asyncio.to_thread(lock.write_text, "")
        first = await c.call_tool("amends_undo", {})
        nothing = await c.call_tool("amends_undo", {"continue": True})
        await asyncio.to_thread(lock.unlink)
        retried = await c.call_tool("amends_undo", {"saga_id": saga_id, "retry": ["s1"]})
        bad = await c.call_tool("amends_undo", {"retry": "s1"})
    assert _states(first) == [("sh.put", "failed")]
    assert "Refused: k is locked" in first.structured_content["steps"][0]["detail"]
    assert nothing.is_error
    assert f'amends_undo {{"saga_id": "{saga_id}", "retry": ["STEP"]}}' in text_of(nothing)
    assert "--retry" not in text_of(nothing)
    assert not retried.is_error, text_of(retried)
    assert _states(retried) == [("sh.put", "reverted")]
    assert retried.structured_content["reversal_id"] == first.structured_content["reversal_id"]
    assert retried.structured_content["status"] == "fully_reversed"
    assert shapes.world() == {}
    assert bad.is_error
    assert "retry must be a list of step ids such as [\"s2\"], got 's1'" in text_of(bad)


async def test_the_retry_question_shows_each_call_the_retry_sends_and_the_steps_that_follow(
    tmp_path: Path,
) -> None:
    """Rule 12: what a person approves is what is sent. The key was written twice (s1 must wait
    for s2); the store did not answer s2's drift check, so s1 was blocked. Before: the retry
    question said only "try again the undo of step(s) 's2'": not the call (put k back to 'v1')
    nor that s1's inverse (delete k) follows. Now it lists both, every argument shown."""
    from mcp import Client

    shapes = write_shapes(tmp_path)
    shapes.config.write_text(
        shapes.config.read_text().replace(
            'title = "shapes session"',
            'title = "shapes session"\napproval = "irreversible"\nprincipal = "ann@example.com"',
        )
    )
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> Any:
        import mcp_types as types

        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    down = Path(f"{shapes.state}.down")
    async with Client(shapes.gateway(), elicitation_callback=elicit) as c:
        r = await c.call_tool("sh_put", {"key": "k", "value": "v1"})
        saga_id = r.meta["amends/step"]["saga_id"]
        await c.call_tool("sh_put", {"key": "k", "value": "v2"})
        await asyncio.to_thread(down.write_text, "")
        first = await c.call_tool("amends_undo", {})
        await asyncio.to_thread(down.unlink)
        retried = await c.call_tool("amends_undo", {"saga_id": saga_id, "retry": ["s2"]})
    assert _states(first) == [("sh.put", "blocked"), ("sh.put", "drifted")]
    assert len(asked) == 1  # undo would send nothing: no question then (rule 10)
    question = asked[-1].split("\n")
    assert question[1].startswith("- Retry s2 sh.put: calls ")
    assert question[1].endswith("sent as sh.put(key='k', value='v1')")
    assert question[2] == "If it succeeds, the steps waiting for it follow, each checked first:"
    assert question[3].startswith("- Revert s1 sh.put: calls ")
    assert question[3].endswith("sent as sh.delete(key='k')")
    assert question[-1] == "Allow?"
    assert not retried.is_error, text_of(retried)
    assert _states(retried) == [("sh.put", "reverted"), ("sh.put", "reverted")]
    assert shapes.world() == {}


async def test_a_step_whose_drift_check_could_not_run_is_retried_from_mcp(
    shapes: ShapesSetup, connect: Any
) -> None:
    """Issue 23: the store did not answer the drift check, so the step was ``drifted`` and
    ``amends_undo {"retry": [...]}`` refused it ("not failed"): nothing in amends could finish
    it. Now the retry checks again once the store is back, and reverts it."""
    down = Path(f"{shapes.state}.down")
    async with connect(shapes) as c:
        r = await c.call_tool("sh_put", {"key": "k", "value": "v"})
        assert not r.is_error, text_of(r)
        saga_id = r.meta["amends/step"]["saga_id"]
        await asyncio.to_thread(down.write_text, "")
        first = await c.call_tool("amends_undo", {})
        await asyncio.to_thread(down.unlink)
        retried = await c.call_tool("amends_undo", {"saga_id": saga_id, "retry": ["s1"]})
    assert _states(first) == [("sh.put", "drifted")]
    detail = first.structured_content["steps"][0]["detail"]
    assert detail.startswith("could not check the world before undoing (")
    assert "Service unavailable" in detail and "someone changed" not in detail
    assert not retried.is_error, text_of(retried)
    assert _states(retried) == [("sh.put", "reverted")]
    assert retried.structured_content["reversal_id"] == first.structured_content["reversal_id"]
    assert shapes.world() == {}


async def test_two_clients_at_once_one_cancels_the_other_is_untouched(
    shapes: ShapesSetup, http_gateway: Any
) -> None:
    """Two agents on one HTTP gateway run slow writes at once, each asking for progress; one
    cancels its call. Only that call is cancelled upstream and in doubt; the other lands, is
    done, and its undo reverts exactly its own key. (Each sends its own saga key: stateless
    HTTP clients without one would share a saga, docs/mcp.md.)"""
    from mcp import Client

    A, B = {"amends/saga": "agent-a"}, {"amends/saga": "agent-b"}
    gw = http_gateway(shapes)
    async with Client(gw.url) as a, Client(gw.url) as b:
        a_call = asyncio.create_task(
            a.call_tool("sh_slow_put", {"key": "a", "value": "1", "seconds": 4}, meta=A)
        )
        b_call = asyncio.create_task(
            b.call_tool("sh_slow_put", {"key": "b", "value": "2", "seconds": 2}, meta=B)
        )
        await _until(Path(f"{shapes.state}.inside"))
        await asyncio.sleep(0.5)  # both are running
        a_call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a_call
        b_done = await b_call
        await asyncio.sleep(4)
        assert shapes.world() == {"b": "2"}
        a_status = await a.call_tool("amends_status", {}, meta=A)
        b_undo = await b.call_tool("amends_undo", {}, meta=B)
    assert not b_done.is_error, text_of(b_done)
    assert b_done.meta["amends/step"]["state"] == "done"
    assert "in_doubt" in text_of(a_status) and "sh.slow_put" in text_of(a_status)
    assert _states(b_undo) == [("sh.slow_put", "reverted")]
    assert shapes.world() == {}


async def test_an_http_upstream_restarted_behind_its_url_is_reached_again_by_undo(
    tmp_path: Path,
) -> None:
    """The upstream is a streamable HTTP server (``url =``) that is killed and started again
    on the same address between two calls: the next call and undo reach the new process, and
    undo reverts the writes made before and after the restart."""
    import subprocess

    from mcp import Client

    port, state = free_port(), tmp_path / "shapes.json"
    state.write_text(json.dumps({"a": "0", "b": "0"}))

    def start() -> subprocess.Popen[bytes]:
        env = {**os.environ, "SHAPES_STATE": str(state), "SHAPES_PORT": str(port)}
        proc = subprocess.Popen(
            [sys.executable, str(SHAPES_SERVER)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return proc
            except OSError:
                time.sleep(0.1)
        proc.kill()
        raise AssertionError("the HTTP upstream did not listen within 30 s")

    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "sh"\n'
        f'url = "http://127.0.0.1:{port}/mcp"\ncontracts = [{json.dumps(str(SHAPES_CONTRACTS))}]\n'
    )
    first = await asyncio.to_thread(start)
    second: subprocess.Popen[bytes] | None = None
    try:
        async with Client(gateway_params(config, tmp_path)) as c:
            a = await c.call_tool("sh_put", {"key": "a", "value": "1"})
            first.kill()
            await asyncio.to_thread(first.wait)
            second = await asyncio.to_thread(start)
            b = await c.call_tool("sh_put", {"key": "b", "value": "1"})
            undo = await c.call_tool("amends_undo", {})
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not a.is_error, text_of(a)
    assert not b.is_error, text_of(b)
    assert _states(undo) == [("sh.put", "reverted"), ("sh.put", "reverted")]
    assert json.loads(state.read_text()) == {"a": "0", "b": "0"}


async def test_an_upstream_that_prints_a_banner_on_stdout_works_without_a_traceback(
    tmp_path: Path,
) -> None:
    """Some servers print a banner on stdout before serving. The SDK skips the line; the
    gateway's stderr says so in one line, never with a traceback, and the calls work."""
    from mcp.client.stdio import stdio_client

    from mcp import Client

    state = tmp_path / "shapes.json"
    state.write_text(json.dumps({"k": "0"}))
    banner = (
        f"print('shapes server starting'); import runpy; "
        f"runpy.run_path({str(SHAPES_SERVER)!r}, run_name='__main__')"
    )
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "sh"\n'
        f"command = {json.dumps(sys.executable)}\nargs = ['-c', {json.dumps(banner)}]\n"
        f"env = {{ SHAPES_STATE = {json.dumps(str(state))} }}\n"
        f"contracts = [{json.dumps(str(SHAPES_CONTRACTS))}]\n"
    )
    err_path = tmp_path / "gateway.err"
    with err_path.open("w") as err:
        async with Client(stdio_client(gateway_params(config, tmp_path), errlog=err)) as c:
            r = await c.call_tool("sh_put", {"key": "k", "value": "1"})
            undo = await c.call_tool("amends_undo", {})
    said = err_path.read_text()
    assert not r.is_error, text_of(r)
    assert _states(undo) == [("sh.put", "reverted")]
    assert json.loads(state.read_text()) == {"k": "0"}
    assert "mcp: Failed to parse JSONRPC message from server (ValidationError" in said
    assert "Traceback" not in said, said
