"""Issue 21 item 2 (rule 12): nothing read from a log is imported or executed.

A saga records which catalog ran it (``sagas.meta.catalog.ref``). A program, or anyone who can
write to the log, may record anything there: ``os:remove`` (called with the log's path, it
deleted the log) or a module of theirs. ``amends undo``, ``amends serve`` and ``amends recover``
load only the catalogs the operator names (``--catalog``, ``$AMENDS_CATALOGS``); the recorded
reference merely selects among them, and the current directory never shadows a real module.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

import amends
from amends._catalog_ref import tag_catalog
from amends.cli import main


async def _saga_recording(db: Path, ref: str, *, stuck: bool = False) -> str:
    """A real saga (its hash chain intact) whose catalog says it can be loaded from ``ref``."""
    catalog = tag_catalog(amends.Catalog(), ref)
    catalog.register("t.read", lambda call, **kw: "v", reversibility="read_only")

    @catalog.tool("t.set", reversibility="reversible")
    async def set_(call: amends.Call, value: str) -> None:
        call.inverse("t.set", value="old")
        call.expect("t.read", {}, equals="v")

    engine = amends.Engine(catalog, log=str(db))
    try:
        async with engine.saga("forged ref") as saga:
            saga.call("t.set", value="new")
        if stuck:  # a reversal whose worker died: what recover resumes
            now = time.time()
            await engine.log.claim_reversal(
                saga.id, reversal_id="rev_x", budget={}, owner="dead", lease_until=now - 1,
                now=now - 2,
            )  # fmt: skip
    finally:
        await engine.close()
    return saga.id


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module in the current directory that marks when it is imported (the attacker's)."""
    (tmp_path / "evil_t21.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('yes')\n"
        "import amends\ncatalog = amends.Catalog()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AMENDS_CATALOG", raising=False)
    monkeypatch.delenv("AMENDS_CATALOGS", raising=False)
    monkeypatch.delitem(sys.modules, "evil_t21", raising=False)
    return tmp_path


def test_undo_never_calls_os_remove_that_the_log_names(
    planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = planted / "log.db"
    saga_id = asyncio.run(_saga_recording(db, "os:remove"))
    assert main(["undo", saga_id, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert db.exists()  # the log is still there
    assert "this process is allowed no catalog" in err
    assert "--catalog myproj.tools:catalog" in err  # what to pass
    assert "'os:remove'" in err  # the log's reference, shown as data


@pytest.mark.parametrize("command", ["undo", "serve", "recover"])
def test_a_module_the_log_names_is_never_imported(
    planted: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = planted / "log.db"
    saga_id = asyncio.run(_saga_recording(db, "evil_t21:catalog", stuck=command == "recover"))
    argv = {
        "undo": ["undo", saga_id, "--db", str(db)],
        "serve": ["serve", "--db", str(db), "--no-auth", "--port", "1"],
        "recover": ["recover", "--db", str(db)],
    }[command]
    code = main(argv)
    out = capsys.readouterr()
    assert not (planted / "IMPORTED").exists(), "a module named in the log was imported"
    assert "evil_t21" not in sys.modules
    if command == "recover":
        assert code == 1 and "NOT recovered" in out.out and "allowed no catalog" in out.out
    else:
        assert code == 2 and "--catalog myproj.tools:catalog" in out.err


def test_the_recorded_reference_selects_only_among_the_allowed_catalogs(
    planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two catalogs allowed, the saga names a third (whose contracts neither has): refused,
    naming the saga's and the allowed ones; the allowed one a saga names is chosen."""
    (planted / "good_t21.py").write_text(
        "import amends\nfrom amends._catalog_ref import tag_catalog\n"
        "catalog = amends.Catalog()\n"
        "catalog.register('t.read', lambda call, **kw: 'v', reversibility='read_only')\n"
        "catalog.register('t.set', lambda call, **kw: None, reversibility='compensable')\n"
        "other = amends.Catalog()\n"
    )
    db = planted / "log.db"
    saga_id = asyncio.run(_saga_recording(db, "evil_t21:catalog"))
    allowed = ["--catalog", "good_t21:catalog", "--catalog", "good_t21:other"]
    assert main(["undo", saga_id, "--db", str(db), *allowed]) == 2
    err = capsys.readouterr().err
    assert "recorded catalog 'evil_t21:catalog'" in err
    assert "'good_t21:catalog', 'good_t21:other'" in err
    assert not (planted / "IMPORTED").exists()
    good = asyncio.run(_saga_recording(db, "good_t21:catalog"))
    assert main(["undo", good, "--db", str(db), *allowed, "--json"]) == 0
    assert '"status": "fully_reversed"' in capsys.readouterr().out
    sys.modules.pop("good_t21", None)


def test_the_current_directory_never_shadows_a_module_found_on_the_import_path(
    planted: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site = planted / "site"
    site.mkdir()
    (site / "mytools_t21.py").write_text(
        "import amends\nimport helper_t21\ncatalog = amends.Catalog()\n"
        "catalog.register(helper_t21.NAME, lambda call: None, reversibility='irreversible')\n"
    )
    (site / "helper_t21.py").write_text("NAME = 'real.tool'\n")
    (planted / "helper_t21.py").write_text("NAME = 'planted.tool'\n")  # in the cwd
    monkeypatch.setattr(sys, "path", [str(site), *[p for p in sys.path if p not in ("", ".")]])
    for name in ("mytools_t21", "helper_t21"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["audit", "--catalog", "mytools_t21:catalog", "--json"]) == 0
    assert '"tool": "real.tool"' in capsys.readouterr().out
