"""A real PostgreSQL 15 for the test session: ``initdb`` + ``pg_ctl`` in a temp dir, loopback only.

The one PostgreSQL launcher of the repository (issue 9): the benchmarks load this file too
(``benchmarks/__main__.py``), with ``root`` on the repository's disk.

As root, PostgreSQL refuses to run, so the server runs as an unprivileged user (``amends-test``,
created with ``useradd`` if missing; ``nobody`` if that fails) via ``runuser``. Missing binaries
are a test FAILURE with the fix, never a silent skip.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

PG_BIN = Path(os.environ.get("AMENDS_PG_BIN", "/usr/lib/postgresql/15/bin"))
_USER = "amends-test"


class PgUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as_user() -> tuple[list[str], int, int]:
    """The command prefix to run as a non-root user, and that user's uid/gid."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    try:
        pwd.getpwnam(_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _USER],
            check=False,
            capture_output=True,
        )
    try:
        entry = pwd.getpwnam(_USER)
    except KeyError:
        entry = pwd.getpwnam("nobody")
    runner = shutil.which("runuser")
    if runner:
        return [runner, "-u", entry.pw_name, "--"], entry.pw_uid, entry.pw_gid
    return ["su", "-s", "/bin/sh", entry.pw_name, "-c"], entry.pw_uid, entry.pw_gid


class PgServer:
    """One throwaway PostgreSQL cluster; ``new_database()`` gives each test its own database."""

    def __init__(self, root: Path | None = None) -> None:
        for tool in ("initdb", "pg_ctl", "postgres"):
            if not (PG_BIN / tool).exists():
                raise PgUnavailable(
                    f"PostgreSQL 15 is not installed: {PG_BIN / tool} is missing. Install it with "
                    f"`apt-get install -y postgresql-15` (scripts/test-deps.sh does this), or set "
                    f"AMENDS_PG_BIN to the directory holding initdb and pg_ctl"
                )
        self.prefix, uid, gid = _run_as_user()
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="amends-pg-", dir=root))
        os.chmod(self.root, 0o755)
        self.data = self.root / "data"
        self.data.mkdir()
        os.chown(self.data, uid, gid)
        os.chmod(self.data, 0o700)
        self.logfile = self.root / "server.log"
        self.logfile.touch()
        os.chown(self.logfile, uid, gid)
        self.port = _free_port()
        self._sh(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "amends",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.data}'\nmax_connections = 200\n"
                "shared_buffers = 64MB\nfsync = on\nsynchronous_commit = on\n"
                "log_min_messages = warning\n"
            )
        self.start()

    def _sh(self, cmd: list[str], timeout: float = 120) -> str:
        if self.prefix and self.prefix[0] == "su":
            full = [*self.prefix, " ".join(cmd)]
        else:
            full = [*self.prefix, *cmd]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout, cwd="/")
        if proc.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            raise PgUnavailable(
                f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}\n{proc.stdout}\n{log}"
            )
        return proc.stdout

    def pg_ctl(self, *args: str) -> None:
        self._sh(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.logfile), "-w", *args]
        )

    def start(self) -> None:
        self.pg_ctl("start")
        self._wait_ready()

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every client connection is cut."""
        self.pg_ctl("restart", "-m", "fast")
        self._wait_ready()

    def stop(self) -> None:
        try:
            # The cluster is thrown away: no shutdown checkpoint, which would fsync every file of
            # every database the session created (over a minute on a loaded disk).
            if (self.data / "postmaster.pid").exists():  # not already stopped (a failed restart)
                self.pg_ctl("stop", "-m", "immediate")
        finally:
            self._remove()

    def _remove(self) -> None:
        """Delete the cluster's files without waiting: a session's clusters hold one database
        per test (hundreds, ~7 MB and ~300 files each), and on a loaded disk removing them took
        over two minutes, charged to the session's last test as a timeout. A background ``rm``
        in its own session deletes them while the tests finish; should it fail to start, they
        are deleted here."""
        try:  # the shell starts rm in the background and exits at once: nothing left to reap
            subprocess.run(
                ["sh", "-c", 'rm -rf -- "$1" &', "sh", str(self.root)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                check=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            shutil.rmtree(self.root, ignore_errors=True)

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def url(self, dbname: str) -> str:
        return f"postgresql://amends@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
