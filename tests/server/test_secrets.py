"""Rule 11 / issue 13.1: sensitive arguments never reach the log, the report, the CLI, the API or
the web page; an inverse that needs one gets it again at undo time from the tool's resolver."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import amends
from amends._secrets import SecretRequest, from_env
from amends.server import ServerSettings, TokenStore, create_app

CARD = "4111111111111111"
CVV = "737"
PASSWORD = "hunter2-correct-horse"
API_KEY = "sk_live_51HxyzSECRETabc"
SECRETS = (CARD, CVV, PASSWORD, API_KEY)


@dataclass
class Ledger:
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds_with: list[str] = field(default_factory=list)
    """The card number each refund was sent with (the real one, resolved at undo time)."""
    asked: list[SecretRequest] = field(default_factory=list)


def secret_catalog(ledger: Ledger, *, with_resolver: bool = True) -> amends.Catalog:
    catalog = amends.Catalog()

    def resolve(req: SecretRequest) -> str:
        ledger.asked.append(req)
        return {"card_number": CARD, "api_key": API_KEY}[req.name]

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return str(ledger.charges[charge_id]["status"])

    @catalog.tool(
        "pay.charge",
        reversibility="compensable",
        sensitive=["card_number", "cvv"],
        resolve_secret=resolve if with_resolver else None,
    )
    async def charge(
        call: amends.Call, customer: str, card_number: str, cvv: str, cents: int
    ) -> Any:
        cid = f"ch_{len(ledger.charges) + 1}"
        ledger.charges[cid] = {"status": "captured", "card": card_number}
        # the inverse needs the card again: recorded as data, redacted before the log
        call.inverse("pay.refund", charge_id=cid, card_number=card_number, cents=cents)
        call.expect("pay.status", {"charge_id": cid}, equals="captured")
        call.residue(f"Refund of {cents / 100:.2f} to card {card_number}", parties=[customer])
        return {"id": cid, "card": card_number, "echo": f"charged {card_number} cvv {cvv}"}

    @catalog.tool("pay.refund", reversibility="compensable")
    async def refund(call: amends.Call, charge_id: str, card_number: str, cents: int) -> Any:
        ledger.refunds_with.append(card_number)
        if card_number != CARD:
            raise amends.PermanentError(f"unknown card {card_number}")
        ledger.charges[charge_id]["status"] = "refunded"
        return {"refunded": cents}

    @catalog.tool("crm.login", sensitive=["password"])  # irreversible
    async def login(call: amends.Call, user: str, password: str) -> Any:
        call.acknowledge(who="the admin", parties=[user], draft=f"Rotate {user}'s session.")
        return {"user": user, "session": f"s-{password}"}

    @catalog.tool("keys.rotate", sensitive=["api_key"])
    async def rotate(call: amends.Call, api_key: str) -> Any:
        raise amends.PermanentError(f"vendor refused key {api_key}: revoked")

    # rule 12: a resolver is asked only for the names the contract declared, so the tool that
    # gets the api key through another step's result declares it too
    @catalog.tool(
        "keys.use", reversibility="compensable", sensitive=["api_key"], resolve_secret=resolve
    )
    async def use(call: amends.Call, token: str) -> Any:
        # receives the api key through another step's result: scrubbed all the same
        call.inverse("keys.unuse", token=token)
        call.expect("keys.probe", {}, equals="ok")
        return {"used": token}

    @catalog.tool("keys.probe", reversibility="read_only")
    async def probe(call: amends.Call) -> str:
        return "ok"

    @catalog.tool("keys.unuse", reversibility="compensable")
    async def unuse(call: amends.Call, token: str) -> Any:
        raise amends.PermanentError(f"cannot unuse token {token}")

    @catalog.tool("keys.fetch", sensitive=["api_key"])
    async def fetch(call: amends.Call, api_key: str) -> Any:
        return {"key": api_key}

    return catalog


async def run_secret_saga(engine: amends.Engine) -> str:
    async with engine.saga("Pay and rotate", tenant="acme", actor="agent:ops") as saga:
        saga.call("pay.charge", customer="c1", card_number=CARD, cvv=CVV, cents=5000)
        saga.call("crm.login", user="ann", password=PASSWORD)
        bad = saga.call("keys.rotate", api_key=API_KEY)
        f = saga.call("keys.fetch", api_key=API_KEY)
        saga.call("keys.use", token=f["key"])
        with contextlib.suppress(amends.StepFailedError):
            await bad
    return saga.id


def leaks(blob: bytes | str) -> list[str]:
    """The secrets found in ``blob``. A short one (the CVV) counts only as a whole token: "737"
    inside a sha256 hex digest of the hash chain is not a leak."""
    text = blob if isinstance(blob, bytes) else blob.encode()
    found = []
    for s in SECRETS:
        pattern = re.escape(s.encode())
        if len(s) < 8:
            pattern = rb"(?<![0-9A-Za-z])" + pattern + rb"(?![0-9A-Za-z])"
        if re.search(pattern, text):
            found.append(s)
    return found


def scan_files(db: Path) -> dict[str, list[str]]:
    found = {}
    for p in sorted(db.parent.glob(db.name + "*")):
        found[p.name] = leaks(p.read_bytes())
    return found


def dump_tables(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture
def secret_log(tmp_path: Path) -> Iterator[tuple[Path, Ledger, str, amends.UndoReport]]:
    ledger = Ledger()
    db = tmp_path / "secret.db"

    async def go() -> tuple[str, amends.UndoReport, dict[str, list[str]]]:
        engine = amends.Engine(secret_catalog(ledger), log=str(db))
        try:
            sid = await run_secret_saga(engine)
            report = await engine.undo(sid)
            live_files = scan_files(db)  # the WAL before any checkpoint
        finally:
            await engine.close()
        return sid, report, live_files

    sid, report, live_files = asyncio.run(go())
    assert any(n.endswith("-wal") for n in live_files), live_files  # the WAL was scanned
    assert all(not v for v in live_files.values()), live_files
    yield db, ledger, sid, report


def test_secret_bytes_are_in_no_table_no_wal_and_no_file(
    secret_log: tuple[Path, Ledger, str, amends.UndoReport],
) -> None:
    db, _, _, _ = secret_log
    dump = dump_tables(db)
    assert leaks(dump) == []
    # the markers are there: the scan looks at the rows the secrets would be in
    for name in ("card_number", "cvv", "password", "api_key"):
        assert f"[redacted:{name}]" in dump, name
    assert scan_files(db) == {db.name: []}


def test_the_inverse_gets_the_real_secret_from_the_resolver_at_undo_time(
    secret_log: tuple[Path, Ledger, str, amends.UndoReport],
) -> None:
    _, ledger, sid, report = secret_log
    assert ledger.refunds_with == [CARD]
    assert ledger.charges["ch_1"]["status"] == "refunded"
    (req,) = [r for r in ledger.asked if r.name == "card_number"]
    assert (req.tool, req.forward_tool, req.saga_id, req.tenant) == (
        "pay.refund",
        "pay.charge",
        sid,
        "acme",
    )
    assert req.args["card_number"] == "[redacted:card_number]"
    by_tool = {s.tool: s for s in report.steps}
    assert by_tool["pay.charge"].state == "compensated"
    # the inverse that failed with the secret in its error: reported, scrubbed
    assert by_tool["keys.use"].state == "failed"
    assert by_tool["keys.use"].detail.endswith("cannot unuse token [redacted:api_key]")


def test_report_in_every_format_shows_no_secret(
    secret_log: tuple[Path, Ledger, str, amends.UndoReport],
) -> None:
    _, _, _, report = secret_log
    for text in (report.to_json(), report.render("text"), report.render("html")):
        assert leaks(text) == []
    assert "[redacted:card_number]" in report.to_json()  # the residue names the card, redacted


def test_api_preview_web_page_and_amends_show_show_no_secret(
    secret_log: tuple[Path, Ledger, str, amends.UndoReport],
) -> None:
    db, ledger, sid, _ = secret_log
    tokens = TokenStore(":memory:")
    token = tokens.create("acme")
    app = create_app(
        lambda: amends.Engine(secret_catalog(ledger), log=str(db)),
        ServerSettings(tokens=tokens),
    )
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        bodies = {}
        for path in (f"/sagas/{sid}", f"/sagas/{sid}/preview", "/sagas"):
            r = client.get(path, headers=auth)
            assert r.status_code == 200, (path, r.text)
            bodies[path] = r.text
        rev = client.get(f"/sagas/{sid}", headers=auth).json()["reversal"]["reversal_id"]
        bodies["rev"] = client.get(f"/reversals/{rev}", headers=auth).text
        page = client.get(f"/ui/sagas/{sid}", headers=auth)
        assert page.status_code == 200
        bodies["page"] = page.text
    tokens.close()
    for name, body in bodies.items():
        assert leaks(body) == [], name
    assert "[redacted:card_number]" in bodies[f"/sagas/{sid}"]

    from amends.cli import main

    for argv in (["show", sid, "--db", str(db)], ["show", sid, "--db", str(db), "--json"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        assert leaks(out.getvalue()) == [], argv
        assert "[redacted:" in out.getvalue()
    json.loads(out.getvalue())


def test_an_inverse_needing_a_secret_without_a_resolver_fails_clearly_and_is_not_called(
    tmp_path: Path,
) -> None:
    ledger = Ledger()

    async def go() -> amends.UndoReport:
        engine = amends.Engine(secret_catalog(ledger, with_resolver=False), log=":memory:")
        async with engine.saga("Pay", tenant="acme") as saga:
            saga.call("pay.charge", customer="c1", card_number=CARD, cvv=CVV, cents=5000)
        try:
            return await engine.undo(saga.id)
        finally:
            await engine.close()

    report = asyncio.run(go())
    (step,) = report.steps
    assert step.state == "failed"
    assert "needs secret 'card_number'" in step.detail
    assert "resolve_secret=" in step.detail
    assert ledger.refunds_with == []  # never sent with a marker instead of the card
    assert ledger.charges["ch_1"]["status"] == "captured"
    assert leaks(report.to_json()) == []
    # rule 7: the budget counts calls made: the drift probe, not the refund never sent
    assert report.tool_calls == 1


def test_from_env_resolver_reads_the_variable_and_names_a_missing_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    req = SecretRequest(
        "api_key", "keys.unuse", "keys.use", "saga_1", "s1", None, {}, declared=("api_key",)
    )
    monkeypatch.setenv("CRM_API_KEY", "k-123")
    assert from_env(prefix="CRM_")(req) == "k-123"
    assert from_env({"api_key": "CRM_API_KEY"})(req) == "k-123"
    with pytest.raises(amends.ConfigError, match=r"from \$API_KEY, which is not set"):
        from_env()(req)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sensitive": "card_number"}, "must be a list of argument names"),
        ({"sensitive": [""]}, "must be a list of argument names"),
        ({"resolve_secret": "env"}, "must be a function of a SecretRequest"),
    ],
)
def test_bad_sensitive_declarations_are_contract_errors(kwargs: dict[str, Any], match: str) -> None:
    catalog = amends.Catalog()
    with pytest.raises(amends.ContractError, match=match):
        catalog.register("x.y", lambda call: None, **kwargs)


async def test_a_resolver_that_fails_or_returns_nothing_is_a_clear_contract_error() -> None:
    from amends._log.base import SagaRecord, StepRecord
    from amends._secrets import Redaction, SecretResolver, Vault, resolve_call_args

    # rule 12: the two places amends recorded a marker (a whole value, and inside a note)
    args = {"card_number": "[redacted:card_number]", "note": "card [redacted:card_number] ok"}
    at = (Redaction(("card_number",), "card_number"), Redaction(("note",), "card_number", 5))
    step = StepRecord("saga_1", "s1", 1, "pay.charge", {}, (), (), "compensable", None, "done")
    saga = SagaRecord("saga_1", "t", "acme", None, "completed", 0.0, None, None, None, (step,))

    def catalog_with(resolver: SecretResolver) -> amends.Catalog:
        catalog = amends.Catalog()
        catalog.register("pay.refund", lambda call, **kw: None, reversibility="compensable")
        catalog.register(
            "pay.charge",
            lambda call, **kw: None,
            reversibility="compensable",
            sensitive=["card_number"],
            resolve_secret=resolver,
        )
        return catalog

    def broken(r: SecretRequest) -> str:
        raise KeyError(r.name)

    for resolver, match in (
        (broken, r"resolver for secret 'card_number' of 'pay.refund' or 'pay.charge' raised Key"),
        (lambda r: "", r"returned ''; it must return the secret's value"),
    ):
        with pytest.raises(amends.ContractError, match=match) as info:
            await resolve_call_args(
                catalog_with(resolver), saga, "pay.refund", "s1", args, Vault(), at=at
            )
        assert (info.value.step_id, info.value.saga_id) == ("s1", "saga_1")

    async def store(r: SecretRequest) -> str:  # an async secret-store callback
        return CARD if r.name == "card_number" else "?"

    vault = Vault()
    got = await resolve_call_args(catalog_with(store), saga, "pay.refund", "s1", args, vault, at=at)
    assert got == {"card_number": CARD, "note": f"card {CARD} ok"}
    assert vault.scrub(f"declined {CARD}") == "declined [redacted:card_number]"
