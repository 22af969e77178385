"""Issue 11 item 2: TOML HTTP tools: 2xx only, no redirects, unknown outcome = in_doubt,
load-time validation naming file, tool and key, credentials only from the environment."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amends
from amends import StepState


class Vendor:
    def __init__(self) -> None:
        self.value = "lead"
        self.writes: list[Any] = []
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def vendor() -> Iterator[tuple[str, Vendor]]:
    v = Vendor()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, code: int, body: Any, **headers: str) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            for k, val in headers.items():
                self.send_header(k, val)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            v.headers.append(dict(self.headers))
            if self.path == "/read":
                return self.reply(200, v.value)
            if self.path == "/set":
                v.writes.append(args["value"])
                v.value = args["value"]
                return self.reply(200, {"value": v.value})
            if self.path == "/set-then-hang-up":  # acts, then the connection drops
                v.writes.append(args["value"])
                v.value = args["value"]
                self.close_connection = True
                self.connection.shutdown(2)
                return None
            if self.path == "/gateway-timeout":  # the upstream may have acted
                v.writes.append(args["value"])
                return self.reply(504, {"error": "upstream timed out"})
            if self.path.startswith("/moved"):  # "/moved-308": a redirect that asks again
                code = int(self.path.rsplit("-", 1)[1]) if self.path[-1].isdigit() else 302
                return self.reply(code, {}, Location="/set")
            if self.path == "/slow":
                time.sleep(2.0)
                return self.reply(200, {})
            return self.reply(404, {"error": "no such path"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", v
    server.shutdown()
    server.server_close()


def catalog_file(
    tmp_path: Path, base: str, forward: str, inverse: str = "/set", extra: str = ""
) -> Path:
    timeout = 0.5 if forward == "/slow" else 10
    path = tmp_path / "tools.toml"
    path.write_text(f'''
[[tool]]
name = "crm.read"
reversibility = "read_only"
http = {{ url = "{base}/read" }}

[[tool]]
name = "crm.set_inverse"
reversibility = "irreversible"
http = {{ url = "{base}{inverse}" }}

[[tool]]
name = "crm.set"
reversibility = "reversible"
timeout = {timeout}
http = {{ url = "{base}{forward}" {extra} }}

[tool.before]
tool = "crm.read"

[tool.inverse]
tool = "crm.set_inverse"
args = {{ value = "{{before}}" }}

[tool.expect]
probe = "crm.read"
equals = "{{args.value}}"
''')
    return path


async def _run(catalog: amends.Catalog, value: str = "won") -> tuple[amends.Engine, str, str]:
    engine = amends.Engine(
        catalog,
        log=amends.SqliteLog(":memory:"),
        retry=amends.RetryPolicy(max_attempts=1, initial_backoff=0.001, max_backoff=0.01),
    )
    async with engine.saga("toml") as saga:
        step = saga.call("crm.set", value=value)
        try:
            await step
        except amends.StepFailedError:
            pass
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    return engine, saga.id, rec.steps[0].state


@pytest.mark.parametrize("code", [307, 308])
async def test_a_redirect_asking_for_the_request_again_is_not_followed_and_the_step_failed(
    tmp_path: Path, vendor: tuple[str, Vendor], code: int
) -> None:
    """A 307 or 308 asks for the same request again at another address: the vendor did not do
    the work at this one, so the step failed (no effect), and the redirect is not followed."""
    base, v = vendor
    engine, saga_id, state = await _run(
        amends.load_toml_catalog(catalog_file(tmp_path, base, f"/moved-{code}"))
    )
    rec = await engine.log.get_saga(saga_id)
    assert rec is not None
    assert state == "failed", rec.steps[0].error
    assert f"HTTP {code} redirect to /set; redirects are not followed" in (rec.steps[0].error or "")
    assert v.writes == []  # the redirect target was never called
    await engine.close()


@pytest.mark.parametrize(("code", "words"), [(301, "Moved Permanently"), (302, "Found")])
async def test_a_write_answered_301_or_302_is_in_doubt_never_refused(
    tmp_path: Path, vendor: tuple[str, Vendor], code: int, words: str
) -> None:
    """Rule 9: servers answer a write they have done with a 302 (POST/redirect/GET) as often as
    with a 303, and a 301 or 302 gives no sign that the vendor refused: a forward call answered
    with one was read as "failed, no effect" and an effect that may stand went unreported. It
    is in doubt, and the redirect is still not followed."""
    base, v = vendor
    engine, saga_id, state = await _run(
        amends.load_toml_catalog(catalog_file(tmp_path, base, f"/moved-{code}"))
    )
    rec = await engine.log.get_saga(saga_id)
    assert rec is not None
    assert state == "in_doubt", rec.steps[0].error
    report = await engine.undo(saga_id)
    step = report.step("s1")
    assert step.state is StepState.IN_DOUBT
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert (
        f"HTTP {code} {words} to /set: the vendor may have done the work (redirects are not "
        "followed, so its result was not read); if the address moved, point http.url at the "
        "final URL"
    ) in step.detail
    assert v.writes == []  # the redirect target was never called
    await engine.close()


async def test_an_inverse_answered_with_a_redirect_is_never_reported_reverted(
    tmp_path: Path, vendor: tuple[str, Vendor]
) -> None:
    base, v = vendor
    cat = amends.load_toml_catalog(catalog_file(tmp_path, base, "/set", inverse="/moved-inverse"))
    engine, saga_id, state = await _run(cat)
    assert state == "done" and v.value == "won"
    report = await engine.undo(saga_id)
    assert report.step("s1").state is StepState.FAILED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert "redirects are not followed" in report.step("s1").detail
    assert v.value == "won" and v.writes == ["won"]
    await engine.close()


@pytest.mark.parametrize("path", ["/set-then-hang-up", "/slow", "/gateway-timeout"])
async def test_an_ambiguous_outcome_leaves_the_forward_step_in_doubt(
    tmp_path: Path, vendor: tuple[str, Vendor], path: str
) -> None:
    """Connection lost after sending, or no answer within the timeout: the vendor may have
    acted (rule 9), so the step is in_doubt and undo lists it as a manual action."""
    base, _v = vendor
    engine, saga_id, state = await _run(
        amends.load_toml_catalog(catalog_file(tmp_path, base, path))
    )
    assert state == "in_doubt"
    report = await engine.undo(saga_id)
    assert report.step("s1").state is StepState.IN_DOUBT
    assert report.manual_actions
    await engine.close()


async def test_credentials_come_from_the_environment_and_never_reach_the_log(
    tmp_path: Path, vendor: tuple[str, Vendor], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, v = vendor
    monkeypatch.setenv("CRM_TOKEN_T11", "s3cr3t-value")
    extra = ', headers = { Authorization = "Bearer ${env:CRM_TOKEN_T11}" }'
    cat = amends.load_toml_catalog(catalog_file(tmp_path, base, "/set", extra=extra))
    engine, saga_id, state = await _run(cat)
    assert state == "done"
    assert v.headers[-1]["Authorization"] == "Bearer s3cr3t-value"
    rec = await engine.log.get_saga(saga_id)
    events = await engine.log.events(saga_id)
    assert "s3cr3t" not in repr(rec) + repr(events)
    await engine.close()


BASE = "[[tool]]\nname = 'a.b'\nreversibility = 'irreversible'\n"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            "http = { url = 'http://x/', method = 'TRACE' }",
            "http.method is 'TRACE'; use one of GET",
        ),
        ('http = { url = "http://x/", method = "PO\\r\\nST" }', "http.method is 'PO\\r\\nST'"),
        ("timeout = '10'\nhttp = { url = 'http://x/' }", "timeout must be a number of seconds"),
        (
            "timeout = -1\nhttp = { url = 'http://x/' }",
            "timeout must be more than 0 and at most 600",
        ),
        ("timeout = nan\nhttp = { url = 'http://x/' }", "at most 600 seconds, got nan"),
        ("timeout = 1e9\nhttp = { url = 'http://x/' }", "at most 600 seconds, got 1000000000.0"),
        ("timeout = true\nhttp = { url = 'http://x/' }", "timeout must be a number of seconds"),
        (
            'http = { url = "http://x/a\\r\\nX-Evil: 1" }',
            "contains whitespace or control characters",
        ),
        ("http = { url = 'http://{args.host}/x' }", "has a template in its host"),
        ("http = { url = 'ftp://x/' }", "must be an absolute http:// or https:// URL with a host"),
        ("http = { url = 'http://u:pw@x/' }", "carries credentials; send them in a header"),
        ("http = { url = 'http://x/{result.id}' }", "http.url template '{result.id}' must start"),
        (
            'http = { url = "http://x/", headers = { "X-Note" = "a\\r\\nX-Evil: 1" } }',
            "http.headers.X-Note contains control characters",
        ),
        (
            'http = { url = "http://x/", headers = { "Bad Name" = "v" } }',
            "http.headers name 'Bad Name' is not a valid header name",
        ),
        (
            "http = { url = 'http://x/', headers = { Authorization = 'Bearer abc' } }",
            "http.headers.Authorization holds a literal credential; read it from the environment",
        ),
        (
            "http = { url = 'http://x/', headers = { X-Api-Key = '${env:NOPE_T11_UNSET}' } }",
            "environment variable 'NOPE_T11_UNSET' is not set; export NOPE_T11_UNSET=...",
        ),
        (
            "http = { url = 'http://x/', headers = { X-Api-Key = '${env:1BAD}' } }",
            "${env:1BAD} is not a valid variable name",
        ),
        (
            "http = { url = 'http://x/' }\n[tool.inverse]\ntool = 'a.b'\n"
            "args = { key = '${env:HOME}' }",
            "${env:...} is allowed only in http.url and http.headers",
        ),
    ],
)
def test_bad_http_tables_are_refused_at_load_naming_file_tool_and_key(
    tmp_path: Path, body: str, fragment: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE + body + "\n")
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path, environ={"HOME": "/root"})
    message = str(exc.value)
    assert fragment in message
    assert f"{path}: tool 'a.b'" in message


def test_url_templates_fill_the_path_percent_encoded(tmp_path: Path) -> None:
    from amends.contract_file.templates import UrlTemplate

    url = UrlTemplate.parse("http://x/records/{args.id}?f={args.f}", {}, "t")
    assert url.fill({"id": "../admin", "f": "a b"}, "t") == "http://x/records/..%2Fadmin?f=a%20b"


async def test_contract_keys_match_the_python_decorator(
    tmp_path: Path, vendor: tuple[str, Vendor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """idempotent, no_drift_check, landed, inverse deadline and sensitive arguments."""
    base, v = vendor
    path = tmp_path / "contract.toml"
    path.write_text(f'''
[[tool]]
name = "crm.read"
reversibility = "read_only"
http = {{ url = "{base}/read" }}

[[tool]]
name = "crm.set"
reversibility = "reversible"
idempotent = true
no_drift_check = "a draft only this saga can see"
sensitive = ["api_key"]
secret_env = {{ api_key = "CRM_KEY_T11" }}
http = {{ url = "{base}/set" }}

[tool.inverse]
tool = "crm.set"
args = {{ value = "lead", api_key = "{{args.api_key}}" }}
deadline = 4102444800

[tool.landed]
probe = "crm.read"
equals = "lead"
''')
    cat = amends.load_toml_catalog(path)
    spec = cat.get("crm.set")
    assert (spec.idempotent, spec.sensitive) == (True, ("api_key",))
    engine = amends.Engine(cat, log=amends.SqliteLog(":memory:"))
    async with engine.saga("contract") as saga:
        await saga.call("crm.set", value="won", api_key="k-very-secret-1")
    rec = await engine.log.get_saga(saga.id)
    events = await engine.log.events(saga.id)
    assert rec is not None
    step = rec.steps[0]
    assert "k-very-secret-1" not in repr(rec) + repr(events)
    assert step.violation is None  # no_drift_check stands in for the expectation
    monkeypatch.setenv("CRM_KEY_T11", "k-very-secret-1")
    report = await engine.undo(saga.id)
    assert report.step("s1").state is StepState.REVERTED
    assert "a draft only this saga can see" in repr(report.to_dict())
    assert v.value == "lead"
    await engine.close()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("idempotent = 'yes'", "idempotent must be true or false"),
        ("no_drift_check = ''", "no_drift_check must say why no expectation is needed"),
        ("sensitive = 'api_key'", "sensitive must be a list of argument names"),
        (
            "sensitive = ['a']\nsecret_env = { b = 'B' }",
            "secret_env names b, which sensitive does not list",
        ),
        (
            "no_drift_check = 'why'\n[tool.expect]\nprobe = 'a.b'\nequals = 1",
            "has both [tool.expect] and no_drift_check",
        ),
    ],
)
def test_bad_contract_keys_are_refused_at_load(tmp_path: Path, body: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE + "http = { url = 'http://x/' }\n" + body + "\n")
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path)
    assert fragment in str(exc.value)
    assert f"{path}: tool 'a.b'" in str(exc.value)


def test_contracts_must_name_declared_tools_and_probes_must_be_read_only(tmp_path: Path) -> None:
    path = tmp_path / "refs.toml"
    # a reversible tool: an irreversible one may declare neither an inverse nor an expectation
    base = BASE.replace("'irreversible'", "'reversible'") + "http = { url = 'http://x/' }\n"
    path.write_text(
        base + "[tool.inverse]\ntool = 'a.b'\n[tool.expect]\nprobe = 'a.b'\nequals = 1\n"
    )
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path)
    assert f"{path}: tool 'a.b': expect.probe 'a.b' must be a read_only tool" in str(exc.value)
    path.write_text(base + "no_drift_check = 'a draft'\n[tool.inverse]\ntool = 'nope.x'\n")
    with pytest.raises(amends.ConfigError) as exc:
        amends.load_toml_catalog(path)
    assert "inverse.tool is 'nope.x', which is not a tool of this catalog (known: a.b)" in str(
        exc.value
    )


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value).lower() if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["{args.x}", "{result.id}", "${env:HOME}", "${env:NOPE}", "http://x/{args.a}", "GET"]
    )
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["url", "method", "headers", "tool", "args", "probe", "equals", "what"]
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)
_entries = st.dictionaries(
    st.sampled_from(
        ["reversibility", "http", "timeout", "before", "inverse", "expect", "landed", "residue",
         "acknowledge", "resources", "idempotent", "no_drift_check", "sensitive", "secret_env",
         "description", "bogus"]
    ),
    _values,
    max_size=6,
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=st.lists(_entries, min_size=1, max_size=3), valid_http=st.booleans())
def test_any_toml_catalog_loads_or_gets_a_config_error_never_a_traceback(
    tmp_path: Path, entries: list[dict[str, Any]], valid_http: bool
) -> None:
    lines = []
    loaded = 0
    for i, entry in enumerate(entries):
        if valid_http:
            entry["http"] = {"url": "http://127.0.0.1:9/x"}
        lines.append(f'[[tool]]\nname = "t.n{i}"')
        lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    path = tmp_path / "fuzz.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    try:
        catalog = amends.load_toml_catalog(path, environ={"HOME": "/root"})
    except amends.AmendsError as exc:
        assert str(path) in str(exc)
    else:
        loaded += len(catalog)
        assert loaded == len(entries)
