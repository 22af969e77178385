"""The applier through the real engine, with a transport answering in memory: what a
contract-file tool records when it runs as an inverse. Its call has succeeded by then, so a
``compensate_residue`` or ``compensate_follow_up`` template that cannot be filled must not make
the inverse ``failed`` -- the report would ask a person to redo a refund that was made -- but
becomes residue saying so (rule 7: a missing follow-up is residue, never the inverse's state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import amends
from amends import StepState
from amends.contract_file import TransportRequest, TransportResult
from contract_setup import file_catalog

CONTRACTS = """
[[tool]]
name = "get_charge"
reversibility = "read_only"

[[tool]]
name = "charge"
reversibility = "compensable"
inverse = { tool = "refund", args = { charge_id = "{result.id}" } }
expect = { probe = "get_charge", args = { charge_id = "{result.id}" }, path = "refunded", equals = 0 }

[[tool]]
name = "refund"
reversibility = "irreversible"
compensate_residue = { what = "Refund settles on {result.settles_on}", settles_at = "{result.settles_on}" }
compensate_follow_up = [{ tool = "notify", args = { text = "refunded {result.nope}" } }]

[[tool]]
name = "notify"
reversibility = "irreversible"
"""  # noqa: E501


class Psp:
    def __init__(self) -> None:
        self.refunded = 0
        self.calls: list[str] = []

    async def __call__(self, request: TransportRequest) -> TransportResult:
        self.calls.append(request.tool)
        if request.tool == "charge":
            return TransportResult("ok", structured={"id": "ch_1"})
        if request.tool == "get_charge":
            return TransportResult("ok", structured={"refunded": self.refunded})
        if request.tool == "refund":
            self.refunded += 1
            return TransportResult("ok", structured={"id": "re_1"})  # no settles_on
        return TransportResult("ok", structured={})


def _catalog(tmp_path: Path, psp: Psp) -> amends.Catalog:
    catalog: amends.Catalog = file_catalog(tmp_path / "c.toml", CONTRACTS, psp)
    return catalog


async def test_an_inverse_whose_residue_cannot_be_described_is_still_compensated(
    tmp_path: Path,
) -> None:
    psp = Psp()
    engine = amends.Engine(_catalog(tmp_path, psp), log=amends.SqliteLog(":memory:"))
    async with engine.saga("pay") as saga:
        await saga.call("charge", customer="c1", cents=100)
    report = await engine.undo(saga.id)
    await engine.close()
    step = report.step("s1")
    assert step.state is StepState.COMPENSATED, step.detail
    assert psp.refunded == 1 and psp.calls.count("refund") == 1
    said: list[Any] = [r.what for r in report.residue]
    assert any(
        "refund ran, but what it leaves behind could not be described" in w and "settles_on" in w
        for w in said
    ), said
    assert any(
        "the follow-up notify it asks for could not be filled in" in w and "'nope'" in w
        for w in said
    ), said
    assert "notify" not in psp.calls  # never sent with a hole in it
    assert list(report.manual_actions) == []


async def test_an_inverse_argument_named_deadline_reaches_the_inverse_apart_from_the_undo_window(
    tmp_path: Path,
) -> None:
    """An upstream's own argument may be named ``deadline`` (or ``call``): the contract file
    cannot rename it. ``inverse.args.deadline`` is the tool's argument, ``inverse.deadline``
    the undo window; neither swallows the other (it used to collide with the window's key when
    the step ran, after the effect, so the file was refused and the tool could get no
    contract)."""
    world = {"due": "2026-01-01"}
    sent: list[dict[str, Any]] = []

    async def tasks(request: TransportRequest) -> TransportResult:
        sent.append({"tool": request.tool, **request.args})
        if request.tool == "set_due":
            before = world["due"]
            world["due"] = request.args["deadline"]
            return TransportResult("ok", structured={"old": before})
        return TransportResult("ok", structured={"deadline": world["due"]})

    text = (
        '[[tool]]\nname = "get_due"\nreversibility = "read_only"\n\n'
        '[[tool]]\nname = "set_due"\nreversibility = "reversible"\n'
        'inverse = { tool = "set_due", deadline = "2999-01-01T00:00:00+00:00", '
        'args = { call = "{args.call}", deadline = "{result.old}" } }\n'
        'expect = { probe = "get_due", path = "deadline", equals = "{args.deadline}" }\n'
    )
    catalog = file_catalog(tmp_path / "c.toml", text, tasks)
    engine = amends.Engine(catalog, log=amends.SqliteLog(":memory:"))
    async with engine.saga("due") as saga:
        await saga.call("set_due", {"call": "c1", "deadline": "2026-02-02"})
    report = await engine.undo(saga.id)
    await engine.close()
    assert [s.state for s in report.steps] == [StepState.REVERTED]
    assert world == {"due": "2026-01-01"}
    assert sent[-1] == {"tool": "set_due", "call": "c1", "deadline": "2026-01-01"}


PROSE = """
[[tool]]
name = "status"
reversibility = "read_only"

[[tool]]
name = "switch"
reversibility = "reversible"
capture = [{ name = "branch", tool = "status", match = "(?m)^On branch (\\\\S+)" }]
inverse = { tool = "switch", args = { to = "{capture.branch}" } }
no_drift_check = "a test"
"""


class Repo:
    """A tool that answers in prose, as the git server does."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.switched: list[str] = []

    async def __call__(self, request: TransportRequest) -> TransportResult:
        if request.tool == "status":
            return TransportResult("ok", text=self.status)
        self.switched.append(request.args["to"])
        return TransportResult("ok", text=f"Switched to {request.args['to']}")


async def test_a_capture_reads_a_prose_answer_with_match_and_undo_uses_the_group(
    tmp_path: Path,
) -> None:
    repo = Repo("Repository status:\nOn branch main\nnothing to commit")
    engine = amends.Engine(
        file_catalog(tmp_path / "c.toml", PROSE, repo), log=amends.SqliteLog(":memory:")
    )
    async with engine.saga("s") as saga:
        await saga.call("switch", to="feature")
    report = await engine.undo(saga.id)
    await engine.close()
    assert report.step("s1").state is StepState.REVERTED
    assert repo.switched == ["feature", "main"]


async def test_a_match_that_finds_nothing_refuses_the_write(tmp_path: Path) -> None:
    """A detached HEAD: undo could not name where to go back, so nothing is sent (rule 1)."""
    repo = Repo("Repository status:\nHEAD detached at 1a2b3c4")
    engine = amends.Engine(
        file_catalog(tmp_path / "c.toml", PROSE, repo), log=amends.SqliteLog(":memory:")
    )
    with pytest.raises(amends.StepFailedError) as exc:
        async with engine.saga("s") as saga:
            await saga.call("switch", to="feature")
    await engine.close()
    assert "capture 'branch': match '(?m)^On branch (\\\\S+)' found nothing in" in str(exc.value)
    assert "the write was not sent" in str(exc.value)
    assert repo.switched == []
