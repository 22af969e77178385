"""Issue 11 item 3: a saga is undone with the catalog that ran it, never the sandbox by default."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from input_tools import SPEC, WORLD

import amends
from amends._catalog_ref import SANDBOX_REF
from amends.cli import main

Rows = Callable[[str], list[str]]


async def test_a_saga_records_the_catalog_that_ran_it(saga_db: tuple[str, str]) -> None:
    db, saga_id = saga_db
    log = amends.SqliteLog(db, read_only=True)
    saga = await log.get_saga(saga_id)
    await log.close()
    assert saga is not None
    meta = saga.meta["catalog"]
    assert meta["ref"] == SPEC  # found as a module attribute: importable again by the CLI
    assert "crm.update_field" in meta["tools"]
    assert len(meta["fingerprint"]) == 16


async def test_undo_loads_the_recorded_catalog_only_when_the_operator_allows_it(
    saga_db: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21 item 2 changed this: the saga's recorded catalog is no longer imported by
    itself (rule 12); it selects among the catalogs the operator allows."""
    db, saga_id = saga_db
    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    before = rows(db)
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "this process is allowed no catalog" in err and f"'{SPEC}'" in err
    assert rows(db) == before
    other = Path(db).with_name("other.toml")  # an allowed catalog must exist (a typo is refused)
    other.write_text("[[tool]]\nname='x.y'\nhttp={url='http://127.0.0.1:9/x'}\n")
    monkeypatch.setenv("AMENDS_CATALOGS", f"{other},{SPEC}")  # the saga's name selects
    assert WORLD.crm["r1"]["stage"] == "won"
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # the email stands: cannot_undo, honestly
    assert [(s["step_id"], s["state"]) for s in out["steps"]] == [
        ("s1", "reverted"),
        ("s2", "acknowledged"),
    ]
    assert WORLD.crm["r1"]["stage"] == "lead"


async def test_catalog_missing_the_sagas_tools_is_refused_by_name_and_nothing_is_written(
    saga_db: tuple[str, str], rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db, saga_id = saga_db
    before = rows(db)
    code = await asyncio.to_thread(
        main, ["undo", saga_id, "--db", db, "--catalog", "amends.sandbox:demo_catalog"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"saga {saga_id} was not made by the sandbox" in err
    assert rows(db) == before
    toml = Path(db).with_name("other.toml")
    toml.write_text("[[tool]]\nname='x.y'\nhttp={url='http://127.0.0.1:9/x'}\n")
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--catalog", str(toml)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"saga {saga_id} needs tool(s) crm.read_field, crm.update_field, missing from " in err
    assert "nothing was done" in err
    assert rows(db) == before


async def test_saga_without_a_recorded_catalog_asks_for_one_instead_of_the_sandbox(
    tmp_path: Path, rows: Rows, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "anon.db")
    catalog = amends.Catalog()  # local: no module attribute names it, so ref is None

    @catalog.tool("crm.touch", reversibility="irreversible")
    async def touch(call: amends.Call) -> None:
        return None

    engine = amends.Engine(catalog, log=db)
    async with engine.saga("anon") as saga:
        saga.call("crm.touch")
    await engine.close()
    before = rows(db)
    code = await asyncio.to_thread(main, ["undo", saga.id, "--db", db])
    err = capsys.readouterr().err
    assert code == 2
    assert f"saga {saga.id} does not record which catalog ran it" in err
    assert "--catalog MODULE:ATTR" in err
    assert rows(db) == before


async def test_sandbox_sagas_record_the_sandbox_catalog(tmp_path: Path) -> None:
    from amends.sandbox import World, sandbox_catalog

    db = str(tmp_path / "sb.db")
    engine = amends.Engine(sandbox_catalog(World(db + ".world")), log=db)
    async with engine.saga("sandbox") as saga:
        saga.call("payments.charge", customer="cus_acme", cents=700)
    saga_rec = await engine.log.get_saga(saga.id)
    await engine.close()
    assert saga_rec is not None and saga_rec.meta["catalog"]["ref"] == SANDBOX_REF


def test_catalog_module_is_imported_from_the_current_directory_after_the_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mytools_input11.py").write_text(
        "import amends\ncatalog = amends.Catalog()\n"
        "@catalog.tool('my.tool', reversibility='irreversible')\n"
        "async def t(call):\n    return None\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["audit", "--catalog", "mytools_input11:catalog", "--json"]) == 0
    assert [r["tool"] for r in json.loads(capsys.readouterr().out)] == ["my.tool"]
    assert str(tmp_path) not in sys.path  # the import path is restored afterwards


def test_http_undo_with_a_catalog_lacking_the_sagas_tools_is_409_and_writes_nothing(
    saga_db: tuple[str, str], rows: Rows
) -> None:
    from fastapi.testclient import TestClient

    from amends.server.app import ServerSettings, create_app

    db, saga_id = saga_db
    other = amends.Catalog()
    other.register("mail.send", lambda call, **kw: None)
    before = rows(db)
    app = create_app(lambda: amends.Engine(other, log=db), ServerSettings(no_auth=True))
    with TestClient(app) as client:
        r = client.post(f"/sagas/{saga_id}/undo")
    assert r.status_code == 409
    assert r.json()["error"] == "catalog_mismatch"
    assert "needs tool(s) crm.read_field, crm.update_field, missing from" in r.json()["detail"]
    assert rows(db) == before


async def test_a_catalog_whose_contracts_changed_since_the_saga_is_named_in_a_warning(
    saga_db: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same tool names, another contract: undo goes ahead with the catalog at hand and says so."""
    db, saga_id = saga_db
    (tmp_path / "changed_tools_t11.py").write_text(
        "from core_world import fresh\n"
        "WORLD, catalog = fresh()\n"
        "catalog.register('extra.tool', lambda call: None, reversibility='irreversible')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        code = await asyncio.to_thread(
            main, ["undo", saga_id, "--db", db, "--catalog", "changed_tools_t11:catalog"]
        )
    finally:
        sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert code == 1
    assert (
        "amends: warning: the contracts of catalog changed_tools_t11:catalog changed since " in err
    )
    assert f"saga {saga_id} ran (fingerprint " in err


async def test_serve_takes_the_one_catalog_allowed_or_the_one_its_sagas_select(
    saga_db: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 2 changed this: serve loads only a catalog the operator names; with
    several allowed, the one the log's sagas recorded is served, never one the log names
    alone."""
    from amends.cli.serve import _serve_catalog

    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    monkeypatch.delenv("AMENDS_CATALOGS", raising=False)
    db, _ = saga_db
    with pytest.raises(amends.ConfigError, match=f"none was given \\(its sagas recorded {SPEC}"):
        await asyncio.to_thread(_serve_catalog, None, db)
    x_file = tmp_path / "x.toml"  # an allowed catalog file must exist (a typo is refused)
    x_file.write_text("[[tool]]\nname='x.y'\nhttp={url='http://127.0.0.1:9/x'}\n")
    x = str(x_file)
    assert await asyncio.to_thread(_serve_catalog, [x], db) == x
    assert await asyncio.to_thread(_serve_catalog, [x, SPEC], db) == SPEC
    from amends.sandbox import World, sandbox_catalog

    engine = amends.Engine(sandbox_catalog(World(db + ".world")), log=db)
    async with engine.saga("sandbox") as saga:
        saga.call("payments.charge", customer="cus_acme", cents=700)
    await engine.close()
    with pytest.raises(amends.ConfigError) as exc:
        await asyncio.to_thread(_serve_catalog, [SANDBOX_REF, SPEC], db)
    assert f"the sagas in {db} select {SANDBOX_REF}, {SPEC}" in str(exc.value)
    monkeypatch.setenv("AMENDS_CATALOGS", SPEC)
    assert await asyncio.to_thread(_serve_catalog, None, db) == SPEC


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        (
            "raise RuntimeError('no config')\n",
            "importing 'broken_t11' raised RuntimeError: no conf",
        ),
        ("def catalog(db):\n    raise KeyError('x')\n", "calling catalog('x.db') raised KeyError"),
        ("catalog = 42\n", "'broken_t11:catalog' is int, not an amends.Catalog"),
    ],
)
def test_a_catalog_module_that_fails_is_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
    fragment: str,
) -> None:
    (tmp_path / "broken_t11.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "broken_t11", raising=False)
    assert main(["audit", "--catalog", "broken_t11:catalog", "--db", "x.db"]) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
    sys.modules.pop("broken_t11", None)


@pytest.mark.parametrize("where", ["flag", "env"])
async def test_an_allowed_catalog_file_that_does_not_exist_is_refused_by_path(
    saga_db: tuple[str, str],
    rows: Rows,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    where: str,
) -> None:
    """`amends undo --catalog missing.toml --catalog SPEC` (or the same in $AMENDS_CATALOGS)
    undid the saga with SPEC and never said that missing.toml does not exist (a typo in the
    operator's list went unseen). Bad input: exit 2, the path named, nothing written."""
    db, saga_id = saga_db
    missing = tmp_path / "missing.toml"
    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    if where == "flag":
        monkeypatch.delenv("AMENDS_CATALOGS", raising=False)
        args = ["--catalog", str(missing), "--catalog", SPEC]
    else:
        monkeypatch.setenv("AMENDS_CATALOGS", f"{missing},{SPEC}")
        args = []
    before = rows(db)
    code = await asyncio.to_thread(main, ["undo", saga_id, "--db", db, "--json", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"catalog file {str(missing)!r} does not exist" in err, err
    assert "Traceback" not in err
    assert rows(db) == before
    assert WORLD.crm["r1"]["stage"] == "won"  # nothing was undone
