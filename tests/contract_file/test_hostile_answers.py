"""What an agent's arguments or a vendor's answer hold cannot make a contract-file tool lie or
leak, against a loopback vendor and the real engine with a SQLite log file:

- a secret a vendor echoes back as a *key* of its answer (``{"sk_live_...": "invalid"}``)
  never reaches the log (rule 11), whether it is a credential read from the environment or a
  ``sensitive`` argument, through the HTTP transport or any other (the engine's own scrub);
- a null, a list or a table never fills a URL (it was sent as ``/items/None``, another
  record), and a boolean is written as JSON writes it (``true``, not ``True``);
- a capture path that an argument fills with a non-ASCII digit (``"²"``) or 5,000 digits is a
  missing key: the write is refused, not left ``in_doubt`` (it raised ``ValueError`` from
  ``int()`` before the write was sent, rule 9)."""

from __future__ import annotations

import sqlite3
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

import amends
from amends import StepState
from amends.contract_file import TransportRequest, TransportResult
from contract_setup import Vendor, file_catalog, http_vendor, reply

KEY = "sk_live_7Qw2Xe9Rt4Yu"
TOKEN = "tok_3Fh8Jk1Lm6Np"
ROWS = [{"v": 1}, {"v": 2}]


def _dump(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def _echo(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    with vendor.lock:
        body = vendor.bodies[-1] or {}
    if req.path.startswith("/rows"):
        return reply(req, 200, {"rows": ROWS})
    if req.path.startswith("/hooks"):  # echoes the key and the header, as keys
        auth = req.headers.get("Authorization") or ""
        return reply(req, 200, {"id": "h1", "invalid": {body.get("api_key", ""): 1, auth: 2}})
    return reply(req, 200, {"path": req.path})


def _catalog(tmp_path: Path, base: str) -> amends.Catalog:
    path = tmp_path / "vendor.toml"
    path.write_text(f'''
[[tool]]
name = "hooks.create"
reversibility = "irreversible"
sensitive = ["api_key"]
http = {{ url = "{base}/hooks", headers = {{ Authorization = "Bearer ${{env:VENDOR_TOKEN}}" }} }}

[[tool]]
name = "items.get"
reversibility = "read_only"
http = {{ url = "{base}/items/{{args.id}}?full={{args.full|default:false}}", method = "GET" }}

[[tool]]
name = "items.drop"
reversibility = "irreversible"
http = {{ url = "{base}/items/{{args.id}}", method = "DELETE" }}

[[tool]]
name = "rows.list"
reversibility = "read_only"
http = {{ url = "{base}/rows", method = "GET" }}

[[tool]]
name = "items.pick"
reversibility = "reversible"
no_drift_check = "a pick only this saga can see"
http = {{ url = "{base}/items/pick" }}
inverse = {{ tool = "items.drop", args = {{ id = "{{capture.row}}" }} }}
[[tool.capture]]
name = "row"
tool = "rows.list"
path = ["rows", "{{args.row}}", "v"]
''')
    return amends.load_toml_catalog(path, environ={"VENDOR_TOKEN": TOKEN})


async def test_a_secret_a_vendor_echoes_as_a_key_never_reaches_the_log(tmp_path: Path) -> None:
    db = tmp_path / "saga.db"
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(str(db)))
        async with engine.saga("hook") as saga:
            await saga.call("hooks.create", api_key=KEY, url="https://example.test/in")
        report = await engine.undo(saga.id)
        await engine.close()
    assert vendor.bodies[0]["api_key"] == KEY  # the vendor did receive it
    logged = _dump(db)
    assert KEY not in logged and TOKEN not in logged
    assert '"invalid":{"${env:VENDOR_TOKEN}":2,"[redacted:api_key]":1}' in logged.replace(
        "Bearer ", ""
    )
    assert KEY not in report.to_json() and TOKEN not in report.to_json()


async def test_the_engine_scrubs_a_sensitive_value_echoed_as_a_key_by_any_transport(
    tmp_path: Path,
) -> None:
    """No HTTP redactor here (an MCP-style transport): the engine's own scrub does it."""

    async def transport(request: TransportRequest) -> TransportResult:
        echoed = {str(v): "seen" for v in request.args.values()}
        return TransportResult("ok", structured={"id": "h1", "echo": echoed})

    catalog = file_catalog(
        tmp_path / "hooks.toml",
        '[[tool]]\nname = "hooks_create"\nreversibility = "irreversible"\n'
        'sensitive = ["api_key"]\n',
        transport,
    )
    db = tmp_path / "saga.db"
    engine = amends.Engine(catalog, log=amends.SqliteLog(str(db)))
    async with engine.saga("hook") as saga:
        await saga.call("hooks_create", api_key=KEY, name="n1")
    rec = await engine.log.get_saga(saga.id)
    await engine.close()
    assert rec is not None
    assert rec.steps[0].result == {"id": "h1", "echo": {"[redacted:api_key]": "seen", "n1": "seen"}}
    assert KEY not in _dump(db)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            None,
            "http.url field '{args.id}' is null; a URL takes text or a number: pass one, "
            "or give the field a default, e.g. '{args.id|default:...}'; nothing was sent",
        ),
        (
            ["a", "b"],
            "http.url field '{args.id}' is a list (\"['a', 'b']\"); a URL takes text "
            "or a number: pass one (a list can be joined into text with '|join'); nothing was sent",
        ),
        ({"k": 1}, "http.url field '{args.id}' is a dict (\"{'k': 1}\")"),
    ],
)
async def test_a_null_list_or_table_never_fills_a_url(
    tmp_path: Path, value: Any, said: str
) -> None:
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("read") as saga:
            step = saga.call("items.get", id=value)
            with pytest.raises(amends.StepFailedError) as exc:
                await step
        assert exc.value.state == "failed"  # refused: nothing was sent
        rec = await engine.log.get_saga(saga.id)
        await engine.close()
    assert vendor.requests == []
    assert rec is not None and said in (rec.steps[0].error or "")


async def test_numbers_and_booleans_fill_a_url_as_json_writes_them(tmp_path: Path) -> None:
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("read") as saga:
            await saga.call("items.get", id=7, full=True)
            await saga.call("items.get", id=2.5, full=False)
            await saga.call("items.get", id="x y")
        await engine.close()
    assert vendor.paths() == [
        "/items/7?full=true",
        "/items/2.5?full=false",
        "/items/x%20y?full=false",
    ]


@pytest.mark.parametrize("row", ["²", "0" * 5000, "1"], ids=["superscript", "5000-digits", "1"])
async def test_a_capture_path_an_argument_fills_is_a_key_never_an_error_in_doubt(
    tmp_path: Path, row: str
) -> None:
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("pick") as saga:
            step = saga.call("items.pick", row=row)
            if row == "1":
                await step
            else:
                with pytest.raises(amends.StepFailedError) as exc:
                    await step
                assert exc.value.state == "failed", str(exc.value)
        report = await engine.undo(saga.id)
        await engine.close()
    if row == "1":  # a real index: the second row's value, read before the write
        assert vendor.paths() == ["/rows", "/items/pick", "/items/2"]
        assert report.step("s1").state is StepState.REVERTED
        return
    assert vendor.paths() == ["/rows"]  # the write was never sent
    step_report = report.step("s1")
    assert step_report.state is StepState.NOT_NEEDED
    assert report.status == amends.Outcome.FULLY_REVERSED
    key = repr(row) if len(row) < 80 else "key of 5,000 characters"
    said = f"contract of 'items.pick' capture 'row': no {key} in {str(ROWS)!r}"
    assert said in step_report.detail
    assert "the write was not sent" in step_report.detail


def _prefixes(secret: str, text: str) -> list[str]:
    """Every prefix of ``secret`` (6 characters or more) found in ``text``."""
    return [secret[:n] for n in range(6, len(secret) + 1) if secret[:n] in text]


@pytest.mark.parametrize("pad", [270, 280])
async def test_a_secret_a_vendor_echoes_across_the_cut_of_its_error_is_not_half_logged(
    tmp_path: Path, pad: int
) -> None:
    """The vendor's error text was cut to 300 characters *before* redaction: a key echoed
    across the cut left its first characters in the log, where no redaction knew them."""

    def refuse(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        with vendor.lock:
            body = vendor.bodies[-1] or {}
        reply(req, 400, "invalid: " + "x" * pad + f" key {body['api_key']} refused")

    db = tmp_path / "saga.db"
    with http_vendor(refuse) as (base, _vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(str(db)))
        async with engine.saga("hook") as saga:
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("hooks.create", api_key=KEY)
        report = await engine.undo(saga.id)
        await engine.close()
    assert _prefixes(KEY, _dump(db)) == []
    assert _prefixes(KEY, str(exc.value)) == []
    assert _prefixes(KEY, report.to_json()) == []
    assert "HTTP 400: invalid: xxx" in report.step("s1").detail


async def test_a_template_error_never_quotes_half_of_a_secret_the_answer_holds(
    tmp_path: Path,
) -> None:
    """An inverse template that cannot be filled names what it found; a long value is named by
    its shape, never cut, so a secret inside it is never half quoted (any transport)."""

    async def transport(request: TransportRequest) -> TransportResult:
        note = "x" * 185 + str(request.args.get("api_key")) + "y" * 100
        return TransportResult("ok", structured={"note": note, "meta": {"k": "v"}})

    catalog = file_catalog(
        tmp_path / "notes.toml",
        '[[tool]]\nname = "notes_add"\nreversibility = "reversible"\nsensitive = ["api_key"]\n'
        'no_drift_check = "a private note"\n'
        '[tool.inverse]\ntool = "notes_delete"\nargs = { id = "{result.note.id}" }\n\n'
        '[[tool]]\nname = "notes_delete"\nreversibility = "irreversible"\n',
        transport,
    )
    db = tmp_path / "saga.db"
    engine = amends.Engine(catalog, log=amends.SqliteLog(str(db)))
    async with engine.saga("note") as saga:
        await saga.call("notes_add", api_key=KEY, title="t")
    report = await engine.undo(saga.id)
    await engine.close()
    assert _prefixes(KEY, _dump(db)) == []
    assert _prefixes(KEY, report.to_json()) == []
    step = report.step("s1")
    assert step.state is StepState.ACKNOWLEDGED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert (
        "notes_add ran, but its contract could not be applied (contract of 'notes_add' "
        "inverse: template '{result.note.id}' found no 'id' in a text of 305 characters); "
        "its effect stands and undo cannot take it back"
    ) in report.to_json()


async def test_a_null_the_vendor_answers_never_addresses_the_inverse(tmp_path: Path) -> None:
    """The vendor changed the shape of its answer (``"id": null``): the inverse's
    ``"item-{result.id}"`` would have addressed ``item-None`` at undo. The contract cannot be
    applied: nothing is sent at undo, the effect stands and the report says why."""

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        reply(req, 200, {"id": None, "created": True})

    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, vendor):
        path.write_text(f'''
[[tool]]
name = "items.add"
reversibility = "reversible"
no_drift_check = "an item only this saga can see"
http = {{ url = "{base}/items" }}
inverse = {{ tool = "items.drop", args = {{ key = "item-{{result.id}}" }} }}

[[tool]]
name = "items.drop"
reversibility = "irreversible"
http = {{ url = "{base}/items/{{args.key}}", method = "DELETE" }}
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            await saga.call("items.add", name="x")
        report = await engine.undo(saga.id)
        await engine.close()
    assert [(m, p) for m, p, _h in vendor.requests] == [("POST", "/items")]
    assert report.step("s1").state is StepState.ACKNOWLEDGED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert (
        "items.add ran, but its contract could not be applied (contract of 'items.add' "
        "inverse: template 'item-{result.id}' found null at '{result.id}', which would be "
        "written as 'None'; give the field a default if one is right, e.g. "
        "'{result.id|default:...}'); its effect stands and undo cannot take it back"
    ) in report.manual_actions[0].what


async def test_a_write_answered_303_see_other_is_in_doubt_never_refused(tmp_path: Path) -> None:
    """POST, then "303 See Other" to the result is how a server answers a write it has done:
    it was read as a refusal ("failed", no effect) and the item stood unreported (rule 9)."""
    created: list[Any] = []

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        with vendor.lock:
            created.append(vendor.bodies[-1])
        reply(req, 303, {}, Location=f"/items/i{len(created)}")

    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, _vendor):
        path.write_text(f'''
[[tool]]
name = "items.add"
reversibility = "irreversible"
http = {{ url = "{base}/items" }}
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("items.add", name="x")
        report = await engine.undo(saga.id)
        await engine.close()
    assert created == [{"name": "x"}]
    assert exc.value.state == "in_doubt"
    step = report.step("s1")
    assert step.state is StepState.IN_DOUBT
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert "HTTP 303 See Other to /items/i1: the vendor may have done the work" in step.detail


async def test_a_request_httpx_cannot_build_is_refused_unsent_not_in_doubt(
    tmp_path: Path,
) -> None:
    """An argument of 70,000 characters makes a URL httpx refuses to build (InvalidURL): the
    step was `in_doubt` ("whether it took effect is unknown") though nothing was sent."""
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("read") as saga:
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("items.get", id="a" * 70_000)
        await engine.close()
    assert vendor.requests == []
    assert exc.value.state == "failed"
    assert "the request could not be made (URL too long); nothing was sent" in str(exc.value)


def test_a_header_that_is_not_ascii_is_refused_when_the_file_loads(tmp_path: Path) -> None:
    """No HTTP client sends it: every call failed unsent, reported `in_doubt`."""
    path = tmp_path / "vendor.toml"
    path.write_text(
        '[[tool]]\nname = "items.get"\nreversibility = "read_only"\n'
        'http = { url = "http://127.0.0.1:9/items", headers = { X-Tenant = "${env:TENANT}" } }\n'
    )
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path, environ={"TENANT": "müller"})
    assert str(exc.value) == (
        f"{path}: tool 'items.get': http.headers.X-Tenant is not ASCII once the environment is "
        "read; header values are ASCII text: percent-encode or drop the other characters"
    )
    amends.load_toml_catalog(path, environ={"TENANT": "muller"})


def _refusing_world(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    """Creates items; its DELETE answers 200 with an error body (a Slack-style API)."""
    if req.command == "DELETE":
        return reply(req, 200, {"ok": False, "error": "not_allowed"})
    with vendor.lock:
        body = vendor.bodies[-1] or {}
    if body.get("name") == "refuse-me":
        return reply(req, 200, {"ok": False, "error": "name_taken"})
    return reply(req, 200, {"ok": True, "id": "i1"})


ITEMS = """
[errors]
refused_answer = '"ok": false'

[[tool]]
name = "items_add"
reversibility = "reversible"
no_drift_check = "an item only this saga can see"
inverse = { tool = "items_drop", args = { id = "{result.id}" } }
HTTP_ADD

[[tool]]
name = "items_drop"
reversibility = "irreversible"
HTTP_DROP
"""


async def test_an_inverse_answered_200_with_an_error_body_is_never_reported_reverted(
    tmp_path: Path,
) -> None:
    """Without a way to read it, 200 {"ok": false} from the inverse was a success: the step
    'reverted', the saga 'fully_reversed', the item still there (rule 8). ``refused_answer``
    says which ok answers are refusals, forward and inverse alike."""
    path = tmp_path / "items.toml"
    with http_vendor(_refusing_world) as (base, vendor):
        path.write_text(
            ITEMS.replace("HTTP_ADD", f'http = {{ url = "{base}/items" }}').replace(
                "HTTP_DROP", f'http = {{ url = "{base}/items/{{args.id}}", method = "DELETE" }}'
            )
        )
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            await saga.call("items_add", name="x")
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("items_add", name="refuse-me")
        report = await engine.undo(saga.id)
        await engine.close()
    assert exc.value.state == "failed"  # the vendor refused: no effect
    assert [(m, p) for m, p, _h in vendor.requests] == [
        ("POST", "/items"),
        ("POST", "/items"),
        ("DELETE", "/items/i1"),
    ]
    assert report.step("s1").state is StepState.FAILED
    assert report.step("s2").state is StepState.NOT_NEEDED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert report.step("s1").detail == (
        'items_drop failed permanently: items_drop refused: it answered: {"error": '
        '"not_allowed", "ok": false}'
    )


async def test_refused_answer_reads_an_mcp_text_answer_in_the_same_words(tmp_path: Path) -> None:
    """The same contract through an MCP-style transport (a server answering its refusal as a
    result, not ``isError``): the same states and the same words."""

    async def transport(request: TransportRequest) -> TransportResult:
        if request.tool == "items_drop":
            return TransportResult("ok", structured={"ok": False, "error": "not_allowed"})
        if request.args.get("name") == "refuse-me":
            return TransportResult("ok", structured={"ok": False, "error": "name_taken"})
        return TransportResult("ok", structured={"ok": True, "id": "i1"})

    text = ITEMS.replace("HTTP_ADD", "").replace("HTTP_DROP", "")
    engine = amends.Engine(
        file_catalog(tmp_path / "items.toml", text, transport), log=amends.SqliteLog(":memory:")
    )
    async with engine.saga("add") as saga:
        await saga.call("items_add", name="x")
        with pytest.raises(amends.StepFailedError) as exc:
            await saga.call("items_add", name="refuse-me")
    report = await engine.undo(saga.id)
    await engine.close()
    assert exc.value.state == "failed"
    assert [report.step(s).state for s in ("s1", "s2")] == [StepState.FAILED, StepState.NOT_NEEDED]
    assert report.step("s1").detail == (
        'items_drop failed permanently: items_drop refused: it answered: {"error": '
        '"not_allowed", "ok": false}'
    )


@pytest.mark.parametrize(
    ("code", "headers", "state"),
    [
        (200, {"Content-Disposition": 'attachment; filename="résumé.pdf"'}, "done"),
        (429, {"Retry-After": "²"}, "failed"),
        (429, {"Retry-After": "9" * 400}, "failed"),
    ],
    ids=["latin-1-header-on-a-success", "superscript-retry-after", "huge-retry-after"],
)
async def test_an_answers_odd_headers_never_turn_it_into_an_unknown_outcome(
    tmp_path: Path, code: int, headers: dict[str, str], state: str
) -> None:
    """A header value that is not ASCII made httpx raise UnicodeEncodeError while amends
    re-built the answer, and ``Retry-After: ²`` passed ``isdigit`` and failed ``float``: a
    success or a refusal was reported ``in_doubt`` (rule 9)."""

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        reply(req, code, {"id": "i1"}, **headers)

    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, vendor):
        path.write_text(f'[[tool]]\nname = "items.add"\nhttp = {{ url = "{base}/items" }}\n')
        engine = amends.Engine(
            amends.load_toml_catalog(path),
            log=amends.SqliteLog(":memory:"),
            retry=amends.RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02),
        )
        async with engine.saga("add") as saga:
            step = saga.call("items.add", name="x")
            if state == "done":
                assert await step == {"id": "i1"}
            else:
                with pytest.raises(amends.StepFailedError) as exc:
                    await step
                assert exc.value.state == state
                assert "HTTP 429" in str(exc.value)
        rec = await engine.log.get_saga(saga.id)
        await engine.close()
    assert rec is not None and rec.steps[0].state == state
    assert len(vendor.requests) == (1 if state == "done" else 2)


async def test_a_capture_answered_200_with_an_error_body_refuses_the_write(
    tmp_path: Path,
) -> None:
    """A capture reads the old value before the write; its tool answering 200 {"ok": false}
    was captured *as* the old value, and undo would have written that back. Its contract's
    ``refused_answer`` reads the capture too: the write is not sent."""

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        if req.command == "GET":
            return reply(req, 200, {"ok": False, "error": "rate_limited"})
        return reply(req, 200, {"ok": True})

    path = tmp_path / "topics.toml"
    with http_vendor(answer) as (base, vendor):
        path.write_text(f'''
[[tool]]
name = "topic_get"
reversibility = "read_only"
errors = {{ refused_answer = '"ok": false' }}
http = {{ url = "{base}/topic", method = "GET" }}

[[tool]]
name = "topic_set"
reversibility = "reversible"
no_drift_check = "a channel only this saga can see"
http = {{ url = "{base}/topic" }}
inverse = {{ tool = "topic_set", args = {{ topic = "{{capture.old}}" }} }}
[[tool.capture]]
name = "old"
tool = "topic_get"
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("topic") as saga:
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("topic_set", topic="new")
        await engine.close()
    assert [m for m, _p, _h in vendor.requests] == ["GET"]  # the write was never sent
    assert exc.value.state == "failed"
    assert (
        "topic_set: reading the state before the write (topic_get) failed, so the write was not "
        'sent: it answered: {"error": "rate_limited", "ok": false}'
    ) in str(exc.value)


async def test_a_capture_error_its_contract_calls_transient_is_retried(tmp_path: Path) -> None:
    """The capture's answer was judged by the transport alone (an MCP error: unknown), so
    ``[errors] transient`` never applied to it and the write failed at once."""
    answers = [TransportResult("unknown", error_text="rate limited, try again")]

    async def transport(request: TransportRequest) -> TransportResult:
        if request.tool == "topic_get":
            return answers.pop() if answers else TransportResult("ok", structured={"t": "old"})
        return TransportResult("ok", structured={"t": request.args["topic"]})

    catalog = file_catalog(
        tmp_path / "topics.toml",
        '[errors]\ntransient = "rate limited"\n\n'
        '[[tool]]\nname = "topic_get"\nreversibility = "read_only"\n\n'
        '[[tool]]\nname = "topic_set"\nreversibility = "reversible"\n'
        'no_drift_check = "a channel only this saga can see"\n'
        'inverse = { tool = "topic_set", args = { topic = "{capture.old}" } }\n'
        '[[tool.capture]]\nname = "old"\ntool = "topic_get"\npath = "t"\n',
        transport,
    )
    engine = amends.Engine(
        catalog,
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02),
    )
    async with engine.saga("topic") as saga:
        await saga.call("topic_set", topic="new")
    rec = await engine.log.get_saga(saga.id)
    await engine.close()
    assert rec is not None and rec.steps[0].state == "done"
    assert rec.steps[0].inverse is not None
    assert (rec.steps[0].inverse["tool"], rec.steps[0].inverse["args"]) == (
        "topic_set",
        {"topic": "old"},
    )


async def test_a_value_a_filter_cannot_format_never_leaves_a_done_call_in_doubt(
    tmp_path: Path,
) -> None:
    """``{args.cents|money}`` over 10**400 cents raised OverflowError (not a contract error):
    the charge, which was made, was reported in doubt, and the refund (also made) failed."""
    made: list[tuple[str, Any]] = []

    async def transport(request: TransportRequest) -> TransportResult:
        made.append((request.tool, request.args.get("cents")))
        if request.tool == "get_charge":
            return TransportResult("ok", structured={"refunded": 0})
        return TransportResult("ok", structured={"id": "ch_1", "cents": request.args["cents"]})

    catalog = file_catalog(
        tmp_path / "psp.toml",
        '[[tool]]\nname = "get_charge"\nreversibility = "read_only"\n\n'
        '[[tool]]\nname = "refund"\nreversibility = "irreversible"\n'
        'compensate_residue = { what = "Refund of {args.cents|money} is pending" }\n\n'
        '[[tool]]\nname = "charge"\nreversibility = "compensable"\n'
        'inverse = { tool = "refund", args = { charge_id = "{result.id}", '
        'cents = "{args.cents}" } }\n'
        'expect = { probe = "get_charge", args = { id = "{result.id}" }, path = "refunded", '
        "equals = 0 }\n"
        'residue = { what = "Refund of {args.cents|money} to {args.customer}" }\n\n'
        '[[tool]]\nname = "charge_plain"\nreversibility = "compensable"\n'
        'inverse = { tool = "refund", args = { charge_id = "{result.id}", '
        'cents = "{args.cents}" } }\n'
        'expect = { probe = "get_charge", args = { id = "{result.id}" }, path = "refunded", '
        "equals = 0 }\n",
        transport,
    )
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("charge") as saga:
        await saga.call("charge", customer="c1", cents=10**400)
        await saga.call("charge_plain", customer="c1", cents=10**400)
    report = await engine.undo(saga.id)
    await engine.close()
    assert [t for t, _c in made] == ["charge", "charge_plain", "get_charge", "refund"]
    s1, s2 = report.step("s1"), report.step("s2")
    assert s1.state is StepState.ACKNOWLEDGED  # its contract could not be applied: it stands
    assert (
        "charge ran, but its contract could not be applied (contract of 'charge' residue: "
        "filter 'money' in '{args.cents|money}' cannot format a number of 401 digits: "
        "OverflowError); its effect stands and undo cannot take it back"
    ) in report.manual_actions[0].what
    assert s2.state is StepState.COMPENSATED  # the refund was made: never 'failed'
    assert [r.what for r in report.residue] == [
        "refund ran, but what it leaves behind could not be described (contract of 'refund' "
        "compensate_residue: filter 'money' in '{args.cents|money}' cannot format a number of "
        "401 digits: OverflowError)"
    ]


async def test_an_argument_holding_a_lone_surrogate_is_refused_unsent_never_a_raw_error(
    tmp_path: Path,
) -> None:
    """``"\\ud800"`` is a Python string no UTF-8 can carry. As a sensitive argument it made the
    redaction's quote() raise UnicodeEncodeError out of ``saga.call`` (a raw exception, the
    step left in doubt "the process stopped"); in a URL it raised the same inside the
    transport. Both are now refused before anything is sent."""
    with http_vendor(_echo) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("odd") as saga:
            with pytest.raises(amends.StepFailedError) as hook:
                await saga.call("hooks.create", api_key="sk_\ud800_7Qw2Xe9R", url="u")
            with pytest.raises(amends.StepFailedError) as get:
                await saga.call("items.get", id="i\ud800x")
        await engine.close()
    assert vendor.requests == []
    assert hook.value.state == "failed" and get.value.state == "failed"
    assert "nothing was sent" in str(hook.value)
    assert "http.url field '{args.id}' is text that is not valid Unicode" in str(get.value)


async def test_a_python_tool_with_a_lone_surrogate_secret_runs_and_logs_it_redacted() -> None:
    """The same argument through a Python tool: the engine's own redaction no longer raises."""
    catalog = amends.Catalog()

    @catalog.tool("vault.store", sensitive=["api_key"])
    async def store(call: amends.Call, api_key: str) -> dict[str, Any]:
        return {"stored": True, "echo": api_key}

    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("odd") as saga:
        assert await saga.call("vault.store", api_key="sk_\ud800_7Qw2Xe9R") == {
            "stored": True,
            "echo": "sk_\ud800_7Qw2Xe9R",
        }
    rec = await engine.log.get_saga(saga.id)
    await engine.close()
    assert rec is not None and rec.steps[0].state == "done"
    assert rec.steps[0].args == {"api_key": "[redacted:api_key]"}
    assert rec.steps[0].result == {"stored": True, "echo": "[redacted:api_key]"}


async def test_a_vendor_trickling_its_answer_is_bounded_by_the_default_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a declared ``timeout``, httpx's default bounded each read, not the call: a
    vendor sending one byte every 0.25 s held the step for as long as it liked. The default
    now bounds the whole call (here patched from 30 s to 1 s)."""
    import time

    import amends._toml_catalog as toml_catalog

    monkeypatch.setattr(toml_catalog, "DEFAULT_TIMEOUT", 1.0)

    def trickle(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        body = b'{"id": "i1"}'
        req.send_response(200)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        try:
            for byte in body:
                req.wfile.write(bytes([byte]))
                req.wfile.flush()
                time.sleep(0.25)
        except OSError:
            pass  # the client gave up

    path = tmp_path / "items.toml"
    with http_vendor(trickle) as (base, _vendor):
        path.write_text(f'[[tool]]\nname = "items.add"\nhttp = {{ url = "{base}/items" }}\n')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        started = time.monotonic()
        async with engine.saga("add") as saga:
            with pytest.raises(amends.StepFailedError) as exc:
                await saga.call("items.add", name="x")
        took = time.monotonic() - started
        await engine.close()
    assert exc.value.state == "in_doubt"  # the vendor may have acted (rule 9)
    assert "items.add timed out after 1 s" in str(exc.value)
    assert took < 2.5


async def test_a_contract_that_cannot_be_applied_names_the_file_and_key_not_python(
    tmp_path: Path,
) -> None:
    """The violation of a contract-file tool whose inverse could not be filled in told its
    author to "call call.inverse(...)": a TOML author fixes the file. It names the file, the
    tool and the key, and whoever maintains that file is who can act."""

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        reply(req, 200, {"created": True})  # no id: the inverse cannot be filled in

    path = tmp_path / "items.toml"
    with http_vendor(answer) as (base, _vendor):
        path.write_text(f'''
[[tool]]
name = "items.add"
reversibility = "reversible"
no_drift_check = "an item only this saga can see"
http = {{ url = "{base}/items" }}
inverse = {{ tool = "items.drop", args = {{ key = "{{result.id}}" }} }}

[[tool]]
name = "items.drop"
reversibility = "irreversible"
http = {{ url = "{base}/items/{{args.key}}", method = "DELETE" }}
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(":memory:"))
        async with engine.saga("add") as saga:
            await saga.call("items.add", name="x")
        report = await engine.undo(saga.id)
        await engine.close()
    s1 = report.step("s1")
    assert s1.state is StepState.ACKNOWLEDGED
    assert s1.violation == (
        f"tool 'items.add' is 'reversible' but recorded no inverse; fix the inverse of tool "
        f"'items.add' in {path} (the manual action says why it could not be filled in) or "
        f'declare it reversibility = "irreversible" there'
    )
    assert "call.inverse" not in report.to_json()
    assert report.manual_actions[0].who == f"whoever maintains {path}"
