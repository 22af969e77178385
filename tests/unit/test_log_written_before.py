"""Issue 29: a log written before the step path changed (records encoded once, chain hash over
the stored text's bytes) still verifies and undoes with this code.

``golden/log_before_issue29.sql`` and ``log_before_issue29-keyed.sql`` are SQL dumps of logs that
``write_log`` below wrote with amends at commit 2b4adad (before the change), with a plain
SHA-256 chain and with an HMAC key: one saga left to undo, one saga already undone (its stored
report sums up a history hashed the old way). Regenerate them only on purpose, from that
commit: ``python tests/unit/test_log_written_before.py DIR``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log.integrity import LOG
from amends._log.sql import SCHEMA_VERSION

GOLDEN = Path(__file__).with_name("golden")
KEY = b"issue-29-old-log-key"
WORLD_AFTER_FORWARD = {"a": 1, "b": 2, "c": 3}
"""The world as the forward pass of ``open_saga`` left it (the undone saga left nothing)."""


def catalog(world: dict[str, Any]) -> amends.Catalog:
    """``kv.put`` (reversible, inverse ``kv.delete``) over ``world``, and a charge that leaves
    residue (compensable), so the fixture has both verbs."""
    cat = amends.Catalog()

    @cat.tool("kv.put", reversibility="reversible")
    async def put(call: amends.Call, key: str, value: int) -> dict[str, Any]:
        world[key] = value
        call.inverse("kv.delete", key=key)
        call.expect("kv.get", {"key": key}, equals=value)
        return {"key": key, "value": value}

    @cat.tool("kv.delete", reversibility="reversible")
    async def delete(call: amends.Call, key: str) -> None:
        world.pop(key, None)

    @cat.tool("kv.get", reversibility="read_only")
    async def get(call: amends.Call, key: str) -> Any:
        return world.get(key)

    return cat


async def write_log(path: str, key: bytes | None) -> None:
    """The sagas of the fixture (run once with the old code to make the dump)."""
    world: dict[str, Any] = {}
    engine = amends.Engine(catalog(world), log=amends.SqliteLog(path, signing_key=key))
    async with engine.saga("undone before", saga_id="undone") as saga:
        x = saga.call("kv.put", key="x", value=9)
        await saga.call("kv.put", key="y", value=x["value"])
    report = await engine.undo("undone")
    assert report.status == "fully_reversed", report.to_dict()
    async with engine.saga("left to undo", saga_id="open") as saga:
        a = saga.call("kv.put", key="a", value=1)
        b = saga.call("kv.put", key="b", value=2, after=[a])
        await saga.gather(a, b, saga.call("kv.put", key="c", value=3))
    await engine.close()


def _load(tmp_path: Path, suffix: str = "") -> str:
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.executescript((GOLDEN / f"log_before_issue29{suffix}.sql").read_text())
    conn.close()
    return path


@pytest.mark.parametrize(("key", "suffix"), [(None, ""), (KEY, "-keyed")])
async def test_a_log_written_before_verifies_and_undoes(
    tmp_path: Path, key: bytes | None, suffix: str
) -> None:
    path = _load(tmp_path, suffix)
    # the check is not vacuous: read with another key, every record reads as edited
    wrong = amends.SqliteLog(path, signing_key=b"another key" if key is None else None)
    assert {(p.saga_id, p.what) for p in await wrong.verify() if p.saga_id != LOG} == {
        ("undone", "edited"),
        ("undone", "report mismatch"),
        ("open", "edited"),
    }
    await wrong.close()
    world = dict(WORLD_AFTER_FORWARD)
    engine = amends.Engine(catalog(world), log=amends.SqliteLog(path, signing_key=key))
    assert await engine.log.verify() == []  # every record, the report and the log's heads
    done = await engine.undo("undone")  # the stored report, verified, is returned
    assert (done.status, [s.state for s in done.steps]) == (
        "fully_reversed",
        ["reverted", "reverted"],
    )
    report = await engine.undo("open")
    assert report.status == "fully_reversed", report.to_dict()
    assert sorted((s.step_id, s.state) for s in report.steps) == [
        ("s1", "reverted"),
        ("s2", "reverted"),
        ("s3", "reverted"),
    ]
    assert world == {}
    # the log now says it holds the new hash form: an amends that knows only the old form
    # refuses it as newer ("upgrade amends") rather than reading the new records as edited
    assert await engine.log.schema_version() == SCHEMA_VERSION == 6
    # what this code appended to the old chains (the reversal's records) verifies too
    assert await engine.log.verify() == []
    await engine.close()


async def test_an_edited_old_record_is_still_caught(tmp_path: Path) -> None:
    """Accepting the old encoding does not accept an edit: a changed argument in the old
    log is named as edited, and the saga is not acted on."""
    path = _load(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE records SET body = replace(body, '\"value\":2', '\"value\":7') "
        "WHERE saga_id='open' AND step_id='s2' AND phase='i'"
    )
    conn.commit()
    conn.close()
    engine = amends.Engine(catalog(dict(WORLD_AFTER_FORWARD)), log=amends.SqliteLog(path))
    problems = [p for p in await engine.log.verify("open")]
    assert [(p.saga_id, p.what) for p in problems] == [("open", "edited")]
    await engine.close()


if __name__ == "__main__":  # regenerate the dumps (see the module docstring)
    for key, suffix in ((None, ""), (KEY, "-keyed")):
        out = Path(sys.argv[1]) / f"log_before_issue29{suffix}.sql"
        db = out.with_suffix(".db")
        for ext in ("", "-wal", "-shm"):
            Path(f"{db}{ext}").unlink(missing_ok=True)
        asyncio.run(write_log(str(db), key))
        con = sqlite3.connect(db)
        out.write_text("\n".join(con.iterdump()) + "\n")
        con.close()
