"""Issue 28 item 3, as an operator runs it: under ``--log-format json`` the JSON lines on stderr
are amends' own records and the server's, never another library's INFO line. httpx logs every
request's full URL at INFO, and an HTTP tool's URL may carry a secret (an ``api_key`` query
parameter filled from the environment, a sensitive argument in the path): rule 11."""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import quote

import pytest

import amends
from amends._telemetry import JsonLines, configure_logging
from contract_setup import Vendor, http_vendor, reply

KEY = "sk_live_7Qx2PzR8vT4mW"
CARD = "4111111111111111"


def _answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    reply(req, 200, {"id": "r1"})


def _catalog(path: Path, base: str) -> Path:
    q = "?api_key=${env:VENDOR_KEY}"
    path.write_text(
        f"""
[[tool]]
name = "vendor.hold"
reversibility = "reversible"
sensitive = ["card"]
no_drift_check = "a hold only this saga can see"
http = {{ url = "{base}/holds/{{args.card}}{q}" }}
inverse = {{ tool = "vendor.release", args = {{ id = "{{result.id}}", card = "{{args.card}}" }} }}

[[tool]]
name = "vendor.release"
reversibility = "irreversible"
sensitive = ["card"]
http = {{ url = "{base}/holds/{{args.card}}/{{args.id}}{q}", method = "DELETE" }}
"""
    )
    return path


async def test_json_lines_carry_no_other_librarys_info_line_with_a_secret_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VENDOR_KEY", KEY)
    monkeypatch.setenv("CARD", CARD)  # the inverse gets the card again at undo time (rule 11)
    undo_logging = configure_logging("json")
    try:
        with http_vendor(_answer) as (base, vendor):
            catalog = amends.load_toml_catalog(_catalog(tmp_path / "vendor.toml", base))
            engine = amends.Engine(catalog, log=str(tmp_path / "a.db"))
            async with engine.saga("Hold a card") as saga:
                saga.call("vendor.hold", card=CARD)
            report = await engine.undo(saga.id)
            await engine.close()
        logging.getLogger("httpx").warning("a warning still reaches the operator")
    finally:
        undo_logging()
    # not vacuous: the vendor got the key and the card in both URLs
    assert [(m, p) for m, p, _h in vendor.requests] == [
        ("POST", f"/holds/{CARD}?api_key={KEY}"),
        ("DELETE", f"/holds/{CARD}/r1?api_key={KEY}"),
    ]
    assert report.status == "fully_reversed"
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    assert [(e["logger"], e["message"]) for e in lines] == [
        ("amends.events", "reversal.started"),
        ("amends.events", "compensation.dispatched"),
        ("amends.events", "compensation.reverted"),
        ("amends.events", "reversal.finished"),
        ("httpx", "a warning still reaches the operator"),
    ]
    for secret in (KEY, CARD, quote(KEY), quote(CARD)):
        assert secret not in err
    assert logging.getLogger("amends").level == logging.NOTSET  # undone as it was


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["undo", "nope"], "amends: error: saga log '{db}' does not exist; check the path "
         "(--db) or $AMENDS_DB. A read command never creates an empty log"),
        (["undo", "nope", "--continue", "--dry-run"],
         "amends: error: --continue and --dry-run exclude each other; give one of them"),
    ],
)  # fmt: skip
def test_the_error_that_stops_a_command_is_a_json_line_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Under ``--log-format json`` every line on stderr is JSON: the error that stops
    ``amends undo`` was the one plain-text line (a collector parsing JSON lines dropped it, or
    stopped there), also when it is found before the command starts its work."""
    from amends.cli import main

    db = tmp_path / "a.db"
    code = main([*args, "--db", str(db), "--log-format", "json"])
    err = capsys.readouterr().err
    assert code == 2
    assert [json.loads(line) for line in err.splitlines()] == [
        {
            "ts": json.loads(err)["ts"],
            "level": "error",
            "logger": "amends",
            "message": message.format(db=db),
        }
    ]
    assert not any(isinstance(h.formatter, JsonLines) for h in logging.getLogger().handlers)
