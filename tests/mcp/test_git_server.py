"""The shipped contracts builtin:git against the real git MCP server (PyPI mcp-server-git,
installed in its own venv by scripts/mcp-deps.sh; issue 24 item 8): per write tool, forward,
drift, undo and the report's words, checked in the repository itself with git."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, installed, shipped_gateway

pytestmark = pytest.mark.slow

GIT_SERVER = ROOT / ".amends-mcp" / "git" / "bin" / "mcp-server-git"


@pytest.fixture(scope="module")
def git_server() -> Path:
    return installed(GIT_SERVER, "mcp-server-git")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "branch", "feature")
    return repo


def git_gateway(tmp_path: Path, server: Path, repo: Path) -> Any:
    return shipped_gateway(tmp_path, "git", "git", [str(server), "--repository", str(repo)])


async def _undo(params: Any, calls: list[tuple[str, dict[str, Any]]], between: Any = None) -> Any:
    from mcp import Client

    async with Client(params) as c:
        for tool, args in calls:
            r = await c.call_tool(tool, args)
            assert not r.is_error, (tool, r.content)
        if between is not None:
            between()
        undo = await c.call_tool("amends_undo", {})
    return undo.structured_content


async def test_checkout_and_add_are_taken_back(tmp_path: Path, git_server: Path) -> None:
    """git_checkout switches back to the branch read before (reverted); git_add is unstaged
    (compensated, no residue: nothing was staged before)."""
    repo = make_repo(tmp_path)
    (repo / "a.txt").write_text("two\n")
    report = await _undo(
        git_gateway(tmp_path, git_server, repo),
        [
            ("git_git_checkout", {"repo_path": str(repo), "branch_name": "feature"}),
            ("git_git_add", {"repo_path": str(repo), "files": ["a.txt"]}),
        ],
    )
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        ("git.git_checkout", "reverted"),
        ("git.git_add", "compensated"),
    ]
    assert report["residue"] == []
    assert git(repo, "branch", "--show-current") == "main\n"
    assert git(repo, "diff", "--cached") == ""
    assert (repo / "a.txt").read_text() == "two\n"  # the working tree is never touched


async def test_an_add_over_staged_changes_says_it_unstaged_them_too(
    tmp_path: Path, git_server: Path
) -> None:
    """The server can only unstage everything: a change staged before the agent's git_add is
    unstaged too, and residue says so."""
    repo = make_repo(tmp_path)
    (repo / "a.txt").write_text("staged by a person\n")
    git(repo, "add", "a.txt")
    (repo / "b.txt").write_text("new\n")
    report = await _undo(
        git_gateway(tmp_path, git_server, repo),
        [("git_git_add", {"repo_path": str(repo), "files": ["b.txt"]})],
    )
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [("git.git_add", "compensated")]
    assert [r["what"] for r in report["residue"]] == [
        f"changes of {repo} that were staged before the agent's git_add were unstaged too (the "
        f"git server can only unstage everything); they are still in the working tree: stage "
        f"them again"
    ]
    assert git(repo, "diff", "--cached", "--name-only") == ""


@pytest.mark.parametrize(
    ("tool", "args", "change"),
    [
        ("git_git_checkout", {"branch_name": "feature"}, "a.txt"),
        ("git_git_add", {"files": ["a.txt"]}, "a.txt"),
    ],
)
async def test_a_repository_a_person_changed_since_is_drifted_and_kept(
    tmp_path: Path, git_server: Path, tool: str, args: dict[str, Any], change: str
) -> None:
    """rule 4: after the agent's checkout or add, a person stages a change; undo leaves the
    repository as the person left it (drifted), never switching or unstaging over their work."""
    repo = make_repo(tmp_path)
    (repo / "a.txt").write_text("two\n")

    def person() -> None:
        (repo / "c.txt").write_text("by a person\n")
        git(repo, "add", "c.txt")

    report = await _undo(
        git_gateway(tmp_path, git_server, repo), [(tool, {"repo_path": str(repo), **args})], person
    )
    (step,) = report["steps"]
    assert step["state"] == "drifted", step
    assert step["detail"].startswith("someone changed it since the agent acted")
    assert "c.txt" in git(repo, "diff", "--cached", "--name-only")


async def test_commit_branch_and_reset_are_acknowledged_with_how_to_take_them_back(
    tmp_path: Path, git_server: Path
) -> None:
    """The server cannot delete a branch, undo a commit or restage: each is irreversible and
    the report names the commit's hash and the command a person would run."""
    repo = make_repo(tmp_path)
    (repo / "a.txt").write_text("two\n")
    git(repo, "add", "a.txt")
    report = await _undo(
        git_gateway(tmp_path, git_server, repo),
        [
            ("git_git_commit", {"repo_path": str(repo), "message": "agent commit"}),
            ("git_git_create_branch", {"repo_path": str(repo), "branch_name": "agent-branch"}),
            ("git_git_reset", {"repo_path": str(repo)}),
        ],
    )
    sha = git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "log", "-1", "--format=%s") == "agent commit\n"
    assert [(s["tool"], s["state"]) for s in report["steps"]] == [
        ("git.git_commit", "acknowledged"),
        ("git.git_create_branch", "acknowledged"),
        ("git.git_reset", "acknowledged"),
    ]
    actions = [s["manual_action"] for s in report["steps"]]
    assert actions[0]["what"] == (
        f"commit {sha} ('agent commit') was made in {repo}; the git server cannot undo a commit"
    )
    assert f"'git reset --soft {sha}~1' takes it back" in actions[0]["draft"]
    assert "'git branch -d agent-branch' deletes it" in actions[1]["draft"]
    assert actions[2]["who"] == f"the owner of the repository {repo}"
    assert report["status"] == "cannot_undo"


async def test_a_commit_with_nothing_staged_is_refused_and_nothing_is_recorded(
    tmp_path: Path, git_server: Path
) -> None:
    """The server's "No changes staged for commit" is a refusal (rule 9): failed, no commit."""
    from mcp import Client

    repo = make_repo(tmp_path)
    async with Client(git_gateway(tmp_path, git_server, repo)) as c:
        r = await c.call_tool("git_git_commit", {"repo_path": str(repo), "message": "empty"})
    assert r.is_error and r.meta["amends/step"]["state"] == "failed"
    assert git(repo, "log", "--format=%s") == "first\n"
