"""What the tamper-evident history covers beyond each saga's hash chain (rule 12, issue 21.3).

The hash chain of :mod:`amends._log.records` makes an edited, inserted or re-ordered record of a
saga visible. Three things it cannot see on its own, and what this module adds:

- **A saga's tail cut off** (its reversal's records deleted, so a second undo would send the
  refund again): every saga row carries a *head*, a hash (an HMAC with the log's key) over the
  hash of its last record, written in the same transaction as that record. A history that ends
  before its head is truncated.
- **A whole saga deleted**: sagas are spread over :data:`SHARDS` shards by id; each shard's row in
  ``log_heads`` holds how many sagas it has and a rolling hash over their ``saga.started``
  records in log order. A deleted saga changes both. (Shards, not one row: concurrent workers
  creating sagas seldom meet on one row.)
- **Rows that are not records** (``sagas``: title, tenant, actor, meta, state; ``reversals``:
  its existence, id, state, generation, continuations, budget): each must equal what the saga's
  records say, so an edit of them is visible too.

A saga rolled back on its own (its rows written back as they were before its undo) is the
tally's to find (:mod:`amends._log.tally`). Not covered: leases (``owner``/``lease_until``,
renewed without a record: editing them only changes who may take a reversal over, and fencing
keeps a second effect out), and a log rolled back as a whole to an earlier consistent state (a
restored backup looks like one): keep the anchor ``amends doctor --verify`` prints somewhere
else and compare (``--anchor``). Without a signing key the
hashes are plain SHA-256: they catch accidents and careless edits, not someone who recomputes
them; with ``AMENDS_LOG_KEY`` they cannot be recomputed without the key.

This module runs no SQL.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .base import ChainProblem
from .handoff import PAUSED
from .records import dumps, loads

__all__ = [
    "LOG",
    "SHARDS",
    "head_fits",
    "head_of",
    "next_shard",
    "shard_and_text",
    "shard_of",
    "shard_step",
    "started_shard",
    "verify_rows",
    "verify_shards",
    "writer_shard",
]

SHARDS = 16
"""How many ``log_heads`` rows the sagas are spread over."""
LOG = "(log)"
"""The ``saga_id`` of a problem of the log as a whole (a saga deleted: its id is gone too)."""


def _mac(key: bytes | None, parts: list[Any]) -> str:
    msg = dumps(parts).encode()
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def head_of(key: bytes | None, saga_id: str, last_hash: str, *, old: bool = False) -> str:
    """The head a saga row carries: bound to the hash of the saga's last record. Written once
    per saga per transaction, so it is built without the JSON encoder (the saga id is
    length-prefixed: no two (id, hash) pairs give the same message).

    Schema version 6 writes ``head6:`` heads; ``old`` is the ``head:`` form of versions 4 and
    5, which a saga keeps until its next write and which still verifies. The form is evidence:
    a log holding a ``head6:`` head was written by an amends that keeps the tally of reversal
    records, so a log that says it is older was rewritten (:func:`amends._log.schema.upgrade`)."""
    msg = f"{'head' if old else 'head6'}:{len(saga_id)}:{saga_id}:{last_hash}".encode()
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def head_fits(key: bytes | None, saga_id: str, last_hash: str, head: object) -> bool:
    """Whether ``head`` is the head (either form) of a history ending at ``last_hash``."""
    return head == head_of(key, saga_id, last_hash) or head == head_of(
        key, saga_id, last_hash, old=True
    )


def shard_of(saga_id: str) -> int:
    """The ``log_heads`` shard of a saga."""
    return int(hashlib.sha256(saga_id.encode()).hexdigest()[:8], 16) % SHARDS


def shard_step(key: bytes | None, shard: int, prev: str, started_hash: str) -> str:
    """A shard's rolling hash after one more saga (its ``saga.started`` record's hash)."""
    return _mac(key, ["sagas", shard, prev, started_hash])


_WRITERS = itertools.count()


def writer_shard() -> int:
    """The shard a new PostgreSQL writer starts its sagas in (``Tx.shard``): one per writer,
    so concurrent writers do not serialize on one ``log_heads`` row (issue 29: 4 worker
    processes started 37 sagas/s with a shard per saga id, 230 before the shards). The process
    id spreads processes, a counter the logs of one process."""
    return (os.getpid() + next(_WRITERS)) % SHARDS


def next_shard(shard: int) -> int:
    """Another shard, after a serialization failure: the row may be another writer's too."""
    return (shard + 1 + random.randrange(SHARDS - 1)) % SHARDS


def shard_and_text(
    shard: int | None, saga_id: str, data: dict[str, Any], text: str
) -> tuple[int, str]:
    """The shard a starting saga joins and its ``saga.started`` text: the writer's own shard,
    named in the text (inside the chain), or, with none, its id's and the text unchanged."""
    if shard is None:
        return shard_of(saga_id), text
    return shard, dumps({**data, "shard": shard})


def started_shard(saga_id: str, text: str | None) -> int | None:
    """The shard a saga joined, from its ``saga.started`` record's text: the one it names
    (a PostgreSQL writer's own, ``Tx.shard``), else the one its id hashes to; ``None`` when
    the record names something that is not one of the log's shards."""
    if not text or '"shard"' not in text:
        return shard_of(saga_id)
    try:
        body = loads(text)
    except ValueError:
        return None  # the chain check reports the record itself
    if not isinstance(body, dict) or "shard" not in body:
        return shard_of(saga_id)  # "shard" was a word inside a value, not the key
    shard = body["shard"]
    if type(shard) is not int or not 0 <= shard < SHARDS:
        return None
    return shard


def verify_shards(
    key: bytes | None,
    started: Iterable[tuple[str, str, str | None]],
    heads: Mapping[int, tuple[int, str]],
) -> list[ChainProblem]:
    """Recompute every shard from the ``saga.started`` records ``(saga_id, hash, text)`` in
    log order and compare with the stored ``heads`` (shard -> (count, rolling hash))."""
    count: dict[int, int] = {}
    rolling: dict[int, str] = {}
    out = []
    for saga_id, digest, text in started:
        shard = started_shard(saga_id, text)
        if shard is None:
            out.append(ChainProblem(saga_id, None, "edited", (
                f"its saga.started record names a log shard that is not one of the log's "
                f"{SHARDS}: the record was altered"
            )))  # fmt: skip
            continue
        count[shard] = count.get(shard, 0) + 1
        rolling[shard] = shard_step(key, shard, rolling.get(shard, ""), digest or "")
    for shard in sorted(set(count) | set(heads)):
        n, head = heads.get(shard, (0, ""))
        if (count.get(shard, 0), rolling.get(shard, "")) == (n, head):
            continue
        found = count.get(shard, 0)
        what = (
            f"shard {shard} of the log recorded {n} saga(s) and {found} remain: a saga was deleted"
            if found < n
            else f"shard {shard} of the log holds {found} saga(s), {n} recorded, or their order "
            f"changed: its sagas' history does not match the log's head"
        )
        out.append(ChainProblem(LOG, None, "deleted" if found < n else "edited", what))
    return out


def _first(records: Sequence[tuple[Any, ...]], kinds: Iterable[str]) -> tuple[Any, ...] | None:
    want = set(kinds)
    return next((r for r in records if r[3] in want), None)


def verify_rows(
    key: bytes | None,
    saga_id: str,
    records: Sequence[tuple[Any, ...]],
    saga_row: tuple[Any, ...] | None,
    reversal_row: tuple[Any, ...] | None,
    *,
    last_edited: bool = False,
) -> list[ChainProblem]:
    """The saga's row, head and reversal row against its records (``last_edited``: the chain
    check found the last record changed, so the head cannot say more about it).

    ``records``: (rec_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash) in log
    order; ``saga_row``: (title, tenant, actor, state, created_at, finished_at, meta, head,
    owner);
    ``reversal_row``: (reversal_id, state, budget, generation, requested_at, continuations).
    """
    if saga_row is None:
        if not records:
            return []
        return [_problem(saga_id, "deleted", "its row in the sagas table is gone, its history "
                         "is still there")]  # fmt: skip
    if not records:
        return []  # verify_saga reports a saga without history
    out = _check_saga_row(saga_id, records, saga_row)
    if not last_edited:
        out.extend(_check_head(key, saga_id, records, saga_row[7]))
    out.extend(_check_reversal_row(saga_id, records, reversal_row))
    return out


def _check_head(
    key: bytes | None, saga_id: str, records: Sequence[tuple[Any, ...]], head: Any
) -> list[ChainProblem]:
    """The saga's last record is the one its head was written for: nothing cut off its end,
    nothing added after it."""
    hashes = [str(r[8] or "") for r in records]
    if head_fits(key, saga_id, hashes[-1], head):
        return []
    at = next(
        (i for i in range(len(hashes) - 2, -1, -1) if head_fits(key, saga_id, hashes[i], head)),
        None,
    )
    if at is not None:
        extra = records[at + 1]
        return [
            _problem(
                saga_id,
                "inserted",
                f"event {extra[0]} ({extra[3]}) and any after it were added after the saga's "
                f"head was written: amends did not write them",
                int(extra[0]),
            )
        ]
    return [
        _problem(
            saga_id,
            "deleted",
            f"its history ends at event {records[-1][0]} ({records[-1][3]}), before the head its "
            f"row recorded: events were removed from its end (or the head was edited)",
        )
    ]


def _problem(saga_id: str, what: Any, detail: str, event_id: int | None = None) -> ChainProblem:
    return ChainProblem(saga_id, event_id, what, detail)


def _check_saga_row(
    saga_id: str, records: Sequence[tuple[Any, ...]], row: tuple[Any, ...]
) -> list[ChainProblem]:
    started = _first(records, ["saga.started"])
    if started is None:
        return []  # the chain check reports the missing start
    body = loads(started[6]) or {}
    title, tenant, actor, state, created_at, finished_at, meta_text = row[:7]
    told = {
        "title": body.get("title"),
        "tenant": body.get("tenant"),
        "actor": body.get("actor"),
        "meta": body.get("meta") or {},
        "created_at": float(started[5]),
    }
    end = _first(records, ["saga.completed", "saga.failed", "saga.interrupted"])
    told["state"] = "running" if end is None else _END[end[3]]
    told["finished_at"] = None if end is None else float(end[5])
    seen = {
        "title": title,
        "tenant": tenant,
        "actor": actor,
        "meta": loads(meta_text) or {},
        "created_at": float(created_at),
        "state": state,
        "finished_at": None if finished_at is None else float(finished_at),
    }
    if len(row) > 8:  # a paused saga may be continued by any process: its history says so
        handed = [r[3] for r in records if r[3] in ("saga.paused", "saga.continued")]
        told["paused"] = end is None and bool(handed) and handed[-1] == "saga.paused"
        seen["paused"] = row[8] == PAUSED
    wrong = [k for k in told if told[k] != seen[k]]
    if not wrong:
        return []
    shown = "; ".join(f"{k} is {seen[k]!r}, its history says {told[k]!r}" for k in wrong)
    return [_problem(saga_id, "edited", f"its row was changed after it was written: {shown}")]


_END = {"saga.completed": "completed", "saga.failed": "failed", "saga.interrupted": "failed"}


def _check_reversal_row(
    saga_id: str, records: Sequence[tuple[Any, ...]], row: tuple[Any, ...] | None
) -> list[ChainProblem]:
    requested = _first(records, ["reversal.requested"])
    if requested is None and row is None:
        return []
    if requested is None:
        return [_problem(saga_id, "inserted", f"reversal {row[0] if row else '?'} has a row "
                         f"but its history has no reversal.requested event")]  # fmt: skip
    if row is None:
        return [
            _problem(
                saga_id,
                "deleted",
                f"its history asked for reversal {requested[2]}, whose row is gone (undo would "
                f"start over and send compensations again)",
                int(requested[0]),
            )
        ]
    told = _reversal_told(records, requested)
    reversal_id, state, budget, generation, requested_at, continuations = row
    seen = {
        "reversal_id": reversal_id,
        "state": state,
        "budget": loads(budget),
        "generation": int(generation),
        "requested_at": float(requested_at),
        "continuations": int(continuations or 0),
    }
    wrong = [k for k in told if told[k] != seen[k]]
    if not wrong:
        return []
    shown = "; ".join(f"{k} is {seen[k]!r}, its history says {told[k]!r}" for k in wrong)
    return [_problem(saga_id, "edited", f"its reversal's row was changed: {shown}")]


def _reversal_told(
    records: Sequence[tuple[Any, ...]], requested: tuple[Any, ...]
) -> dict[str, Any]:
    rev_id = requested[2]
    body = loads(requested[6]) or {}
    told: dict[str, Any] = {
        "reversal_id": rev_id,
        "state": "running",
        "budget": body.get("budget"),
        "generation": 1,
        "requested_at": float(requested[5]),
        "continuations": 0,
    }
    for r in records:
        if r[2] != rev_id:
            continue
        if r[3] in ("reversal.taken_over", "reversal.continued"):
            data = loads(r[6]) or {}
            told["generation"] = int(data.get("generation", told["generation"]))
            told["state"] = "running"
            if r[3] == "reversal.continued":
                told["continuations"] += 1
                told["budget"] = data.get("budget", told["budget"])
        elif r[3] == "reversal.done":
            told["state"] = "done"
    return told
