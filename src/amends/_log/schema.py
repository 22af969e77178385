"""The log's schema and its migrations, shared by both SQL backends (append only, never edit).

Version 1: a table per kind of state (sagas, steps, reversals, compensations) plus events.
Version 2: saga metadata, resolutions, continuations, the hash chain, HTTP idempotency keys.
Version 3 (issue 12): steps, compensations, resolutions and the history become one append-only
``records`` table (one row per step per phase, one JSON blob); ``steps``, ``compensations`` and
``events`` remain as read-only views derived from it, for operators' ad-hoc SQL.
Version 4 (issue 21, rule 12): each saga row carries the head of its chain, and ``log_heads``
spreads the sagas over shards whose count and rolling hash make a deleted saga visible
(:mod:`amends._log.integrity`).
Version 5 (issue 29): records hashed over their stored text; no table changes.
Version 6 (rule 12): ``log_tally`` counts every reversal record log-wide, so one saga rolled
back on its own (its reversal cut off, an older head written back) is visible
(:mod:`amends._log.tally`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._errors import SchemaVersionError
from .integrity import SHARDS, head_of, shard_of, shard_step, started_shard
from .records import (
    COMPENSATION,
    FINISH,
    INTENT,
    RESOLVED,
    chain_hash,
    dumps,
    hkind,
    loads,
    report_hash,
)
from .tally import ANCHORED, SINCE

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Dialect", "stored_version", "upgrade"]

SCHEMA_VERSION = 6

Dialect = Literal["sqlite", "postgres"]


class _Tx(Protocol):
    def execute(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]: ...


def _pk(dialect: Dialect) -> str:
    if dialect == "sqlite":
        return "INTEGER PRIMARY KEY AUTOINCREMENT"
    return "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"


def schema_statements(dialect: Dialect) -> list[str]:
    """DDL of schema version 1."""
    return [
        "CREATE TABLE IF NOT EXISTS amends_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS sagas (saga_id TEXT PRIMARY KEY, title TEXT NOT NULL, "
        "tenant TEXT, actor TEXT, state TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
        "finished_at DOUBLE PRECISION, owner TEXT, lease_until DOUBLE PRECISION)",
        "CREATE INDEX IF NOT EXISTS sagas_created ON sagas (created_at)",
        "CREATE INDEX IF NOT EXISTS sagas_tenant_created ON sagas (tenant, created_at)",
        "CREATE INDEX IF NOT EXISTS sagas_running ON sagas (lease_until) WHERE state='running'",
        "CREATE TABLE IF NOT EXISTS steps (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, tool TEXT NOT NULL, args TEXT NOT NULL, deps TEXT NOT NULL, "
        "resources TEXT NOT NULL, declared TEXT NOT NULL, effective TEXT, state TEXT NOT NULL, "
        "result TEXT, inverse TEXT, expectation TEXT, residue TEXT NOT NULL, "
        "acknowledgement TEXT, violation TEXT, error TEXT, "
        "started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, "
        "PRIMARY KEY (saga_id, step_id))",
        "CREATE INDEX IF NOT EXISTS steps_intent ON steps (saga_id) WHERE state='intent'",
        "CREATE TABLE IF NOT EXISTS reversals (reversal_id TEXT PRIMARY KEY, "
        "saga_id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, budget TEXT NOT NULL, owner TEXT, "
        "generation INTEGER NOT NULL, lease_until DOUBLE PRECISION, "
        "requested_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, "
        "calls_spent INTEGER NOT NULL DEFAULT 0, tokens_spent INTEGER NOT NULL DEFAULT 0, "
        "report TEXT)",
        "CREATE INDEX IF NOT EXISTS reversals_running ON reversals (lease_until) "
        "WHERE state='running'",
        "CREATE TABLE IF NOT EXISTS compensations (reversal_id TEXT NOT NULL, "
        "step_id TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, detail TEXT, "
        "data TEXT NOT NULL, generation INTEGER NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (reversal_id, step_id))",
        f"CREATE TABLE IF NOT EXISTS events (event_id {_pk(dialect)}, saga_id TEXT NOT NULL, "
        "step_id TEXT, reversal_id TEXT, kind TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, "
        "data TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS events_saga ON events (saga_id, event_id)",
    ]


def schema_v2_statements(dialect: Dialect) -> list[str]:
    """DDL bringing version 1 to 2."""
    del dialect
    return [
        "ALTER TABLE sagas ADD COLUMN meta TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE reversals ADD COLUMN continuations INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE reversals ADD COLUMN report_hash TEXT",
        "ALTER TABLE events ADD COLUMN prev_hash TEXT",
        "ALTER TABLE events ADD COLUMN hash TEXT",
        "CREATE TABLE IF NOT EXISTS resolutions (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "by_who TEXT NOT NULL, note TEXT, at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (saga_id, step_id))",
        "CREATE TABLE IF NOT EXISTS idem_keys (tenant TEXT NOT NULL, key TEXT NOT NULL, "
        "request_hash TEXT NOT NULL, response TEXT NOT NULL, "
        "expires_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (tenant, key))",
        "CREATE INDEX IF NOT EXISTS idem_expires ON idem_keys (expires_at)",
    ]


def _chain_v2(tx: _Tx, key: bytes | None, dialect: Dialect) -> None:
    """Version 2 data step: hash-chain the history written before chaining existed."""
    del dialect
    heads: dict[str, str] = {}
    done_prev: dict[str, str] = {}
    rows = tx.execute(
        "SELECT event_id, saga_id, step_id, reversal_id, kind, at, data FROM events "
        "ORDER BY saga_id, event_id"
    )
    for eid, saga_id, step_id, rev_id, kind, at, data in rows:
        prev = heads.get(saga_id, "")
        digest = chain_hash(key, prev, saga_id, step_id, rev_id, kind, at, data)
        tx.execute("UPDATE events SET prev_hash=?, hash=? WHERE event_id=?", (prev, digest, eid))
        if kind == "reversal.done" and rev_id is not None:
            done_prev[rev_id] = prev
        heads[saga_id] = digest
    for rev_id, report_text in tx.execute(
        "SELECT reversal_id, report FROM reversals WHERE report IS NOT NULL"
    ):
        tx.execute(
            "UPDATE reversals SET report_hash=? WHERE reversal_id=?",
            (report_hash(key, report_text, done_prev.get(rev_id, "")), rev_id),
        )


def schema_v3_statements(dialect: Dialect) -> list[str]:
    """DDL bringing version 2 to 3 (the data step then fills ``records`` and drops the old
    tables; :func:`_views_v3` re-creates their names as views)."""
    return [
        f"CREATE TABLE records (rec_id {_pk(dialect)}, saga_id TEXT NOT NULL, step_id TEXT, "
        "reversal_id TEXT, kind TEXT NOT NULL, phase TEXT NOT NULL, "
        "at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, prev_hash TEXT, hash TEXT)",
        "CREATE INDEX records_saga ON records (saga_id, rec_id)",
        "CREATE INDEX records_comp ON records (reversal_id, rec_id) WHERE phase='c'",
        "CREATE INDEX records_in_doubt ON records (saga_id) WHERE kind='step.in_doubt'",
    ]


def _views_v3(dialect: Dialect) -> list[str]:
    if dialect == "sqlite":

        def j(col: str, field: str) -> str:
            return f"json_extract({col}.body, '$.{field}')"
    else:

        def j(col: str, field: str) -> str:
            return f"({col}.body::jsonb ->> '{field}')"

    seq = j("i", "seq") if dialect == "sqlite" else f"{j('i', 'seq')}::int"
    fin = ", ".join(
        f"{j('f', c)} AS {c}"
        for c in ("result", "inverse", "expectation", "residue", "acknowledgement", "violation")
    )
    return [
        "CREATE VIEW events AS SELECT rec_id AS event_id, saga_id, step_id, reversal_id, kind, "
        "at, body AS data, prev_hash, hash FROM records",
        f"CREATE VIEW steps AS SELECT i.saga_id, i.step_id, {seq} AS seq, "
        f"{j('i', 'tool')} AS tool, {j('i', 'args')} AS args, {j('i', 'deps')} AS deps, "
        f"{j('i', 'resources')} AS resources, {j('i', 'declared')} AS declared, "
        f"{j('f', 'effective')} AS effective, COALESCE({j('f', 'state')}, CASE i.kind WHEN "
        f"'step.cancelled' THEN 'cancelled' ELSE 'intent' END) AS state, {fin}, "
        f"{j('f', 'error')} AS error, i.at AS started_at, f.at AS finished_at "
        "FROM records i LEFT JOIN records f ON f.rec_id = (SELECT max(x.rec_id) FROM records x "
        "WHERE x.saga_id = i.saga_id AND x.step_id = i.step_id AND x.phase = 'f') "
        "WHERE i.phase = 'i'",
        f"CREATE VIEW compensations AS SELECT c.reversal_id, c.step_id, "
        f"{j('c', 'state')} AS state, {j('c', 'attempts')} AS attempts, "
        f"{j('c', 'detail')} AS detail, {j('c', 'data')} AS data, "
        f"{j('c', 'generation')} AS generation, c.at AS updated_at FROM records c "
        "WHERE c.phase = 'c' AND c.rec_id = (SELECT max(x.rec_id) FROM records x "
        "WHERE x.reversal_id = c.reversal_id AND x.step_id = c.step_id AND x.phase = 'c')",
    ]


def _to_records_v3(tx: _Tx, key: bytes | None, dialect: Dialect) -> None:
    """Version 3 data step: rewrite the v2 history into records carrying the full step data.

    Event ids are kept. An intent record gets the step's arguments and contract; a step's last
    finish record its full outcome; a step's last compensation record its compensation row; the
    reversal's last compensation record what the reversal had spent. The chain is re-hashed
    (the bodies changed), and each stored report re-bound to it.
    """
    v2 = _read_v2(tx)
    last = _LastEvents.of(v2.events)
    insert = (
        "INSERT INTO records (rec_id, saga_id, step_id, reversal_id, kind, phase, at, body, "
        "prev_hash, hash) "
        + ("OVERRIDING SYSTEM VALUE " if dialect == "postgres" else "")
        + "VALUES (?,?,?,?,?,?,?,?,?,?)"
    )
    heads: dict[str, str] = {}
    for eid, saga_id, step_id, rev_id, kind, at, data in v2.events:
        phase = last.phases[eid]
        body = _body_v3(v2, last, eid, (saga_id, step_id, rev_id, kind, phase), loads(data) or {})
        prev = heads.get(saga_id, "")
        if kind == "reversal.done" and last.done.get(rev_id) == eid:
            report_text = v2.revs[rev_id][4] if rev_id in v2.revs else None
            if report_text is not None:
                digest = report_hash(key, report_text, prev)
                body["report_hash"] = digest
                tx.execute(
                    "UPDATE reversals SET report_hash=? WHERE reversal_id=?", (digest, rev_id)
                )
        text = dumps(body)
        digest = chain_hash(key, prev, saga_id, step_id, rev_id, hkind(kind, phase), at, text)
        tx.execute(insert, (eid, saga_id, step_id, rev_id, kind, phase, at, text, prev, digest))
        heads[saga_id] = digest
    _finish_v3(tx, dialect)


@dataclass(frozen=True)
class _V2:
    """The rows of a v2 log the v3 data step rewrites."""

    steps: dict[tuple[str, str], tuple[Any, ...]]
    comps: dict[tuple[str | None, str], tuple[Any, ...]]
    revs: dict[str | None, tuple[Any, ...]]
    events: list[tuple[Any, ...]]


def _read_v2(tx: _Tx) -> _V2:
    steps = {
        (r[0], r[1]): r
        for r in tx.execute(
            "SELECT saga_id, step_id, seq, tool, args, deps, resources, declared, effective, "
            "state, result, inverse, expectation, residue, acknowledgement, violation, error "
            "FROM steps"
        )
    }
    comps = {
        (r[0], r[1]): r
        for r in tx.execute(
            "SELECT reversal_id, step_id, state, attempts, detail, data, generation "
            "FROM compensations"
        )
    }
    revs = {
        r[0]: r
        for r in tx.execute(
            "SELECT reversal_id, calls_spent, tokens_spent, continuations, report FROM reversals"
        )
    }
    events = tx.execute(
        "SELECT event_id, saga_id, step_id, reversal_id, kind, at, data FROM events "
        "ORDER BY saga_id, event_id"
    )
    return _V2(steps, comps, revs, list(events))


@dataclass
class _LastEvents:
    """Each v2 event's phase, and which event was the last of its step, compensation or run."""

    phases: dict[int, str] = field(default_factory=dict)
    finish: dict[tuple[str, str], int] = field(default_factory=dict)
    comp: dict[tuple[str | None, str], int] = field(default_factory=dict)
    rev_comp: dict[str | None, int] = field(default_factory=dict)
    done: dict[str | None, int] = field(default_factory=dict)

    @classmethod
    def of(cls, events: list[tuple[Any, ...]]) -> _LastEvents:
        last = cls()
        for eid, saga_id, step_id, rev_id, kind, _at, _data in events:
            phase = _phase_v2(step_id, rev_id, kind)
            last.phases[eid] = phase
            if phase == FINISH:
                last.finish[(saga_id, step_id)] = eid
            elif phase == COMPENSATION:
                last.comp[(rev_id, step_id)] = eid
                last.rev_comp[rev_id] = eid
            elif kind == "reversal.done" and rev_id is not None:
                last.done[rev_id] = eid
        return last


def _body_v3(
    v2: _V2,
    last: _LastEvents,
    eid: int,
    where: tuple[str, str, str | None, str, str],
    body: dict[str, Any],
) -> dict[str, Any]:
    """The v3 body of one v2 event: the full step data on intents and last finishes, the
    compensation row and the reversal's spending on last compensations."""
    saga_id, step_id, rev_id, kind, phase = where
    step = v2.steps.get((saga_id, step_id))
    if phase == INTENT and step is not None:
        return {
            "seq": int(step[2]),
            "tool": step[3],
            "args": loads(step[4]),
            "deps": loads(step[5]),
            "resources": loads(step[6]),
            "declared": step[7],
        }
    if phase == FINISH and step is not None and last.finish[(saga_id, step_id)] == eid:
        return _finish_v2(step, body)
    if phase == FINISH:
        return {"state": kind[len("step.") :], **body}
    if phase != COMPENSATION:
        return body
    row = v2.comps.get((rev_id, step_id))
    body = _comp_v2(body)
    body["generation"] = int(row[6]) if row else 1
    if row is not None and last.comp.get((rev_id, step_id)) == eid:
        body.update(state=row[2], attempts=int(row[3]), detail=row[4], data=loads(row[5]))
    rev = v2.revs.get(rev_id)
    if rev is not None and last.rev_comp.get(rev_id) == eid:
        body.update(calls_spent=int(rev[1]), tokens_spent=int(rev[2]))
        if int(rev[3]):
            body["run"] = int(rev[3])
    return body


def _finish_v3(tx: _Tx, dialect: Dialect) -> None:
    """Carry the id counter over, drop the v2 tables, and create the v3 views in their place."""
    if dialect == "postgres":
        tx.execute(
            "SELECT setval(pg_get_serial_sequence('records', 'rec_id'), "
            "GREATEST((SELECT max(rec_id) FROM records), 1))"
        )
    else:  # AUTOINCREMENT never reuses an id: carry the events' counter over
        tx.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'records', seq FROM sqlite_sequence "
            "WHERE name='events' AND NOT EXISTS (SELECT 1 FROM sqlite_sequence "
            "WHERE name='records')"
        )
    for table in ("events", "steps", "compensations", "resolutions"):
        tx.execute(f"DROP TABLE {table}")
    for stmt in _views_v3(dialect):
        tx.execute(stmt)


def _phase_v2(step_id: str | None, rev_id: str | None, kind: str) -> str:
    if step_id is None:
        return ""
    if kind in ("step.intent", "step.cancelled"):
        return INTENT
    if kind == "step.resolved":
        return RESOLVED
    if kind.startswith("step."):
        return FINISH
    if rev_id is not None:
        return COMPENSATION
    return ""


def _finish_v2(step: tuple[Any, ...], data: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"state": step[9]}
    for name, value in (
        ("effective", step[8]),
        ("result", loads(step[10])),
        ("inverse", loads(step[11])),
        ("expectation", loads(step[12])),
        ("residue", loads(step[13]) or None),
        ("acknowledgement", loads(step[14])),
        ("violation", step[15]),
        ("error", step[16]),
    ):
        if value is not None:
            body[name] = value
    if "reason" in data:
        body["reason"] = data["reason"]
    return body


def _comp_v2(data: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in data.items() if k not in ("state", "attempts", "detail")}
    return {
        "state": data.get("state"),
        "attempts": int(data.get("attempts") or 0),
        "detail": data.get("detail"),
        "data": rest,
    }


def schema_v4_statements(dialect: Dialect) -> list[str]:
    """DDL bringing version 3 to 4: the saga heads and the log's shards (rule 12)."""
    del dialect
    return [
        "ALTER TABLE sagas ADD COLUMN head TEXT",
        "CREATE TABLE log_heads (shard INTEGER PRIMARY KEY, n INTEGER NOT NULL, "
        "head TEXT NOT NULL)",
    ]


def _heads_v4(tx: _Tx, key: bytes | None, dialect: Dialect) -> None:
    """Version 4 data step: each saga's head from its last record, each shard's count and
    rolling hash from its sagas' ``saga.started`` records in log order. Records are not
    touched: an existing log verifies as it did."""
    del dialect
    last: dict[str, str] = {}
    counts = [0] * SHARDS
    rolling = [""] * SHARDS
    for saga_id, kind, digest, body in tx.execute(
        "SELECT saga_id, kind, hash, CASE WHEN kind='saga.started' THEN body END FROM records "
        "ORDER BY rec_id"
    ):
        last[saga_id] = str(digest or "")
        if kind == "saga.started":
            # the shard the record names, as verify_shards reads it (else its id's)
            shard = started_shard(saga_id, body)
            if shard is None:
                shard = shard_of(saga_id)
            counts[shard] += 1
            rolling[shard] = shard_step(key, shard, rolling[shard], str(digest or ""))
    for saga_id, digest in sorted(last.items()):
        tx.execute(
            "UPDATE sagas SET head=? WHERE saga_id=?",
            (head_of(key, saga_id, digest, old=True), saga_id),
        )
    for shard in range(SHARDS):
        tx.execute(
            "INSERT INTO log_heads (shard, n, head) VALUES (?, ?, ?)",
            (shard, counts[shard], rolling[shard]),
        )


def _no_data(tx: _Tx, key: bytes | None, dialect: Dialect) -> None:
    del tx, key, dialect


def schema_v5_statements(dialect: Dialect) -> list[str]:
    """Version 5 changes no table: from it on, records are hashed over their stored text
    (issue 29, ``chain_hash``); records written before keep their ``chain_hash_v1`` form and
    still verify. The version exists so that an amends which knows only the old form refuses
    the log as newer ("upgrade amends") instead of reading every new record as edited."""
    del dialect
    return []


def schema_v6_statements(dialect: Dialect) -> list[str]:
    """DDL bringing version 5 to 6: the log-wide tally of reversal records (rule 12: a saga
    rolled back on its own, its reversal cut off, is visible; :mod:`amends._log.tally`)."""
    del dialect
    return [
        "CREATE TABLE log_tally (shard INTEGER PRIMARY KEY, n INTEGER NOT NULL, acc TEXT NOT NULL)",
        # one index for both (each index an INSERT maintains costs the forward step ~2 k
        # instructions): the anchors' records, read by ``TallySeen``
        f"CREATE INDEX IF NOT EXISTS records_anchors ON records (rec_id, reversal_id, kind) "
        f"WHERE {ANCHORED}",
    ]


def _tally_v6(tx: _Tx, key: bytes | None, dialect: Dialect) -> None:
    """Version 6 data step: the tally starts after the last record the log holds (the row of
    shard ``SINCE``): nothing is computed over what the log holds, so no key signs it (an
    upgrade run without the key, or with another, leaves nothing that would later read as
    altered). Records written before keep the checks they had.

    Rule 12: a log that holds a head of version 6's form (``head6:``, an HMAC with the key) was
    written by an amends that kept the tally; one that says it is older had its tally dropped
    to hide a reversal cut off, and is refused, not given a fresh tally.

    Raises:
        SchemaVersionError: With a key, a saga's head has version 6's form."""
    del dialect
    if key:
        for saga_id, head, digest in tx.execute(
            "SELECT s.saga_id, s.head, r.hash FROM sagas s JOIN records r ON r.rec_id = "
            "(SELECT max(rec_id) FROM records WHERE saga_id = s.saga_id)"
        ):
            if head == head_of(key, str(saga_id), str(digest or "")):
                raise SchemaVersionError(
                    f"this log says it is older than version 6, but the head of saga "
                    f"{str(saga_id)[:200]!r} was written by an amends of version 6 or later "
                    f"(it keeps the log's tally of reversal records): the log was rewritten "
                    f"into an older format, its tally dropped (a reversal cut off would be "
                    f"undone again); restore the log from a backup (rule 12)"
                )
    last = tx.execute("SELECT max(rec_id) FROM records")
    since = int(last[0][0] or 0) if last else 0
    tx.execute("INSERT INTO log_tally (shard, n, acc) VALUES (?, ?, '')", (SINCE, since))


MIGRATIONS: dict[int, Callable[[Dialect], list[str]]] = {
    1: schema_statements,
    2: schema_v2_statements,
    3: schema_v3_statements,
    4: schema_v4_statements,
    5: schema_v5_statements,
    6: schema_v6_statements,
}
"""Schema version -> DDL that brings the previous version to it (append only, never edit)."""

DATA_MIGRATIONS: dict[int, Callable[[_Tx, bytes | None, Dialect], None]] = {
    1: _no_data,
    2: _chain_v2,
    3: _to_records_v3,
    4: _heads_v4,
    5: _no_data,
    6: _tally_v6,
}
"""Schema version -> the data step run after its DDL, in the same transaction."""


_CREATED_BY = {"log_tally": 6, "log_heads": 4, "records": 3}
"""A table that only a migration creates -> that migration's version: a log holding it is at
least at that version, whatever its ``amends_meta`` row says."""


def stored_version(raw: object, tables: Callable[[str], bool], where: str) -> int:
    """The schema version a log's ``amends_meta`` row stores (``raw``: its text; ``None``: no
    row), checked against the tables the log has (``tables(name)``: whether it exists).

    An edited version is named as such, never a traceback nor a migration run over a log that
    already has its tables (a lower number re-ran "ALTER TABLE sagas ADD COLUMN head"): a log
    is opened only at the version it really has (rule 12).

    Raises:
        SchemaVersionError: The stored version is not a whole number from 1 to
            :data:`SCHEMA_VERSION`, above it (a newer amends wrote the log), or below what the
            log's tables show.
    """
    fix = "restore the log from a backup (its schema version was edited)"
    if raw is None:
        if not tables("sagas"):
            return 0  # a fresh amends_meta: the migration that created it is running
        raise SchemaVersionError(
            f"saga log {where!r} stores no schema version but has amends' tables; {fix}",
            path=where,
        )
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 6) or int(text) < 1:
        raise SchemaVersionError(
            f"saga log {where!r} stores schema version {str(raw)[:40]!r}, which is no version "
            f"amends ever wrote (a whole number from 1 to {SCHEMA_VERSION}); {fix}",
            path=where,
        )
    version = int(text)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"saga log {where!r} has schema version {version}, newer than this amends "
            f"understands ({SCHEMA_VERSION}); upgrade amends",
            path=where,
        )
    for table, since in sorted(_CREATED_BY.items(), key=lambda kv: -kv[1]):
        if version < since and tables(table):
            raise SchemaVersionError(
                f"saga log {where!r} stores schema version {version}, but has the table "
                f"{table!r} that version {since} created; {fix}",
                path=where,
            )
    return version


SIGN_OLD_HISTORY = "AMENDS_SIGN_OLD_HISTORY"
"""The environment variable by which an operator agrees, for one run, that an old log's history
be signed with the log's key as it is (:func:`upgrade`)."""
_SIGNED_FROM = 4
"""The first schema version whose history carries every anchor of rule 12 (chains since 2,
records since 3, saga heads and the log's shards since 4): upgrading a log below it computes
anchors over records nothing authenticates yet."""


def upgrade(
    tx: _Tx, version: int, dialect: Dialect, key: bytes | None, where: str = "<the log>"
) -> None:
    """Bring a log at ``version`` to :data:`SCHEMA_VERSION` inside the caller's transaction.

    Rule 12: the data steps of versions 2 to 4 compute the tamper-evident history (hash
    chains, the re-hashed records, saga heads, the log's shards) over what the log holds. With a
    signing key that would bless whatever someone who can write the log put there: rewrite a
    log into the format of version 3 (drop ``log_heads`` and ``sagas.head``, set the version)
    with an undone saga's reversal cut off, and the upgrade computed a head that verifies, so a
    second undo sent the refund again; a forged version-1 log came out fully signed. So with a
    key, a log below version 4 that holds sagas is upgraded only when the operator says so.

    Raises:
        SchemaVersionError: A signing key is set, the log is below version 4 and holds sagas,
            and ``$AMENDS_SIGN_OLD_HISTORY`` is not ``1``.
    """
    if (
        key
        and 1 <= version < _SIGNED_FROM
        and os.environ.get(SIGN_OLD_HISTORY) != "1"
        and tx.execute("SELECT 1 FROM sagas LIMIT 1")
    ):
        raise SchemaVersionError(
            f"saga log {where!r} stores schema version {version}, and upgrading it would sign "
            f"its history with your AMENDS_LOG_KEY as it is: its hash chains and saga heads "
            f"would be computed now, over records nothing authenticates yet, so a log "
            f"rewritten into an older format by someone who can write it would verify. If "
            f"an older amends really wrote this log, upgrade it once on purpose: "
            f"{SIGN_OLD_HISTORY}=1 amends recover --db {where} (rule 12)",
            path=where,
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in MIGRATIONS[target](dialect):
            tx.execute(stmt)
        DATA_MIGRATIONS[target](tx, key, dialect)
        tx.execute(
            "INSERT INTO amends_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value=excluded.value",
            (str(target),),
        )
