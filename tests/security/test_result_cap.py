"""Issue 21 item 13: a vendor answering 50 MB does not put 50 MB into the log (nor into memory
through an HTTP tool). The call happened, so the step is done; the log keeps a summary of its
answer, and everything undo needs (inverse, expectation) whole."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import amends

BIG = 50 * 1024 * 1024


def _catalog(world: dict[str, Any]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("doc.read", reversibility="read_only")
    async def read(call: amends.Call, doc: str) -> Any:
        return world.get(doc)

    @catalog.tool("doc.export", reversibility="reversible")
    async def export(call: amends.Call, doc: str) -> Any:
        world[doc] = "exported"
        call.inverse("doc.unexport", doc=doc)
        call.expect("doc.read", {"doc": doc}, equals="exported")
        return {"doc": doc, "content": "x" * BIG}  # the vendor answers 50 MB

    @catalog.tool("doc.unexport", reversibility="reversible")
    async def unexport(call: amends.Call, doc: str) -> Any:
        world.pop(doc, None)
        return None

    return catalog


async def test_a_50_mb_result_is_stored_as_a_summary_and_the_step_still_undoes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    world: dict[str, Any] = {}
    engine = amends.Engine(_catalog(world), log=str(db))
    try:
        async with engine.saga("Export") as saga:
            step = saga.call("doc.export", doc="d1")
            got = await step
        assert len(got["content"]) == BIG  # the agent gets the whole answer
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None
        (logged,) = rec.steps
        assert logged.state == "done"
        assert logged.inverse is not None and logged.inverse["tool"] == "doc.unexport"
        assert logged.expectation is not None and logged.expectation["equals"] == "exported"
        summary = logged.result
        size = len(json.dumps({"content": "x" * BIG, "doc": "d1"}, separators=(",", ":")))
        assert summary["bytes"] == size and len(summary["sha256"]) == 64
        assert summary["amends_summary"] == (
            f"result too large ({size:,} bytes > the log's cap of 1,048,576); stored a summary"
        )
        assert summary["start"].startswith('{"content":"xxx') and len(summary["start"]) == 1000
        report = await engine.undo(saga.id)
        assert report.status == "fully_reversed" and world == {}
    finally:
        await engine.close()
    assert _bytes_on_disk(tmp_path, "log.db") < 2 * 1024 * 1024


def _bytes_on_disk(folder: Path, name: str) -> int:
    """The log file with its -wal and -shm."""
    return sum(p.stat().st_size for p in folder.glob(name + "*"))


async def test_the_cap_is_an_engine_option_and_a_bad_one_is_refused() -> None:
    world: dict[str, Any] = {}
    engine = amends.Engine(_catalog(world), log=amends.SqliteLog(":memory:"), max_result_bytes=None)
    try:
        async with engine.saga("Export") as saga:
            saga.call("doc.export", doc="d1")
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and len(rec.steps[0].result["content"]) == BIG  # no cap: whole
    finally:
        await engine.close()
    for bad in (0, -1, 1.5, "1MB", True):
        with pytest.raises(amends.ConfigError, match="max_result_bytes must be a positive"):
            amends.Engine(amends.Catalog(), log=amends.SqliteLog(":memory:"), max_result_bytes=bad)  # type: ignore[arg-type]


@pytest.fixture
def huge_vendor() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            code = 200 if self.path == "/big" else 400
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(BIG + 2))
            self.end_headers()
            try:
                self.wfile.write(b'"')
                for _ in range(BIG // (1 << 20)):
                    self.wfile.write(b"y" * (1 << 20))
                self.wfile.write(b'"')
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what this test wants

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()
    server.server_close()


async def test_an_http_tool_stops_reading_an_answer_over_the_cap(
    tmp_path: Path, huge_vendor: tuple[str, list[str]]
) -> None:
    base, seen = huge_vendor
    path = tmp_path / "tools.toml"
    path.write_text(
        f'[[tool]]\nname = "big.get"\nhttp = {{ url = "{base}/big" }}\n'
        f'[[tool]]\nname = "big.fail"\nhttp = {{ url = "{base}/fail" }}\n'
    )
    engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
    try:
        async with engine.saga("Big answers") as saga:
            ok = saga.call("big.get")
            bad = saga.call("big.fail")
            got = await ok
            with pytest.raises(amends.StepFailedError) as failed:
                await bad
        assert got == {
            "amends_summary": f"big.get: POST {base}/big: HTTP 200, answer over 1,048,576 bytes;"
            " not read"
        }
        assert "HTTP 400, an answer over 1,048,576 bytes (not read)" in str(failed.value)
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and [s.state for s in rec.steps] == ["done", "failed"]
        assert sorted(seen) == ["/big", "/fail"]
    finally:
        await engine.close()
