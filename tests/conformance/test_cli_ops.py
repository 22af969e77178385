"""``amends doctor`` and ``amends recover`` on both backends."""

from __future__ import annotations

import json
import time

import pytest

import amends
from amends._log import open_log
from amends._log.base import StepIntent
from amends.cli import main
from core_world import fresh


async def _stuck_saga(url: str) -> None:
    log = open_log(url)
    try:
        now = time.time() - 100
        await log.create_saga(
            "stuck", "t", tenant=None, actor=None, owner="dead-worker", lease_until=now, now=now
        )
        await log.begin_step(
            StepIntent(
                "stuck",
                "s1",
                seq=1,
                tool="crm.update_field",
                args={},
                deps=[],
                resources=[],
                declared="reversible",
                now=now,
            )
        )
    finally:
        await log.close()


async def test_doctor_finds_each_problem_and_recover_fixes_it(
    log_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await open_log(log_url).close()  # doctor reads an existing log only (never creates one)
    assert await _run(["doctor", "--db", log_url]) == 0
    assert "healthy" in capsys.readouterr().out
    await _stuck_saga(log_url)
    assert await _run(["doctor", "--db", log_url, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    actions = [f for f in out["findings"] if f["level"] == "action"]
    assert len(actions) == 1 and "stopped renewing its lease" in actions[0]["what"]
    assert "amends recover" in actions[0]["fix"]
    assert await _run(["recover", "--db", log_url, "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec == {
        "in_doubt": [{"saga_id": "stuck", "step_id": "s1"}],
        "resumed": [],
        "failed": [],
    }
    assert await _run(["doctor", "--db", log_url]) == 1
    text = capsys.readouterr().out
    assert "step s1 (crm.update_field) of saga stuck is in_doubt" in text
    assert "amends undo stuck" in text
    _world, catalog = fresh()
    engine = amends.Engine(catalog, log=log_url)
    try:
        report = await engine.undo("stuck")
    finally:
        await engine.close()
    assert [s.state.value for s in report.steps] == ["in_doubt"]
    assert await _run(["doctor", "--db", log_url]) == 0
    assert capsys.readouterr().out.strip().endswith("healthy")


async def test_doctor_reports_a_newer_schema_with_exit_2(
    log_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(log_url)
    await log.db.write(  # type: ignore[attr-defined]
        lambda tx: tx.execute("UPDATE amends_meta SET value='7' WHERE key='schema_version'")
    )
    await log.close()
    assert await _run(["doctor", "--db", log_url]) == 2
    assert "schema version 7" in capsys.readouterr().out


async def _run(argv: list[str]) -> int:
    import asyncio

    return await asyncio.to_thread(main, argv)


async def test_doctor_verify_finds_an_edited_event_and_names_the_saga(
    log_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await _stuck_saga(log_url)
    assert await _run(["recover", "--db", log_url, "--json"]) == 0
    capsys.readouterr()
    log = open_log(log_url)
    try:
        assert await log.verify() == []
        first = (await log.events("stuck"))[1]
        await log.db.write(  # type: ignore[attr-defined]
            lambda tx: tx.execute(
                "UPDATE records SET body=? WHERE rec_id=?", ('{"tool":"x"}', first.event_id)
            )
        )
    finally:
        await log.close()
    assert await _run(["doctor", "--db", log_url, "--verify", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    tampered = [f for f in out["findings"] if "was edited" in f["what"]]
    assert [f["what"] for f in tampered] == [f"saga stuck: event {first.event_id} was edited"]
    assert "changed after it was written" in tampered[0]["fix"]
    assert "restore the log from a backup" in tampered[0]["fix"]
