"""Rule 12's shards of the log's heads do not make concurrent writers wait on each other.

Every saga start updates one ``log_heads`` row (a count and a rolling hash, so deleting a whole
saga is visible). With the row picked by the saga's id, PostgreSQL writers in different
processes starting sagas at once updated the same rows: under REPEATABLE READ each such pair
failed with 40001 and ran again, and the 4-worker load benchmark fell from 230 to 37 sagas/s
(issue 29, bisected to the shards' commit). A PostgreSQL writer now has a shard of its own,
named in the ``saga.started`` record inside the chain; SQLite, with one writer, is unchanged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import amends
from amends._log.integrity import SHARDS, shard_of, started_shard, verify_shards


def _catalog() -> amends.Catalog:
    catalog = amends.Catalog()

    @catalog.tool("kv.read", reversibility="read_only")
    async def read(call: amends.Call, key: str) -> str:
        return key

    return catalog


async def _start(engine: amends.Engine, saga_id: str) -> None:
    async with engine.saga(f"Start {saga_id}", saga_id=saga_id):
        pass


async def _started_bodies(log: Any) -> dict[str, dict[str, Any]]:
    def fn(tx: Any) -> dict[str, dict[str, Any]]:
        rows = tx.execute("SELECT saga_id, body FROM records WHERE kind='saga.started'")
        return {str(sid): json.loads(body) for sid, body in rows}

    return await log.db.read(fn)  # type: ignore[no-any-return]


@pytest.mark.postgres
async def test_a_writer_starts_sagas_while_every_other_shard_row_is_locked(pg_url: str) -> None:
    """A saga start touches only its writer's shard: with the other 15 rows held by another
    transaction (another process mid-commit), the writer still starts 24 sagas at once; they
    waited on the lock before, whichever row each saga's id hashed to."""
    import psycopg

    first = amends.PostgresLog(pg_url)
    log = amends.PostgresLog(pg_url)
    engine = amends.Engine(_catalog(), log=log)
    own = log.db._shard  # type: ignore[attr-defined]
    assert own != first.db._shard  # type: ignore[attr-defined]  # two logs, two shards
    ids = [f"s{i}" for i in range(24)]
    assert len({shard_of(s) for s in ids} - {own}) > 8  # by id they would spread over the rows
    holder = psycopg.connect(pg_url)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("UPDATE log_heads SET n = n WHERE shard <> %s", (own,))
        await asyncio.wait_for(asyncio.gather(*(_start(engine, s) for s in ids)), 20)
    finally:
        holder.rollback()
        holder.close()
    try:
        bodies = await _started_bodies(log)
        assert {sid: body["shard"] for sid, body in bodies.items()} == dict.fromkeys(ids, own)
        assert await log.verify() == []
        # and a whole saga deleted from that shard is still found
        await log.db.write(lambda tx: [
            tx.execute("DELETE FROM records WHERE saga_id=?", ("s7",)),
            tx.execute("DELETE FROM sagas WHERE saga_id=?", ("s7",)),
        ])  # fmt: skip
        assert [(p.saga_id, p.what) for p in await log.verify()] == [("(log)", "deleted")]
    finally:
        await engine.close()
        await first.close()


@pytest.mark.postgres
async def test_a_writer_that_collides_on_its_shard_moves_to_another(pg_url: str) -> None:
    """Two writers that start on the same shard (two hosts whose process ids agree) stop
    colliding: a serialization failure moves the writer that lost to another shard, and the
    log verifies with both shards' sagas."""
    a, b = amends.PostgresLog(pg_url), amends.PostgresLog(pg_url)
    b.db._shard = a.db._shard  # type: ignore[attr-defined]
    first = a.db._shard  # type: ignore[attr-defined]
    ea, eb = amends.Engine(_catalog(), log=a), amends.Engine(_catalog(), log=b)
    try:
        for round_ in range(10):
            await asyncio.gather(
                *(_start(ea, f"a{round_}.{i}") for i in range(4)),
                *(_start(eb, f"b{round_}.{i}") for i in range(4)),
            )
        shards = {a.db._shard, b.db._shard}  # type: ignore[attr-defined]
        assert len(shards) == 2 and shards != {first}
        bodies = await _started_bodies(a)
        assert len(bodies) == 80
        assert all(0 <= body["shard"] < SHARDS for body in bodies.values())
        assert await a.verify() == []
    finally:
        await ea.close()
        await eb.close()


@pytest.mark.postgres
async def test_two_writers_on_different_sagas_never_fail_a_transaction_on_each_other(
    pg_url: str,
) -> None:
    """The class behind the shards' regression: no row is shared between sagas, so two
    writers (two processes) recording, finishing and undoing different sagas at once never
    fail a transaction with a serialization failure or a deadlock. A row every saga start
    updated (a shard per saga id) failed three of them with 40001 in each of 4 runs."""
    store: dict[str, int] = {}
    catalog = amends.Catalog()

    @catalog.tool("kv.put", reversibility="compensable")
    async def put(call: amends.Call, key: str, value: int) -> None:
        call.inverse("kv.delete", key=key)
        call.no_drift_check(reason="a test store nobody else writes")
        store[key] = value

    @catalog.tool("kv.delete", reversibility="irreversible")
    async def delete(call: amends.Call, key: str) -> None:
        store.pop(key, None)

    logs = [amends.PostgresLog(pg_url), amends.PostgresLog(pg_url)]
    failed: list[str] = []
    for log in logs:
        attempt = log.db._one_attempt  # type: ignore[attr-defined]

        def counted(fn: Any, *, _attempt: Any = attempt, **kw: Any) -> Any:
            try:
                return _attempt(fn, **kw)
            except Exception as exc:
                failed.append(str(getattr(exc, "sqlstate", None) or type(exc).__name__))
                raise

        log.db._one_attempt = counted  # type: ignore[attr-defined]
    engines = [amends.Engine(catalog, log=log) for log in logs]

    async def one(engine: amends.Engine, name: str) -> str:
        async with engine.saga(f"Put {name}", saga_id=name) as saga:
            for i in range(3):
                saga.call("kv.put", key=f"{name}.{i}", value=i)
        return (await engine.undo(name)).status

    try:
        statuses = await asyncio.gather(*(one(engines[i % 2], f"w{i % 2}.s{i}") for i in range(32)))
        assert set(statuses) == {"fully_reversed"} and store == {}
        assert failed == []
        assert await logs[0].verify() == []
    finally:
        for engine in engines:
            await engine.close()


async def test_sqlite_saga_starts_keep_the_shard_of_their_id(tmp_path: Any) -> None:
    """One writer: nothing to spread, so the record is as before (no ``shard`` key)."""
    log = amends.SqliteLog(str(tmp_path / "log.db"))
    engine = amends.Engine(_catalog(), log=log)
    try:
        await _start(engine, "one")
        body = (await _started_bodies(log))["one"]
        assert "shard" not in body
        assert await log.verify() == []
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "by id"),
        ('{"title":"t"}', "by id"),
        ('{"title":"the \\"shard\\" word"}', "by id"),
        ('{"title":"t","meta":{"shard":3}}', "by id"),
        ('{"title":"t","shard":5}', 5),
        ('{"title":"t","shard":15}', 15),
        ('{"title":"t","shard":16}', None),
        ('{"title":"t","shard":-1}', None),
        ('{"title":"t","shard":"5"}', None),
        ('{"title":"t","shard":true}', None),
        ('{"title":"t","shard":5.0}', None),
        ('{"shard": not json', None),
    ],
)
def test_the_shard_a_started_record_names(text: str | None, expected: object) -> None:
    want = shard_of("saga-1") if expected == "by id" else expected
    assert started_shard("saga-1", text) == want


def test_a_started_record_naming_no_shard_of_the_log_is_reported_not_raised() -> None:
    problems = verify_shards(None, [("s1", "h", '{"title":"t","shard":99}')], {})
    assert [(p.saga_id, p.what) for p in problems] == [("s1", "edited")]
    assert "not one of the log's 16" in problems[0].detail
