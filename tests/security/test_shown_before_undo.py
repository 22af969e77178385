"""What a person is shown before undo is what undo sends (rule 12).

An inverse is computed from the vendor's answer (rule 2): the refund's ``charge_id`` is the id
the processor answered. Its sentence comes from the inverse tool's ``describe=``, and a template
that leaves an argument out hid it from every screen that asks a person to undo -- the preview,
``amends show``, the web page's "Undo: ..." and its confirmation: "Refund 500 cents" said
nothing of *which* charge would be refunded (a confused or compromised processor answering
another customer's charge id), "Cancel event evt_1" nothing of the channel the cancellation is
then announced in. Now the sentence of an inverse names every argument its template leaves
out (a sensitive one as its marker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import amends

REFUNDED: list[dict[str, Any]] = []


def _catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("pay.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> int:
        return 0

    @catalog.tool("pay.charge", reversibility="compensable", describe="Charge {cents} cents")
    async def charge(call: amends.Call, customer: str, cents: int) -> Any:
        answer = {"id": "ch_someone_else"}  # what the processor answered
        call.inverse("pay.refund", charge_id=answer["id"], cents=cents, api_key="k-123")
        call.expect("pay.status", {"charge_id": answer["id"]}, equals=0)
        return answer

    @catalog.tool(
        "pay.refund",
        describe="Refund {cents} cents",
        sensitive=["api_key"],
        resolve_secret=lambda req: "k-123",
    )
    async def refund(call: amends.Call, charge_id: str, cents: int, api_key: str) -> Any:
        REFUNDED.append({"charge_id": charge_id, "cents": cents})
        return {}

    return catalog


SAID = "Refund 500 cents; it also sends api_key='[redacted:api_key]', charge_id='ch_someone_else'"


async def test_the_preview_and_the_report_name_every_argument_the_inverse_sends(
    tmp_path: Path,
) -> None:
    REFUNDED.clear()
    engine = amends.Engine(_catalog(), log=str(tmp_path / "log.db"))
    try:
        async with engine.saga("Charge", saga_id="c") as saga:
            saga.call("pay.charge", customer="acme", cents=500)
        (planned,) = (await engine.preview("c")).steps
        report = await engine.undo("c")
    finally:
        await engine.close()
    assert planned.inverse_description == SAID
    (step,) = report.steps
    assert step.inverse_description == SAID
    assert f"undo: {SAID[:60]}" in report.render("text")
    assert REFUNDED == [{"charge_id": "ch_someone_else", "cents": 500}]


def test_the_web_page_shows_it_before_the_click(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    import asyncio

    from fastapi.testclient import TestClient
    from markupsafe import escape

    from amends.server import ServerSettings, create_app

    db = str(tmp_path / "log.db")

    async def run() -> None:
        engine = amends.Engine(_catalog(), log=db)
        try:
            async with engine.saga("Charge", saga_id="c") as saga:
                saga.call("pay.charge", customer="acme", cents=500)
        finally:
            await engine.close()

    asyncio.run(run())
    app = create_app(lambda: amends.Engine(_catalog(), log=db), ServerSettings(no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/ui/sagas/c")
    assert page.status_code == 200
    assert f"Undo: {escape(SAID)}</div>" in page.text
