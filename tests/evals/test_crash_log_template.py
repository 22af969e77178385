"""Issue 29: a batch's crash log files start as copies of one new log made in the batch's
directory (``runner._copy_of_new_log``). A copy must be the very file ``SqliteLog`` would have
created: the same bytes, owner-only, made with the same chain key; and the schema is built
once per directory, not once per crash scenario."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from pathlib import Path

import pytest

from amends import SqliteLog
from amends.evals import runner
from amends.evals.runner import crash_log_file


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


async def _new_log_bytes(path: Path) -> bytes:
    await SqliteLog(str(path), synchronous="OFF").close()
    return _bytes(path)


def _templates(directory: Path) -> list[Path]:
    return sorted(directory.glob("new-log-*.template"))


async def test_a_crash_log_is_a_new_logs_bytes_owner_only_and_the_schema_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AMENDS_LOG_KEY", raising=False)
    batch = tmp_path / "batch"
    batch.mkdir()
    paths = []
    for _ in range(2):
        async with crash_log_file(str(batch)) as log:
            paths.append(Path(log.path))
            assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600
            assert await log.list_sagas() == []
        assert _bytes(batch / paths[-1].name) == await _new_log_bytes(
            tmp_path / f"plain{len(paths)}.db"
        )
    (template,) = _templates(batch)  # one template, made by the first scenario
    made = template.stat().st_mtime_ns
    built = []
    real = runner.SqliteLog

    def counting(path: str, **kw: object) -> SqliteLog:
        built.append(path)
        return real(path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "SqliteLog", counting)
    async with crash_log_file(str(batch)) as log:
        assert built == [log.path]  # opened, not a template built first
    assert template.stat().st_mtime_ns == made


async def test_a_crash_log_made_under_another_chain_key_is_that_keys_new_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    monkeypatch.delenv("AMENDS_LOG_KEY", raising=False)
    async with crash_log_file(str(batch)):
        pass
    monkeypatch.setenv("AMENDS_LOG_KEY", "another key")
    async with crash_log_file(str(batch)) as log:
        path = Path(log.path)
    assert len(_templates(batch)) == 2  # one per key (a new log's bytes may depend on it)
    assert _bytes(path) == await _new_log_bytes(tmp_path / "keyed.db")


async def test_crash_scenarios_starting_together_build_the_schema_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    real = runner.SqliteLog

    def counting(path: str, **kw: object) -> SqliteLog:
        built.append(path)
        return real(path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "SqliteLog", counting)
    async with contextlib.AsyncExitStack() as stack:
        logs = await asyncio.gather(
            *(stack.enter_async_context(crash_log_file(str(tmp_path))) for _ in range(4))
        )
        assert sorted(built) == sorted([log.path for log in logs] + built[:1])
        assert len(built) == 5  # one template, then the four logs opened
