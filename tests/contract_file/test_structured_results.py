"""Issue 24 item 1 (the contract side): captures and probes read a result's structured content
when there is one, and its JSON text otherwise; ``absent_when`` and ``[errors]`` read the error
the tool itself raised (the transport's ``error_text``), not only the answer's text.

The first test runs a real gateway in front of an ordinary mcp 2.x server whose ``note_get``
returns a bare ``dict`` (answered as JSON text, no ``structuredContent``). The others drive the
applier through the real engine with a transport that answers as an MCP gateway does when the
upstream raised ``ValueError`` (its text: "Error executing tool ..."; its own words in
``error_text``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import amends
from amends import StepState
from contract_setup import file_catalog, plain_gateway, text_of

if TYPE_CHECKING:
    from amends.contract_file import TransportRequest, TransportResult

NOTES = """
[[tool]]
name = "note_get"
reversibility = "read_only"

[[tool]]
name = "note_set"
reversibility = "reversible"
resources = ["note:{args.key}"]

[[tool.capture]]
name = "old"
tool = "note_get"
args = { key = "{args.key}" }
path = "text"
absent_when = "no note named"

[tool.inverse]
tool = "note_set"
args = { key = "{args.key}", text = "{capture.old}" }

[tool.expect]
probe = "note_get"
args = { key = "{args.key}" }
path = "text"
equals = "{args.text}"

[tool.if_absent]                 # n2 did not exist: undo deletes it
capture = "old"
inverse = { tool = "note_delete", args = { key = "{args.key}" } }
no_drift_check = "the test's own note; nobody else writes it"

[[tool]]
name = "note_delete"
reversibility = "irreversible"
"""


@pytest.mark.slow
async def test_captures_and_probes_read_a_dict_answered_as_json_text(tmp_path: Path) -> None:
    from mcp import Client

    setup = plain_gateway(tmp_path, NOTES)
    setup.seed(notes={"n1": "hello"})
    async with Client(setup.gateway()) as c:
        changed = await c.call_tool("note_set", {"key": "n1", "text": "bye"})
        created = await c.call_tool("note_set", {"key": "n2", "text": "new"})
        assert not changed.is_error, text_of(changed)
        assert not created.is_error, text_of(created)
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    assert report["status"] == "fully_reversed", report
    assert [s["state"] for s in report["steps"]] == ["reverted", "reverted"]
    assert setup.world()["notes"] == {"n1": "hello"}
    journal = setup.world()["journal"]
    assert journal[:2] == [["note_set", "n1", "bye"], ["note_set", "n2", "new"]]
    assert sorted(journal[2:]) == [["note_delete", "n2"], ["note_set", "n1", "hello"]]


class Upstream:
    """An in-memory notes server answering as the gateway hands answers over: a missing note
    is an error whose text is the SDK's "Error executing tool ..." and whose own words are
    in ``error_text``."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {"n1": "hello"}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, request: TransportRequest) -> TransportResult:
        from amends.contract_file import TransportResult

        args: Mapping[str, Any] = request.args
        self.calls.append((request.tool, dict(args)))
        if request.tool in ("note_get", "note_delete") and args["key"] not in self.notes:
            return TransportResult(
                "unknown",
                text=f"Error executing tool {request.tool}",
                error_text=f"ValueError: no note named {args['key']}",
            )
        if request.tool == "note_get":
            return TransportResult(
                "ok", text=f'{{"key": "{args["key"]}", "text": "{self.notes[args["key"]]}"}}'
            )
        if request.tool == "note_delete":
            del self.notes[args["key"]]
            return TransportResult("ok", structured={"deleted": True})
        self.notes[args["key"]] = args["text"]
        return TransportResult("ok", structured={"key": args["key"], "text": args["text"]})


def _catalog(tmp_path: Path, text: str, upstream: Upstream) -> amends.Catalog:
    catalog: amends.Catalog = file_catalog(tmp_path / "notes.toml", text, upstream)
    return catalog


async def test_absent_when_reads_the_error_the_upstream_raised(tmp_path: Path) -> None:
    """n2 did not exist: the capture's error says so only in the upstream's own words (its
    answer's text is "Error executing tool note_get"), so if_absent applies: undo deletes n2."""
    upstream = Upstream()
    engine = amends.Engine(_catalog(tmp_path, NOTES, upstream), log=amends.SqliteLog(":memory:"))
    async with engine.saga("notes") as saga:
        await saga.call("note_set", key="n2", text="new")
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None and rec.steps[0].inverse == {
        "tool": "note_delete",
        "args": {"key": "n2"},
        "no_drift_check": "the test's own note; nobody else writes it",
    }
    report = await engine.undo(saga.id)
    await engine.close()
    assert report.step("s1").state is StepState.REVERTED
    assert upstream.notes == {"n1": "hello"}


async def test_errors_patterns_read_the_error_the_upstream_raised(tmp_path: Path) -> None:
    """[errors] refused matches the upstream's own words: the failed delete of a missing note
    had no effect (the step is failed, not in doubt)."""
    upstream = Upstream()
    text = '[errors]\nrefused = "^ValueError: no note named"\n' + NOTES
    engine = amends.Engine(_catalog(tmp_path, text, upstream), log=amends.SqliteLog(":memory:"))
    async with engine.saga("notes") as saga:
        step = saga.call("note_delete", key="nope")
        with pytest.raises(amends.StepFailedError) as exc:
            await step
    await engine.close()
    assert exc.value.state == "failed"
    assert "note_delete refused" in str(exc.value) and "no note named nope" in str(exc.value)
