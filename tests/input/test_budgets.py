"""Issue 11 item 1: budgets are finite, non-negative and bounded, wherever they come from."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from input_tools import SPEC

import amends
from amends._budget import MAX_SECONDS, MAX_TOKENS, MAX_TOOL_CALLS
from amends.cli import main

Rows = Callable[[str], list[str]]


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("seconds", float("nan"), "Budget.seconds must be a finite number, got nan"),
        ("seconds", float("inf"), "Budget.seconds must be a finite number, got inf"),
        ("seconds", float("-inf"), "Budget.seconds must be a finite number, got -inf"),
        ("seconds", -0.5, "Budget.seconds must be non-negative, got -0.5"),
        ("seconds", MAX_SECONDS + 1, "above the upper bound 86400"),
        ("seconds", "30", "Budget.seconds must be a number of seconds, got '30'"),
        ("tool_calls", 1.5, "Budget.tool_calls must be a whole number, got 1.5"),
        ("tool_calls", True, "Budget.tool_calls must be a whole number, got True"),
        ("tool_calls", MAX_TOOL_CALLS + 1, "above the upper bound 100000"),
        ("tokens", -1, "Budget.tokens must be non-negative, got -1"),
        ("tokens", MAX_TOKENS + 1, "above the upper bound 1e+09"),
    ],
)
def test_budget_refuses_each_bad_value_class_naming_field_value_and_fix(
    field: str, value: object, fragment: str
) -> None:
    with pytest.raises(amends.ConfigError) as exc:
        amends.Budget(**{field: value})  # type: ignore[arg-type]
    assert fragment in str(exc.value)


def test_budget_parse_refuses_what_json_turns_into_infinity() -> None:
    """``{"seconds": 1e400}`` parses to inf in Python: refused, not clamped, at the edge."""
    import json

    with pytest.raises(amends.ConfigError, match="budget.seconds must be a finite number, got inf"):
        amends.Budget.parse(json.loads('{"seconds": 1e400}'))
    with pytest.raises(amends.ConfigError, match=r"unknown budget field\(s\) \['calls'\]"):
        amends.Budget.parse({"calls": 3})
    assert amends.Budget.parse({"seconds": 5}) == amends.Budget(seconds=5)


def test_budget_read_back_from_the_log_clamps_what_an_older_amends_stored() -> None:
    """NaN becomes the default, infinity the bound, negatives 0: the saga can still be undone."""
    b = amends.Budget.from_dict({"tool_calls": 10, "tokens": -5, "seconds": float("inf")})
    assert b == amends.Budget(tool_calls=10, tokens=0, seconds=MAX_SECONDS)
    assert amends.Budget.from_dict({"seconds": float("nan")}).seconds == 60.0


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_is_a_valid_budget_or_a_config_error_never_a_stuck_one(value: float) -> None:
    try:
        b = amends.Budget(seconds=value)
    except amends.ConfigError as exc:
        assert "Budget.seconds" in str(exc)
        assert not (math.isfinite(value) and 0 <= value <= MAX_SECONDS)
    else:
        assert math.isfinite(b.seconds) and 0 <= b.seconds <= MAX_SECONDS
    clamped = amends.Budget.from_dict({"seconds": value})
    assert math.isfinite(clamped.seconds) and 0 <= clamped.seconds <= MAX_SECONDS


@pytest.mark.parametrize(
    ("flag", "text", "fragment"),
    [
        ("--budget-seconds", "nan", "--budget-seconds must be a finite number, got nan"),
        ("--budget-seconds", "inf", "--budget-seconds must be a finite number, got inf"),
        ("--budget-seconds", "1e400", "--budget-seconds must be a finite number, got inf"),
        ("--budget-seconds", "-3", "--budget-seconds must be non-negative, got -3.0"),
        ("--budget-calls", "1.5", "'1.5' is not a whole number"),
        ("--budget-calls", "999999999", "--budget-calls is 999999999, above the upper bound"),
        ("--budget-tokens", "-1", "--budget-tokens must be non-negative, got -1"),
    ],
)
def test_cli_budget_flags_refuse_bad_values_and_leave_the_log_untouched(
    saga_db: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    text: str,
    fragment: str,
) -> None:
    db, saga_id = saga_db
    before = rows(db)
    with pytest.raises(SystemExit) as exc:
        main(["undo", saga_id, "--db", db, "--catalog", SPEC, flag, text])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err  # one line, not the usage block
    assert fragment in err
    assert "Traceback" not in err
    assert rows(db) == before


async def test_recover_finishes_a_reversal_whose_stored_budget_is_nan(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A log written before budgets were validated holds NaN/inf: recover still finishes it."""
    db, saga_id = saga_db
    log = amends.SqliteLog(db)
    now = time.time()
    await log.claim_reversal(
        saga_id,
        reversal_id="rev_legacy",
        budget={"tool_calls": float("inf"), "tokens": 100, "seconds": float("nan")},
        owner="dead-worker",
        lease_until=now - 1,
        now=now - 2,
    )
    await log.close()
    code = await asyncio.to_thread(main, ["recover", "--db", db, "--catalog", SPEC])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"resumed reversal rev_legacy of saga {saga_id}: cannot_undo" in out
    log = amends.SqliteLog(db)
    rev = await log.get_reversal(saga_id=saga_id)
    await log.close()
    assert rev is not None and rev.state == "done"
    assert rev.report is not None
    assert rev.report["budget"] == {"tool_calls": MAX_TOOL_CALLS, "tokens": 100, "seconds": 60.0}
    assert [s["state"] for s in rev.report["steps"]] == ["reverted", "acknowledged"]


async def test_recover_carries_on_past_a_reversal_it_cannot_resume_and_reports_it(
    tmp_path: Path, saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two stuck reversals, one whose saga's catalog is gone: the other is still resumed."""
    db, good = saga_db
    engine = amends.Engine(amends.Catalog(), log=db)  # an unimportable catalog: ref is None
    engine.catalog.register("x.thing", lambda call: None, reversibility="irreversible")
    async with engine.saga("orphan") as orphan:
        orphan.call("x.thing")
    await engine.close()
    log = amends.SqliteLog(db)
    now = time.time()
    for sid, rid in ((orphan.id, "rev_a"), (good, "rev_b")):
        await log.claim_reversal(
            sid, reversal_id=rid, budget={}, owner="dead", lease_until=now - 1, now=now - 2
        )
    await log.close()
    other = tmp_path / "other.toml"
    other.write_text('[[tool]]\nname = "y.thing"\nhttp = { url = "http://127.0.0.1:9/y" }\n')
    # issue 21 item 2: the operator allows two catalogs; the orphan's is neither
    code = await asyncio.to_thread(
        main, ["recover", "--db", db, "--catalog", SPEC, "--catalog", str(other)]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert f"NOT recovered: reversal rev_a of saga {orphan.id}: saga {orphan.id} recorded " in out
    assert "which is not among the catalogs this process is allowed to load" in out
    assert f"resumed reversal rev_b of saga {good}: cannot_undo" in out


# --- the HTTP body ------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
budget_like = st.fixed_dictionaries(
    {},
    optional={
        "tool_calls": st.integers(min_value=-5, max_value=10**9) | st.floats() | st.text(),
        "tokens": st.integers(min_value=-5, max_value=10**12) | st.floats(),
        "seconds": st.floats(allow_nan=True, allow_infinity=True) | st.integers(),
    },
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=json_values | budget_like, raw=st.booleans())
def test_http_undo_and_preview_never_answer_5xx_nor_leave_a_reversal_running(
    http_saga: tuple[object, str, str], body: object, raw: bool
) -> None:
    import json

    client, saga_id, db = http_saga
    data = json.dumps(body, allow_nan=True)
    if raw and isinstance(body, dict):  # NaN / Infinity / 1e400 as literal tokens too
        data = data.replace("Infinity", "1e400")
    for method, path in (("GET", "preview"), ("POST", "undo")):
        r = client.request(  # type: ignore[attr-defined]
            method,
            f"/sagas/{saga_id}/{path}",
            content=data,
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code < 500, (method, data, r.text)
    for _ in range(200):  # a started reversal finishes within its (bounded) budget
        rev = asyncio.run(_reversal_state(db, saga_id))
        if rev in (None, "done"):
            break
        time.sleep(0.02)
    assert rev in (None, "done")


async def _reversal_state(db: str, saga_id: str) -> str | None:
    log = amends.SqliteLog(db, read_only=True)
    try:
        rev = await log.get_reversal(saga_id=saga_id)
        return None if rev is None else rev.state
    finally:
        await log.close()


@pytest.fixture
def http_saga(saga_db: tuple[str, str]):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient
    from input_tools import CATALOG

    from amends.server.app import ServerSettings, create_app

    db, saga_id = saga_db
    app = create_app(lambda: amends.Engine(CATALOG, log=db), ServerSettings(no_auth=True))
    with TestClient(app) as client:
        yield client, saga_id, db


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ('{"seconds": 1e400}', 422, "budget.seconds must be a finite number, got inf"),
        ('{"seconds": NaN}', 400, "NaN is not a number JSON allows"),
        ('{"seconds": Infinity}', 400, "Infinity is not a number JSON allows"),
        ('{"seconds": -1}', 422, "budget.seconds must be non-negative, got -1"),
        ('{"tool_calls": 1.5}', 422, "budget.tool_calls must be a whole number, got 1.5"),
        ('{"tool_calls": 100001}', 422, "budget.tool_calls is 100001, above the upper bound"),
        ('{"tokens": "9"}', 422, "budget.tokens must be a whole number, got '9'"),
        ('{"calls": 3}', 422, "unknown budget field(s) ['calls']"),
        ("[1, 2]", 422, "budget must be an object with tool_calls, tokens, seconds"),
    ],
)
def test_http_undo_refuses_each_bad_budget_with_a_4xx_and_writes_nothing(
    http_saga: tuple[object, str, str], rows: Rows, body: str, status: int, fragment: str
) -> None:
    client, saga_id, db = http_saga
    before = rows(db)
    r = client.post(  # type: ignore[attr-defined]
        f"/sagas/{saga_id}/undo", content=body, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == status, r.text
    assert fragment in r.json()["detail"]
    assert rows(db) == before
