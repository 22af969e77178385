"""Rule 11 across the cut of an inverse's error: when only the FORWARD tool declares an
argument sensitive, the inverse's tool redacted its vendor's words with its own (empty)
sensitive list before cutting them to 500 characters, so a secret echoed across the cut left
a prefix no later scrub recognised. Every secret amends resolved for the step is redacted
first, whichever contract declared it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import amends
from amends import StepState
from amends.contract_file import TransportRequest, TransportResult
from contract_setup import file_catalog

KEY = "sk_live_9Zr4Tq7Wm2Lp"

CONTRACTS = """
[[tool]]
name = "hooks_create"
reversibility = "reversible"
sensitive = ["api_key"]
secret_env = { api_key = "ACME_API_KEY" }
no_drift_check = "a hook only this saga can see"
inverse = { tool = "hooks_delete", args = { url = "{args.url}", api_key = "{args.api_key}" } }

[[tool]]
name = "hooks_delete"
reversibility = "irreversible"
"""


def _prefixes(secret: str, text: str) -> list[str]:
    return [secret[:n] for n in range(6, len(secret) + 1) if secret[:n] in text]


@pytest.mark.parametrize("pad", [476, 480, 484])
async def test_an_inverse_echoing_a_secret_only_the_forward_tool_declares_leaves_no_prefix(
    tmp_path: Path, pad: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_API_KEY", KEY)
    sent: list[str] = []

    async def transport(request: TransportRequest) -> TransportResult:
        sent.append(request.tool)
        if request.tool == "hooks_create":
            return TransportResult("ok", structured={"id": "h1"})
        words = "Refused: " + "x" * pad + f" key {request.args['api_key']} is revoked"
        return TransportResult("refused", error_text=words)

    catalog = file_catalog(tmp_path / "hooks.toml", CONTRACTS, transport)
    db = tmp_path / "saga.db"
    engine = amends.Engine(catalog, log=amends.SqliteLog(str(db)))
    async with engine.saga("hook") as saga:
        await saga.call("hooks_create", url="https://acme.test/h", api_key=KEY)
    report = await engine.undo(saga.id)
    await engine.close()
    assert sent == ["hooks_create", "hooks_delete"]
    s1 = report.step("s1")
    assert s1.state is StepState.FAILED
    assert "hooks_delete refused: Refused: xxx" in s1.detail
    con = sqlite3.connect(db)
    try:
        dump = "\n".join(con.iterdump())
    finally:
        con.close()
    assert _prefixes(KEY, dump) == []
    assert _prefixes(KEY, report.to_json()) == []
    assert _prefixes(KEY, report.render("text")) == []


@pytest.mark.parametrize("note", [468, 472])
async def test_an_http_inverse_whose_vendor_echoes_its_url_holding_a_secret_leaves_no_prefix(
    tmp_path: Path, note: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP: the inverse's URL carries the key and the vendor's 400 quotes the URL, the
    key across the 500-character cut. The HTTP transport and the applier redact with the key
    the forward tool declared (the inverse's own contract declares nothing) before cutting."""
    from http.server import BaseHTTPRequestHandler

    from contract_setup import Vendor, http_vendor, reply

    monkeypatch.setenv("ACME_API_KEY", KEY)

    def answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        if req.command == "POST":
            reply(req, 200, {"id": "h1"})
        else:
            reply(req, 400, f"no hook at {req.path} for this account")

    path = tmp_path / "hooks.toml"
    db = tmp_path / "saga.db"
    with http_vendor(answer) as (base, vendor):
        path.write_text(f'''
[[tool]]
name = "hooks.create"
reversibility = "reversible"
sensitive = ["api_key"]
secret_env = {{ api_key = "ACME_API_KEY" }}
no_drift_check = "a hook only this saga can see"
http = {{ url = "{base}/hooks" }}
[tool.inverse]
tool = "hooks.drop"
args = {{ note = "{{args.note}}", api_key = "{{args.api_key}}" }}

[[tool]]
name = "hooks.drop"
reversibility = "irreversible"
http = {{ url = "{base}/hooks/{{args.note}}/{{args.api_key}}", method = "DELETE" }}
''')
        engine = amends.Engine(amends.load_toml_catalog(path), log=amends.SqliteLog(str(db)))
        async with engine.saga("hook") as saga:
            await saga.call("hooks.create", note="n" * note, api_key=KEY)
        report = await engine.undo(saga.id)
        await engine.close()
    assert [m for m, _p, _h in vendor.requests] == ["POST", "DELETE"]
    assert report.step("s1").state is StepState.FAILED
    assert "HTTP 400" in report.step("s1").detail
    con = sqlite3.connect(db)
    try:
        dump = "\n".join(con.iterdump())
    finally:
        con.close()
    assert _prefixes(KEY, dump) == []
    assert _prefixes(KEY, report.to_json()) == []
