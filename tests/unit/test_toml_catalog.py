"""TOML catalogs: HTTP tools with template inverses, against a real loopback server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import StepState


class Crm:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {"r1": {"stage": "lead"}}
        self.replies: dict[str, Any] = {}
        self.writes: list[tuple[str, str, Any, str]] = []
        self.lock = threading.Lock()


@pytest.fixture
def crm_server() -> Iterator[tuple[str, Crm]]:
    crm = Crm()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = self.headers.get("Idempotency-Key", "")
            with crm.lock:
                if self.path == "/crm/read_field":
                    return self.reply(200, crm.records[args["record_id"]][args["field"]])
                if self.path == "/crm/update_field":
                    if key in crm.replies:
                        return self.reply(200, crm.replies[key])
                    rec = crm.records[args["record_id"]]
                    pre = self.headers.get("X-Amends-Precondition")
                    if pre and rec[args["field"]] != json.loads(pre)["equals"]:
                        return self.reply(412, {"error": "version mismatch"})
                    rec[args["field"]] = args["value"]
                    crm.writes.append((args["record_id"], args["field"], args["value"], key))
                    crm.replies[key] = dict(rec)
                    return self.reply(200, dict(rec))
                if self.path == "/busy":
                    return self.reply(503, {"error": "busy"})
            return self.reply(404, {"error": "no such path"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", crm
    server.shutdown()
    server.server_close()


def write_catalog(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "tools.toml"
    path.write_text(f'''
[[tool]]
name = "crm.read_field"
reversibility = "read_only"
http = {{ url = "{base}/crm/read_field" }}

[[tool]]
name = "crm.update_field"
reversibility = "reversible"
resources = ["crm:{{args.record_id}}"]
http = {{ url = "{base}/crm/update_field" }}

[tool.before]
tool = "crm.read_field"
args = {{ record_id = "{{args.record_id}}", field = "{{args.field}}" }}

[tool.inverse]
tool = "crm.update_field"
args = {{ record_id = "{{args.record_id}}", field = "{{args.field}}", value = "{{before}}" }}

[tool.expect]
probe = "crm.read_field"
args = {{ record_id = "{{args.record_id}}", field = "{{args.field}}" }}
equals = "{{args.value}}"
''')
    return path


async def test_toml_http_tool_is_reverted_with_the_value_observed_before(
    tmp_path: Path, crm_server: tuple[str, Crm]
) -> None:
    base, crm = crm_server
    catalog = amends.load_toml_catalog(write_catalog(tmp_path, base))
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("toml") as saga:
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    logged = await engine.log.get_saga(saga.id)
    assert logged is not None
    assert logged.steps[0].inverse == {
        "tool": "crm.update_field",
        "args": {"record_id": "r1", "field": "stage", "value": "lead"},
    }
    assert logged.steps[0].resources == ("crm:r1",)
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.REVERTED
    assert crm.records["r1"]["stage"] == "lead"
    await engine.close()


async def test_toml_http_tool_drift_is_refused_by_probe(
    tmp_path: Path, crm_server: tuple[str, Crm]
) -> None:
    base, crm = crm_server
    catalog = amends.load_toml_catalog(write_catalog(tmp_path, base))
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("toml") as saga:
        await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
    crm.records["r1"]["stage"] = "lost"  # a human, through the vendor's own UI
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.DRIFTED
    assert crm.records["r1"]["stage"] == "lost"
    assert len(crm.writes) == 1
    await engine.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[tool]\nname='x'", "is not valid TOML"),
        ("", "declares no tools"),
        (
            "[[tool]]\nname='a.b'\nreversibility='reversible'\nhttp={url='http://x'}\nfoo=1",
            "tool 'a.b' has unknown key(s) foo",
        ),
        (
            "[[tool]]\nname='a.b'\nreversibility='maybe'\nhttp={url='http://x'}",
            "has reversibility 'maybe'; use one of",
        ),
        ("[[tool]]\nname='a.b'\nreversibility='reversible'", "tool 'a.b' needs http = "),
        (
            "[[tool]]\nname='a.b'\nhttp={url='http://x'}\n[tool.inverse]\ntool='a.b'\n"
            "args={v='{nope.x}'}",
            "template '{nope.x}' uses 'nope'; use one of args, result",
        ),
        (
            "[[tool]]\nname='a.b'\nhttp={url='http://x'}\n[tool.expect]\nprobe='p'",
            "'expect' needs equals",
        ),
    ],
)
def test_bad_toml_catalogs_get_precise_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(
        amends.AmendsError,
        match=message.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("{", r"\{")
        .replace("}", r"\}"),
    ) as exc:
        amends.load_toml_catalog(path)
    assert "bad.toml" in str(exc.value) or "maybe" in str(exc.value)


def test_missing_toml_file(tmp_path: Path) -> None:
    with pytest.raises(amends.ConfigError, match="does not exist"):
        amends.load_toml_catalog(tmp_path / "none.toml")
