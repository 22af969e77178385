"""Issue 26 item 9: a PostgreSQL log that cannot be reached is one clear line and exit 2: the
server's own words (refused, wrong password, no such database), the URL without its password,
the fix. Before: the pool retried for 10 s and printed psycopg's raw error four times."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.postgres


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens on it once the socket is closed


def test_an_unreachable_server_is_one_line_naming_the_cause_and_exit_2() -> None:
    url = f"postgresql://ann:s3cret@127.0.0.1:{closed_port()}/amends"
    done = subprocess.run(
        [sys.executable, "-m", "amends.cli", "show", "saga_x", "--db", url],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert line.startswith("amends: error: saga log 'postgresql://ann:***@127.0.0.1:"), line
    assert "could not connect to PostgreSQL (" in line and "Connection refused" in line, line
    assert "s3cret" not in done.stderr + done.stdout
    assert "error connecting in 'amends'" not in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ann:s3cret@[::1/amends",  # urlsplit and libpq both reject the host
        "postgresql://ann:s3c@ret@[::1:5432/amends",  # libpq ends the password at its first @
        "postgresql://ann:s3cret@127.0.0.1:notaport/amends",
    ],
)
@pytest.mark.parametrize("command", [["show", "saga_x"], ["doctor"]])
def test_a_url_libpq_cannot_use_is_one_line_without_its_password(
    url: str, command: list[str]
) -> None:
    # before: psycopg's ProgrammingError as a traceback, quoting the URL with its password
    done = subprocess.run(
        [sys.executable, "-m", "amends.cli", *command, "--db", url],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out, out
    assert "s3c" not in out and "ret@" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert "saga log 'postgresql://" in lines[0] and "could not connect to PostgreSQL (" in lines[0]
