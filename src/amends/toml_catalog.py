"""Catalogs for tools that live outside Python (HTTP APIs), declared in a TOML file.

The contract is the same as for Python tools: the inverse and the expectation are *argument
templates* filled in when the step runs, from the call's arguments (``args``), the tool's result
(``result``) and, if declared, a read-only probe called just before the tool (``before``). They
are stored as concrete data, never re-evaluated at undo time (rule 2).

```toml
[[tool]]
name = "crm.update_field"
reversibility = "reversible"
resources = ["crm:{args.record_id}"]
http = { url = "http://127.0.0.1:8080/crm/update_field" }

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

HTTP tools receive ``POST`` with the arguments as a JSON object and headers ``Idempotency-Key``
and, for compensations with an expectation, ``X-Amends-Precondition`` (JSON). The response's JSON
body is the result. 429 and 5xx are transient, 412 means the precondition failed (drift), other
4xx are permanent.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .calls import invoke
from .contracts import Call, Catalog
from .errors import ConfigError, PermanentError, PreconditionFailed, TransientError

__all__ = ["load_toml_catalog"]

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
}
_ROOTS = {"args", "result", "before"}
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")


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


def _check_roots(template: Any, allowed: set[str], where: str) -> None:
    if isinstance(template, str):
        for m in _FIELD.finditer(template):
            root = m.group(1).split(".")[0]
            if root not in allowed:
                raise ConfigError(
                    f"{where}: template '{{{m.group(1)}}}' uses {root!r}; use one "
                    f"of {', '.join(sorted(allowed))}"
                )
    elif isinstance(template, list):
        for t in template:
            _check_roots(t, allowed, where)
    elif isinstance(template, dict):
        for t in template.values():
            _check_roots(t, allowed, where)


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


class _HttpTool:
    def __init__(
        self, name: str, url: str, method: str, headers: Mapping[str, str], timeout: float
    ) -> None:
        self.name, self.url, self.method = name, url, method
        self.headers, self.timeout = dict(headers), timeout

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
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                resp = await client.request(self.method, self.url, json=dict(args), headers=headers)
        except httpx.TransportError as exc:  # connect/read errors: may be retried
            raise TransientError(f"{self.name}: {self.method} {self.url} failed: {exc!r}") from exc
        if resp.status_code == 412:
            raise PreconditionFailed(f"{self.name}: {resp.text.strip()[:300]}")
        if resp.status_code == 429 or resp.status_code >= 500:
            retry = resp.headers.get("Retry-After")
            raise TransientError(
                f"{self.name}: HTTP {resp.status_code}",
                retry_after=float(retry) if retry and retry.isdigit() else None,
            )
        if resp.status_code >= 400:
            raise PermanentError(f"{self.name}: HTTP {resp.status_code}: {resp.text.strip()[:300]}")
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as exc:
            raise PermanentError(f"{self.name}: response is not JSON: {resp.text[:200]!r}") from exc


def _make_tool(entry: dict[str, Any], where: str, catalog: Catalog) -> Any:
    name = entry["name"]
    http = _table(entry, "http", where, {"url"}, {"method", "headers"})
    if http is None:
        raise ConfigError(f'{where}: tool {name!r} needs http = {{ url = "..." }}')
    timeout = entry.get("timeout", 30.0)
    transport = _HttpTool(
        name, http["url"], http.get("method", "POST"), http.get("headers", {}), float(timeout)
    )
    before = _table(entry, "before", where, {"tool"}, {"args"})
    inverse = _table(entry, "inverse", where, {"tool"}, {"args"})
    expect = _table(entry, "expect", where, {"probe", "equals"}, {"args", "path"})
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
        if inverse is not None:
            call.inverse(inverse["tool"], **fill(inverse.get("args", {}), scope, where))
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
        return result

    tool.__name__ = name.replace(".", "_")
    return tool


def load_toml_catalog(path: str | os.PathLike[str], catalog: Catalog | None = None) -> Catalog:
    """Register every ``[[tool]]`` of the TOML file at ``path`` (into ``catalog`` if given).

    Raises:
        ConfigError: The file is missing, is not valid TOML, or a tool entry is malformed (the
            message names the file, the tool and the key).
        ContractError: A tool's name or class is invalid, or the name is already registered.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"catalog file {str(p)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"catalog file {str(p)!r} is not valid TOML: {exc}; fix the syntax at that line"
        ) from exc
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
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"{where} needs a name")
        where = f"{p}: tool {entry['name']!r}"
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
        fn = _make_tool(entry, where, catalog)
        res_fn = None
        if resources is not None:
            templates = list(resources)

            def res_fn(
                args: Mapping[str, Any], _t: list[str] = templates, _w: str = where
            ) -> list[str]:
                return [str(fill(t, {"args": args}, _w)) for t in _t]

        catalog.register(
            entry["name"],
            fn,
            reversibility=entry.get("reversibility"),
            resources=res_fn,
            description=entry.get("description"),
            timeout=entry.get("timeout"),
        )
    return catalog
