"""Issue 21 item 9: a credential an HTTP TOML tool reads from ``${env:...}`` (in its URL or a
header) never reaches anything amends writes or shows, whatever the vendor echoes back.

A saga runs through HTTP tools against a loopback vendor that answers 400, 503, a timeout, a
body that is not JSON, a redirect, a dropped connection and a success -- each answer echoing
the request's URL and Authorization header -- and is undone (the inverse fails with an echo
too). Then every file the run wrote (the SQLite log and its WAL, the HTML and JSON reports),
the CLI's output (``amends show``, ``--history``, ``--json``, ``amends undo``), the server's
API and web page, and every exception the agent saw are searched for the key and the token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

import amends
from contract_setup import Vendor, http_vendor, reply

pytestmark = pytest.mark.slow

KEY = "sk_live_9Hx2QpZ7vT4mN"
TOKEN = "tok_8f3Kq1xZw0LmB"


def _answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    route, _, query = req.path.partition("?")
    echo = f"you asked for {req.path} with {req.headers.get('Authorization')}"
    if route.startswith("/ok"):
        return reply(req, 200, {"id": "r1", "echo": echo})
    if route.startswith("/bad"):
        return reply(req, 400, f"bad request: {echo}")
    if route.startswith("/busy"):
        return reply(req, 503, f"busy: {echo}")
    if route.startswith("/slow"):
        time.sleep(1.5)
        return reply(req, 200, {})
    if route.startswith("/text"):
        return reply(req, 200, f"not json: {echo}")
    if route.startswith("/redirect"):
        return reply(req, 302, {}, Location=f"/elsewhere?{query}")
    req.close_connection = True  # /hangup: the connection drops after the request
    req.connection.shutdown(2)
    return None


def _catalog(path: Path, base: str) -> Path:
    q = "?api_key=${env:VENDOR_KEY}"
    auth = 'headers = { Authorization = "Bearer ${env:VENDOR_TOKEN}" }'
    tools = [
        ("vendor.reject", "/bad/1", ""),
        ("vendor.busy", "/busy", ""),
        ("vendor.slow", "/slow", "timeout = 0.5\n"),
        ("vendor.text", "/text", ""),
        ("vendor.moved", "/redirect", ""),
        ("vendor.hangup", "/hangup", ""),
    ]
    text = f'''
[[tool]]
name = "vendor.create"
reversibility = "reversible"
no_drift_check = "a record only this saga can see"
http = {{ url = "{base}/ok/{{args.name}}{q}", {auth} }}
inverse = {{ tool = "vendor.remove", args = {{ id = "{{result.id}}" }} }}

[[tool]]
name = "vendor.remove"
reversibility = "irreversible"
http = {{ url = "{base}/bad/{{args.id}}{q}", method = "DELETE", {auth} }}

[[tool]]
name = "vendor.echo"
reversibility = "irreversible"
http = {{ url = "{base}/ok/echo{q}", {auth} }}
acknowledge = {{ who = "the vendor's admin", what = "The vendor answered: {{result.echo}}" }}
'''
    for name, route, extra in tools:
        text += (
            f'\n[[tool]]\nname = "{name}"\n{extra}http = {{ url = "{base}{route}{q}", {auth} }}\n'
        )
    path.write_text(text)
    return path


def _files(directory: Path, *patterns: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for pat in patterns for p in directory.glob(pat)}


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "amends.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    return f"{done.stdout}\n{done.stderr}"


def _server_views(db: Path, catalog: amends.Catalog, saga_id: str, reversal_id: str) -> str:
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    app = create_app(lambda: amends.Engine(catalog, log=str(db)), ServerSettings(no_auth=True))
    shown = []
    with TestClient(app) as client:
        for url in (
            "/sagas",
            f"/sagas/{saga_id}",
            f"/sagas/{saga_id}/preview",
            f"/reversals/{reversal_id}",
            f"/ui/sagas/{saga_id}",
            f"/ui/reversals/{reversal_id}/outcome",
            "/",
        ):
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code, resp.text[:300])
            shown.append(resp.text)
    return "\n".join(shown)


async def test_env_credentials_are_redacted_from_every_file_and_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"VENDOR_KEY": KEY, "VENDOR_TOKEN": TOKEN}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    db = tmp_path / "saga.db"
    seen: list[str] = []  # what the agent's code saw: every exception it caught
    with http_vendor(_answer) as (base, vendor):
        toml = _catalog(tmp_path / "vendor.toml", base)
        catalog = amends.load_toml_catalog(toml)
        engine = amends.Engine(
            catalog,
            log=str(db),
            retry=amends.RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02),
        )
        async with engine.saga("Talk to the vendor") as saga:
            steps = [saga.call("vendor.create", name="n1"), saga.call("vendor.echo")]
            steps += [saga.call(n) for n in ("vendor.reject", "vendor.busy", "vendor.slow")]
            steps += [saga.call(n) for n in ("vendor.text", "vendor.moved", "vendor.hangup")]
            for step in steps:
                try:
                    await step
                except amends.AmendsError as exc:
                    seen.append(f"{type(exc).__name__}: {exc!s} {exc!r}")
        report = await engine.undo(saga.id)
        # the log's files as they are while the engine is open (the WAL goes at close)
        written = _files(tmp_path, "saga.db*")
        await engine.close()
        (tmp_path / "report.html").write_text(report.render("html"))
        (tmp_path / "report.json").write_text(report.to_json())
        seen += [report.render("text"), report.to_json()]
        cli = env | {"PYTHONPATH": os.pathsep.join(sys.path)}
        for args in (
            ["show", "--db", str(db)],
            ["show", saga.id, "--db", str(db)],
            ["show", saga.id, "--db", str(db), "--history"],
            ["show", saga.id, "--db", str(db), "--json"],
            ["undo", saga.id, "--db", str(db), "--catalog", str(toml), "--json"],
            ["undo", saga.id, "--db", str(db), "--catalog", str(toml)],
        ):
            seen.append(_cli(*args, env=cli))
        seen.append(_server_views(db, catalog, saga.id, report.reversal_id))

    # not vacuous: the vendor did get the credentials, and echoed them into what amends keeps
    assert all(KEY in p for p in vendor.paths()) and len(vendor.paths()) >= 9
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for _m, _p, h in vendor.requests)
    states = {s.tool: s.state for s in report.steps}
    assert states["vendor.create"] == "failed"  # its inverse answered 400 (with an echo)
    assert "saga.db-wal" in written
    for name, data in _files(tmp_path, "saga.db*", "report.*").items():
        written[f"{name} (at the end)"] = data
    leaks: dict[str, Any] = {}
    for secret in (KEY, TOKEN):
        for name, data in written.items():
            if secret.encode() in data:
                leaks[f"{name} holds {secret}"] = True
        for i, text in enumerate(seen):
            if secret in text:
                at = text.index(secret)
                leaks[f"view {i} holds {secret}"] = text[max(0, at - 200) : at + 40]
    assert leaks == {}
    assert "${env:VENDOR_KEY}" in json.dumps(report.to_dict())  # the echo, redacted
