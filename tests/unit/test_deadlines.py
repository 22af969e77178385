"""Undo windows (rule 10): a deadline is an instant, so a time without a zone is refused.

``datetime.now() + timedelta(hours=1)`` on a machine set to UTC-5 read as UTC would close the
recall window five hours late: amends would send a recall the bank no longer accepts, or (east of
UTC) acknowledge a step it could still have undone. Neither is honest, so amends refuses the
ambiguous value where the tool records it, and the step that acted is in doubt (rule 9), never
reported as reversible on a guessed window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

import amends
from amends import StepState


def _wire_catalog(deadline: datetime | str | float, sent: list[str]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("bank.wire", reversibility="compensable")
    async def wire(call: amends.Call, to: str) -> dict[str, str]:
        sent.append(to)
        call.inverse("bank.recall", to=to, deadline=deadline)
        call.no_drift_check(reason="a wire cannot be changed by anyone else")
        return {"sent": to}

    @catalog.tool("bank.recall", reversibility="irreversible")
    async def recall(call: amends.Call, to: str) -> None:
        sent.append(f"recall {to}")

    return catalog


@pytest.mark.parametrize(
    "naive",
    [datetime(2030, 1, 1, 12, 0), "2030-01-01T12:00:00", "2030-01-01 12:00"],
    ids=["datetime", "iso", "iso-space"],
)
async def test_a_deadline_without_a_time_zone_is_refused_and_the_step_is_in_doubt(
    naive: datetime | str,
) -> None:
    sent: list[str] = []
    engine = amends.Engine(_wire_catalog(naive, sent), log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError, match="has no time zone") as raised:
            async with engine.saga("pay") as saga:
                saga.call("bank.wire", to="supplier")
        assert "whether it took effect is unknown" in str(raised.value)
        record = await engine.log.get_saga(saga.id)
        assert record is not None
        step = record.steps[0]
        assert sent == ["supplier"]  # the wire went out before the bad deadline was seen
        assert step.state == "in_doubt"
        assert step.inverse is None  # nothing recorded on a guessed window
        assert "has no time zone" in (step.error or "")
        assert repr(naive) in (step.error or "")
        assert "datetime.now(UTC)" in (step.error or "")  # the fix
        report = await engine.undo(saga.id)
        assert report.step(step.step_id).state is StepState.IN_DOUBT
        assert sent == ["supplier"]  # no recall sent on a window amends could not place
    finally:
        await engine.close()


@pytest.mark.parametrize(
    "aware",
    [
        datetime.now(UTC) + timedelta(hours=1),
        datetime.now(timezone(timedelta(hours=-5))) + timedelta(hours=1),
        (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        datetime.now(UTC).timestamp() + 3600,
    ],
    ids=["utc", "utc-5", "iso-offset", "iso-z", "epoch"],
)
async def test_an_aware_deadline_in_any_zone_keeps_the_window_open(
    aware: datetime | str | float,
) -> None:
    sent: list[str] = []
    engine = amends.Engine(_wire_catalog(aware, sent), log=amends.SqliteLog(":memory:"))
    try:
        async with engine.saga("pay") as saga:
            saga.call("bank.wire", to="supplier")
        record = await engine.log.get_saga(saga.id)
        assert record is not None
        step = record.steps[0]
        assert step.inverse is not None
        assert str(step.inverse["deadline"]).endswith("+00:00")  # stored as one instant, in UTC
        report = await engine.undo(saga.id)
        assert report.step(step.step_id).state is StepState.COMPENSATED
        assert sent == ["supplier", "recall supplier"]
    finally:
        await engine.close()
