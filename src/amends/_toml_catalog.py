"""Catalogs for tools that live outside Python (HTTP APIs), declared in a TOML file.

The contract is the same as for Python tools: the inverse and the expectation are *argument
templates* filled in when the step runs, from the call's arguments (``args``), the tool's result
(``result``) and, if declared, a read-only probe called just before the tool (``before``). They
are stored as concrete data, never re-evaluated at undo time (rule 2).

```toml
[[tool]]
name = "crm.read_field"
reversibility = "read_only"
http = { url = "https://crm.example/api/records/{args.record_id}/{args.field}", method = "GET" }

[[tool]]
name = "crm.update_field"
reversibility = "reversible"
resources = ["crm:{args.record_id}"]
timeout = 10                                  # seconds, 0 < timeout <= 600

[tool.http]
url = "https://crm.example/api/records/{args.record_id}"
method = "PATCH"
headers = { Authorization = "Bearer ${env:CRM_TOKEN}" }

[tool.before]             # read-only probe called just before the tool
tool = "crm.read_field"
args = { record_id = "{args.record_id}", field = "{args.field}" }

[tool.inverse]
tool = "crm.update_field"
args = { record_id = "{args.record_id}", field = "{args.field}", value = "{before}" }

[tool.expect]
probe = "crm.read_field"
args = { record_id = "{args.record_id}", field = "{args.field}" }
equals = "{args.value}"
```

A template string that is exactly ``"{path}"`` keeps the value's type; other strings are
formatted. Paths are dotted (``{result.charge.id}``).

The rest of the contract, as the Python decorator and :class:`~amends.Call` state it:

- ``idempotent = true``: the vendor honours the ``Idempotency-Key`` header (rule 5; default
  false, so a compensation in flight at a crash is re-observed, never blindly re-sent).
- ``no_drift_check = "a draft only this saga can see"``: why no ``[tool.expect]`` is needed
  (rule 4; without either, a reversible step is never reverted blindly).
- ``[tool.landed]`` (``probe``, ``args``, ``equals``, ``path``): how to see that the inverse
  landed after a crash.
- ``[tool.inverse] deadline = "{result.recall_until}"``: when the undo window closes.
- ``describe = "Set {field} of {record_id} to {value}"``: the step in a sentence, a template
  over the call's arguments (Python ``str.format`` fields), shown on every screen (issue 17).
- ``sensitive = ["api_key"]``: arguments redacted before anything is logged (rule 11);
  ``secret_env = { api_key = "CRM_API_KEY" }`` says where an inverse gets the value again at
  undo time (default ``$API_KEY``).

HTTP tools send the arguments as a JSON object (``POST`` unless ``method`` says otherwise) with
headers ``Idempotency-Key`` and, for compensations with an expectation, ``X-Amends-Precondition``
(JSON). The response's JSON body is the result. Only a 2xx is success. Redirects are never
followed: a 3xx is a failure (the vendor did not do the work at this address). 429 and 5xx are
transient, 412 means the precondition failed (drift), other 4xx are permanent. An ambiguous
outcome -- a timeout or a connection lost after the request was sent, a 504 -- raises
:class:`OutcomeUnknownError`, which is deliberately *not* an amends error: the engine logs the
forward step ``in_doubt`` (rule 9: the vendor may have acted) and an inverse ``failed``, never
``reverted``.

The file is validated when it is loaded, and every message names the file, the tool and the key:
methods (GET, POST, PUT, PATCH, DELETE), timeouts (a number, 0 < t <= 600), URLs (http or https,
a host, no whitespace or control characters, no credentials, templates only in the path and
query -- never in the host, so an agent's arguments cannot choose where a request goes), header
names and values (no CR/LF). Vendor credentials are never written in the file: a header value or
URL says ``${env:NAME}`` and the value is read from the environment at load time; a variable that
is not set is an error at load, and a literal value in a credential header (``Authorization``,
``Cookie``, names containing ``key``, ``token`` or ``secret``) is refused. ``${env:...}`` is
refused in argument templates, which are logged.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from ._calls import invoke
from ._catalog_ref import tag_catalog
from ._contracts import Call, Catalog
from ._errors import (
    AmendsError,
    ConfigError,
    PermanentError,
    PreconditionFailed,
    TransientError,
)
from ._log.records import MAX_RESULT_BYTES

__all__ = [
    "MAX_TIMEOUT",
    "METHODS",
    "OutcomeUnknownError",
    "fill",
    "load_toml_catalog",
    "secret_contract",
]

MAX_TIMEOUT = 600.0
"""Largest ``timeout`` a TOML tool may declare, in seconds."""
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
"""HTTP methods a TOML tool may use."""

_TOOL_KEYS = {
    "name",
    "reversibility",
    "description",
    "resources",
    "http",
    "before",
    "inverse",
    "expect",
    "residue",
    "acknowledge",
    "timeout",
    "idempotent",
    "no_drift_check",
    "landed",
    "sensitive",
    "secret_env",
    "describe",
}
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_ENV = re.compile(r"\$\{env:([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CREDENTIAL_HEADER = re.compile(r"authorization|cookie|key|token|secret|password", re.IGNORECASE)


class OutcomeUnknownError(RuntimeError):
    """An HTTP tool's request may or may not have been acted on (timeout or connection lost
    after sending, 504).

    Deliberately not an :class:`~amends.AmendsError` subclass: for the engine, "any other
    exception" from a forward call means ``in_doubt`` (rule 9), and from an inverse means it
    did not verifiably land (never ``reverted``).
    """


def _lookup(path: str, scope: Mapping[str, Any], where: str) -> Any:
    root, *rest = path.split(".")
    if root not in scope:
        raise ConfigError(
            f"{where}: template '{{{path}}}' uses {root!r}, which is not available "
            f"here (available: {', '.join(sorted(scope))})"
        )
    value = scope[root]
    for key in rest:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise ConfigError(f"{where}: template '{{{path}}}' found no {key!r} in {value!r}")
    return value


def fill(template: Any, scope: Mapping[str, Any], where: str) -> Any:
    """Fill a template (str, list or table) from ``scope``."""
    if isinstance(template, str):
        whole = _FIELD.fullmatch(template)
        if whole:
            return _lookup(whole.group(1), scope, where)
        return _FIELD.sub(lambda m: str(_lookup(m.group(1), scope, where)), template)
    if isinstance(template, list):
        return [fill(t, scope, where) for t in template]
    if isinstance(template, dict):
        return {k: fill(v, scope, where) for k, v in template.items()}
    return template


def _walk_strings(template: Any) -> list[str]:
    if isinstance(template, str):
        return [template]
    if isinstance(template, list):
        return [s for t in template for s in _walk_strings(t)]
    if isinstance(template, dict):
        return [s for t in template.values() for s in _walk_strings(t)]
    return []


def _check_roots(template: Any, allowed: set[str], where: str) -> None:
    for text in _walk_strings(template):
        if _ENV.search(text):
            raise ConfigError(
                f"{where}: {text!r} reads the environment; ${{env:...}} is allowed only in "
                f"http.url and http.headers (arguments are logged, credentials must not be)"
            )
        for m in _FIELD.finditer(text):
            root = m.group(1).split(".")[0]
            if root not in allowed:
                raise ConfigError(
                    f"{where}: template '{{{m.group(1)}}}' uses {root!r}; use one "
                    f"of {', '.join(sorted(allowed))}"
                )


def _table(
    entry: Mapping[str, Any],
    key: str,
    where: str,
    required: set[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any] | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' must be a table, got {value!r}")
    missing = required - set(value)
    unknown = set(value) - required - set(optional)
    if missing:
        raise ConfigError(f"{where}: '{key}' needs {', '.join(sorted(missing))}")
    if unknown:
        raise ConfigError(
            f"{where}: '{key}' has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(required | set(optional)))}"
        )
    return value


# --- load-time validation of the http table ---------------------------------------------------
def _expand_env(text: str, where: str, environ: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: ${{env:{name}}} is not a valid variable name; use letters, digits "
                f"and _ (e.g. ${{env:CRM_TOKEN}})"
            )
        if name not in environ:
            raise ConfigError(
                f"{where}: environment variable {name!r} is not set; export {name}=... before "
                f"loading the catalog (credentials are read from the environment, never "
                f"written in the file)"
            )
        return environ[name]

    return _ENV.sub(one, text)


def _check_timeout(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{where}: timeout must be a number of seconds, got {value!r}; e.g. timeout = 10"
        )
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT:
        raise ConfigError(
            f"{where}: timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds, "
            f"got {value!r}; e.g. timeout = 10"
        )
    return float(value)


def _check_method(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.upper() not in METHODS:
        raise ConfigError(f"{where}: http.method is {value!r}; use one of {', '.join(METHODS)}")
    return value.upper()


def _check_url(value: Any, where: str, environ: Mapping[str, str]) -> str:
    if not isinstance(value, str):
        raise ConfigError(
            f'{where}: http.url must be a string, got {value!r}; e.g. url = "https://..."'
        )
    if _CONTROL.search(value) or any(c.isspace() for c in value):
        raise ConfigError(
            f"{where}: http.url {value!r} contains whitespace or control characters (CR/LF "
            f"would let a value inject headers); percent-encode them"
        )
    expanded = _expand_env(value, f"{where}: http.url", environ)
    if _CONTROL.search(expanded) or any(c.isspace() for c in expanded):
        raise ConfigError(
            f"{where}: http.url {value!r} contains whitespace or control characters once the "
            f"environment is read; fix the variable's value"
        )
    parts = urlsplit(expanded)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{where}: http.url {value!r} must be an absolute http:// or https:// URL with a host"
        )
    if "{" in parts.netloc or "}" in parts.netloc:
        raise ConfigError(
            f"{where}: http.url {value!r} has a template in its host; templates may fill the "
            f"path and query only, so a tool's arguments can never choose the server"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{where}: http.url {value!r} carries credentials; send them in a header read from "
            f'the environment, e.g. headers = {{ Authorization = "Bearer ${{env:TOKEN}}" }}'
        )
    _check_roots_in_url(parts.path + "?" + parts.query, where)
    return expanded


def _check_roots_in_url(text: str, where: str) -> None:
    for m in _FIELD.finditer(text):
        if m.group(1).split(".")[0] != "args":
            raise ConfigError(f"{where}: http.url template '{{{m.group(1)}}}' must start with args")


def _check_headers(value: Any, where: str, environ: Mapping[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: http.headers must be a table of strings, got {value!r}")
    out: dict[str, str] = {}
    for name, raw in value.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: http.headers name {name!r} is not a valid header name (letters, "
                f"digits and -, no spaces, CR or LF)"
            )
        if not isinstance(raw, str):
            raise ConfigError(f"{where}: http.headers.{name} must be a string, got {raw!r}")
        if _CONTROL.search(raw):
            raise ConfigError(
                f"{where}: http.headers.{name} contains control characters (CR/LF would inject "
                f"headers); remove them"
            )
        if _CREDENTIAL_HEADER.search(name) and not _ENV.search(raw):
            raise ConfigError(
                f"{where}: http.headers.{name} holds a literal credential; read it from the "
                f'environment instead, e.g. {name} = "Bearer ${{env:CRM_TOKEN}}"'
            )
        expanded = _expand_env(raw, f"{where}: http.headers.{name}", environ)
        if _CONTROL.search(expanded):
            raise ConfigError(
                f"{where}: http.headers.{name}: the environment variable's value contains "
                f"control characters (CR/LF); fix the variable"
            )
        out[name] = expanded
    return out


_SSL: list[Any] = []


def _ssl_context() -> Any:
    """One TLS context for every HTTP tool (building one per call costs ~50 ms of CPU)."""
    if not _SSL:
        import httpx

        _SSL.append(httpx.create_ssl_context())
    return _SSL[0]


class _HttpTool:
    """The transport of one TOML tool: one HTTP request per call, judged by its status."""

    def __init__(
        self, name: str, url: str, method: str, headers: Mapping[str, str], timeout: float
    ) -> None:
        self.name, self.url, self.method = name, url, method
        self.headers, self.timeout = dict(headers), timeout

    def _url_for(self, args: Mapping[str, Any]) -> str:
        if "{" not in self.url:
            return self.url
        return _FIELD.sub(
            lambda m: quote(str(_lookup(m.group(1), {"args": args}, self.name)), safe=""),
            self.url,
        )

    async def __call__(self, call: Call, args: Mapping[str, Any]) -> Any:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise PermanentError(
                f"tool {self.name!r} is an HTTP tool; install httpx (pip install 'amends[http]')"
            ) from exc
        headers = {**self.headers, "Idempotency-Key": call.idempotency_key}
        if call.precondition is not None:
            headers["X-Amends-Precondition"] = json.dumps(call.precondition.to_dict())
        url = self._url_for(args)
        what = f"{self.name}: {self.method} {url}"
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.timeout, follow_redirects=False, verify=_ssl_context()
                ) as client,
                client.stream(self.method, url, json=dict(args), headers=headers) as resp,
            ):
                body = await _read_limited(resp, MAX_RESPONSE_BYTES)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # nothing reached the vendor: safe to retry
            raise TransientError(f"{what} could not connect: {exc!r}") from exc
        except httpx.TransportError as exc:
            # rule 9: the request may have been acted on (timeout or connection lost after
            # sending): not an amends error, so the engine logs the outcome as unknown.
            raise OutcomeUnknownError(
                f"{what}: {type(exc).__name__} after the request was sent; whether the vendor "
                f"acted is unknown ({exc})"
            ) from exc
        if body is None:  # issue 21.13: never read a 50 MB answer into memory, nor the log
            return self._too_large(resp, what)
        read = httpx.Response(
            resp.status_code, headers=resp.headers, content=body, request=resp.request
        )  # read within the limit: judged as before
        return self._judge(read, what)

    def _too_large(self, resp: Any, what: str) -> Any:
        """An answer over :data:`MAX_RESPONSE_BYTES`: judged by its status alone. A 2xx says
        the vendor did the work (the step is done) but its answer was not read, so nothing
        can be captured from it."""
        code = resp.status_code
        limit = f"{MAX_RESPONSE_BYTES:,} bytes"
        if 200 <= code < 300:
            return {"amends_summary": f"{what}: HTTP {code}, answer over {limit}; not read"}
        raise PermanentError(f"{what}: HTTP {code}, an answer over {limit} (not read)")

    def _judge(self, resp: Any, what: str) -> Any:
        code = resp.status_code
        if code == 504:
            raise OutcomeUnknownError(
                f"{what}: HTTP 504 from a gateway; whether the vendor acted is unknown"
            )
        if code == 412:
            raise PreconditionFailed(f"{self.name}: {resp.text.strip()[:300]}")
        if code == 429 or code >= 500:
            retry = resp.headers.get("Retry-After")
            raise TransientError(
                f"{what}: HTTP {code}",
                retry_after=float(retry) if retry and retry.isdigit() else None,
            )
        if 300 <= code < 400:
            where_to = resp.headers.get("Location", "no Location header")
            raise PermanentError(
                f"{what}: HTTP {code} redirect to {where_to}; redirects are not followed (the "
                f"vendor did not do the work at this address): point http.url at the final URL"
            )
        if not 200 <= code < 300:
            raise PermanentError(f"{what}: HTTP {code}: {resp.text.strip()[:300]}")
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as exc:
            raise PermanentError(f"{what}: response is not JSON: {resp.text[:200]!r}") from exc


MAX_RESPONSE_BYTES = MAX_RESULT_BYTES
"""The most bytes of an HTTP answer a TOML tool reads (issue 21 item 13): the log's cap."""


async def _read_limited(resp: Any, limit: int) -> bytes | None:
    """The response body, or ``None`` once it passes ``limit`` bytes (the rest is not read)."""
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _transport(entry: dict[str, Any], where: str, environ: Mapping[str, str]) -> _HttpTool:
    name = entry["name"]
    http = _table(entry, "http", where, {"url"}, {"method", "headers"})
    if http is None:
        raise ConfigError(f'{where}: tool {name!r} needs http = {{ url = "..." }}')
    timeout = _check_timeout(entry.get("timeout"), where)
    return _HttpTool(
        name,
        _check_url(http["url"], where, environ),
        _check_method(http.get("method", "POST"), where),
        _check_headers(http.get("headers"), where, environ),
        30.0 if timeout is None else timeout,
    )


def _make_tool(
    entry: dict[str, Any], where: str, catalog: Catalog, environ: Mapping[str, str]
) -> Any:
    transport = _transport(entry, where, environ)
    before = _table(entry, "before", where, {"tool"}, {"args"})
    inverse = _table(entry, "inverse", where, {"tool"}, {"args", "deadline"})
    expect = _table(entry, "expect", where, {"probe", "equals"}, {"args", "path"})
    landed = _table(entry, "landed", where, {"probe", "equals"}, {"args", "path"})
    no_drift = entry.get("no_drift_check")
    if no_drift is not None and (not isinstance(no_drift, str) or not no_drift.strip()):
        raise ConfigError(
            f"{where}: no_drift_check must say why no expectation is needed, e.g. no_drift_check "
            f'= "a draft only this saga can see"; got {no_drift!r}'
        )
    if no_drift is not None and expect is not None:
        raise ConfigError(
            f"{where}: has both [tool.expect] and no_drift_check; keep the expectation (rule 4: "
            f"drift is checked) or say why none is needed, not both"
        )
    residue = _table(
        entry,
        "residue",
        where,
        {"what"},
        {"parties", "settles_in_days", "settles_in_business_days"},
    )
    ack = _table(entry, "acknowledge", where, {"who"}, {"parties", "draft", "what"})
    scope_roots = {"args", "result"} | ({"before"} if before else set())
    for label, tpl in (
        ("inverse", inverse),
        ("expect", expect),
        ("landed", landed),
        ("residue", residue),
        ("acknowledge", ack),
    ):
        if tpl is not None:
            _check_roots(tpl, scope_roots, f"{where} {label}")
    if before is not None:
        _check_roots(before, {"args"}, f"{where} before")

    async def tool(call: Call, **args: Any) -> Any:
        scope: dict[str, Any] = {"args": args}
        if before is not None and call.phase == "forward":
            probe = catalog.get(before["tool"])
            pcall = Call(
                saga_id=call.saga_id,
                step_id=call.step_id,
                tool=probe.name,
                phase="probe",
                idempotency_key=call.idempotency_key + ":before",
            )
            scope["before"] = await invoke(
                probe.fn, pcall, fill(before.get("args", {}), scope, where), probe.timeout
            )
        result = await transport(call, args)
        if call.phase != "forward":
            return result  # templates describe the forward call's contract only
        scope["result"] = result
        _record(call, scope, where, inverse, expect, residue, ack)
        if landed is not None:
            call.landed(
                landed["probe"],
                fill(landed.get("args", {}), scope, where),
                equals=fill(landed["equals"], scope, where),
                path=landed.get("path", ()),
            )
        if no_drift is not None:
            call.no_drift_check(reason=no_drift)
        return result

    tool.__name__ = entry["name"].replace(".", "_")
    return tool


def _record(
    call: Call,
    scope: Mapping[str, Any],
    where: str,
    inverse: dict[str, Any] | None,
    expect: dict[str, Any] | None,
    residue: dict[str, Any] | None,
    ack: dict[str, Any] | None,
) -> None:
    """Record the contract of a forward call that returned, from its templates (rule 2)."""
    if inverse is not None:
        deadline = fill(inverse.get("deadline"), scope, where)
        call.inverse(
            inverse["tool"], deadline=deadline, **fill(inverse.get("args", {}), scope, where)
        )
    if expect is not None:
        call.expect(
            expect["probe"],
            fill(expect.get("args", {}), scope, where),
            equals=fill(expect["equals"], scope, where),
            path=expect.get("path", ()),
        )
    if residue is not None:
        filled = fill(residue, scope, where)
        call.residue(
            filled["what"],
            parties=filled.get("parties", ()),
            settles_in_days=filled.get("settles_in_days"),
            settles_in_business_days=filled.get("settles_in_business_days"),
        )
    if ack is not None:
        filled = fill(ack, scope, where)
        call.acknowledge(
            who=filled["who"],
            parties=filled.get("parties", ()),
            draft=filled.get("draft"),
            what=filled.get("what"),
        )


def _read(p: Path) -> dict[str, Any]:
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"catalog file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"catalog file {str(p)!r} cannot be read: {exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"catalog file {str(p)!r} is not valid TOML: {exc}; fix the syntax at that line"
        ) from exc
    return data


def load_toml_catalog(
    path: str | os.PathLike[str],
    catalog: Catalog | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Catalog:
    """Register every ``[[tool]]`` of the TOML file at ``path`` (into ``catalog`` if given).

    Args:
        path: The TOML catalog file.
        catalog: Register into this catalog instead of a new one.
        environ: Where ``${env:NAME}`` values are read; default ``os.environ``.

    Raises:
        ConfigError: The file is missing, is not valid TOML, a tool entry is malformed, or a
            ``${env:NAME}`` variable is not set (the message names the file, the tool and the
            key).
    """
    p = Path(path)
    data = _read(p)
    env = os.environ if environ is None else environ
    tools = data.get("tool")
    if not isinstance(tools, list) or not tools:
        raise ConfigError(
            f"catalog file {str(p)!r} declares no tools; add [[tool]] tables "
            f"with name, reversibility and http"
        )
    unknown_top = set(data) - {"tool"}
    if unknown_top:
        raise ConfigError(
            f"catalog file {str(p)!r} has unknown top-level key(s) "
            f"{', '.join(sorted(unknown_top))}; only [[tool]] tables are read"
        )
    catalog = catalog if catalog is not None else Catalog()
    for i, entry in enumerate(tools, 1):
        where = f"{p}: tool #{i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f'{where} needs a name, e.g. name = "crm.update_field"')
        _register(entry, f"{p}: tool {entry['name']!r}", catalog, env)
    for entry in tools:  # now that every tool is known: the names the contracts refer to
        _check_references(entry, f"{p}: tool {entry['name']!r}", catalog)
    # issue 11: a saga run with these tools records this file, so undo uses the same tools.
    return tag_catalog(catalog, str(p.resolve()))


def _register(
    entry: dict[str, Any], where: str, catalog: Catalog, environ: Mapping[str, str]
) -> None:
    unknown = set(entry) - _TOOL_KEYS
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(_TOOL_KEYS))}"
        )
    resources = entry.get("resources")
    if resources is not None:
        if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
            raise ConfigError(f"{where}: resources must be a list of template strings")
        _check_roots(resources, {"args"}, where)
    for key in ("description", "reversibility"):
        if key in entry and not isinstance(entry[key], str):
            raise ConfigError(f"{where}: {key} must be a string, got {entry[key]!r}")
    fn = _make_tool(entry, where, catalog, environ)
    res_fn = None
    if resources is not None:
        templates = list(resources)

        def res_fn(
            args: Mapping[str, Any], _t: list[str] = templates, _w: str = where
        ) -> list[str]:
            return [str(fill(t, {"args": args}, _w)) for t in _t]

    sensitive, resolver = secret_contract(entry, where)
    idempotent = entry.get("idempotent", False)
    if not isinstance(idempotent, bool):
        raise ConfigError(
            f"{where}: idempotent must be true or false (does the vendor honour the "
            f"Idempotency-Key header?), got {idempotent!r}"
        )
    try:
        catalog.register(
            entry["name"],
            fn,
            reversibility=entry.get("reversibility"),
            resources=res_fn,
            description=entry.get("description"),
            timeout=_check_timeout(entry.get("timeout"), where),
            sensitive=sensitive,
            resolve_secret=resolver,
            idempotent=idempotent,
            describe=entry.get("describe"),
        )
    except AmendsError as exc:
        raise ConfigError(f"{where}: {exc}", tool=entry["name"]) from exc


def secret_contract(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], Any]:
    """``sensitive = ["api_key"]`` (rule 11: redacted everywhere) and, for an inverse that needs
    the value again, ``secret_env = { api_key = "CRM_API_KEY" }`` (default ``$API_KEY``).

    Shared with the MCP gateway's contract files, so both read the same keys alike.

    Returns:
        The sensitive argument names and their resolver (``None`` when there are none).

    Raises:
        ConfigError: Either key is malformed, or ``secret_env`` names an argument that
            ``sensitive`` does not list (``where`` names the file and tool).
    """
    sensitive = entry.get("sensitive", [])
    if not isinstance(sensitive, list) or not all(isinstance(n, str) for n in sensitive):
        raise ConfigError(
            f'{where}: sensitive must be a list of argument names, e.g. sensitive = ["api_key"]; '
            f"got {sensitive!r}"
        )
    table = entry.get("secret_env", {})
    if not isinstance(table, dict) or not all(
        isinstance(v, str) and _ENV_NAME.fullmatch(v) for v in table.values()
    ):
        raise ConfigError(
            f"{where}: secret_env must map argument names to variable names, e.g. secret_env = "
            f'{{ api_key = "CRM_API_KEY" }}; got {table!r}'
        )
    unknown = sorted(set(table) - set(sensitive))
    if unknown:
        raise ConfigError(
            f"{where}: secret_env names {', '.join(unknown)}, which sensitive does not list; "
            f"add them to sensitive"
        )
    if not sensitive:
        return (), None
    from ._secrets import from_env

    return tuple(sensitive), from_env(table, names=sensitive)


def _check_references(entry: Mapping[str, Any], where: str, catalog: Catalog) -> None:
    """The tools a contract names exist; probes (``before``, ``expect``, ``landed``) are
    read-only tools, so checking the world never changes it (rule 4)."""
    from ._contracts import Reversibility

    for key, field, probe in (
        ("before", "tool", True),
        ("expect", "probe", True),
        ("landed", "probe", True),
        ("inverse", "tool", False),
    ):
        table = entry.get(key)
        if not isinstance(table, dict):
            continue
        name = table.get(field)
        if not isinstance(name, str) or name not in catalog:
            known = ", ".join(t.name for t in catalog)
            raise ConfigError(
                f"{where}: {key}.{field} is {name!r}, which is not a tool of this catalog "
                f"(known: {known}); declare it as a [[tool]] too"
            )
        if probe and catalog.get(name).reversibility is not Reversibility.READ_ONLY:
            raise ConfigError(
                f"{where}: {key}.{field} {name!r} must be a read_only tool (a probe never changes "
                f'the world); declare it with reversibility = "read_only"'
            )
