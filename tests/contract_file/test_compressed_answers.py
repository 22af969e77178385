"""A vendor that compresses its answers (``Content-Encoding: gzip``, which most APIs do when
asked, and httpx asks by default) is read once, not decoded twice.

The HTTP transport read the answer within its size cap (decompressed), then built a response
from those bytes with the vendor's headers, ``Content-Encoding: gzip`` included: httpx tried
to decompress them again and raised ``DecodingError`` -- so a charge the vendor answered 200
was reported ``in_doubt`` (rule 8: the report is the truth), its inverse never captured, and a
refusal's error text was lost. Now the answer is judged as the vendor sent it.
"""

from __future__ import annotations

import gzip
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import amends
from contract_setup import Vendor, http_vendor


def _gzipped(req: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    data = gzip.compress(json.dumps(body).encode())
    req.send_response(code)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Encoding", "gzip")
    req.send_header("Content-Length", str(len(data)))
    req.end_headers()
    req.wfile.write(data)


def _answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    if req.command == "POST" and req.path == "/charges":
        return _gzipped(req, 200, {"id": "ch_1", "status": "captured"})
    if req.command == "POST" and req.path == "/refunds":
        return _gzipped(req, 402, {"error": "card_declined"})
    return _gzipped(req, 200, {"status": "captured"})


def _catalog(tmp_path: Path, base: str) -> amends.Catalog:
    path = tmp_path / "psp.toml"
    path.write_text(f'''
[[tool]]
name = "psp.status"
reversibility = "read_only"
http = {{ url = "{base}/charges/{{args.id}}", method = "GET" }}

[[tool]]
name = "psp.charge"
reversibility = "compensable"
http = {{ url = "{base}/charges" }}
inverse = {{ tool = "psp.refund", args = {{ charge = "{{result.id}}" }} }}

[tool.expect]
probe = "psp.status"
args = {{ id = "{{result.id}}" }}
path = "status"
equals = "captured"

[[tool]]
name = "psp.refund"
reversibility = "irreversible"
http = {{ url = "{base}/refunds" }}
''')
    return amends.load_toml_catalog(path)


async def test_a_gzipped_answer_is_read_once_and_the_step_is_done(tmp_path: Path) -> None:
    with http_vendor(_answer) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        try:
            async with engine.saga("Charge", saga_id="pay") as saga:
                charged = saga.call("psp.charge", customer="c1", cents=500)
            rec = await engine.log.get_saga("pay")
            assert rec is not None
            (step,) = rec.steps
            assert (step.state, step.error) == ("done", None)
            assert step.result == {"id": "ch_1", "status": "captured"}
            assert await charged == {"id": "ch_1", "status": "captured"}
            assert step.inverse is not None and step.inverse["args"] == {"charge": "ch_1"}
            report = await engine.undo("pay")
        finally:
            await engine.close()
    (undone,) = report.steps
    assert undone.state == "failed"  # the vendor refused the refund: it said so, in words
    assert "card_declined" in undone.detail, undone.detail
    assert [p for m, p, _ in vendor.requests if m == "POST"] == ["/charges", "/refunds"]
