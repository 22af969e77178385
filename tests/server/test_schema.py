"""Schemathesis against the served OpenAPI document (issue 13 "done when"): with a token and
without, no generated request gets a 5xx, and every answer's status, content type and body are
the ones the document declares for that operation."""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from server_harness import Live

pytestmark = pytest.mark.slow

# Load schemathesis' lazily imported modules now, at collection: importing them later, deep in a
# test, made pytest's assertion rewriter hit CPython 3.11.7's "AST constructor recursion depth
# mismatch" SystemError (seen when the whole tests/server directory runs).
for _op in schemathesis.openapi.from_dict(
    {
        "openapi": "3.1.0",
        "info": {"title": "warm-up", "version": "1"},
        "paths": {
            "/x/{i}": {
                "post": {
                    "parameters": [{"name": "i", "in": "path", "required": True}],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
).get_all_operations():
    _op.ok().as_strategy()  # type: ignore[union-attr]

EXAMPLES = int(os.environ.get("AMENDS_SCHEMA_EXAMPLES", "40"))
"""Examples per operation and caller; raise it for a longer run (docs/security.md)."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _operations(live: Live) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()  # type: ignore[union-attr]
        ops.append(op)
    return ops


def test_openapi_document_lists_the_api(live: Live) -> None:
    ops = sorted(f"{op.method.upper()} {op.path}" for op in _operations(live))
    assert ops == [
        "GET /reversals/{reversal_id}",
        "GET /reversals/{reversal_id}/events",
        "GET /sagas",
        "GET /sagas/{saga_id}",
        "GET /sagas/{saga_id}/follow-ups",
        "GET /sagas/{saga_id}/preview",
        "POST /sagas/{saga_id}/retry",
        "POST /sagas/{saga_id}/steps/{step_id}/follow-up",
        "POST /sagas/{saga_id}/steps/{step_id}/resolve",
        "POST /sagas/{saga_id}/steps/{step_id}/withdraw",
        "POST /sagas/{saga_id}/undo",
    ]


@pytest.mark.parametrize("who", ["acme", "anonymous"])
def test_every_generated_request_gets_a_documented_answer_never_a_5xx(live: Live, who: str) -> None:
    """Every operation, with a valid token and without: the status is one the document lists for
    the operation (so every 4xx is documented), the body matches its schema, never a 5xx."""
    headers = live.auth() if who == "acme" else {}
    seen: dict[str, set[int]] = {}
    calls: list[int] = []
    for op in _operations(live):

        @given(case=op.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            calls.append(1)
            params = case.path_parameters or {}
            if "saga_id" in params and len(calls) % 2:
                params["saga_id"] = live.sagas["acme3"]  # real ids too
                if "step_id" in params and len(calls) % 4 == 1:
                    params["step_id"] = "s3"
            resp = case.call_and_validate(
                base_url=live.url, headers=headers, timeout=30, checks=CHECKS
            )
            seen.setdefault(f"{case.method} {case.path}", set()).add(resp.status_code)
            if resp.status_code >= 400:
                assert set(resp.json()) == {"error", "detail"}, resp.text

        check()
    print(f"schemathesis ({who}): {len(calls)} requests, statuses {sorted(seen.items())}")
    assert len(seen) == 11  # every operation (issue 23: retry, withdraw; issue 27: follow-ups)
    if who == "anonymous":
        assert {c for codes in seen.values() for c in codes} == {401}
    else:
        assert 200 in seen["GET /sagas"]
        assert 200 in seen["GET /sagas/{saga_id}/preview"]
        assert seen["POST /sagas/{saga_id}/undo"] & {200, 202}
