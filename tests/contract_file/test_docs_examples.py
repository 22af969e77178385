"""The contract files the docs show are executed, not only loaded: docs/toml-catalog.md's HTTP
catalog against a loopback vendor (its hosts pointed there), and docs/mcp.md's MCP contracts
through a real gateway in front of an ordinary mcp 2.x server. Every tool the files declare a
contract for runs forward and is undone, and the report says what each contract promises."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

import amends
from contract_setup import Vendor, http_vendor, plain_gateway, reply, text_of

DOCS = Path(__file__).resolve().parents[2] / "docs"
HOSTS = (
    "https://crm.example",
    "https://psp.example",
    "https://docs.example",
    "https://mail.example",
)


class Psp:
    """The vendors docs/examples/http_catalog.toml talks to, in memory."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {"r1": {"stage": "lead"}}
        self.charges: dict[str, dict[str, Any]] = {}
        self.drafts: set[str] = set()
        self.sent: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
        with vendor.lock:
            body = vendor.bodies[-1] or {}
        parts = req.path.split("?")[0].strip("/").split("/")
        with self.lock:
            return self._route(req, req.command, parts, body)

    def _route(self, req: BaseHTTPRequestHandler, method: str, parts: list[str], body: Any) -> None:
        if parts[:2] == ["api", "records"] and method == "GET":
            return reply(req, 200, {"value": self.records[parts[2]][parts[3]]})
        if parts[:2] == ["api", "records"] and method == "PATCH":
            pre = req.headers.get("X-Amends-Precondition")
            rec = self.records[parts[2]]
            if pre and rec[body["field"]] != json.loads(pre)["equals"]:
                return reply(req, 412, {"error": "changed since"})
            rec[body["field"]] = body["value"]
            return reply(req, 200, {"value": body["value"]})
        if parts == ["v1", "charges"]:
            cid = f"ch_{len(self.charges) + 1}"
            self.charges[cid] = {"id": cid, "refunded": 0, "cents": body["cents"]}
            return reply(
                req, 200, {**self.charges[cid], "refundable_until": "2099-01-01T00:00:00+00:00"}
            )
        if parts[:2] == ["v1", "charges"]:
            return reply(req, 200, self.charges[parts[2]])
        if parts == ["v1", "refunds"]:
            self.charges[body["charge_id"]]["refunded"] = body["cents"]
            return reply(req, 200, {"id": "re_1", "settles_on": "2099-01-05"})
        if parts == ["api", "drafts"]:
            self.drafts.add("d1")
            return reply(req, 200, {"id": "d1"})
        if parts[:2] == ["api", "drafts"] and method == "DELETE":
            self.drafts.discard(parts[2])
            return reply(req, 200, {"deleted": True})
        if parts == ["api", "send"]:
            self.sent.append(body)
            return reply(req, 200, {"id": "m1"})
        return reply(req, 404, {"error": f"no route {method} {parts}"})


async def test_the_http_catalog_of_the_docs_runs_and_is_undone(tmp_path: Path) -> None:
    psp = Psp()
    with http_vendor(psp) as (base, _vendor):
        text = (DOCS / "examples" / "http_catalog.toml").read_text()
        for host in HOSTS:
            assert host in text
            text = text.replace(host, base)
        path = tmp_path / "http_catalog.toml"
        path.write_text(text)
        catalog = amends.load_toml_catalog(path, environ={"CRM_TOKEN": "t1", "PSP_TOKEN": "t2"})
        engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
        async with engine.saga("Close the ACME deal") as saga:
            a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
            saga.call("payments.charge", customer="c1", cents=5000, card_number="4111", after=[a])
            saga.call("docs.create_draft", title="Welcome")
            saga.call("mail.send", to="bob@acme.test", subject="Won", after=[a])
        report = await engine.undo(saga.id)
        await engine.close()
    states = {s.tool: s.state.value for s in report.steps}
    assert states == {
        "crm.update_field": "reverted",
        "payments.charge": "compensated",
        "docs.create_draft": "reverted",
        "mail.send": "acknowledged",
    }
    assert psp.records["r1"]["stage"] == "lead"
    assert psp.charges["ch_1"]["refunded"] == 5000
    assert psp.drafts == set()
    assert [r.what for r in report.residue] == ["Refund of 5000 cents to c1"]
    (action,) = report.manual_actions
    assert action.draft == "Please disregard my earlier message 'Won'."


@pytest.mark.slow
async def test_the_mcp_contracts_of_the_docs_run_through_a_gateway_and_are_undone(
    tmp_path: Path,
) -> None:
    from mcp import Client

    setup = plain_gateway(tmp_path, (DOCS / "examples" / "mcp_contracts.toml").read_text())
    setup.seed(notes={"n1": "hello"})
    calls = [
        ("note_set", {"key": "n1", "text": "bye"}),
        ("note_set", {"key": "n2", "text": "new"}),
        ("deal_close", {"deal_id": "d1"}),
        ("charge", {"customer": "c1", "cents": 120000}),
        ("hooks_create", {"url": "https://acme.test/h", "api_key": "acme-key-1"}),
        ("mail_archive", {"message_id": "m1"}),
        ("send_email", {"to": "bob@acme.test", "subject": "Won", "body": "secret body"}),
    ]
    async with Client(setup.gateway({"ACME_API_KEY": "acme-key-1"})) as c:
        for tool, args in calls:
            r = await c.call_tool(tool, args)
            assert not r.is_error, (tool, text_of(r))
        undo = await c.call_tool("amends_undo", {})
    report = undo.structured_content
    states = [(s["tool"], s["state"]) for s in report["steps"]]
    assert states == [
        ("note_set", "reverted"),
        ("note_set", "reverted"),
        ("deal_close", "reverted"),
        ("charge", "compensated"),
        ("hooks_create", "reverted"),
        ("mail_archive", "reverted"),
        ("send_email", "acknowledged"),
    ], report
    world = setup.world()
    assert world["notes"] == {"n1": "hello"}
    assert world["deals"] == {"d1": "open"} and world["charges"]["ch_1"]["refunded"] == 120000
    assert world["hooks"]["https://acme.test/h"]["active"] is False
    assert world["mail"]["m1"] == {"folder": "inbox"}
    assert [r["what"] for r in report["residue"]] == ["Refund of 1,200.00 USD to c1 is pending"]
    assert report["manual_actions"][0]["draft"] == "Please disregard my email 'Won'."
    assert "secret body" not in setup.dump() and "acme-key-1" not in setup.dump()
