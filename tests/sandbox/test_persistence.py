"""A World with a path persists every mutation; a second World(path) sees it all."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import amends
from amends.sandbox import World, demo_catalog, sandbox_catalog
from amends.sandbox.catalog import world_path_for


def test_second_world_on_the_same_file_sees_state_effects_and_clock(tmp_path: Path) -> None:
    path = str(tmp_path / "w.world")
    a = World(path)
    ch = a.payments.charge("cus_acme", 100, idempotency_key="k")
    a.crm.human_edit("acme", "stage", "legal")
    a.advance(42)
    b = World(path)  # while a is still open, as `amends show` would
    assert b.snapshot() == a.snapshot()
    assert b.effects() == a.effects()
    assert b.now() == a.now()
    assert b.payments.charge("cus_acme", 100, idempotency_key="k") == ch  # replay survives
    assert b.payments.charge("cus_acme", 100)["id"] == "ch_2"  # counters survive
    assert a.payments.get_charge("ch_2")["cents"] == 100  # a reads b's write
    a.close()
    b.close()


def test_reopening_does_not_reseed(tmp_path: Path) -> None:
    path = str(tmp_path / "w.world")
    with World(path) as w:
        w.crm.human_edit("acme", "stage", "legal")
        assert repr(w) == f"World({path!r}, seed=0, now='2026-12-07T09:00:00+00:00')"
    with World(path) as again:
        assert again.crm.read_field("acme", "stage") == "legal"
        assert again.crm.get("acme")["version"] == 2


def test_unwritable_path_names_the_path(tmp_path: Path) -> None:
    bad = str(tmp_path / "missing-dir" / "w.world")
    with pytest.raises(amends.ConfigError, match="missing-dir"):
        World(bad)


def test_world_path_for_db() -> None:
    assert world_path_for("x.db") == "x.db.world"
    assert world_path_for("sqlite:///tmp/x.db") == "tmp/x.db.world"
    assert world_path_for(":memory:") is None


async def test_undo_in_a_fresh_catalog_over_the_same_files(tmp_path: Path) -> None:
    """Forward with one world object, undo with demo_catalog(db): as `amends undo` does."""
    db = str(tmp_path / "s.db")
    eng = amends.Engine(demo_catalog(db), log=db)
    async with eng.saga("charge") as saga:
        saga.call("payments.charge", customer="cus_acme", cents=700)
    await eng.close()
    eng2 = amends.Engine(demo_catalog(db), log=db)
    report = await eng2.undo(saga.id)
    await eng2.close()
    assert report.status == "partially_reversed"
    assert World(db + ".world").payments.get_charge("ch_1")["refunded"] == 700


@pytest.mark.slow
async def test_amends_undo_in_a_new_process_refunds_in_the_world_file(tmp_path: Path) -> None:
    """Forward here; `amends undo` in another process undoes it against the world file."""
    db = str(tmp_path / "s.db")
    eng = amends.Engine(sandbox_catalog(World(db + ".world")), log=db)
    async with eng.saga("charge") as saga:
        saga.call("payments.charge", customer="cus_acme", cents=900)
    await eng.close()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "amends.cli", "undo", saga.id, "--db", db,
        # issue 21 item 2: the operator allows the sandbox's catalog (never the log by itself)
        "--catalog", "amends.sandbox:demo_catalog",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert "partially_reversed" in out.decode()
    assert World(db + ".world").payments.get_charge("ch_1")["refunded"] == 900


def test_atomic_rolls_back_a_failed_vendor_operation(tmp_path: Path) -> None:
    """A vendor call that raises leaves the file exactly as it was."""
    w = World(str(tmp_path / "w.world"))
    before = (w.snapshot(), w.effects())
    with pytest.raises(amends.PermanentError):
        w.payments.refund("ch_404", 1)
    assert (w.snapshot(), w.effects()) == before


_WRITER = """
import sys
from amends.sandbox import World
w = World(sys.argv[1])
for i in range(40):
    w.payments.charge("cus_acme", 1, idempotency_key=f"{sys.argv[2]}-{i}")
"""


@pytest.mark.slow
async def test_two_processes_writing_one_world_file_never_interleave(tmp_path: Path) -> None:
    """Ids stay unique and every charge is kept when two processes charge at once."""
    path = str(tmp_path / "w.world")
    World(path).close()
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", _WRITER, path, tag)
        for tag in ("a", "b")
    ]
    for p in procs:
        assert await asyncio.wait_for(p.wait(), 60) == 0
    w = World(path)
    charges = w.snapshot()["payments"]["charges"]
    assert len(charges) == 80 and sorted(charges) == sorted(f"ch_{i}" for i in range(1, 81))
    assert len([e for e in w.effects() if e["op"] == "charge"]) == 80


def test_a_world_file_nobody_closed_is_closed_when_the_world_is_collected(tmp_path: Path) -> None:
    """``demo_catalog(db)`` (the CLI's catalog factory) opens the world file and hands the world
    to a catalog, which has no ``close``: the world's connection is closed when the world is
    collected, not left open for the life of the process (Python 3.13 warns about a sqlite3
    connection collected unclosed). ``close`` closes it at once, and a second close is a no-op."""
    import gc
    import sqlite3

    world = World(str(tmp_path / "w.world"))
    conn = world._store._db
    assert conn is not None
    del world
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
    closed = World(str(tmp_path / "w.world"))
    conn = closed._store._db
    closed.close()
    closed.close()
    assert conn is not None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
