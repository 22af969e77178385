"""Issue 11 item 5: saga API mistakes get one clear error naming the value and the fix."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from input_tools import CATALOG, SPEC

import amends
from amends.cli import main

Rows = Callable[[str], list[str]]


async def test_reusing_a_saga_id_is_refused_by_name_and_the_log_is_unchanged(
    saga_db: tuple[str, str], rows: Rows
) -> None:
    db, saga_id = saga_db
    before = rows(db)
    engine = amends.Engine(CATALOG, log=db)
    with pytest.raises(amends.ConfigError) as exc:
        async with engine.saga("again", saga_id=saga_id):
            pass
    await engine.close()
    assert f"saga id {saga_id!r} is already used in" in str(exc.value)
    assert "omit saga_id= for a generated one" in str(exc.value)
    assert rows(db) == before


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "a/b", "\x1b[2J", 7])
async def test_malformed_saga_and_step_ids_are_refused(engine: amends.Engine, bad: object) -> None:
    with pytest.raises(amends.ConfigError, match="is not valid: use 1-128 letters, digits"):
        engine.saga("t", saga_id=bad)  # type: ignore[arg-type]
    async with engine.saga("t") as saga:
        with pytest.raises(amends.ConfigError, match="step id .* is not valid"):
            saga.call("mail.send", step_id=bad, to="a@x", subject="s")  # type: ignore[arg-type]


async def test_a_custom_step_id_never_collides_with_automatic_ones(engine: amends.Engine) -> None:
    """Naming the first step "s2" used to make the second (automatic "s2") and every later
    unnamed call fail; automatic ids now skip the taken ones."""
    async with engine.saga("ids") as saga:
        a = saga.call("mail.send", step_id="s2", to="a@x", subject="1")
        b = saga.call("mail.send", to="b@x", subject="2")
        c = saga.call("mail.send", to="c@x", subject="3")
        d = saga.call("mail.send", step_id="mine", to="d@x", subject="4")
        e = saga.call("mail.send", to="e@x", subject="5")
        await saga.gather(a, b, c, d, e)
    assert [a.id, b.id, c.id, d.id, e.id] == ["s2", "s3", "s4", "mine", "s5"]
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None and [s.state for s in rec.steps] == ["done"] * 5
    with pytest.raises(amends.SagaClosedError):
        saga.call("mail.send", to="f@x", subject="6")


async def test_a_step_reference_formatted_into_a_string_is_caught_with_the_fix(
    engine: amends.Engine,
) -> None:
    async with engine.saga("fmt") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        with pytest.raises(amends.ContractError) as exc:
            saga.call("mail.send", to="x@y", subject=f"see {a['version']}")
        with pytest.raises(amends.ContractError, match="cannot be formatted into a string"):
            saga.call("mail.send", to="x@y", subject=f"see {a}")
        with pytest.raises(amends.ContractError, match="cannot be formatted into a string"):
            saga.call("mail.send", to="x@y", subject="see %s" % a["version"])  # noqa: UP031
        await a
    message = str(exc.value)
    assert "ref(s1['version']) is the result of step s1" in message
    assert "await the step first and pass after=[step]" in message
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None and [s.tool for s in rec.steps] == ["crm.update_field"]


async def test_a_reference_to_a_missing_result_key_fails_the_step_by_name_and_reports_it(
    engine: amends.Engine,
) -> None:
    async with engine.saga("missing key") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        b = saga.call("mail.send", to="x@y", subject=a["no_such_key"])
        with pytest.raises(amends.StepFailedError) as exc:
            await b
    assert isinstance(exc.value, amends.AmendsError)
    message = str(exc.value)
    assert "step s2 (mail.send) never ran: reference ref(s1['no_such_key'])" in message
    assert "has no 'no_such_key'" in message
    assert exc.value.step_id == "s2"
    report = await engine.undo(saga.id)
    assert [(s.step_id, s.state.value) for s in report.steps] == [
        ("s1", "reverted"),
        ("s2", "not_needed"),
    ]


@pytest.mark.parametrize(
    ("port", "fragment"),
    [
        ("99999", "port 99999 is out of range; give a port from 1 to 65535"),
        ("http", "'http' is not a port number"),
    ],
)
def test_serve_with_a_bad_port_is_one_line(
    saga_db: tuple[str, str], capsys: pytest.CaptureFixture[str], port: str, fragment: str
) -> None:
    db, _ = saga_db
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--db", db, "--catalog", SPEC, "--no-auth", "--port", port])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert fragment in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_serve_on_a_busy_port_is_one_line_and_never_says_serving(
    saga_db: tuple[str, str],
) -> None:
    db, _ = saga_db
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "amends.cli", "serve", "--db", db, "--no-auth", "--catalog",
             "amends.sandbox:demo_catalog", "--port", str(port)],
            capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).parent),
        )  # fmt: skip
    finally:
        busy.close()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"amends: error: cannot serve on 127.0.0.1:{port}: the port is already in use; stop "
        f"the other server or pick another --port"
    ]
    assert "running on" not in proc.stdout + proc.stderr


async def test_a_saga_id_taken_between_the_check_and_the_insert_is_still_named(
    saga_db: tuple[str, str], rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates the same chosen id just after our check: not a raw UNIQUE error."""
    db, saga_id = saga_db
    before = rows(db)
    engine = amends.Engine(CATALOG, log=db)
    real, seen = engine.log.get_saga, []

    async def racing(sid: str) -> object:
        seen.append(sid)
        return None if len(seen) == 1 else await real(sid)

    monkeypatch.setattr(engine.log, "get_saga", racing)
    with pytest.raises(amends.ConfigError, match=f"saga id {saga_id!r} is already used in"):
        async with engine.saga("again", saga_id=saga_id):
            pass
    await engine.close()
    assert seen == [saga_id, saga_id]
    assert rows(db) == before


def _typed_catalog(world: dict[str, Any]) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("kv.put")
    async def put(call: amends.Call, key: str) -> Any:
        world[key] = 1
        return len(key, "too many")  # type: ignore[call-arg]  # a TypeError inside the tool

    @catalog.tool("kv.sync_put")
    def sync_put(call: amends.Call, key: str) -> Any:
        world[key] = 1
        return "ok"

    return catalog


@pytest.mark.parametrize("tool", ["kv.put", "kv.sync_put"])
async def test_arguments_that_do_not_fit_the_signature_fail_the_step_and_nothing_happened(
    tool: str,
) -> None:
    """Python refused the call before any line of the tool ran: failed, never in doubt."""
    world: dict[str, Any] = {}
    engine = amends.Engine(_typed_catalog(world), log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError) as err:
            async with engine.saga("Put") as saga:
                saga.call(tool, kee="k")
        assert err.value.state == "failed"
        assert f"{tool} was not called: its arguments do not fit its signature" in str(err.value)
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and [s.state for s in rec.steps] == ["failed"] and world == {}
    finally:
        await engine.close()


async def test_a_type_error_raised_inside_the_tool_stays_in_doubt() -> None:
    world: dict[str, Any] = {}
    engine = amends.Engine(_typed_catalog(world), log=amends.SqliteLog(":memory:"))
    try:
        with pytest.raises(amends.StepFailedError) as err:
            async with engine.saga("Put") as saga:
                saga.call("kv.put", key="k")
        assert err.value.state == "in_doubt" and "raised TypeError" in str(err.value)
        rec = await engine.log.get_saga(saga.id)
        assert rec is not None and [s.state for s in rec.steps] == ["in_doubt"]
        assert world == {"k": 1}
    finally:
        await engine.close()


@pytest.mark.parametrize("how", ["one", "list", "none"])
async def test_after_and_undo_after_take_one_step_a_list_or_none(
    engine: amends.Engine, how: str
) -> None:
    """A single step given to after= / undo_after= looped forever (a Step's [...] never ends)."""
    async with engine.saga("Order") as saga:
        a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
        given = {"one": a, "list": [a], "none": None}[how]
        b = saga.call("mail.send", to="bob@acme.test", subject="Won", after=given)
        c = saga.call(
            "crm.update_field", record_id="r2", field="stage", value="won", undo_after=given
        )
    rec = await engine.log.get_saga(saga.id)
    assert rec is not None
    deps = {s.step_id: list(s.deps) for s in rec.steps}
    assert deps[b.id] == ([] if how == "none" else [a.id])
    assert [o.id for o in c.undo_after] == ([] if how == "none" else [a.id])
