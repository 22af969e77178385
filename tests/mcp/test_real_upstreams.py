"""The gateway in front of an ordinary mcp 2.x server (issue 24, items 1-3): its structured and
plain-JSON results, the errors it raises, its tools' shape, and its death mid-call. A real
``mcp.Client`` talks to ``amends mcp serve`` (a subprocess, over stdio and over streamable HTTP),
which runs ``upstream_notes.py`` (another subprocess) as users run their own servers."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import NOTES_SERVER, NotesSetup, text_of

pytestmark = pytest.mark.slow


async def test_a_capture_reads_the_json_text_of_a_plain_dict_result(
    notes: NotesSetup, connect: Any
) -> None:
    """A tool returning a ``dict`` reaches the gateway as JSON text only; the capture reads
    its ``text`` field, and undo writes exactly that back."""
    notes.state.write_text('{"plan": "basic"}')
    async with connect(notes) as c:
        r = await c.call_tool("notes_note_set", {"key": "plan", "text": "pro"})
        assert not r.is_error, text_of(r)
        assert notes.notes() == {"plan": "pro"}
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [("notes.note_set", "reverted")]
    assert report["status"] == "fully_reversed"
    assert notes.notes() == {"plan": "basic"}


async def test_absent_when_matches_the_valueerror_the_upstream_raised(
    notes: NotesSetup, connect: Any
) -> None:
    """The SDK sends only "Error executing tool note_get"; the gateway recovers the server's
    own ``ValueError`` text from its log, so ``absent_when`` matches and undo deletes the note
    that did not exist before. The agent reads the same words."""
    async with connect(notes) as c:
        r = await c.call_tool("notes_note_set", {"key": "fresh", "text": "hello"})
        assert not r.is_error, text_of(r)
        missing = await c.call_tool("notes_note_get", {"key": "ghost"})
        undo = await c.call_tool("amends_undo", {})
    assert missing.is_error
    assert "ValueError: no note named ghost" in text_of(missing)
    states = {s["tool"]: s["state"] for s in undo.structured_content["steps"]}
    assert states["notes.note_set"] == "reverted"
    assert notes.notes() == {}


async def test_the_upstream_tool_shape_and_structured_content_reach_the_agent(
    notes: NotesSetup, connect: Any
) -> None:
    """outputSchema, title, openWorldHint are the upstream's; hints that would make a client
    less careful come from the contract only (a server calling a purge read-only is not)."""
    from mcp import Client

    async with Client(notes.gateway()) as direct_gw:  # any way to list through the gateway
        listed = {t.name: t for t in (await direct_gw.list_tools()).tools}
    stats, purge = listed["notes_note_stats"], listed["notes_note_purge"]
    assert stats.output_schema is not None
    assert stats.output_schema["properties"]["count"]["type"] == "integer"
    assert stats.output_schema["required"] == ["count", "keys"]
    assert stats.annotations.title == "Note statistics"
    assert stats.annotations.open_world_hint is False
    assert stats.annotations.read_only_hint is True  # the contract says read_only
    assert purge.annotations.read_only_hint is False  # the server says so; no contract does
    assert purge.annotations.destructive_hint is True
    assert purge.description.startswith("[amends: irreversible (no contract);")
    notes.state.write_text('{"a": "1", "b": "2"}')
    async with connect(notes) as c:
        r = await c.call_tool("notes_note_stats", {})
    assert not r.is_error, text_of(r)
    assert r.structured_content == {"count": 2, "keys": ["a", "b"]}


async def _wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(path.exists):
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


async def test_a_sigkilled_upstream_is_restarted_and_undo_reaches_the_new_process(
    notes: NotesSetup, connect: Any
) -> None:
    """The upstream dies mid-call: that step is in doubt; the next call starts the server
    again, and undo reverts the calls before and after the death through the new process."""
    notes.state.write_text('{"stage": "lead"}')
    inside = Path(f"{notes.state}.inside")
    async with connect(notes) as c:
        before = await c.call_tool("notes_note_set", {"key": "stage", "text": "won"})
        assert not before.is_error, text_of(before)
        first_pid = notes.pid()

        async def kill_when_inside() -> None:
            await _wait_for(inside)
            os.kill(first_pid, signal.SIGKILL)

        killer = asyncio.create_task(kill_when_inside())
        died = await c.call_tool("notes_slow_note_set", {"key": "memo", "text": "x", "seconds": 30})
        await killer
        after = await c.call_tool("notes_note_set", {"key": "owner", "text": "ann"})
        undo = await c.call_tool("amends_undo", {})
    assert died.is_error and died.meta["amends/step"]["state"] == "in_doubt"
    assert "closed while slow_note_set was running" in text_of(died)
    assert not after.is_error, text_of(after)
    assert notes.pid() != first_pid  # a new process answered
    states = {s["tool"] + ":" + s["step_id"]: s["state"] for s in undo.structured_content["steps"]}
    assert sorted(states.values()) == ["in_doubt", "reverted", "reverted"]
    assert notes.notes() == {"stage": "lead"}  # both writes before and after the death undone


async def test_a_probe_that_cannot_reach_the_upstream_says_so(notes: NotesSetup) -> None:
    """An upstream that died and cannot start again: undo touches nothing and says it could not
    reach the server, never that someone changed the note."""
    from mcp import Client

    async with Client(notes.gateway()) as c:
        r = await c.call_tool("notes_note_set", {"key": "k", "text": "v"})
        assert not r.is_error, text_of(r)
        await asyncio.to_thread(Path(f"{notes.state}.down").write_text, "")
        os.kill(notes.pid(), signal.SIGKILL)
        undo = await c.call_tool("amends_undo", {"seconds": 20})
    (step,) = undo.structured_content["steps"]
    assert step["state"] != "reverted"
    assert "could not reach upstream 'notes'" in step["detail"]
    assert "someone changed" not in step["detail"]
    assert notes.notes() == {"k": "v"}


async def test_the_notes_server_keeps_every_note_of_parallel_calls(notes: NotesSetup) -> None:
    """The race behind the flaky SIGKILL test: undo runs the compensations of independent steps
    (different notes) in parallel, and the SDK runs plain tools in threads, so the server read,
    changed and wrote its one file from several threads at once (a lost update: a reverted note
    came back; or a missing notes.tmp, a failed compensation). Parallel writes all land."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(NOTES_SERVER)],
        env={**os.environ, "NOTES_STATE": str(notes.state)},
    )
    async with Client(params) as c:
        results = await asyncio.gather(
            *(c.call_tool("note_set", {"key": f"k{i}", "text": str(i)}) for i in range(40))
        )
    assert [r.is_error for r in results] == [False] * 40, [text_of(r) for r in results]
    assert notes.notes() == {f"k{i}": str(i) for i in range(40)}
