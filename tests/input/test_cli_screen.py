"""Issue 17 item 4: the CLI at 80 columns (ids never broken), --version, and a fast --help."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import amends
from screen_lines import fits

HERE = Path(__file__).parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    env["TERM"] = "xterm-256color"
    env["AMENDS_CATALOGS"] = "input_tools:CATALOG"  # issue 21 item 2: the operator allows it
    return env


def _in_pty(argv: list[str], columns: int = 80) -> str:
    """Run the CLI on a pseudo-terminal ``columns`` wide; its screen text, escapes removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "amends.cli", *argv],
        stdin=slave, stdout=slave, stderr=slave, cwd=HERE, env=_env(), close_fds=True,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


@pytest.mark.slow
def test_show_and_undo_at_80_columns_never_break_an_id(saga_db: tuple[str, str]) -> None:
    db, saga_id = saga_db
    for argv in (
        ["show", saga_id, "--db", db],
        ["undo", saga_id, "--db", db, "--dry-run"],
        ["undo", saga_id, "--db", db],
    ):
        screen = _in_pty(argv)
        lines = screen.splitlines()
        # a command to paste is one line (the terminal folds it, issue 26 item 3); all else fits
        assert all(fits(line, 80) for line in lines), screen
        assert any(saga_id in line for line in lines), screen
        for step_id in ("s1", "s2"):
            assert any(re.search(rf"\b{step_id}\b", line) for line in lines), screen
    log = amends.SqliteLog(db, read_only=True)
    import asyncio

    rev = asyncio.run(log.get_reversal(saga_id=saga_id))
    asyncio.run(log.close())
    assert rev is not None
    assert any(rev.reversal_id in line for line in screen.splitlines()), screen


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from amends.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"amends {amends.__version__}"


def test_python_dash_m_amends_is_the_amends_command() -> None:
    """``python -m amends`` (what a user types without the console script on PATH) runs the
    same command line as ``amends`` and ``python -m amends.cli``."""
    for module in ("amends", "amends.cli"):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--version"],
            capture_output=True, text=True, timeout=60, env=_env(),
        )  # fmt: skip
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (
            0,
            f"amends {amends.__version__}",
            "",
        )


@pytest.mark.slow
def test_help_imports_no_server_or_optional_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "amends.cli", "--help"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0
    assert "Honest undo for AI-agent tool calls." in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    for heavy in ("fastapi", "uvicorn", "starlette", "jinja2", "httpx", "psycopg", "temporalio"):
        assert heavy not in imported


def test_show_is_concise_by_default_and_history_is_asked_for(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: `amends show SAGA` is the saga and its report in sentences, wrapped at 80
    columns; the append-only event log only with --history."""
    from amends.cli import main

    db, saga_id = saga_db
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("AMENDS_CATALOGS", "input_tools:CATALOG")  # issue 21.2: allowed
    assert main(["undo", saga_id, "--db", db]) == 1  # the email stands
    capsys.readouterr()
    assert main(["show", saga_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert all(fits(x, 80) for x in out.splitlines()), out
    assert out.splitlines()[4].startswith("1 of 2 taken back · 1 needs your attention")  # headline
    assert re.search(r"s1 +Revert +reverted", out)
    assert "undo: " in out
    assert "History" not in out and f"amends show {saga_id} --history" in out
    assert main(["show", saga_id, "--db", db, "--history"]) == 0
    assert "History (append-only, " in capsys.readouterr().out  # issue 26: its day named
