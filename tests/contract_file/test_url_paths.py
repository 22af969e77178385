"""Issue 21 item 10: an argument fills exactly one URL path segment and can never change the
path's shape. Against a loopback vendor that records the raw request target: separators and
look-alikes are percent-encoded into the one segment; an empty, ``.`` or ``..`` segment is
refused before anything is sent, forward and at undo (where the value came from the vendor)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import amends
from amends import StepState
from contract_setup import Vendor, http_vendor, reply


def _answer(req: BaseHTTPRequestHandler, vendor: Vendor) -> None:
    if req.command == "POST" and req.path == "/api/records":
        return reply(req, 200, {"id": ".."})  # a vendor-chosen id that is a dot segment
    return reply(req, 200, {"path": req.path})


def _catalog(tmp_path: Path, base: str) -> amends.Catalog:
    path = tmp_path / "records.toml"
    path.write_text(f'''
[[tool]]
name = "records.view"
reversibility = "read_only"
http = {{ url = "{base}/api/records/{{args.id}}/view", method = "GET" }}

[[tool]]
name = "records.create"
reversibility = "reversible"
no_drift_check = "a draft record only this saga can see"
http = {{ url = "{base}/api/records" }}
inverse = {{ tool = "records.delete", args = {{ id = "{{result.id}}" }} }}

[[tool]]
name = "records.delete"
reversibility = "irreversible"
http = {{ url = "{base}/api/records/{{args.id}}", method = "DELETE" }}
''')
    return amends.load_toml_catalog(path)


ENCODED = {
    "%2e%2e": "/api/records/%252e%252e/view",
    "a/b": "/api/records/a%2Fb/view",
    "../admin": "/api/records/..%2Fadmin/view",
    "?x=1": "/api/records/%3Fx%3D1/view",
    "#top": "/api/records/%23top/view",
    "a\\..": "/api/records/a%5C../view",
    "..;": "/api/records/..%3B/view",
}
REFUSED = ["..", ".", ""]


async def test_each_argument_fills_one_path_segment_and_dot_segments_are_refused(
    tmp_path: Path,
) -> None:
    with http_vendor(_answer) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("paths") as saga:
            steps = {v: saga.call("records.view", id=v) for v in [*ENCODED, *REFUSED]}
            await saga.gather(*[s for v, s in steps.items() if v in ENCODED])
            for value in REFUSED:
                with pytest.raises(amends.StepFailedError) as exc:
                    await steps[value]
                assert exc.value.state == "failed"  # refused: nothing happened
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None
        errors = {s.args["id"]: s.error or "" for s in rec.steps}
        await engine.close()
    # exactly the encoded ones reached the vendor, each inside its one segment
    assert sorted(vendor.paths()) == sorted(ENCODED.values())
    for value in REFUSED:
        assert (
            f"make it {value!r}, which would change the URL's path; an argument fills exactly "
            f"one path segment, so '', '.' and '..' are refused (nothing was sent)"
        ) in errors[value], errors[value]


async def test_an_inverse_whose_vendor_chosen_id_is_a_dot_segment_is_refused_not_sent(
    tmp_path: Path,
) -> None:
    """The inverse's id came from the vendor's answer ({result.id} = '..'): at undo the DELETE
    would have gone to /api/; it is refused, nothing is sent, and the step is failed."""
    with http_vendor(_answer) as (base, vendor):
        engine = amends.Engine(_catalog(tmp_path, base), log=amends.SqliteLog(":memory:"))
        async with engine.saga("create") as saga:
            await saga.call("records.create", title="x")
        report = await engine.undo(saga.id)
        await engine.close()
    assert [m for m, _p, _h in vendor.requests] == ["POST"]  # no DELETE anywhere
    step = report.step("s1")
    assert step.state is StepState.FAILED
    assert report.status == amends.Outcome.CANNOT_UNDO
    assert "make it '..', which would change the URL's path" in step.detail
