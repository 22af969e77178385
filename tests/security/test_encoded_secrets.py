"""Rule 11: a secret a tool echoes percent-encoded, form-encoded or JSON-escaped is scrubbed too.

An HTTP client's error names the URL it called, percent-encoded (``card=4242%204242...``); a
vendor's error body quotes the request as JSON (``"k": "sk_live/ab+c\\"d"``). The vault
replaced only a secret's own text, so those forms of a card number and an API key reached the
log, the report and the agent's exception. Now every such form is replaced by the secret's
marker; only the secret's own text is a position undo gives it back at (rule 12).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

import amends

CARD = "4242 4242 4242 4242"
KEY = 'sk_live/ab+c"d\\e'
FORMS = {
    quote(CARD),
    quote_plus(CARD),
    quote(KEY, safe=""),
    quote_plus(KEY),
    json.dumps(KEY)[1:-1],
    CARD,
    KEY,
}


def _catalog(refunds: list[str]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("psp.status", reversibility="read_only")
    async def status(call: amends.Call, charge_id: str) -> str:
        return "captured"

    @catalog.tool("psp.echo", reversibility="read_only", sensitive=["card"])
    async def echo(call: amends.Call, card: str) -> Any:
        return {"url": f"https://psp.test/x?card={quote_plus(card)}", "json": json.dumps(card)}

    @catalog.tool("psp.charge", reversibility="compensable", sensitive=["card", "api_key"])
    async def charge(call: amends.Call, card: str, api_key: str) -> Any:
        call.inverse("psp.refund", charge_id="ch_1", api_key=api_key)
        call.expect("psp.status", {"charge_id": "ch_1"}, equals="captured")
        return {"id": "ch_1", "seen": f"k={quote(api_key, safe='')}"}

    @catalog.tool("psp.refund", sensitive=["api_key"], resolve_secret=lambda req: KEY)
    async def refund(call: amends.Call, charge_id: str, api_key: str) -> Any:
        assert api_key == KEY  # given back whole, at the place amends redacted it
        refunds.append(charge_id)
        raise amends.PermanentError(
            f"402 for url 'https://psp.test/refund?k={quote_plus(api_key)}' body "
            + json.dumps({"k": api_key})
        )

    @catalog.tool("psp.fail", sensitive=["card"])
    async def fail(call: amends.Call, card: str) -> Any:
        raise amends.PermanentError(f"402 for url 'https://psp.test/charge?card={quote(card)}'")

    return catalog


def _file_bytes(path: str) -> bytes:
    """The log file and its WAL, as written on disk."""
    wal = Path(path + "-wal")
    return Path(path).read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def _leaks(text: str) -> list[str]:
    return sorted(f for f in FORMS if f in text)


async def test_encoded_forms_of_a_secret_never_reach_the_log_the_report_or_the_agent(
    tmp_path: Path,
) -> None:
    refunds: list[str] = []
    path = str(tmp_path / "log.db")
    engine = amends.Engine(_catalog(refunds), log=path)
    try:
        with pytest.raises(amends.StepFailedError) as info:
            async with engine.saga("Pay", saga_id="pay") as saga:
                saga.call("psp.echo", card=CARD)
                saga.call("psp.charge", card=CARD, api_key=KEY)
                saga.call("psp.fail", card=CARD)
        assert _leaks(str(info.value)) == []
        assert "card=[redacted:card]" in str(info.value)
        report = await engine.undo("pay")
        assert refunds == ["ch_1"]  # the refund got the key whole
        texts = [report.to_json(), report.render("text"), report.render("html")]
        assert all(_leaks(t) == [] for t in texts), [_leaks(t) for t in texts]
        rec = await engine.log.get_saga("pay")
        assert rec is not None
        assert _leaks(json.dumps([s.to_dict() for s in rec.steps])) == []
        history = json.dumps([e.to_dict() for e in await engine.log.events("pay")])
        assert _leaks(history) == []
    finally:
        await engine.close()
    raw = _file_bytes(path)
    for form in FORMS:
        assert form.encode() not in raw
        assert json.dumps(form)[1:-1].encode() not in raw
