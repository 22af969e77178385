"""mkdocs hooks: pages that are generated from the code at build time, so they cannot go stale.

- ``<!-- cli-help: COMMAND -->`` becomes the ``amends COMMAND --help`` text (80 columns);
  ``<!-- cli-help: -->`` is ``amends --help``.
- ``<!-- http-api -->`` becomes the table of the server's OpenAPI operations, with their
  parameters and request bodies, from ``create_app(...).openapi()``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
from typing import Any

_CLI = re.compile(r"<!--\s*cli-help:\s*([\w -]*?)\s*-->")
_HTTP = re.compile(r"<!--\s*http-api\s*-->")


def _help(command: str) -> str:
    os.environ["COLUMNS"] = "80"  # argparse wraps at the terminal width; docs show 80 columns
    from amends.cli import build_parser

    parser: argparse.ArgumentParser = build_parser()
    words = command.split()
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        parser.print_help()
    return f"```text\n$ amends {command} --help\n{out.getvalue().rstrip()}\n```".replace(
        "$ amends  --help", "$ amends --help"
    )


def _schema_text(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    return json.dumps({k: v for k, v in schema.items() if k != "title"}, sort_keys=True)


def _http_api() -> str:
    from amends import Engine, SqliteLog
    from amends.server import ServerSettings, create_app

    app = create_app(Engine(_catalog(), log=SqliteLog(":memory:")), ServerSettings(no_auth=True))
    spec = app.openapi()
    out = ["| method | path | what it does |", "|---|---|---|"]
    details: list[str] = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            summary = (op.get("summary") or "").replace("|", "\\|")
            out.append(f"| `{method.upper()}` | `{path}` | {summary} |")
            lines = [f"### `{method.upper()} {path}`", ""]
            if op.get("description"):
                lines += [op["description"].strip(), ""]
            for p in op.get("parameters", []):
                desc = p.get("description", "")
                lines.append(f"- `{p['name']}` ({p['in']}): {desc}".rstrip(": "))
            body = op.get("requestBody", {}).get("content", {})
            for ctype, media in body.items():
                schema = media.get("schema", {})
                lines.append(f"- body ({ctype}): `{_schema_text(schema, spec)}`")
            codes = ", ".join(
                f"{code} {r.get('description', '')}".strip()
                for code, r in op.get("responses", {}).items()
            )
            lines += ["", f"Responses: {codes}", ""]
            details += lines
    return "\n".join([*out, "", *details])


def _catalog() -> Any:
    from amends.sandbox import World, sandbox_catalog

    return sandbox_catalog(World())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    markdown = _CLI.sub(lambda m: _help(m.group(1)), markdown)
    return _HTTP.sub(lambda m: _http_api(), markdown)
