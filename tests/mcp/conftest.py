"""Fixtures for the MCP gateway tests: a real upstream MCP server (``upstream_kv.py``, built with
the SDK), the gateway as a subprocess (stdio or streamable HTTP), and a real ``mcp.Client``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
KV_SERVER = HERE / "upstream_kv.py"
KV_CONTRACTS = HERE / "kv_contracts.toml"
sys.path.insert(0, str(HERE))
TREE_ENV = {"PYTHONPATH": str(ROOT / "src")}
# Every subprocess these tests start inherits it (``amends`` CLI runs, HTTP gateways): a
# relative PYTHONPATH=src would not survive their own working directories.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [TREE_ENV["PYTHONPATH"], *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
)
"""The gateway subprocess imports amends from this tree's ``src``, not from wherever the venv's
editable install points (a worktree's tests would otherwise run another checkout's gateway:
the SDK passes a child only HOME, PATH and a few more, and a relative PYTHONPATH would not
survive the child's own working directory)."""


def gateway_params(config: Path, cwd: Path) -> Any:
    """Parameters that start ``amends mcp serve --config`` over stdio, as a client would."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "amends.integrations.mcp", "serve", "--config", str(config)],
        cwd=str(cwd),
        env=TREE_ENV,
    )


def installed(path: Path, what: str) -> Path:
    """``path`` of a reference server, installed by scripts/mcp-deps.sh when missing."""
    if not path.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "mcp-deps.sh")], check=True, timeout=600)
    assert path.exists(), f"scripts/mcp-deps.sh did not install {what}"
    return path


def shipped_gateway(
    directory: Path,
    name: str,
    contract: str,
    command: list[str],
    env: dict[str, str] | None = None,
) -> Any:
    """A gateway over one reference server (``command``) with its shipped contracts,
    ``builtin:<contract>``, as upstream ``name`` (tools ``<name>_<tool>``), logging to
    ``directory/saga.db``."""
    env_line = f"env = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in (env or {}).items())} }}"
    config = directory / "gateway.toml"
    config.write_text(
        f'[gateway]\nlog = "saga.db"\n\n[[upstream]]\nname = "{name}"\n'
        f"command = {json.dumps(command[0])}\nargs = {json.dumps(command[1:])}\n"
        + (env_line + "\n" if env else "")
        + f'contracts = ["builtin:{contract}"]\n'
    )
    return gateway_params(config, directory)


@dataclass
class KvSetup:
    """A gateway config over the kv upstream, with its state file and saga log."""

    dir: Path
    config: Path
    state: Path
    db: Path

    def world(self) -> dict[str, Any]:
        """The upstream's state as the upstream wrote it."""
        if not self.state.exists():
            return {"kv": {}, "charges": {}, "journal": [], "emails": []}
        data: dict[str, Any] = json.loads(self.state.read_text())
        return data

    def human_sets(self, key: str, value: str) -> None:
        """A person edits the upstream directly, not through the gateway."""
        data = self.world()
        data["kv"][key] = value
        self.state.write_text(json.dumps(data))

    def gateway(self) -> Any:
        """Parameters that start the gateway over stdio, as an MCP client config would."""
        return gateway_params(self.config, self.dir)


def write_kv_config(directory: Path, *, extra_gateway: str = "", prefix: bool = True) -> KvSetup:
    state = directory / "kv.json"
    config = directory / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"
title = "kv session"
{extra_gateway}

[[upstream]]
name = "kv"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(KV_SERVER))}]
env = {{ KV_STATE = {json.dumps(str(state))} }}
contracts = [{json.dumps(str(KV_CONTRACTS))}]
prefix = {"true" if prefix else "false"}
"""
    )
    return KvSetup(directory, config, state, directory / "saga.db")


@pytest.fixture
def kv(tmp_path: Path) -> KvSetup:
    return write_kv_config(tmp_path, extra_gateway="lease_seconds = 1.0")


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpGateway:
    """``amends mcp serve --http`` as a subprocess this test owns (and may SIGKILL)."""

    def __init__(self, config: Path, cwd: Path, *, port: int | None = None) -> None:
        """Serve on ``--http 127.0.0.1:<free port>``, or, given ``port``, on the address the
        config's ``[gateway] http`` names (no flag)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        flag = [] if port else ["--http", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amends.integrations.mcp",
                "serve",
                "--config",
                str(config),
                *flag,
            ],
            cwd=str(cwd),
            env={**os.environ, **TREE_ENV},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its upstream child dies with its group on SIGKILL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"gateway exited with {self.proc.returncode}: {err}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("gateway did not listen within 30 s")

    def kill(self) -> None:
        """SIGKILL the gateway and its upstream (its process group)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def http_gateway() -> Iterator[Any]:
    started: list[HttpGateway] = []

    def start(setup: KvSetup, port: int | None = None) -> HttpGateway:
        gw = HttpGateway(setup.config, setup.dir, port=port)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


NOTES_SERVER = HERE / "upstream_notes.py"
NOTES_CONTRACTS = HERE / "notes_contracts.toml"


@dataclass
class NotesSetup:
    """A gateway config over ``upstream_notes.py``, an ordinary mcp 2.x server (issue 24)."""

    dir: Path
    config: Path
    state: Path
    db: Path

    def notes(self) -> dict[str, str]:
        """The notes as the upstream wrote them."""
        if not self.state.exists():
            return {}
        data: dict[str, str] = json.loads(self.state.read_text())
        return data

    def pid(self) -> int:
        """The pid of the upstream process running now."""
        return int(Path(f"{self.state}.pid").read_text())

    def gateway(self) -> Any:
        return gateway_params(self.config, self.dir)


def write_notes_config(directory: Path, *, extra_gateway: str = "", more: str = "") -> NotesSetup:
    state = directory / "notes.json"
    config = directory / "gateway.toml"
    config.write_text(
        f"""
[gateway]
log = "saga.db"
title = "notes session"
{extra_gateway}

[[upstream]]
name = "notes"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(NOTES_SERVER))}]
env = {{ NOTES_STATE = {json.dumps(str(state))} }}
contracts = [{json.dumps(str(NOTES_CONTRACTS))}]
{more}
"""
    )
    return NotesSetup(directory, config, state, directory / "saga.db")


@pytest.fixture
def notes(tmp_path: Path) -> NotesSetup:
    return write_notes_config(tmp_path)


@pytest.fixture(params=["stdio", "http"])
def connect(request: Any, http_gateway: Any) -> Any:
    """Connects a real ``mcp.Client`` to a gateway for a setup, over stdio (the gateway a
    subprocess of the client) or streamable HTTP (``amends mcp serve --http``)."""
    from mcp import Client

    def open_client(setup: Any, **kwargs: Any) -> Any:
        if request.param == "stdio":
            return Client(setup.gateway(), **kwargs)
        return Client(http_gateway(setup).url, **kwargs)

    return open_client
