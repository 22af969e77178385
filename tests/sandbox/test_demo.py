"""The demo scene: exact step states, drift untouched, one reversal, the naive stack's damage."""

from __future__ import annotations

import concurrent.futures
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import amends
from amends.cli import main
from amends.sandbox import World
from amends.sandbox.demo import (
    HUMAN_STAGE,
    SELECTED_STEP,
    SELECTIVE_TITLE,
    DemoResult,
    run_demo,
)

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


SELECTIVE_HEADLINE = (
    "2 of 2 taken back (1 compensated, leaving a trace) · 1 other step kept as it is"
)
CLOSURE_REASON = (
    "undoing training_fee (payments.charge) also undoes crm_training_fee (crm.update_field): "
    "it used training_fee's result ('ch_2')"
)


def test_demo_takes_back_the_charge_and_keeps_the_meeting(demo: DemoResult) -> None:
    """Issue 27, Done when: the demo shows one selective undo. The second request's charge is
    refunded and the CRM field recording it reverted; the meeting stays on the calendar."""
    w = demo.world
    [meeting] = [e for e in w["calendar"]["events"].values()
                 if e["title"] == "ACME admin training"]  # fmt: skip
    assert meeting["status"] == "confirmed"
    assert [n["kind"] for n in meeting["notices"]] == ["invitation", "invitation"]  # no cancel
    fee = w["payments"]["charges"]["ch_2"]
    assert (fee["description"], fee["cents"], fee["refunded"]) == (
        "ACME admin training", 150_000, 150_000,
    )  # fmt: skip
    [re_id] = fee["refunds"]
    assert w["payments"]["refunds"][re_id]["status"] == "pending"
    assert w["crm"]["records"]["acme"]["fields"]["training_charge"] is None
    assert demo.selective_outcome == [
        "The meeting 'ACME admin training' on 2026-12-14 is still on the calendar; invited: "
        "buyer@acme.example, dana@example.com",
        "The card charge of 1,500.00 USD for 'ACME admin training' is refunded: the refund is "
        "pending until 2026-12-10",
        "The CRM field that recorded the charge is empty again",
    ]


def test_demo_selective_report_covers_the_closure_and_names_the_kept_step(
    demo: DemoResult,
) -> None:
    report = demo.selective
    assert report is not None and report.title == SELECTIVE_TITLE
    assert (
        demo.selective_saga_id not in ("", demo.saga_id)
        and report.saga_id == demo.selective_saga_id
    )
    assert report.status == "partially_reversed"  # a refund leaves a trace: not "fully"
    assert report.headline == SELECTIVE_HEADLINE
    # the meeting is not in the reversal: a kept step is never reported as undone
    assert {s.step_id: s.state.value for s in report.steps} == {
        SELECTED_STEP: "compensated", "crm_training_fee": "reverted",
    }  # fmt: skip
    assert dict(report.selection or {}) == {
        "asked": [SELECTED_STEP],
        "steps": [SELECTED_STEP, "crm_training_fee"],
        "added": [
            {
                "step_id": "crm_training_fee",
                "because_of": SELECTED_STEP,
                "why": "output",
                "reason": CLOSURE_REASON,
            },
        ],
        "kept": ["training"],
    }
    [res] = report.residue
    assert res.parties == ("cus_acme",) and res.settles_at == "2026-12-10"
    assert res.what.startswith("Refund of 1,500.00 USD for charge ch_2")
    assert list(report.manual_actions) == []  # a refund needs no person


def test_demo_selective_preview_named_the_closure_before_the_undo(demo: DemoResult) -> None:
    preview, report = demo.selective_preview, demo.selective
    assert preview is not None and preview.selection is not None and report is not None
    assert [a["reason"] for a in preview.selection["added"]] == [CLOSURE_REASON]
    assert list(preview.selection["kept"]) == ["training"]
    # what the preview predicted is what the undo then did (rule 10)
    assert {p.step_id: p.predicted for p in preview.steps} == {
        s.step_id: s.state for s in report.steps
    }
    assert preview.steps[0].description == "Charge 1,500.00 USD to cus_acme"


def test_demo_selective_undo_is_in_the_log_and_the_rest_can_be_undone_later(
    demo: DemoResult, tmp_path: Path
) -> None:
    """The log another process reads holds the selective reversal; undoing the rest later (from
    a copy of the demo's log and world) cancels the meeting and refunds the charge only once."""
    import shutil

    assert demo.selective is not None
    db = str(tmp_path / "copy.db")
    for src, dst in ((demo.db, db), (str(demo.world_path), db + ".world")):
        for suffix in ("", "-wal"):  # the closed demo leaves no WAL; copy one if it did
            if Path(src + suffix).exists():
                shutil.copy(src + suffix, dst + suffix)

    async def rest() -> tuple[amends.UndoReport | None, amends.UndoReport]:
        async with amends.Engine(amends.sandbox.demo_catalog(db), log=db) as engine:
            stored = await engine.report(demo.selective_saga_id)
            return stored, await engine.undo(demo.selective_saga_id)

    stored, whole = in_thread(amends.run, rest())
    assert stored is not None and stored.to_dict() == demo.selective.to_dict()
    assert whole.reversal_id == stored.reversal_id and whole.selection is None
    assert {s.step_id: s.state.value for s in whole.steps} == {
        "training": "compensated", SELECTED_STEP: "compensated", "crm_training_fee": "reverted",
    }  # fmt: skip
    world = World(db + ".world")
    assert world.snapshot()["calendar"]["events"]["evt_2"]["status"] == "cancelled"
    refunds = [e for e in world.effects() if e["op"] == "refund"]
    assert len(refunds) == 2  # the renewal's and the training fee's, each once


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
    # no compensation applied twice: one refund per charge (the renewal's, then the training
    # fee's, taken back by the selective undo of the second request)
    assert len(refunds) == 2
    assert sorted(r["charge_id"] for r in w["payments"]["refunds"].values()) == ["ch_1", "ch_2"]


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
    # one charge per request: the renewal, and the training fee of the second request
    assert len([e for e in World(db + ".world").effects() if e["op"] == "charge"]) == 2


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


def test_demo_cli_prints_the_selective_undo_and_its_command_runs_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: the printed demo shows "take back the charge, keep the meeting" in words (the
    preview's closure, the report, the world), and "undo the rest later" runs as printed."""
    import re

    monkeypatch.setenv("COLUMNS", "400")  # one line per item: the test reads whole sentences
    monkeypatch.chdir(tmp_path)
    argv = ["demo", "--db", ".amends-demo.db", "--html", "r.html"]
    assert in_thread(main, argv) == 0
    out = capsys.readouterr().out
    scene = out[out.index(f"A second request: '{SELECTIVE_TITLE}'") :]
    lines = [line.strip() for line in scene.splitlines()]
    assert "A person asks: take back the charge, keep the meeting." in scene
    assert "• “Charge 1,500.00 USD to cus_acme” is undone: the person asked for it" in lines
    assert (
        "• “Set training_charge of CRM record acme to 'ch_2'” is undone too: it used the result "
        "of “Charge 1,500.00 USD to cus_acme”"
    ) in lines
    assert "• 1 other step of the request stays as it is" in lines
    assert f"{SELECTIVE_HEADLINE} — partially_reversed" in lines
    assert (
        "• The meeting 'ACME admin training' on 2026-12-14 is still on the calendar; invited: "
        "buyer@acme.example, dana@example.com"
    ) in lines
    # the preview comes before the undo's report, the world after it
    assert (
        scene.index("The preview")
        < scene.index(SELECTIVE_HEADLINE)
        < scene.index("What the world shows now")
    )
    # the sentences are for people: no saga, reversal or step ids in them
    said = scene[: scene.index("Undo only the charge")]
    assert not re.search(r"saga_|rev_|training_fee|crm_training_fee", said)
    [later] = [line for line in lines if line.startswith("Undo the rest later")]
    words = shlex.split(later.split(": ", 1)[1])
    assert words[:2] == ["amends", "undo"] and "--catalog" in words and "--db" in words
    assert in_thread(main, words[1:]) == 0
    rest = capsys.readouterr().out
    assert "3 of 3 taken back (2 compensated, leaving a trace)" in rest
    world = World(str(tmp_path / ".amends-demo.db.world"))
    assert world.snapshot()["calendar"]["events"]["evt_2"]["status"] == "cancelled"
    assert len([e for e in world.effects() if e["op"] == "refund"]) == 2  # not refunded twice


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
    selective = data["selective"]  # issue 27: the second request, undone only in part
    assert selective["report"]["headline"] == SELECTIVE_HEADLINE
    assert selective["report"]["saga_id"] == selective["saga_id"] != data["saga_id"]
    assert selective["preview"]["selection"]["added"][0]["reason"] == CLOSURE_REASON
    assert selective["outcome"][-1] == "The CRM field that recorded the charge is empty again"


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
    # issue 27 (and 26 item 3): the selective scene's "undo the rest later" runs as printed in
    # a new process, where `amends` is `python -m amends.cli` as printed, not a name on PATH
    [later] = [x for x in proc.stdout.splitlines() if x.startswith("Undo the rest later")]
    words = shlex.split(later.split(": ", 1)[1])
    assert words[:3] == [sys.executable, "-m", "amends.cli"], later
    rest = subprocess.run(words, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert "3 of 3 taken back (2 compensated, leaving a trace)" in rest.stdout


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
