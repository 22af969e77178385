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
    log = amends.SqliteLog(":memory:")  # the caller's: a refused engine leaves it open
    for bad in (0, -1, 1.5, "1MB", True):
        with pytest.raises(amends.ConfigError, match="max_result_bytes must be a positive"):
            amends.Engine(amends.Catalog(), log=log, max_result_bytes=bad)  # type: ignore[arg-type]
    await log.close()


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


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _odd_catalog(world: dict[str, Any], result: Any, inverse_extra: Any = None) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("doc.read", reversibility="read_only")
    async def read(call: amends.Call, doc: str) -> Any:
        return world.get(doc)

    @catalog.tool("doc.export", reversibility="reversible")
    async def export(call: amends.Call, doc: str, extra: Any = None) -> Any:
        world[doc] = "exported"
        call.inverse("doc.unexport", doc=doc, extra=inverse_extra)
        call.expect("doc.read", {"doc": doc}, equals="exported")
        return result

    @catalog.tool("doc.unexport", reversibility="reversible")
    async def unexport(call: amends.Call, doc: str, extra: Any = None) -> Any:
        world.pop(doc, None)
        return None

    return catalog


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ({"v": _deep(150)}, "nested deeper than 100 levels"),
        ({"v": _deep(50_000)}, "nested deeper than 100 levels"),
        ({"v": 10**5000}, "an integer of about 5,001 digits, longer than Python prints"),
    ],
    ids=["deep-150", "deep-50000", "int-5000-digits"],
)
async def test_a_result_too_deep_or_with_an_int_too_long_is_stored_as_its_repr_and_undoes(
    tmp_path: Path, result: Any, why: str
) -> None:
    """Issue 21: the call happened, so the step is done; the log keeps a cut repr saying why
    (never a crash, never a step left without its outcome), and undo still reverts it."""
    world: dict[str, Any] = {}
    engine = amends.Engine(_odd_catalog(world, result), log=str(tmp_path / "log.db"))
    try:
        async with engine.saga("Export") as saga:
            got = await saga.call("doc.export", doc="d1")
        assert got is result  # the agent gets the whole answer
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None
        (logged,) = rec.steps
        assert logged.state == "done" and rec.state == "completed"
        assert logged.result["amends_note"] == f"not kept as data: {why}" or logged.result[
            "amends_note"
        ].startswith(f"not kept as data: {why}")
        assert len(logged.result["repr"]) <= 1001
        assert await engine.log.verify(saga.id) == []
        report = await engine.undo(saga.id)
        assert report.status == "fully_reversed" and world == {}
    finally:
        await engine.close()


@pytest.mark.parametrize("extra", [10**5000, _deep(150)], ids=["int", "deep"])
async def test_an_inverse_that_cannot_be_kept_is_a_contract_violation_never_reverted(
    tmp_path: Path, extra: Any
) -> None:
    """Undo needs the inverse whole: one the log cannot keep makes the step irreversible, the
    violation named, and the effect stays for a person (never reported reverted)."""
    world: dict[str, Any] = {}
    engine = amends.Engine(_odd_catalog(world, "ok", extra), log=str(tmp_path / "log.db"))
    try:
        async with engine.saga("Export") as saga:
            saga.call("doc.export", doc="d1")
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None
        (logged,) = rec.steps
        assert logged.state == "done" and logged.inverse is None
        assert logged.violation is not None
        assert "the inverse it recorded cannot be kept in the log" in logged.violation
        report = await engine.undo(saga.id)
        assert report.status == "cannot_undo" and world == {"d1": "exported"}
        assert report.steps[0].state != "reverted"
        assert "cannot be kept in the log" in report.steps[0].detail
    finally:
        await engine.close()


async def test_an_argument_too_deep_or_too_long_is_logged_as_its_repr_and_the_tool_gets_it(
    tmp_path: Path,
) -> None:
    world: dict[str, Any] = {}
    engine = amends.Engine(_odd_catalog(world, "ok"), log=str(tmp_path / "log.db"))
    try:
        for extra in (10**5000, _deep(150)):
            async with engine.saga("Export") as saga:
                assert await saga.call("doc.export", doc="d1", extra=extra) == "ok"
            rec = await engine.log.get_saga(saga.id)
            assert rec is not None and rec.state == "completed"
            (logged,) = rec.steps
            assert logged.state == "done" and logged.args["doc"] == "d1"
            assert logged.args["extra"]["amends_note"].startswith("not kept as data: ")
            assert await engine.log.verify(saga.id) == []
    finally:
        await engine.close()


@pytest.fixture
def deep_vendor() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"[" * 100_000 + b"]" * 100_000
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


async def test_an_http_answer_nested_too_deep_is_kept_as_text(
    tmp_path: Path, deep_vendor: str
) -> None:
    """Issue 21: the vendor did act (2xx); an answer too deep to parse is its text, never a
    crash of the step."""
    path = tmp_path / "tools.toml"
    path.write_text(f'[[tool]]\nname = "deep.get"\nhttp = {{ url = "{deep_vendor}/x" }}\n')
    engine = amends.Engine(amends.load_toml_catalog(path), log=str(tmp_path / "log.db"))
    try:
        async with engine.saga("Deep answer") as saga:
            got = await saga.call("deep.get")
        assert got == "[" * 100_000 + "]" * 100_000
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and [s.state for s in rec.steps] == ["done"]
    finally:
        await engine.close()
