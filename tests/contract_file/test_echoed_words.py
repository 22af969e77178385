"""A tool's error that echoes the agent's words is not judged by them (rules 9 and 12).

A contract's ``[errors]`` patterns read an error's words to tell a refusal (nothing happened)
or a transient error (try again) from an unknown outcome (an MCP ``isError`` result: the write
may have landed). Tools echo what they were sent ("connection reset while saving note '...'"),
and the agent chooses those words: a note reading "Access denied: see the memo" turned an
unknown outcome into a refusal, the step ``failed`` ("no effect"), and undo reported
``fully_reversed`` over a note that stood; a note reading "we are rate limited" made it
transient, and the note was sent, and saved, twice. A pattern's match inside an argument's own
text is now passed over: the error keeps the transport's judgement (unknown: in doubt). The
tool's own refusal still reads as one. Driven through the real engine and applier (the MCP
gateway's path) with a transport standing for the upstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import amends
from amends.contract_file.transport import TransportRequest, TransportResult
from contract_setup import file_catalog

CONTRACTS = """
[errors]
refused = "(?i)access denied|ENOENT"
transient = "rate limited"

[[tool]]
name = "get_note"
reversibility = "read_only"

[[tool]]
name = "add_note"
reversibility = "reversible"
inverse = { tool = "delete_note", args = { id = "{result.id}" } }

[tool.expect]
probe = "get_note"
args = { id = "{result.id}" }
path = "text"
equals = "{args.text}"

[[tool.capture]]
name = "folder"
tool = "get_note"
args = { id = "{args.folder}" }
absent_when = "ENOENT"

[[tool]]
name = "delete_note"
reversibility = "irreversible"
"""


def _upstream(saved: list[str]) -> Any:
    async def transport(request: TransportRequest) -> TransportResult:
        args = request.args
        if request.tool == "get_note":  # the folder exists; a locked one says so, echoing it
            if args["id"].endswith("-locked"):
                said = f"EACCES: permission denied, open {args['id']!r}"
                return TransportResult("unknown", error_text=said)
            return TransportResult("ok", structured={"id": args["id"], "text": "folder"})
        if args["text"] == "hello":  # the tool's own refusal: nothing was saved
            return TransportResult("unknown", error_text="Access denied for this folder")
        saved.append(args["text"])  # it saved the note, then lost the connection
        return TransportResult(
            "unknown", error_text=f"connection reset while saving note {args['text']!r}"
        )

    return transport


@pytest.mark.parametrize(
    "text",
    ["Access denied: see the memo", "ACCESS DENIED\nsee the memo", "we are rate limited"],
)
async def test_an_echo_of_the_agents_words_leaves_the_step_in_doubt(
    tmp_path: Path, text: str
) -> None:
    saved: list[str] = []
    catalog = file_catalog(tmp_path / "c.toml", CONTRACTS, _upstream(saved))
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError) as info:
            async with engine.saga("Note", saga_id="n") as saga:
                saga.call("add_note", text=text, folder="inbox")
        report = await engine.undo("n")
    finally:
        await engine.close()
    assert info.value.state == "in_doubt"
    assert saved == [text]  # sent once, never again
    (step,) = report.steps
    assert (report.status, step.state) == ("cannot_undo", "in_doubt")


async def test_the_tools_own_refusal_still_reads_as_one(tmp_path: Path) -> None:
    saved: list[str] = []
    catalog = file_catalog(tmp_path / "c.toml", CONTRACTS, _upstream(saved))
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError) as info:
            async with engine.saga("Note", saga_id="n") as saga:
                saga.call("add_note", text="hello", folder="inbox")
        report = await engine.undo("n")
    finally:
        await engine.close()
    assert info.value.state == "failed"
    assert saved == []
    (step,) = report.steps
    assert (report.status, step.state) == ("fully_reversed", "not_needed")


async def test_a_capture_that_echoes_the_agents_words_is_not_read_as_absent(
    tmp_path: Path,
) -> None:
    """``absent_when = "ENOENT"``: a folder named "ENOENT-locked" that could not be read
    (permission denied) was taken for one that does not exist, and the write was sent."""
    saved: list[str] = []
    catalog = file_catalog(tmp_path / "c.toml", CONTRACTS, _upstream(saved))
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError) as info:
            async with engine.saga("Note", saga_id="n") as saga:
                saga.call("add_note", text="minutes", folder="ENOENT-locked")
    finally:
        await engine.close()
    assert info.value.state == "failed"
    assert "the write was not sent" in str(info.value)
    assert saved == []
