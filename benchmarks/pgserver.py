"""A throwaway local PostgreSQL 15 for the benchmarks (initdb + pg_ctl in a temp dir, loopback).

PostgreSQL refuses to run as root, so as root the server runs as an unprivileged user via
``runuser`` (``amends-bench``, created if missing; ``nobody`` as a fallback).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path(os.environ.get("AMENDS_PG_BIN", "/usr/lib/postgresql/15/bin"))
_USER = "amends-bench"


class PgUnavailableError(RuntimeError):
    """PostgreSQL 15 binaries are missing or the server did not start."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prefix() -> tuple[list[str], int, int]:
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
    return ["runuser", "-u", entry.pw_name, "--"], entry.pw_uid, entry.pw_gid


class PgServer:
    """Start with ``PgServer()``; ``url`` is a fresh database; ``stop()`` removes everything."""

    def __init__(self, root: Path) -> None:
        for tool in ("initdb", "pg_ctl"):
            if not (PG_BIN / tool).exists():
                raise PgUnavailableError(
                    f"{PG_BIN / tool} is missing; install PostgreSQL 15 "
                    f"(`apt-get install -y postgresql-15`) or set AMENDS_PG_BIN"
                )
        self.prefix, uid, gid = _prefix()
        root.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir=root))  # on the repo's disk
        os.chmod(self.root, 0o755)
        self.data = self.root / "data"
        self.data.mkdir()
        os.chown(self.data, uid, gid)
        os.chmod(self.data, 0o700)
        self.logfile = self.root / "server.log"
        self.logfile.touch()
        os.chown(self.logfile, uid, gid)
        self.port = _free_port()
        self._sh([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "amends", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C"])  # fmt: skip
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.data}'\nshared_buffers = 64MB\n"
                "fsync = on\nsynchronous_commit = on\nlog_min_messages = warning\n"
            )
        self._sh([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.logfile), "-w",
                  "start"])  # fmt: skip
        self._wait()
        import psycopg

        with psycopg.connect(self._url("postgres"), autocommit=True) as conn:
            conn.execute('CREATE DATABASE "bench"')
        self.url = self._url("bench")

    def _url(self, db: str) -> str:
        return f"postgresql://amends@127.0.0.1:{self.port}/{db}"

    def _sh(self, cmd: list[str]) -> None:
        proc = subprocess.run(
            [*self.prefix, *cmd], capture_output=True, text=True, timeout=120, cwd="/"
        )
        if proc.returncode != 0:
            raise PgUnavailableError(f"{' '.join(cmd)} failed: {proc.stderr}{proc.stdout}")

    def _wait(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self._url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        try:
            self._sh([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "stop", "-m", "fast"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
