"""From the quickstart to your own project (issue 26 item 8): ``amends serve`` prints its URL,
and the refusals for a catalog amends cannot load point to docs/your-project.md."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import amends
from amends.cli import main

HERE = Path(__file__).parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import hint_tools  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _log(db: str) -> None:
    engine = amends.Engine(hint_tools.CATALOG, log=db)
    async with engine.saga("Close the ACME deal", tenant="acme") as saga:
        saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    await engine.close()


@pytest.mark.slow
def test_serve_prints_the_url_it_serves_and_the_url_answers(tmp_path: Path) -> None:
    """Before: `amends serve` printed only uvicorn's log lines on stderr, never its URL."""
    db = str(tmp_path / "s.db")
    asyncio.run(_log(db))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "amends.cli", "serve", "--db", db, "--catalog",
         "hint_tools:CATALOG", "--no-auth", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=60), "amends serve printed nothing within 60 s"
        line = proc.stdout.readline()
        url = f"http://127.0.0.1:{port}/"
        sel.close()
        assert line == f"amends: serving {url} (Ctrl-C stops)\n"
        for _ in range(200):  # the socket listens; uvicorn may still be starting its app
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                asyncio.run(asyncio.sleep(0.1))
        assert resp.status == 200 and "Close the ACME deal" in body
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_catalog_amends_cannot_find_points_to_the_project_guide(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A saga whose catalog lived in __main__ records none; undo refuses, naming the page."""
    monkeypatch.delenv("AMENDS_CATALOGS", raising=False)
    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    db = str(tmp_path / "m.db")
    catalog = amends.Catalog()  # not an attribute of any module: as if defined in __main__

    @catalog.tool("kv.set", reversibility="reversible")
    async def kv_set(call: amends.Call, key: str) -> None:
        call.inverse("kv.set", key=key)
        call.no_drift_check(reason="test")

    async def run() -> str:
        engine = amends.Engine(catalog, log=db)
        async with engine.saga("Set a key") as saga:
            saga.call("kv.set", key="a")
        await engine.close()
        return saga.id

    saga_id = asyncio.run(run())
    assert main(["undo", saga_id, "--db", db]) == 2
    err = capsys.readouterr().err
    assert "does not record which catalog ran it" in err and "docs/your-project.md" in err
    assert main(["audit"]) == 2
    assert "docs/your-project.md" in capsys.readouterr().err


EXAMPLE = REPO / "docs" / "examples" / "your_project"
AMENDS = str(Path(sys.executable).parent / "amends")


@pytest.mark.slow
def test_the_project_guide_runs_as_written(tmp_path: Path) -> None:
    """docs/your-project.md: the agent logs a saga; undo without a catalog refuses and points
    to the page; with --catalog myproj.tools:catalog it is undone; audit --strict passes with
    $AMENDS_CATALOGS; the project's own amends.testing test passes."""
    project = tmp_path / "your_project"
    shutil.copytree(EXAMPLE, project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMENDS_", "PYTHONPATH"))}

    def run(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=project, env={**env, **extra}, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip

    agent = run(sys.executable, "-m", "myproj.agent")
    assert agent.returncode == 0, agent.stderr
    saga_id = agent.stdout.strip()
    assert json.loads((project / "settings.json").read_text()) == {"beta": "on"}
    refused = run(AMENDS, "undo", saga_id)
    assert refused.returncode == 2 and "docs/your-project.md" in refused.stderr
    assert "recorded 'myproj.tools:catalog'" in refused.stderr
    undone = run(AMENDS, "undo", saga_id, "--catalog", "myproj.tools:catalog")
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.startswith("1 of 1 taken back — fully_reversed")
    assert json.loads((project / "settings.json").read_text()) == {"beta": None}
    audit = run(AMENDS, "audit", "--strict", AMENDS_CATALOGS="myproj.tools:catalog")
    assert audit.returncode == 0 and "Catalog myproj.tools:catalog: 2 tools" in audit.stdout
    tests = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert tests.returncode == 0 and "1 passed" in tests.stdout, tests.stdout + tests.stderr
