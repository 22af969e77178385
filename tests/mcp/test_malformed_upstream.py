"""An upstream whose answer is not valid MCP (issue 24: malformed responses survived). The call
that got it is in doubt and says what was wrong with the answer; the connection is fine, so the
server is not restarted, and calls it is running for other steps finish. A real ``mcp.Client``
talks to ``amends mcp serve``, which runs ``upstream_malformed.py``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from conftest import HERE, gateway_params, text_of

pytestmark = pytest.mark.slow


def _config(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "calls.txt"
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"

[[upstream]]
name = "raw"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(HERE / "upstream_malformed.py"))}]
env = {{ MALFORMED_STATE = {json.dumps(str(state))} }}
"""
    )
    return config, state


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ("raw_bad_shape", "Invalid structured content returned by tool bad_shape"),
        ("raw_bad_content", "validation error"),
    ],
)
async def test_a_malformed_answer_is_in_doubt_and_cuts_no_other_call(
    tmp_path: Path, tool: str, why: str
) -> None:
    """While ``slow`` runs, another call gets a malformed answer and a third follows: the
    malformed one is in doubt, worded as an answer that is not valid MCP (not "the connection
    failed"); the server keeps running (same pid, never "started again", which used to cut the
    slow call in flight and leave it in doubt too), and the slow and third calls are done."""
    from mcp import Client

    config, state = _config(tmp_path)
    async with Client(gateway_params(config, tmp_path)) as c:
        slow = asyncio.create_task(c.call_tool("raw_slow", {}))
        while "slow" not in (await asyncio.to_thread(_text, state)):
            await asyncio.sleep(0.05)
        pid = await asyncio.to_thread(_text, Path(f"{state}.pid"))
        bad = await c.call_tool(tool, {})
        third = await c.call_tool("raw_write", {})
        done = await slow
        status = await c.call_tool("amends_status", {})
    assert bad.is_error and bad.meta["amends/step"]["state"] == "in_doubt"
    assert "answered " + tool.removeprefix("raw_") + " with a result that is not valid MCP" in (
        text_of(bad)
    )
    assert why in text_of(bad)
    assert "connection" not in text_of(bad)
    assert not third.is_error and third.meta["amends/step"]["state"] == "done"
    assert not done.is_error, text_of(done)
    assert done.meta["amends/step"]["state"] == "done"
    assert text_of(done) == "slow done"
    assert await asyncio.to_thread(_text, Path(f"{state}.pid")) == pid  # never restarted
    assert _text(state).split() == ["slow", tool.removeprefix("raw_"), "write"]
    assert "in_doubt" in text_of(status)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_an_answer_that_is_not_utf8_is_read_and_the_connection_lives_on(
    tmp_path: Path,
) -> None:
    """A stdio server answers in Latin-1: the bytes that are not UTF-8 read as U+FFFD, the call
    is done, and the next call works (the SDK's strict reader used to die on them: this call and
    every later one on the connection hung until ``call_timeout`` and were left in doubt)."""
    from mcp import Client

    config, state = _config(tmp_path)
    config.write_text(
        config.read_text().replace('log = "saga.db"', 'log = "saga.db"\ncall_timeout = 10')
    )
    async with Client(gateway_params(config, tmp_path)) as c:
        odd = await c.call_tool("raw_latin1", {})
        after = await c.call_tool("raw_write", {})
    assert not odd.is_error, text_of(odd)
    assert odd.meta["amends/step"]["state"] == "done"
    assert text_of(odd) == "caf\ufffd \ufffd"
    assert not after.is_error, text_of(after)
    assert _text(state).split() == ["latin1", "write"]
