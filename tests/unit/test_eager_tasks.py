"""Issue 29: a write commits inline (no writer thread, its own fsync) only when no other task can
write in the same loop pass; tasks started eagerly (Python 3.12's ``eager_task_factory``) must
not turn a fan-out's group commit into one fsync per record."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import amends
from amends._log import database, sqlite
from core_world import fresh

SRC = Path(__file__).resolve().parents[2] / "src"

# Run by an interpreter that has eager tasks (3.12+): a fan-out, an undo of independent
# compensations and sequential steps on a synchronous=FULL file log, every task started eagerly;
# prints the commits each made (``_commit`` calls, inline or by the writer) and the outcomes.
_EAGER_RUN = r"""
import asyncio, json, os, tempfile
import amends

store = {}
catalog = amends.Catalog()

@catalog.tool("kv.put", reversibility="reversible")
async def put(call, key, value):
    if key in store:
        call.inverse("kv.put", key=key, value=store[key])
    else:
        call.inverse("kv.delete", key=key)
    call.no_drift_check(reason="a test store nobody else writes")
    store[key] = value
    return value

@catalog.tool("kv.delete", reversibility="compensable")
async def delete(call, key):
    store.pop(key, None)

async def main():
    asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    log = amends.SqliteLog(os.path.join(tempfile.mkdtemp(), "eager.db"), synchronous="FULL")
    engine = amends.Engine(catalog, log=log)
    commits = []
    real = log.db._commit
    def counted(batch):
        commits.append(len(batch))
        return real(batch)
    log.db._commit = counted
    out = {}
    async with engine.saga("fan-out") as saga:
        steps = [saga.call("kv.put", key=f"k{i}", value=i) for i in range(200)]
        await saga.gather(*steps)
    out["fan_out"] = [len(commits), sorted({s.state for s in steps}), len(store)]
    commits.clear()
    report = await engine.undo(saga.id, budget=amends.Budget(tool_calls=1000, seconds=120))
    out["undo"] = [len(commits), report.status, len(store)]
    commits.clear()
    async with engine.saga("sequential") as saga:
        for i in range(20):
            await saga.call("kv.put", key=f"s{i}", value=i)
    out["sequential"] = [len(commits), len(store)]
    await engine.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def _eager_interpreter() -> str | None:
    """This interpreter if it has eager tasks, else a Python 3.12+ of the machine (pyenv's
    versions, then the PATH's), checked by running it: a pyenv shim may name one it lacks."""
    if sys.version_info >= (3, 12):
        return sys.executable
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    found += [p for p in (shutil.which(f"python3.{minor}") for minor in range(12, 16)) if p]
    for python in found:
        probe = "import asyncio, sys; sys.exit(not hasattr(asyncio, 'eager_task_factory'))"
        try:
            if subprocess.run([python, "-c", probe], capture_output=True, timeout=30).returncode:
                continue
        except (OSError, subprocess.TimeoutExpired):
            continue
        return python
    return None


def test_an_eagerly_started_fan_out_undo_and_sequence_commit_in_batches() -> None:
    """Before the fix, 200 eagerly started steps made 400 commits (each intent and outcome
    inline, an fsync each, the loop blocked); now the writer batches them."""
    python = _eager_interpreter()
    if python is None:
        pytest.skip("no Python 3.12+ interpreter on this machine (eager tasks are 3.12+)")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [python, "-c", _EAGER_RUN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    commits, states, stored = out["fan_out"]
    assert (states, stored) == (["done"], 200)
    assert commits <= 20, f"{commits} commits for a 200-step fan-out (group commit lost)"
    commits, status, stored = out["undo"]
    assert (status, stored) == ("fully_reversed", 0)
    assert commits <= 12, f"{commits} commits for an undo of 200 independent compensations"
    commits, stored = out["sequential"]
    assert stored == 20
    assert commits <= 42  # sequential steps cannot batch: at most a commit per write


async def test_a_write_of_a_task_started_eagerly_goes_to_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check itself, on any Python: with eager tasks possible, a write made while its task
    is being started eagerly is queued; the same write of a task started lazily, with the
    loop otherwise idle, commits inline as before; where asyncio keeps no set of the tasks it
    is starting eagerly, a loop with a task factory queues every write."""

    class Starting(set[Any]):  # asyncio's set of the tasks it is starting eagerly, as seen
        def __contains__(self, task: object) -> bool:
            return bool(getattr(task, "eager_mark", False))

    monkeypatch.setattr(sqlite, "EAGER", True)
    monkeypatch.setattr(database, "EAGER_TASKS", Starting())
    real_task = asyncio.Task

    def marked(eager: bool) -> Any:
        def factory(lp: Any, coro: Any, **kw: Any) -> Any:
            task = real_task(coro, loop=lp, **kw)
            task.eager_mark = eager  # type: ignore[attr-defined]
            return task

        return factory

    async def writers(factory: Any) -> list[str]:
        _world, catalog = fresh()
        log = amends.SqliteLog(str(tmp_path / f"w{len(os.listdir(tmp_path))}.db"))
        engine = amends.Engine(catalog, log=log)
        loop = asyncio.get_running_loop()
        main = threading.get_ident()
        who: list[str] = []
        real = log.db._commit

        def counted(batch: list[Any]) -> Any:
            who.append("inline" if threading.get_ident() == main else "writer")
            return real(batch)

        log.db._commit = counted  # type: ignore[method-assign]
        loop.set_task_factory(factory)
        try:
            async with engine.saga("one step") as saga:
                who.clear()
                await saga.call("crm.update_field", record_id="r1", field="stage", value="won")
                return list(who)
        finally:
            loop.set_task_factory(None)
            await engine.close()

    assert await writers(marked(eager=True)) == ["writer", "writer"]
    assert await writers(marked(eager=False)) == ["inline", "inline"]
    monkeypatch.setattr(database, "EAGER_TASKS", None)
    assert await writers(marked(eager=False)) == ["writer", "writer"]
    monkeypatch.setattr(sqlite, "EAGER", False)  # Python 3.11: no eager tasks to fear
    assert await writers(marked(eager=True)) == ["inline", "inline"]
