"""The demo scene: exact step states, drift untouched, one reversal, the naive stack's damage."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import amends
from amends.cli import main
from amends.sandbox import World
from amends.sandbox.demo import HUMAN_STAGE, DemoResult, run_demo

T = TypeVar("T")


def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in a fresh thread: its asyncio.run() must not replace this thread's loop
    (pytest-asyncio's), or the replaced loop is reported unclosed."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


EXPECTED_STATES = {
    "crm_stage": "drifted",
    "charge": "compensated",
    "crm_charge": "reverted",
    "email_buyer": "acknowledged",
    "email_finance": "acknowledged",
    "kickoff": "compensated",
    "chat": "compensated",
    "note": "reverted",
    "draft": "reverted",
    "share": "compensated",
    "reminder": "reverted",
    "sms": "acknowledged",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return in_thread(run_demo, str(tmp_path_factory.mktemp("demo") / "d.db"))


def test_demo_step_states_and_status(demo: DemoResult) -> None:
    report = demo.report
    assert len(report.steps) == 12
    assert {s.step_id: s.state.value for s in report.steps} == EXPECTED_STATES
    assert report.status == "cannot_undo"
    assert report.headline == (
        "8 of 12 taken back (4 compensated, leaving a trace) · 4 need your attention"
    )
    verbs = {s.step_id: s.verb for s in report.steps}
    assert verbs["charge"] == "Compensate" and verbs["email_buyer"] == "Acknowledge"
    # rule 8: one verb per state: a drifted step still stands, a person must acknowledge it
    assert verbs["crm_stage"] == "Acknowledge" and verbs["crm_charge"] == "Revert"


def test_demo_both_undo_clicks_join_one_reversal(demo: DemoResult) -> None:
    assert demo.second_report.reversal_id == demo.report.reversal_id
    assert demo.second_report.to_dict() == demo.report.to_dict()


def test_demo_human_edit_is_drifted_and_untouched(demo: DemoResult) -> None:
    step = demo.report.step("crm_stage")
    assert step.detail == (
        "someone changed it since the agent acted: expected 'closed_won', found "
        f"'{HUMAN_STAGE}'; left as it is"
    )
    acme = demo.world["crm"]["records"]["acme"]
    assert acme["fields"]["stage"] == HUMAN_STAGE
    assert "last_charge" in acme["fields"] and acme["fields"]["last_charge"] is None
    assert acme["notes"] == {}


def test_demo_charge_compensated_with_refund_residue(demo: DemoResult) -> None:
    charge = demo.report.step("charge")
    [res] = charge.residue
    assert res.parties == ("cus_acme",) and res.settles_at == "2026-12-10"
    assert "Refund of 12,000.00 USD" in res.what
    pay = demo.world["payments"]
    assert pay["charges"]["ch_1"]["refunded"] == 1_200_000
    assert pay["refunds"]["re_1"]["status"] == "pending"
    assert [r.settles_at for r in demo.report.residue] == ["2026-12-10", None, None, None]


def test_demo_emails_and_sms_acknowledged_with_drafts(demo: DemoResult) -> None:
    actions = {m.step_id: m for m in demo.report.manual_actions}
    assert set(actions) == {"crm_stage", "email_buyer", "email_finance", "sms"}
    assert actions["email_buyer"].who == "the sender"
    assert actions["email_buyer"].parties == ("buyer@acme.example",)
    assert actions["email_buyer"].draft is not None
    assert "Your ACME renewal is confirmed" in actions["email_buyer"].draft
    assert actions["sms"].parties == ("+1-555-0100",)
    statuses = {m["subject"]: m["status"] for m in demo.world["mail"]["messages"].values()}
    assert statuses == {
        "Your ACME renewal is confirmed": "delivered",
        "ACME renewal booked: 12,000.00 USD": "delivered",
        "Reminder: prepare the ACME kickoff": "cancelled",
        "Correction: your ACME renewal": "delivered",  # the draft a person sent (issue 27)
    }


def test_demo_a_person_sends_the_buyers_draft_as_a_follow_up_of_the_reversal(
    demo: DemoResult,
) -> None:
    """Issue 27: the demo shows one draft sent by a person; it handles that manual action."""
    sent = demo.sent
    assert sent is not None
    assert (sent.follow_up_id, sent.state, sent.by) == (
        "email_buyer+f1", "sent", "dana@example.com",
    )  # fmt: skip
    assert sent.reversal_id == demo.report.reversal_id and sent.parties == ("buyer@acme.example",)
    [mail] = [m for m in demo.world["mail"]["messages"].values()
              if m["subject"] == "Correction: your ACME renewal"]  # fmt: skip
    assert mail["to"] == "buyer@acme.example" and mail["body"].endswith("Dana")

    async def read() -> amends.UndoReport | None:
        async with amends.Engine(amends.Catalog(), log=demo.db) as engine:
            return await engine.report(demo.saga_id)

    report = in_thread(amends.run, read())
    assert report is not None
    assert [m.step_id for m in report.open_manual_actions] == ["crm_stage", "email_finance", "sms"]
    assert report.handled("email_buyer")["by"] == "dana@example.com"  # type: ignore[index]


def test_demo_true_world_after_undo(demo: DemoResult) -> None:
    w = demo.world
    assert w["calendar"]["events"]["evt_1"]["status"] == "cancelled"
    assert w["chat"]["messages"]["chat_1"]["status"] == "deleted"
    assert w["chat"]["messages"]["chat_1"]["seen_by"] == ["sam"]
    assert w["docs"]["docs"]["doc_1"]["status"] == "deleted"
    assert w["docs"]["docs"]["doc_1"]["shared_with"] == []
    world = World(demo.world_path)  # persisted: another process sees the same
    assert world.snapshot() == demo.world
    refunds = [e for e in world.effects() if e["op"] == "refund"]
    assert len(refunds) == 1  # no compensation applied twice


def test_demo_naive_stack_claims_success_and_did_damage(demo: DemoResult) -> None:
    assert len(demo.naive_claims) == 12
    assert {c["claim"] for c in demo.naive_claims} == {"Undone"}
    assert [c["step_id"] for c in demo.naive_claims][:2] == ["sms", "reminder"]  # time order
    nw = demo.naive_world
    assert nw["crm"]["records"]["acme"]["fields"]["stage"] == "negotiation"
    assert demo.naive_damage[0] == (
        f"CRM acme.stage is 'negotiation': the undo stack overwrote the account owner's edit "
        f"('{HUMAN_STAGE}')"
    )
    assert "Text message to +1-555-0100 is still delivered" in demo.naive_damage
    # the true world kept the human's value
    assert demo.world["crm"]["records"]["acme"]["fields"]["stage"] == HUMAN_STAGE


def test_demo_is_deterministic_and_recreates_the_db(tmp_path: Path) -> None:
    db = str(tmp_path / "d.db")
    a = in_thread(run_demo, db, seed=3)
    b = in_thread(run_demo, db, seed=3)
    assert a.saga_id != b.saga_id
    assert a.world == b.world
    assert World(db + ".world").effects() == World(db + ".world").effects()
    assert len([e for e in World(db + ".world").effects() if e["op"] == "charge"]) == 1


def test_demo_cli_prints_report_and_writes_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "r.html"
    assert in_thread(main, ["demo", "--db", str(tmp_path / "d.db"), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "cannot_undo" in out and "Undone 12 of 12" in out
    assert "overwrote the account" in out
    assert "• [email_buyer] Email 'Your ACME renewal is confirmed'" in out  # not eaten as markup
    page = html.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html") and "cannot_undo" in page


def test_demo_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert (
        in_thread(main, ["demo", "--db", str(tmp_path / "d.db"), "--html", str(html), "--json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["report"]["status"] == "cannot_undo"
    assert data["same_reversal"] is True
    assert {s["step_id"]: s["state"] for s in data["report"]["steps"]} == EXPECTED_STATES
    assert data["html"] == str(html) and html.exists()


def test_demo_cli_unwritable_html_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "no-dir" / "r.html"
    assert in_thread(main, ["demo", "--db", str(tmp_path / "d.db"), "--html", str(bad)]) == 2
    assert "no-dir" in capsys.readouterr().err


@pytest.mark.slow
def test_amends_demo_command_runs_in_seconds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "amends.cli", "demo", "--db", ".amends-demo.db"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "amends-demo-report.html").exists()
    assert (tmp_path / ".amends-demo.db.world").exists()


def test_sandbox_exports_are_frozen() -> None:
    """Other areas code against these names (shared/sandbox_api.md); a change shows here."""
    import amends.sandbox

    assert amends.sandbox.__all__ == [
        "EPOCH",
        "DemoResult",
        "Faults",
        "SimulatedCrash",
        "World",
        "current_world",
        "demo_catalog",
        "run_demo",
        "run_demo_async",
        "sandbox_catalog",
        "use_world",
    ]
    w = World()
    assert {"mail", "calendar", "crm", "payments", "chat", "docs", "sms", "faults"} <= set(vars(w))


def test_demo_serve_without_server_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "amends.server.demo", None)  # as if not installed
    argv = ["demo", "--db", str(tmp_path / "d.db"), "--html", str(tmp_path / "r.html")]
    assert in_thread(main, [*argv, "--json", "--serve"]) == 2
    assert "amends[server]" in capsys.readouterr().err
