"""The shipped contracts (builtin:filesystem) against the real reference filesystem MCP server
(@modelcontextprotocol/server-filesystem from npm, installed by scripts/mcp-deps.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, installed, shipped_gateway

pytestmark = pytest.mark.slow

FS_SERVER = (
    ROOT
    / ".amends-mcp"
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-filesystem"
    / "dist"
    / "index.js"
)


@pytest.fixture(scope="module")
def fs_server() -> Path:
    return installed(FS_SERVER, "the filesystem server")


def fs_gateway(tmp_path: Path, fs_server: Path) -> tuple[object, Path]:
    files = tmp_path / "files"
    files.mkdir()
    return shipped_gateway(
        tmp_path, "fs", "filesystem", ["node", str(fs_server), str(files)]
    ), files


async def test_write_edit_move_are_undone_with_the_captured_previous_content(
    tmp_path: Path, fs_server: Path
) -> None:
    """Overwrite, edit and move are reverted; a new file is moved aside (residue); a created
    directory is acknowledged (the server cannot remove it)."""
    from mcp import Client

    params, files = fs_gateway(tmp_path, fs_server)
    (files / "notes.txt").write_text("original notes")
    (files / "plan.txt").write_text("plan: keep")
    (files / "old-name.txt").write_text("moving")
    async with Client(params) as c:
        steps = [
            await c.call_tool(
                "fs_write_file", {"path": str(files / "notes.txt"), "content": "agent notes"}
            ),
            await c.call_tool(
                "fs_edit_file",
                {
                    "path": str(files / "plan.txt"),
                    "edits": [{"oldText": "keep", "newText": "drop"}],
                },
            ),
            await c.call_tool(
                "fs_move_file",
                {"source": str(files / "old-name.txt"), "destination": str(files / "new-name.txt")},
            ),
            await c.call_tool("fs_write_file", {"path": str(files / "new.txt"), "content": "hi"}),
            await c.call_tool("fs_create_directory", {"path": str(files / "made")}),
        ]
        assert [s.is_error for s in steps] == [False] * 5, [s.content for s in steps]
        assert (files / "plan.txt").read_text() == "plan: drop"
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    states = [(s["tool"], s["state"]) for s in report["steps"]]
    assert states == [
        ("fs.write_file", "compensated"),
        ("fs.edit_file", "reverted"),
        ("fs.move_file", "reverted"),
        ("fs.write_file", "compensated"),
        ("fs.create_directory", "acknowledged"),
    ]
    assert (files / "notes.txt").read_text() == "original notes"
    assert (files / "plan.txt").read_text() == "plan: keep"
    assert (files / "old-name.txt").read_text() == "moving"
    assert not (files / "new-name.txt").exists()
    assert not (files / "new.txt").exists()
    assert (files / "new.txt.amends-undone").read_text() == "hi"
    assert [r["what"] for r in report["residue"]] == [
        f"{files / 'new.txt'} did not exist before; the filesystem server cannot delete files, "
        f"so undo moved it to {files / 'new.txt'}.amends-undone"
    ]
    assert report["status"] == "cannot_undo"  # the directory stands


async def test_a_file_edited_by_a_person_after_the_agent_is_drifted_and_kept(
    tmp_path: Path, fs_server: Path
) -> None:
    """rule 4 against the real server: the person's content is never overwritten."""
    from mcp import Client

    params, files = fs_gateway(tmp_path, fs_server)
    target = files / "doc.txt"
    target.write_text("v1")
    async with Client(params) as c:
        await c.call_tool("fs_write_file", {"path": str(target), "content": "v2 by agent"})
        target.write_text("v3 by a person")
        undo = await c.call_tool("amends_undo", {})
    assert undo.structured_content["steps"][0]["state"] == "drifted"
    assert target.read_text() == "v3 by a person"


async def test_a_write_outside_the_allowed_directories_is_refused_not_in_doubt(
    tmp_path: Path, fs_server: Path
) -> None:
    """The server's "Access denied" is read as a refusal (nothing written): failed, no undo."""
    from mcp import Client

    params, _files = fs_gateway(tmp_path, fs_server)
    async with Client(params) as c:
        r = await c.call_tool("fs_write_file", {"path": str(tmp_path / "x.txt"), "content": "x"})
    assert r.is_error and r.meta["amends/step"]["state"] == "failed"
    assert not (tmp_path / "x.txt").exists()


def test_audit_shows_hints_as_hints_and_suggest_writes_an_unusable_draft(
    tmp_path: Path, fs_server: Path
) -> None:
    """A server's readOnlyHint never upgrades a tool without a contract; the --suggest draft is
    refused until a person reviews it, and then says irreversible for every tool."""
    from amends import ConfigError
    from amends.integrations.mcp import load_contracts

    files = tmp_path / "files"
    files.mkdir()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[[upstream]]\nname = "fs"\ncommand = "node"\n'
        f"args = [{json.dumps(str(fs_server))}, {json.dumps(str(files))}]\n"
    )
    draft = tmp_path / "draft.toml"
    out = subprocess.run(
        [sys.executable, "-m", "amends.cli", "mcp", "audit", "--config", str(config), "--json",
         "--suggest", str(draft)],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["tool"]: r for r in json.loads(out.stdout)}
    read = rows["read_text_file"]
    assert read["hints"]["read_only_hint"] is True
    assert read["class"] == "irreversible"  # the class value (issue 24 item 11)
    assert read["label"] == "irreversible (no contract)"
    assert "a hint is not a contract" in read["note"]
    with pytest.raises(ConfigError, match="is a draft"):
        load_contracts(draft)
    draft.write_text(draft.read_text().replace("reviewed = false\n", ""))
    reviewed = load_contracts(draft).tools
    assert set(reviewed) == set(rows)
    assert {c.reversibility for c in reviewed.values()} == {"irreversible"}


async def test_a_file_written_then_edited_by_the_agent_is_previewed_as_undo_then_does_it(
    tmp_path: Path, fs_server: Path
) -> None:
    """Issue 23: fs_write_file then fs_edit_file of the same file. The preview used to say the
    write "needs review: someone changed it" (the someone was the agent's own edit), then undo
    took both back. The preview is the undo's own run, simulated: both predicted as undone, and
    undo reports exactly those states; the file is as it was."""
    from mcp import Client

    params, files = fs_gateway(tmp_path, fs_server)
    (files / "plan.txt").write_text("plan: keep")
    async with Client(params) as c:
        steps = [
            await c.call_tool(
                "fs_write_file", {"path": str(files / "plan.txt"), "content": "plan: agent"}
            ),
            await c.call_tool(
                "fs_edit_file",
                {
                    "path": str(files / "plan.txt"),
                    "edits": [{"oldText": "agent", "newText": "agent, edited"}],
                },
            ),
        ]
        assert [s.is_error for s in steps] == [False] * 2, [s.content for s in steps]
        preview = (await c.call_tool("amends_preview", {})).structured_content
        undo = await c.call_tool("amends_undo", {})
    assert preview["needs_review"] == []  # it was ["s1"]: the agent's own edit was "someone"
    predicted = [(s["tool"], s["predicted"], s["needs_review"]) for s in preview["steps"]]
    assert predicted == [
        ("fs.write_file", "compensated", False),
        ("fs.edit_file", "reverted", False),
    ]
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        (tool, state) for tool, state, _ in predicted
    ]
    assert (files / "plan.txt").read_text() == "plan: keep"


async def test_a_file_written_then_moved_by_the_agent_is_previewed_as_undo_then_does_it(
    tmp_path: Path, fs_server: Path
) -> None:
    """Issue 23, a variation: fs_write_file then fs_move_file of that file. The write's probe
    cannot read the old path now (the agent's own move took it), so the preview said the write
    "needs review" while undo moved the file back and restored it. The move's inverse declares
    what it lands (the old path shows the content again): both predicted as undone, as undo
    reports them; the files are as they were."""
    from mcp import Client

    params, files = fs_gateway(tmp_path, fs_server)
    (files / "plan.txt").write_text("plan: keep")
    async with Client(params) as c:
        steps = [
            await c.call_tool(
                "fs_write_file", {"path": str(files / "plan.txt"), "content": "plan: agent"}
            ),
            await c.call_tool(
                "fs_move_file",
                {"source": str(files / "plan.txt"), "destination": str(files / "done.txt")},
            ),
        ]
        assert [s.is_error for s in steps] == [False] * 2, [s.content for s in steps]
        preview = (await c.call_tool("amends_preview", {})).structured_content
        undo = await c.call_tool("amends_undo", {})
    assert preview["needs_review"] == [], preview["steps"][0]  # it was ["s1"]
    predicted = [(s["tool"], s["predicted"], s["needs_review"]) for s in preview["steps"]]
    assert predicted == [
        ("fs.write_file", "compensated", False),
        ("fs.move_file", "reverted", False),
    ]
    report = undo.structured_content
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        (tool, state) for tool, state, _ in predicted
    ]
    assert (files / "plan.txt").read_text() == "plan: keep"
    assert not (files / "done.txt").exists()
