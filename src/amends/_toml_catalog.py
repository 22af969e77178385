"""The HTTP transport of the contract language: tools behind an HTTP API, from a TOML file.

The contract is the one every tool outside Python has (:mod:`amends.contract_file`,
docs/toml-catalog.md): the inverse and the expectation are *argument templates* filled in when
the step runs, from the call's arguments (``args``), the tool's result (``result``) and what
was read just before it (``capture``; ``[tool.before]`` is the capture read as ``before``), and
stored as concrete data, never re-evaluated at undo time (rule 2). This module adds only what
is HTTP: the ``[tool.http]`` table and how a request is sent and its answer judged.

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

HTTP tools send the arguments as a JSON object (``POST`` unless ``method`` says otherwise) with
headers ``Idempotency-Key`` and, for compensations with an expectation, ``X-Amends-Precondition``
(JSON). The response's JSON body is the result (a body that is not JSON is its text). Only a
2xx is success. Redirects are never followed. A 301, 302 or 303 answering a write (any method
but ``GET`` and ``HEAD``) is unknown (rule 9): servers answer a write they have done that way
(POST/redirect/GET) as well as one sent to an address that moved. Any other 3xx (a 307 or 308,
or any redirect of a read) is a refusal: the vendor did not do the work at this address. 429 and
5xx are transient, 412 means the precondition failed (drift), other 4xx are refusals. An
ambiguous outcome -- a timeout or a connection lost after the request was sent, a 504 -- is
unknown: the forward step is ``in_doubt`` (rule 9), an inverse ``failed``,
never ``reverted``. An answer over :data:`MAX_RESPONSE_BYTES` is not read (issue 21 item 13): it
is judged by its status alone, and a 2xx's result is a summary saying so.

The URL is checked when the file is loaded (http or https, a host, no whitespace or control
characters, no credentials, templates only in the path and query, never in the host, so an
agent's arguments cannot choose where a request goes), and when a call is made: each argument
fills exactly one path segment, percent-encoded, and an empty, ``.`` or ``..`` segment is refused
before anything is sent (issue 21 item 10). Vendor credentials are never written in the file: a
header value or URL says ``${env:NAME}``, read from the environment at load time (a variable
that is not set is an error); a literal value in a credential header (``Authorization``,
``Cookie``, names containing ``key``, ``token`` or ``secret``) is refused, and every value read
from the environment is redacted from anything the vendor's answer or an error could echo (the
log, the report, the web page; issue 21 item 9).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._calls import invoke
from ._catalog_ref import tag_catalog
from ._contracts import Call, Catalog, Reversibility
from ._errors import AmendsError, ConfigError
from ._log.records import MAX_RESULT_BYTES
from ._secrets import marker
from .contract_file import templates
from .contract_file.applier import Binding, registration, tool_function
from .contract_file.schema import ToolContract, read_file
from .contract_file.transport import (
    OutcomeUnknownError,
    Transport,
    TransportRequest,
    TransportResult,
    failed_as,
    result_of,
    strict_json,
)

__all__ = ["MAX_RESPONSE_BYTES", "METHODS", "OutcomeUnknownError", "load_toml_catalog"]

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
"""HTTP methods a TOML tool may use."""
DEFAULT_TIMEOUT = 30.0
"""Seconds an HTTP call may take when its contract sets no ``timeout``."""

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SECONDS = re.compile(r"[0-9]{1,9}")
"""A ``Retry-After`` in seconds (``"²".isdigit()`` is true, and ``float`` refuses it)."""
_CREDENTIAL_HEADER = re.compile(r"authorization|cookie|key|token|secret|password", re.IGNORECASE)


# --- load-time validation of the http table ---------------------------------------------------
def _check_method(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.upper() not in METHODS:
        raise ConfigError(f"{where}: http.method is {value!r}; use one of {', '.join(METHODS)}")
    return value.upper()


def _check_url(value: Any, where: str, environ: Mapping[str, str]) -> templates.UrlTemplate:
    if not isinstance(value, str):
        raise ConfigError(
            f'{where}: http.url must be a string, got {value!r}; e.g. url = "https://..."'
        )
    if _CONTROL.search(value) or any(c.isspace() for c in value):
        raise ConfigError(
            f"{where}: http.url {value!r} contains whitespace or control characters (CR/LF "
            f"would let a value inject headers); percent-encode them"
        )
    env = templates.expand_env(value, f"{where}: http.url", environ)
    expanded = templates.substitute_env(value, env)
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
    return templates.UrlTemplate.parse(value, env, where)


def _check_headers(
    value: Any, where: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The headers with the environment read, and the environment values they used."""
    if value is None:
        return {}, {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: http.headers must be a table of strings, got {value!r}")
    out: dict[str, str] = {}
    env: dict[str, str] = {}
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
        if _CREDENTIAL_HEADER.search(name) and not templates.env_names(raw):
            raise ConfigError(
                f"{where}: http.headers.{name} holds a literal credential; read it from the "
                f'environment instead, e.g. {name} = "Bearer ${{env:CRM_TOKEN}}"'
            )
        used = templates.expand_env(raw, f"{where}: http.headers.{name}", environ)
        expanded = templates.substitute_env(raw, used)
        if _CONTROL.search(expanded):
            raise ConfigError(
                f"{where}: http.headers.{name}: the environment variable's value contains "
                f"control characters (CR/LF); fix the variable"
            )
        if not expanded.isascii():  # no HTTP client sends it: every call would fail unsent
            raise ConfigError(
                f"{where}: http.headers.{name} is not ASCII"
                + (" once the environment is read" if used else "")
                + "; header values are ASCII text: percent-encode or drop the other characters"
            )
        out[name] = expanded
        env.update(used)
    return out, env


_SSL: list[Any] = []


def _ssl_context() -> Any:
    """One TLS context for every HTTP tool (building one per call costs ~50 ms of CPU)."""
    if not _SSL:
        import httpx

        _SSL.append(httpx.create_ssl_context())
    return _SSL[0]


class HttpTransport:
    """The transport of one HTTP tool: one request per call, judged by its status code.

    Everything it says back (result, error text, details) is redacted of the environment
    values it used and of the call's sensitive arguments, in every encoding a vendor could echo
    them in (issue 21 item 9).
    """

    def __init__(
        self,
        name: str,
        url: templates.UrlTemplate,
        method: str,
        headers: Mapping[str, str],
        timeout: float,
        *,
        env: Mapping[str, str],
        sensitive: tuple[str, ...] = (),
    ) -> None:
        self.name, self.url, self.method = name, url, method
        self.headers, self.timeout, self.sensitive = dict(headers), timeout, sensitive
        self.redactor = templates.Redactor.of_env({**url.env, **env})

    async def __call__(self, request: TransportRequest) -> TransportResult:
        secret = {*self.sensitive, *request.sensitive}
        redact = self.redactor.adding(
            {request.args[n]: marker(n) for n in secret if n in request.args}
        )
        try:
            url = self.url.fill(request.args, f"tool {self.name!r}")
        except AmendsError as exc:  # a path that would change shape, a missing argument
            return TransportResult("refused", detail=redact.text(f"{exc}; nothing was sent"))
        shown = redact.text(f"{self.method} {url}")
        if len(shown) > 300:  # cut only once redacted: a secret is never cut in two (rule 11)
            shown = f"{shown[:200]}… (a URL of {len(url):,} characters)"
        result = await self._send(request, url, shown)
        return TransportResult(
            result.kind,
            structured=redact.data(result.structured),
            text=redact.text(result.text),
            error_text=None if result.error_text is None else redact.text(result.error_text),
            detail=redact.text(result.detail),
            retry_after=result.retry_after,
        )

    async def _send(self, request: TransportRequest, url: str, shown: str) -> TransportResult:
        try:
            import httpx
        except ImportError:  # pragma: no cover - depends on the install
            return TransportResult(
                "refused",
                detail=f"tool {self.name!r} is an HTTP tool; install httpx (pip install "
                f"'amends[http]'); nothing was sent",
            )
        headers = {**self.headers, "Idempotency-Key": request.idempotency_key}
        try:  # rule 9: what cannot be encoded is never sent, and that is known, not in doubt
            json.dumps(dict(request.args), allow_nan=False)
            if request.precondition is not None:
                precondition = request.precondition.to_dict()
                headers["X-Amends-Precondition"] = json.dumps(precondition, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            return TransportResult(
                "refused", detail=f"{shown}: its arguments are not JSON ({exc}); nothing was sent"
            )
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.timeout, follow_redirects=False, verify=_ssl_context()
                ) as client,
                client.stream(self.method, url, json=dict(request.args), headers=headers) as resp,
            ):
                body = await _read_limited(resp, MAX_RESPONSE_BYTES)
        except (httpx.InvalidURL, UnicodeEncodeError) as exc:
            # raised while the request is built, before anything is sent (a URL over httpx's
            # 65,536 characters): known to have had no effect, never in doubt (rule 9)
            return TransportResult(
                "refused",
                detail=f"{shown}: the request could not be made ({exc}); nothing was sent",
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # nothing reached the vendor: safe to retry
            return TransportResult("transient", detail=f"{shown} could not connect: {exc!r}")
        except httpx.TransportError as exc:
            # rule 9: the request may have been acted on (timeout or connection lost after
            # sending): the outcome is unknown.
            return TransportResult(
                "unknown",
                detail=f"{shown}: {type(exc).__name__} after the request was sent ({exc}); "
                f"whether the vendor acted is unknown",
            )
        if body is None:  # issue 21.13: never read a 50 MB answer into memory, nor the log
            return self._too_large(resp, shown)
        read = httpx.Response(
            resp.status_code, headers=_decoded(resp.headers), content=body, request=resp.request
        )  # read within the limit (decompressed): judged as any other answer
        return self._judge(read, shown)

    def _too_large(self, resp: Any, shown: str) -> TransportResult:
        """An answer over :data:`MAX_RESPONSE_BYTES`, judged by its status alone: a 2xx says
        the vendor did the work (the step is done) but its answer was not read, so nothing can
        be captured from it."""
        import httpx

        code = resp.status_code
        limit = f"{MAX_RESPONSE_BYTES:,} bytes"
        if 200 <= code < 300:
            summary = f"{self.name}: {shown}: HTTP {code}, answer over {limit}; not read"
            return TransportResult("ok", structured={"amends_summary": summary})
        judged = self._judge(
            httpx.Response(code, headers=_decoded(resp.headers), request=resp.request), shown
        )
        return dataclasses.replace(
            judged,
            error_text=None,
            detail=f"{shown}: HTTP {code}, an answer over {limit} (not read)",
        )

    @staticmethod
    def _judge(resp: Any, shown: str) -> TransportResult:
        code = resp.status_code
        body = resp.text.strip()  # whole (within MAX_RESPONSE_BYTES): redacted, then cut
        if code == 504:
            return TransportResult(
                "unknown",
                detail=f"{shown}: HTTP 504 from a gateway; whether the vendor acted is unknown",
            )
        if code == 412:
            return TransportResult("drift", error_text=body, detail=f"{shown}: HTTP 412")
        if code == 429 or code >= 500:
            retry = resp.headers.get("Retry-After")
            return TransportResult(
                "transient",
                error_text=body or None,
                detail=f"{shown}: HTTP {code}",
                retry_after=float(retry) if retry and _SECONDS.fullmatch(retry) else None,
            )
        if code in _AFTER_A_WRITE and resp.request.method not in ("GET", "HEAD"):
            # rule 9: a 301, 302 or 303 is how a server answers a write it has done (POST,
            # then redirect to the result: POST/redirect/GET), and a server that moved
            # answers the same codes: nothing says the vendor refused, so the outcome is
            # unknown; amends does not follow it. (A 307 or 308 asks for the same request
            # again at another address: the vendor did not do it at this one.)
            where_to = resp.headers.get("Location", "no Location header")
            return TransportResult(
                "unknown",
                detail=f"{shown}: HTTP {code} {HTTPStatus(code).phrase} to {where_to}: the vendor "
                f"may have done the work (redirects are not followed, so its result was not "
                f"read); if the address moved, point http.url at the final URL",
            )
        if 300 <= code < 400:
            where_to = resp.headers.get("Location", "no Location header")
            return TransportResult(
                "refused",
                detail=f"{shown}: HTTP {code} redirect to {where_to}; redirects are not followed "
                f"(the vendor did not do the work at this address): point http.url at the "
                f"final URL",
            )
        if not 200 <= code < 300:
            return TransportResult("refused", error_text=body, detail=f"{shown}: HTTP {code}")
        if not resp.content:
            return TransportResult("ok")
        try:  # strict JSON: NaN and Infinity from a vendor never reach a template (rule 12)
            return TransportResult("ok", structured=strict_json(resp.text))
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: the
            # vendor did act (a 2xx); its answer is kept as text (issue 21)
            return TransportResult("ok", text=resp.text)


_AFTER_A_WRITE = frozenset({301, 302, 303})
"""Redirects a server may answer a write with after doing it (rule 9: not a refusal)."""

MAX_RESPONSE_BYTES = MAX_RESULT_BYTES
"""The most bytes of an HTTP answer a TOML tool reads (issue 21 item 13): the log's cap."""


def _decoded(headers: Any) -> list[tuple[bytes, bytes]]:
    """The answer's headers for a response built from bytes already decompressed: without
    ``Content-Encoding`` (httpx would decompress them again and raise ``DecodingError``, so a
    gzipped 200 read as an unknown outcome) and ``Content-Length``. As the bytes the vendor
    sent: as text, a value that is not ASCII (``filename="résumé.pdf"``) made httpx raise
    ``UnicodeEncodeError`` and every answer read as an unknown outcome."""
    drop = (b"content-encoding", b"content-length")
    return [(k, v) for k, v in headers.raw if k.lower() not in drop]


async def _read_limited(resp: Any, limit: int) -> bytes | None:
    """The response body, or ``None`` once it passes ``limit`` bytes (the rest is not read)."""
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _http(contract: ToolContract, where: str, environ: Mapping[str, str]) -> HttpTransport:
    http = contract.http or {}
    headers, env = _check_headers(http.get("headers"), where, environ)
    return HttpTransport(
        contract.name,
        _check_url(http["url"], where, environ),
        _check_method(http.get("method", "POST"), where),
        headers,
        DEFAULT_TIMEOUT if contract.timeout is None else contract.timeout,
        env=env,
        sensitive=contract.sensitive,
    )


def _url_null(tools: Mapping[str, HttpTransport]) -> Callable[[str, str], str | None]:
    """Why an HTTP tool of the file cannot take argument ``arg`` null: its URL writes it."""

    def refuses(name: str, arg: str) -> str | None:
        http = tools.get(name)
        shown = http.url.null_field(arg) if http is not None else None
        return (
            None
            if shown is None
            else f"writes it into its URL as '{shown}', which has no spelling for null"
        )

    return refuses


def _file_transport(tools: Mapping[str, HttpTransport], catalog: Catalog) -> Transport:
    """Reaches a tool of the file over HTTP, or a tool of the same catalog (a Python probe a
    ``[tool.before]`` names) in-process."""

    async def send(request: TransportRequest) -> TransportResult:
        http = tools.get(request.tool)
        if http is not None:
            return await http(request)
        spec = catalog.get(request.tool)  # checked at load: a tool of this catalog
        call = Call(
            saga_id=request.saga_id,
            step_id=request.step_id,
            tool=spec.name,
            phase="probe",
            idempotency_key=request.idempotency_key,
        )
        try:
            return result_of(await invoke(spec.fn, call, request.args, spec.timeout))
        except Exception as exc:
            got = failed_as(exc)
            if got is not None:
                return got
            return TransportResult("unknown", error_text=f"{type(exc).__name__}: {exc}")

    return send


def load_toml_catalog(
    path: str | os.PathLike[str],
    catalog: Catalog | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Catalog:
    """Register every ``[[tool]]`` of the TOML file at ``path`` (into ``catalog`` if given).

    Args:
        path: The TOML catalog file (docs/toml-catalog.md).
        catalog: Register into this catalog instead of a new one.
        environ: Where ``${env:NAME}`` values are read; default ``os.environ``.

    Raises:
        ConfigError: The file is missing, is not valid TOML, a tool entry is malformed, or a
            ``${env:NAME}`` variable is not set (the message names the file, the tool and the
            key).
    """
    p = Path(path)
    cf = read_file(p, transport="http", kind="catalog")
    env = os.environ if environ is None else environ
    catalog = catalog if catalog is not None else Catalog()
    transports: dict[str, HttpTransport] = {}
    for name, contract in cf.tools.items():
        where = f"{p}: tool {name!r}"
        if contract.undo_after:
            raise ConfigError(
                f"{where}: undo_after is applied by the MCP gateway when it opens a step; with "
                f"amends.load_toml_catalog, say it where the saga calls the tool: "
                f"saga.call({name!r}, ..., undo_after=[step])"
            )
        transports[name] = _http(contract, where, env)
    binding = Binding(
        _file_transport(transports, catalog), cf.tools, refuses_null=_url_null(transports)
    )
    for name, contract in cf.tools.items():
        try:
            kwargs = registration(contract, binding)
            # httpx's timeout bounds each read, not the call: a vendor that trickles its answer
            # a byte at a time held the step forever; the engine bounds the whole call
            kwargs["timeout"] = kwargs["timeout"] or DEFAULT_TIMEOUT
            catalog.register(name, tool_function(contract, binding, name), **kwargs)
        except AmendsError as exc:
            raise ConfigError(f"{p}: tool {name!r}: {exc}", tool=name) from exc
    for name, contract in cf.tools.items():  # now that every tool is known
        _check_references(contract, f"{p}: tool {name!r}", catalog)
    # issue 11: a saga run with these tools records this file, so undo uses the same tools.
    return tag_catalog(catalog, str(p.resolve()))


def _check_references(contract: ToolContract, where: str, catalog: Catalog) -> None:
    """The tools a contract names exist in the catalog; probes (``before``, ``capture``,
    ``observe``, ``expect``, ``landed``) are read-only tools, so checking the world never
    changes it (rule 4)."""
    for key, name, probe in contract.references():
        if name not in catalog:
            known = ", ".join(t.name for t in catalog)
            raise ConfigError(
                f"{where}: {key} is {name!r}, which is not a tool of this catalog "
                f"(known: {known}); declare it as a [[tool]] too"
            )
        if probe and catalog.get(name).reversibility is not Reversibility.READ_ONLY:
            raise ConfigError(
                f"{where}: {key} {name!r} must be a read_only tool (a probe never changes "
                f'the world); declare it with reversibility = "read_only"'
            )
