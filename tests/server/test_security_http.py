"""Issue 21 items 8, 14 and 16 as an attacker on the network would try them, against real
``amends serve`` processes on loopback: bad tokens and forged ``X-Forwarded-For``, idle and
dribbling connections by the hundred, repeated undo requests, a UTF-16 body, a locked log and a
token in a URL. Each test fails on the server as it was before the fix."""

from __future__ import annotations

import select
import socket
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_harness import Served, log_snapshot, seeded_log, serve_process

pytestmark = pytest.mark.slow


def _bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


# --- 8. rate limiting ---------------------------------------------------------------------------
def test_ten_bad_tokens_from_an_address_never_lock_out_a_valid_token(tmp_path: Path) -> None:
    """Someone on the same address (a NAT, a shared host) sends ten bad tokens: their invalid
    tokens get 429 from then on, but the valid token — by bearer header and through the sign-in
    form — is served as before."""
    seeded = seeded_log(tmp_path)
    db, sagas, acme = seeded.db, seeded.sagas, seeded.acme
    with serve_process(tmp_path, db) as srv, httpx.Client(base_url=srv.url) as c:
        for i in range(10):
            r = c.get("/sagas", headers=_bearer(f"amd_guess{i}"))
            assert (r.status_code, r.json()["error"]) == (401, "invalid_token"), r.text
        r = c.get("/sagas", headers=_bearer("amd_guess10"))
        assert (r.status_code, r.json()["error"]) == (429, "too_many_failed_attempts")
        assert 1 <= int(r.headers["retry-after"]) <= 60
        r = c.get("/sagas", headers=_bearer(acme))
        assert r.status_code == 200, r.text
        assert {s["saga_id"] for s in r.json()["sagas"]} == {
            sagas["acme1"],
            sagas["acme2"],
            sagas["acme3"],
        }
        page = c.get("/login")
        nonce = page.text.split('name="csrf" value="')[1].split('"')[0]
        r = c.post("/login", data={"token": acme, "csrf": nonce}, headers={"Origin": srv.url})
        assert r.status_code == 200, r.text
        assert c.get("/", follow_redirects=False).status_code == 200  # signed in


def test_forwarded_for_from_a_peer_that_is_no_trusted_proxy_is_ignored(tmp_path: Path) -> None:
    """Without --trusted-proxy, X-Forwarded-For is the client's own words: 300 guesses each
    naming another address are limited after ten, and guesses naming a victim's address do not
    lock the victim out."""
    seeded = seeded_log(tmp_path)
    db, acme = seeded.db, seeded.acme
    with serve_process(tmp_path, db) as srv, httpx.Client(base_url=srv.url) as c:
        answers = [
            c.get(
                "/sagas", headers=_bearer(f"amd_guess{i}", **{"X-Forwarded-For": f"10.7.{i}.1"})
            ).status_code
            for i in range(300)
        ]
        assert answers[:10] == [401] * 10
        assert answers[10:] == [429] * 290
        victim = {"X-Forwarded-For": "198.51.100.9"}
        r = c.get("/sagas", headers=_bearer(acme, **victim))
        assert r.status_code == 200, r.text


def test_a_trusted_proxys_forwarded_for_names_the_client(tmp_path: Path) -> None:
    """With --trusted-proxy 127.0.0.1, the client is the nearest X-Forwarded-For hop that is not
    a trusted proxy: each client address has its own count, a hop the client forged in front of
    the proxy's does not move it to another count, and a valid token is always served."""
    seeded = seeded_log(tmp_path)
    db, acme = seeded.db, seeded.acme
    with (
        serve_process(tmp_path, db, "--trusted-proxy", "127.0.0.1") as srv,
        httpx.Client(base_url=srv.url) as c,
    ):
        for i in range(10):
            forged = f"10.9.{i}.9, 203.0.113.5"  # the client wrote the first hop itself
            r = c.get("/sagas", headers=_bearer("amd_guess", **{"X-Forwarded-For": forged}))
            assert r.status_code == 401, r.text
        r = c.get("/sagas", headers=_bearer("amd_guess", **{"X-Forwarded-For": "203.0.113.5"}))
        assert r.status_code == 429, r.text
        r = c.get("/sagas", headers=_bearer("amd_guess", **{"X-Forwarded-For": "203.0.113.6"}))
        assert r.status_code == 401, r.text  # another client behind the proxy: its own count
        r = c.get("/sagas", headers=_bearer(acme, **{"X-Forwarded-For": "203.0.113.5"}))
        assert r.status_code == 200, r.text


def test_trusted_proxy_must_be_an_address(tmp_path: Path) -> None:
    db = seeded_log(tmp_path).db
    from test_security import _cli

    code, _, err = _cli("serve", "--db", db, "--catalog", "x:y", "--trusted-proxy", "proxy.lan")
    assert code == 2
    assert "--trusted-proxy 'proxy.lan' is not an IP address or network" in err


# --- 14. bounds -----------------------------------------------------------------------------------
def _connect(srv: Served, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10, source_address=(source, 0))
    s.setblocking(False)
    return s


def _answer(s: socket.socket, wait: float) -> bytes | None:
    """What the server sent before closing ``s`` within ``wait`` seconds; None: still open."""
    got = b""
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([s], [], [], left)
        if not ready:
            continue
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    return None


def _dribble(s: socket.socket, stop: threading.Event) -> None:
    """Slowloris: the headers of one request, a byte every 0.5 s, never finished."""
    for byte in b"GET /login HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        if stop.wait(0.5):
            return
        try:
            s.send(bytes([byte]))
        except OSError:
            return


def test_idle_and_dribbling_connections_are_capped_per_address_and_closed(tmp_path: Path) -> None:
    """150 connections from one address that never finish a request: past 100 they are answered
    503 at once; the 100 kept (idle ones, half-sent headers, one sending a byte every 0.5 s) get
    408 and are closed after the 10 s request deadline; meanwhile another address is served."""
    seeded = seeded_log(tmp_path)
    db, acme = seeded.db, seeded.acme
    with serve_process(tmp_path, db) as srv:
        held = []
        for i in range(150):
            s = _connect(srv)
            if i % 2:
                s.send(b"GET /login HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            held.append(s)
            if i == 99:
                time.sleep(0.5)  # the server has counted the first 100
        first = _answer(held[100], 10)  # before: accepted and kept open like the others
        assert first is not None and first.startswith(b"HTTP/1.1 503"), first
        assert b"too_many_connections" in first and b"retry-after: 5" in first
        over = [_answer(s, 10) for s in held[101:]]
        assert all(a is not None and a.startswith(b"HTTP/1.1 503") for a in over), over[:3]
        stop = threading.Event()
        held[0].close()  # make room for the dribbler
        time.sleep(0.5)
        slow = _connect(srv)
        dribbler = threading.Thread(target=_dribble, args=(slow, stop), daemon=True)
        dribbler.start()
        try:
            other = socket.create_connection(
                ("127.0.0.1", srv.port), timeout=10, source_address=("127.0.0.2", 0)
            )
            other.sendall(
                f"GET /sagas HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {acme}\r\n"
                f"Connection: close\r\n\r\n".encode()
            )
            other.setblocking(False)
            served = _answer(other, 30)
            assert served is not None and served.startswith(b"HTTP/1.1 200"), served
            closed = [_answer(s, 60) for s in [*held[1:100], slow]]
        finally:
            stop.set()
        assert all(a is not None for a in closed), sum(a is None for a in closed)
        timed_out = [a for a in closed if a]
        assert len(timed_out) == 100 and all(a.startswith(b"HTTP/1.1 408") for a in timed_out)
        assert b"request_timeout" in timed_out[0]
        r = httpx.get(f"{srv.url}/sagas", headers=_bearer(acme), timeout=10)
        assert r.status_code == 200  # the address is served again once its connections closed
        for s in held:
            s.close()


def test_the_total_connection_cap_answers_503(tmp_path: Path) -> None:
    """--max-connections bounds every address together; the flags are checked up front."""
    seeded = seeded_log(tmp_path)
    db, acme = seeded.db, seeded.acme
    from test_security import _cli

    code, _, err = _cli("serve", "--db", db, "--catalog", "x:y", "--request-timeout", "0")
    assert code == 2 and "--request-timeout must be more than 0" in err
    code, _, err = _cli("serve", "--db", db, "--catalog", "x:y", "--max-connections", "10000000")
    assert code == 2 and "lower --max-connections or raise `ulimit -n`" in err
    with serve_process(tmp_path, db, "--max-connections", "20", "--request-timeout", "2") as srv:
        held = [_connect(srv, f"127.0.0.{2 + i % 5}") for i in range(20)]
        time.sleep(0.5)
        extra = _connect(srv, "127.0.0.9")
        answer = _answer(extra, 10)
        assert answer is not None and answer.startswith(b"HTTP/1.1 503"), answer
        assert b"holds 20 connections already" in answer
        assert all(_answer(s, 60) is not None for s in held)  # the 2 s deadline closed them
        r = httpx.get(f"{srv.url}/sagas", headers=_bearer(acme), timeout=10)
        assert r.status_code == 200
        for s in [*held, extra]:
            s.close()


def _events(db: str, saga_id: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT kind FROM events WHERE saga_id = ? ORDER BY event_id", (saga_id,)
            )
        ]
    finally:
        conn.close()


def test_repeated_undo_and_resolve_requests_write_once(tmp_path: Path) -> None:
    """Ten POST undo while the reversal runs and ten after it finished record one "undo asked"
    and nothing else; ten ?continue=true with nothing left to continue are 409 and write
    nothing; the same resolution sent five times is recorded once (before, each request
    appended an event, and each continuation three)."""
    seeded = seeded_log(tmp_path)
    db, sagas, acme = seeded.db, seeded.sagas, seeded.acme
    sid = sagas["acme1"]
    with (
        serve_process(tmp_path, db, world=seeded.world, refund_delay=3.0) as srv,
        httpx.Client(base_url=srv.url) as c,
    ):
        first = c.post(f"/sagas/{sid}/undo", headers=_bearer(acme), timeout=30)
        assert first.status_code == 202, first.text
        rev = first.json()["reversal_id"]
        for _ in range(10):
            r = c.post(f"/sagas/{sid}/undo", headers=_bearer(acme), timeout=30)
            assert r.status_code in (200, 202) and r.json()["reversal_id"] == rev
        deadline = time.monotonic() + 60
        while c.get(f"/reversals/{rev}", headers=_bearer(acme)).json()["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        after_done = _events(db, sid)
        for _ in range(10):
            r = c.post(f"/sagas/{sid}/undo", headers=_bearer(acme), timeout=30)
            assert r.status_code == 200 and r.json()["reversal_id"] == rev
        for _ in range(10):
            r = c.post(f"/sagas/{sid}/undo?continue=true", headers=_bearer(acme), timeout=30)
            assert (r.status_code, r.json()["error"]) == (409, "nothing_to_continue"), r.text
            assert "left nothing to continue" in r.json()["detail"]
        assert _events(db, sid) == after_done
        resolve = f"/sagas/{sid}/steps/s3/resolve"
        for note in ["sent the correction"] * 5 + ["sent it again, by phone"]:
            r = c.post(resolve, json={"note": note}, headers=_bearer(acme))
            assert r.status_code == 200 and r.json()["note"] == note, r.text
    events = _events(db, sid)
    assert events == [*after_done, "step.resolved", "step.resolved"]  # a new note is news
    assert events.count("undo.asked") == 1
    assert events.count("reversal.requested") == 1


# --- 16. small ones -----------------------------------------------------------------------------
def test_a_utf16_json_body_is_415_and_changes_nothing(tmp_path: Path) -> None:
    """JSON on the wire is UTF-8: a UTF-16 budget (with or without BOM, or announced by its
    charset) is refused with 415 before anything is written — never guessed at."""
    seeded = seeded_log(tmp_path)
    db, sagas, acme = seeded.db, seeded.sagas, seeded.acme
    budget = '{"tool_calls": 1}'
    with serve_process(tmp_path, db) as srv, httpx.Client(base_url=srv.url) as c:
        before = log_snapshot(db)
        for body, ctype in (
            (budget.encode("utf-16"), "application/json"),
            (budget.encode("utf-16-le"), "application/json"),
            (budget.encode("utf-32"), "application/json"),
            (budget.encode(), "application/json; charset=utf-16"),
            (b'{"tool_calls": 1, "x": "\xff"}', "application/json"),
        ):
            r = c.post(
                f"/sagas/{sagas['acme1']}/undo",
                content=body,
                headers=_bearer(acme, **{"Content-Type": ctype}),
            )
            assert (r.status_code, r.json()["error"]) == (415, "unsupported_media_type"), body
            assert "UTF-8" in r.json()["detail"]
        assert log_snapshot(db) == before
        r = c.post(
            f"/sagas/{sagas['acme1']}/undo",
            content=b"\xef\xbb\xbf" + budget.encode(),  # UTF-8 with a BOM: still UTF-8
            headers=_bearer(acme, **{"Content-Type": "application/json"}),
        )
        assert r.status_code in (200, 202), r.text


def test_a_locked_log_answers_503_with_retry_after(tmp_path: Path) -> None:
    """Another process holds the SQLite log's write lock past the busy timeout: undo answers
    503 with Retry-After (the request was fine; retry), not 409, and writes nothing."""
    seeded = seeded_log(tmp_path)
    db, sagas, acme = seeded.db, seeded.sagas, seeded.acme
    undo = f"/sagas/{sagas['acme1']}/undo"
    with serve_process(tmp_path, db) as srv:
        before = log_snapshot(db)
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            r = httpx.post(f"{srv.url}{undo}", headers=_bearer(acme), timeout=60)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert (r.status_code, r.json()["error"]) == (503, "LogLockedError"), r.text
        assert r.headers["retry-after"] == "2"
        assert "stayed locked by another process" in r.json()["detail"]
        assert log_snapshot(db) == before
        r = httpx.post(f"{srv.url}{undo}", headers=_bearer(acme), timeout=60)
        assert r.status_code in (200, 202), r.text  # the retry goes through


def test_the_access_log_never_records_a_token_in_a_url(tmp_path: Path) -> None:
    """A token pasted into a URL (a sign-in link, a query parameter) is redacted in the access
    log; the request line is still logged."""
    seeded = seeded_log(tmp_path)
    db, acme = seeded.db, seeded.acme
    with serve_process(tmp_path, db) as srv:
        for path in (
            f"/login?token={acme}",
            f"/sagas?limit=5&api_key=sk_live_{acme[4:20]}",
            f"/sagas?access_token={acme}&limit=5",
            f"/nope/{acme}",
        ):
            httpx.get(f"{srv.url}{path}", timeout=10)
        printed = srv.stop()
    assert acme not in printed and acme[4:20] not in printed
    assert '"GET /login?token=[redacted] HTTP/1.1" 400' in printed, printed
    assert '"GET /sagas?limit=5&api_key=[redacted] HTTP/1.1" 401' in printed
    assert '"GET /sagas?access_token=[redacted]&limit=5 HTTP/1.1" 401' in printed
    assert '"GET /nope/[redacted] HTTP/1.1" 404' in printed
