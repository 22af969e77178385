"""Issue 13.7 against real ``amends serve`` processes: a 100 MiB body is refused before it is
sent, and two server processes sharing one log refuse a reused Idempotency-Key."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_harness import log_snapshot, seeded_log, serve_process

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[list[str], str, dict[str, str], str]]:
    """Two ``amends serve`` processes on one SQLite log: (urls, token of acme, sagas, db)."""
    seeded = seeded_log(tmp_path, "two.db")
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_process(tmp_path, seeded.db)).url for _ in range(2)]
        yield urls, seeded.acme, seeded.sagas, seeded.db


def test_two_server_processes_refuse_a_reused_idempotency_key(
    servers: tuple[list[str], str, dict[str, str], str],
) -> None:
    (first, second), token, sagas, db = servers
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "order-42"}
    r = httpx.post(f"{first}/sagas/{sagas['acme1']}/undo", headers=headers, timeout=30)
    assert r.status_code in (200, 202), r.text
    before = log_snapshot(db)
    r = httpx.post(f"{second}/sagas/{sagas['acme2']}/undo", headers=headers, timeout=30)
    assert (r.status_code, r.json()["error"]) == (409, "idempotency_key_reused"), r.text
    assert log_snapshot(db)[1] == before[1]  # no reversal for acme2
    # the same request through the other process joins the same reversal
    r2 = httpx.post(f"{second}/sagas/{sagas['acme1']}/undo", headers=headers, timeout=30)
    assert r2.status_code in (200, 202), r2.text


def test_a_100_mib_body_is_refused_before_it_is_sent(
    servers: tuple[list[str], str, dict[str, str], str],
) -> None:
    (url, _), token, sagas, db = servers
    host, port = url.removeprefix("http://").split(":")
    before = log_snapshot(db)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            (
                f"POST /sagas/{sagas['acme1']}/undo HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {100 * 1024 * 1024}\r\n\r\n"
            ).encode()
        )
        s.sendall(b"{" + b" " * 1024)  # 1 KiB of the promised 100 MiB; the rest never comes
        answer = b""
        while b"\r\n\r\n" not in answer or b"body_too_large" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"body_too_large" in answer
    assert took < 5, took
    assert log_snapshot(db) == before
