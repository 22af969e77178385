"""Issue 29: a step hands its outcome record to the log and does not wait for it; rule 1 holds
where the outcome is used (a dependent's start, ``await step``, ``gather``, the saga's exit),
and a failure writing it surfaces there with the error the step's own task raised before. On
SQLite and PostgreSQL (their write paths are separate)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import amends
from amends import LogError
from amends._log import open_log


def _catalog(calls: list[str], gate: asyncio.Event | None = None) -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("t.echo", reversibility="irreversible")
    async def echo(call: amends.Call, v: Any) -> Any:
        calls.append(call.step_id)
        if gate is not None and call.step_id == "s1":
            await gate.wait()
        return {"v": v}

    return catalog


def _sql(log_url: str, statements: list[str]) -> None:
    """Run ``statements`` on the log's database through a connection of another client."""
    if log_url.startswith("sqlite:///"):
        conn = sqlite3.connect(log_url.removeprefix("sqlite:///"), isolation_level=None)
        for sql in statements:
            conn.execute(sql)
        conn.close()
        return
    import psycopg

    with psycopg.connect(log_url, autocommit=True) as pg:
        for sql in statements:
            pg.execute(sql)


@contextmanager
def _write_lock(log_url: str) -> Iterator[None]:
    """Another client holds the lock every write of the log needs, until the block ends."""
    if log_url.startswith("sqlite:///"):
        conn = sqlite3.connect(log_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("COMMIT")
            conn.close()
        return
    import psycopg

    with psycopg.connect(log_url) as pg:
        pg.execute("LOCK TABLE records IN EXCLUSIVE MODE")  # reads go on, inserts wait
        try:
            yield
        finally:
            pg.commit()


async def test_await_gather_and_a_dependent_wait_for_the_outcome_to_be_durable(
    log_url: str,
) -> None:
    """Another client holds the log's write lock after a step's intent committed: the step's
    tool returns, but the agent's await, gather and the dependent step all wait until its
    outcome record is committed; then each sees it."""
    calls: list[str] = []
    gate = asyncio.Event()
    log = open_log(log_url)
    if log_url.startswith("sqlite:///"):
        log.db.inline_when_idle = False  # type: ignore[attr-defined]  # writes via the writer
    engine = amends.Engine(_catalog(calls, gate), log=log)
    try:
        async with engine.saga("durable before use") as saga:
            a = saga.call("t.echo", v=1)
            b = saga.call("t.echo", v=a["v"])
            while calls != ["s1"]:  # s1's intent is durable, its tool is running
                await asyncio.sleep(0.005)
            with _write_lock(log_url):
                gate.set()
                awaited = asyncio.ensure_future(a._wait())
                gathered = asyncio.ensure_future(saga.gather(a))
                await asyncio.sleep(0.3)
                assert (a.state, awaited.done(), gathered.done(), calls) == (
                    "intent",
                    False,
                    False,
                    ["s1"],
                )
            assert await awaited == {"v": 1}
            assert await gathered == [{"v": 1}]
            assert await b == {"v": 1}
        assert calls == ["s1", "s2"] and a.state == b.state == "done"
        record = await log.get_saga(saga.id)
        assert record is not None
        assert [(s.step_id, s.state, s.result) for s in record.steps] == [
            ("s1", "done", {"v": 1}),
            ("s2", "done", {"v": 1}),
        ]
    finally:
        await engine.close()


REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse_done BEFORE INSERT ON records WHEN NEW.kind = 'step.done' AND "
        "NEW.step_id = 's1' BEGIN SELECT RAISE(ABORT, 'the disk refused it'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse_done() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'the disk refused it'; END $$",
        "CREATE TRIGGER refuse_done BEFORE INSERT ON records FOR EACH ROW WHEN "
        "(NEW.kind = 'step.done' AND NEW.step_id = 's1') EXECUTE FUNCTION refuse_done()",
    ],
}


async def test_a_failed_outcome_write_surfaces_where_the_outcome_is_used(log_url: str) -> None:
    """The log refuses a step's outcome record (a trigger on the real table): ``await step``,
    ``gather`` and the dependent step each raise the log's LogError, with the message the step's
    own task raised before issue 29; the step stays ``intent`` (in the log too: recovery calls it
    in doubt), and the dependent's tool never runs."""
    calls: list[str] = []
    log = open_log(log_url)
    engine = amends.Engine(_catalog(calls), log=log)
    _sql(log_url, REFUSE["sqlite" if log_url.startswith("sqlite:///") else "postgres"])
    try:
        async with engine.saga("outcome refused") as saga:
            a = saga.call("t.echo", v=1)
            b = saga.call("t.echo", v=a["v"])
            c = saga.call("t.echo", v=3)
            errors = []
            for awaited in (a, saga.gather(c, a), b):
                with pytest.raises(LogError) as caught:
                    await awaited
                errors.append(str(caught.value))
            assert await c == {"v": 3}
        assert len(set(errors)) == 1 and "the disk refused it" in errors[0], errors
        if log_url.startswith("sqlite:///"):
            path = log_url.removeprefix("sqlite:///")
            assert errors[0] == f"saga log {path!r}: the disk refused it"
        assert (a.state, b.state, c.state, calls) == ("intent", "pending", "done", ["s1", "s3"])
        record = await log.get_saga(saga.id)
        assert record is not None
        assert [(s.step_id, s.state) for s in record.steps] == [("s1", "intent"), ("s3", "done")]
    finally:
        await engine.close()
