"""A value no JSON encoder can send (``NaN``, ``Infinity``) never makes an HTTP call's outcome
unknown when amends knows it.

- A vendor answering ``{"id": NaN}`` (Python's parser accepts it; the JSON standard does not)
  put ``NaN`` into the step's inverse; at undo, encoding the refund's body failed inside httpx
  before anything was sent, and the step was reported ``in_doubt`` ("whether it took effect is
  unknown"). Now the answer is not JSON: it is kept as text, the step records no inverse (a
  contract violation a person acknowledges), and nothing is ever sent with ``NaN``.
- A caller passing ``NaN`` as an argument likewise got ``in_doubt`` for a request that never
  left the process; it is now refused: nothing was sent (rule 9: only an unknown outcome is in
  doubt).
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import amends
from contract_setup import Vendor, http_vendor, reply


def _answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    if req.path == "/records":
        return reply(req, 200, '{"id": NaN}')
    return reply(req, 200, {"ok": True})


def _catalog(tmp_path: Path, base: str) -> amends.Catalog:
    path = tmp_path / "records.toml"
    path.write_text(f'''
[[tool]]
name = "records.create"
reversibility = "reversible"
no_drift_check = "a draft record only this saga can see"
http = {{ url = "{base}/records" }}
inverse = {{ tool = "records.delete", args = {{ id = "{{result.id}}" }} }}

[[tool]]
name = "records.delete"
reversibility = "irreversible"
http = {{ url = "{base}/records/delete" }}
''')
    return amends.load_toml_catalog(path)


async def test_a_nan_in_a_vendors_answer_never_reaches_an_inverse(tmp_path: Path) -> None:
    with http_vendor(_answer) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        try:
            async with engine.saga("Create", saga_id="c") as saga:
                saga.call("records.create", title="x")
            rec = await engine.log.get_saga("c")
            assert rec is not None
            (step,) = rec.steps
            assert step.state == "done" and step.inverse is None
            assert step.result == '{"id": NaN}'  # kept as the vendor's text
            report = await engine.undo("c")
        finally:
            await engine.close()
    (undone,) = report.steps
    assert (report.status, undone.state) == ("cannot_undo", "acknowledged")
    assert "recorded no inverse" in undone.detail
    assert vendor.paths() == ["/records"]  # no delete was ever sent


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
async def test_an_argument_no_json_can_carry_is_refused_and_nothing_is_sent(
    tmp_path: Path, value: float
) -> None:
    with http_vendor(_answer) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        try:
            with pytest.raises(amends.StepFailedError) as info:
                async with engine.saga("Create", saga_id="c") as saga:
                    saga.call("records.create", title=value)
            assert info.value.state == "failed"  # refused, not in doubt: nothing left
            assert "its arguments are not JSON" in str(info.value)
            assert "nothing was sent" in str(info.value)
        finally:
            await engine.close()
    assert vendor.paths() == []
