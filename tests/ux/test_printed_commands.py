"""Every command amends prints runs as printed, from where it was printed (issue 26 item 3).

Each test runs the CLI the way a person does after ``make demo`` — ``.venv/bin/amends`` from the
project directory, with ``amends`` NOT on ``PATH`` — collects every command the output suggests
(hints under a report, ``show``'s footer, ``doctor``'s fixes, an error's fix, the demo's "Inspect
it"), and runs each one through the shell, exactly as printed, on its own copy of the log. Before
the fix these printed ``amends ...`` (rc 127 here), left out ``--db`` (rc 2: no such saga in
./amends.db) or printed ``--db URL`` literally.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import amends

HERE = Path(__file__).parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import hint_tools  # noqa: E402

PROGRAM = os.path.relpath(Path(sys.executable).parent / "amends", REPO)  # .venv/bin/amends
SPEC = "hint_tools:CATALOG"
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMENDS_")}
    env["PATH"] = "/usr/bin:/bin"  # `amends` is not on PATH, as after `make demo`
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent)])
    env["COLUMNS"] = "2000"  # one command per line: what is collected is what a person copies
    env.update(extra)
    return env


def _run(line: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``line`` through the shell, from the project directory (where `make demo` prints)."""
    return subprocess.run(
        ["bash", "-c", line], cwd=REPO, env=_env(**env), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def _amends(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROGRAM, *argv], cwd=REPO, env=_env(**env), capture_output=True, text=True, timeout=120
    )


# a printed command: the program, then words up to the end of the line, a `;`, a `, ` or a `)`
_COMMAND = re.compile(re.escape(PROGRAM) + r" [^;\n`)]*?(?=,\s|;|`|\)|\s*$)", re.M)


def _commands(text: str) -> list[str]:
    found = [m.group().strip() for m in _COMMAND.finditer(text)]
    assert found, f"no command printed:\n{text}"
    assert not re.search(r"(?<![./\w])amends (show|undo|resolve|recover|doctor)\b", text), text
    assert "--db URL" not in text, text
    return found


def _copy(db: str, tmp: Path, n: int) -> str:
    """A copy of the log (its -wal too) for one pasted command: each runs from the same state."""
    out = tmp / f"copy{n}"
    out.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            shutil.copy(db + suffix, str(out / Path(db).name) + suffix)
    return str(out / Path(db).name)


async def _saga(db: str, *, in_doubt: bool = False) -> str:
    """A saga of hint_tools: a CRM update (s1) and an email (s2, irreversible)."""
    hint_tools.WORLD.crm["r1"]["stage"] = "lead"
    if in_doubt:  # rule 9: an error that is not the vendor's refusal leaves the step in doubt
        hint_tools.WORLD.faults["crm.update_field"] = [RuntimeError("connection reset")]
    engine = amends.Engine(hint_tools.CATALOG, log=db)
    try:
        async with engine.saga("Close the ACME deal", tenant="acme", actor="agent:sales") as saga:
            a = saga.call("crm.update_field", record_id="r1", field="stage", value="won")
            saga.call("mail.send", to="bob@acme.test", subject="Won", after=[a])
    except amends.StepFailedError:
        assert in_doubt
    finally:
        await engine.close()
    return saga.id


def _each_runs(
    output: str, db: str, tmp: Path, expect: dict[str, tuple[set[int], str]], **env: str
) -> list[str]:
    """Run every command in ``output`` on a fresh copy of ``db``; ``expect`` maps a piece of the
    command to (allowed exit codes, text its output must hold). Returns the commands."""
    commands = _commands(output)
    for n, line in enumerate(commands):
        assert line.startswith(PROGRAM + " "), line
        key = next((k for k in expect if k in line), None)
        assert key is not None, f"unexpected command {line!r} in:\n{output}"
        codes, text = expect[key]
        copy = _copy(db, tmp, n)
        proc = _run(line.replace(db, copy), **env)
        assert proc.returncode in codes, (line, proc.returncode, proc.stdout, proc.stderr)
        assert text in proc.stdout, (line, proc.stdout, proc.stderr)
    return commands


def test_the_demo_s_inspect_it_runs_without_amends_on_path(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    # at 80 columns too: the hint is one line, so a copy of it pastes as one command
    proc = _amends("demo", "--db", db, "--html", str(tmp_path / "r.html"), COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("Inspect it: ")]
    command = line.removeprefix("Inspect it: ")
    assert command.startswith(f"{PROGRAM} show saga_") and command.endswith(f"--db {db}"), line
    shown = _run(command)
    assert shown.returncode == 0, shown.stderr
    assert "Send the Q3 offer to ACME" in shown.stdout or "saga_" in shown.stdout
    saga_id = command.split()[2]
    assert saga_id in shown.stdout and "taken back" in shown.stdout, shown.stdout


async def test_hints_under_a_report_carry_db_and_catalog_and_run(tmp_path: Path) -> None:
    """A failed compensation and an email: resolve, --retry, and show's --history hint."""
    db = str(tmp_path / "h.db")
    saga_id = await _saga(db)
    proc = _amends("undo", saga_id, "--db", db, "--catalog", SPEC, HINT_STAGE="won", HINT_FAULT="1")
    assert proc.returncode == 1, proc.stderr
    assert f"{PROGRAM} undo {saga_id} --retry s1 --db {db} --catalog {SPEC}" in proc.stdout
    expect = {
        "resolve": ({0}, "handled by"),
        "--retry s1": ({1}, "reverted"),  # the email still stands: exit 1, s1 taken back
    }
    found = _each_runs(proc.stdout, db, tmp_path / "a", expect, HINT_STAGE="won")
    assert len(found) == 3, found  # resolve s1, retry s1, resolve s2
    shown = _amends("show", saga_id, "--db", db)
    assert shown.returncode == 0, shown.stderr
    expect["--history"] = ({0}, "History")
    # show takes no --catalog: its --retry hint runs where the operator allows the catalog
    env = {"HINT_STAGE": "won", "AMENDS_CATALOGS": SPEC}
    found = _each_runs(shown.stdout, db, tmp_path / "b", expect, **env)
    assert any(line.endswith(f"show {saga_id} --history --db {db}") for line in found), found


async def test_show_of_a_saga_not_undone_hints_preview_and_undo_that_run(tmp_path: Path) -> None:
    db = str(tmp_path / "n.db")
    saga_id = await _saga(db)
    shown = _amends("show", saga_id, "--db", db)
    assert shown.returncode == 0, shown.stderr
    # issue 26 item 6: first, how to see what undo would do (show, with the catalog allowed);
    # no catalog is allowed here, so no `undo` command is printed: each paste would exit 2
    expect = {f" show {saga_id}": ({0}, "Undo would: revert 1 · ask a person about 1")}
    found = _each_runs(shown.stdout, db, tmp_path, expect, HINT_STAGE="won", AMENDS_CATALOGS=SPEC)
    assert found == [f"{PROGRAM} show {saga_id} --db {db}"]
    # with the catalog allowed, show prints the preview and undo commands, and each runs
    shown = _amends("show", saga_id, "--db", db, AMENDS_CATALOGS=SPEC, HINT_STAGE="won")
    assert shown.returncode == 0, shown.stderr
    expect = {"--dry-run": ({0}, "What undo would do now"), "undo": ({1}, "taken back")}
    found = _each_runs(
        shown.stdout, db, tmp_path / "b", expect, HINT_STAGE="won", AMENDS_CATALOGS=SPEC
    )
    assert found == [
        f"{PROGRAM} undo {saga_id} --dry-run --db {db}",
        f"{PROGRAM} undo {saga_id} --db {db}",
    ]


async def test_the_continue_hint_of_a_budget_cut_names_no_placeholder_and_runs(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "b.db")
    saga_id = await _saga(db)
    proc = _amends(
        "undo", saga_id, "--db", db, "--catalog", SPEC, "--budget-calls", "0", HINT_STAGE="won"
    )
    assert proc.returncode == 1, proc.stderr
    assert "budget-calls N" not in proc.stdout and "--budget-seconds S" not in proc.stdout
    expect = {"--continue": ({1}, "reverted"), "resolve": ({0}, "handled by")}
    found = _each_runs(proc.stdout, db, tmp_path, expect, HINT_STAGE="won")
    assert f"{PROGRAM} undo {saga_id} --continue --db {db} --catalog {SPEC}" in found, found


async def test_doctor_s_fix_names_this_log_and_runs(tmp_path: Path) -> None:
    """Before: `amends undo SAGA --db URL`, the placeholder printed as it is."""
    db = str(tmp_path / "d.db")
    saga_id = await _saga(db, in_doubt=True)
    proc = _amends("doctor", "--db", db)
    assert proc.returncode == 1, proc.stdout
    assert f"`{PROGRAM} undo {saga_id} --db {db}`" in proc.stdout, proc.stdout
    expect = {"undo": ({1}, "in_doubt")}
    _each_runs(proc.stdout, db, tmp_path, expect, AMENDS_CATALOGS=SPEC)


async def test_an_error_s_fix_runs_as_printed(tmp_path: Path) -> None:
    """A library error quoting `amends show SAGA` and the CLI's own `undo it first`."""
    db = str(tmp_path / "e.db")
    saga_id = await _saga(db)
    proc = _amends("resolve", saga_id, "s9", "--db", db, "--note", "x")
    assert proc.returncode == 2 and "has no step 's9'" in proc.stderr, proc.stderr
    _each_runs(proc.stderr, db, tmp_path / "a", {"show": ({0}, "Close the ACME deal")})
    proc = _amends("undo", saga_id, "--db", db, "--continue", "--catalog", SPEC)
    assert proc.returncode == 2 and "nothing to continue" in proc.stderr, proc.stderr
    found = _each_runs(
        proc.stderr, db, tmp_path / "b", {"undo": ({1}, "taken back")}, HINT_STAGE="won"
    )
    assert found == [f"{PROGRAM} undo {saga_id} --db {db} --catalog {SPEC}"]


def test_program_is_amends_only_when_path_finds_this_environment_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amends.cli._hints import program

    script = tmp_path / "venv" / "bin" / "amends"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    python = str(script.parent / "python")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program(str(script), python) == "venv/bin/amends"
    entry = str(Path(amends.__file__).parent / "cli" / "__main__.py")  # python -m amends.cli
    assert program(entry, python) == f"{python} -m amends.cli"
    assert program("/x/pytest/__main__.py", python) == "amends"  # python -m pytest: in-process
    assert program("/usr/bin/pytest", python) == "amends"  # main() called in-process
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert program(str(script), python) == "amends"


@pytest.mark.parametrize(
    ("db", "printed"),
    [
        ("postgresql://ann:s3cret@db.example:5432/amends", "postgresql://ann:***@db.example:5432/amends"),
        # urlsplit raises on the unclosed "[": the password is hidden all the same
        ("postgresql://ann:s3cret@[::1/amends", "postgresql://ann:***@[::1/amends"),
        ("postgresql://ann:s3c@ret@[::1:5432/amends?sslmode=require", "postgresql://ann:***@[::1:5432/amends?sslmode=require"),
        ("postgresql://ann@[::1/amends", "postgresql://ann@[::1/amends"),
        ("postgresql://[::1/amends", "postgresql://[::1/amends"),
    ],
)  # fmt: skip
def test_a_printed_db_never_repeats_its_password(db: str, printed: str) -> None:
    # rule 11: a hint is pasted into tickets; the password comes from PGPASSWORD or ~/.pgpass
    import shlex

    from amends.cli._hints import command

    assert shlex.split(command("show", "SAGA", db=db))[-2:] == ["--db", printed]
    assert "s3c" not in command("doctor", db=db)
