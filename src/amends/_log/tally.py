"""The log-wide tally of reversal records (rule 12): what a rollback of one saga cannot hide.

A saga's head binds its history to its last record, and the log's shards bind each saga's
*start*; neither sees a saga rolled back on its own: someone who copied a saga's rows before its
undo and writes them back afterwards (its reversal's records and row deleted, the old head
restored) leaves a history that verifies, and a second undo sent the refund again. So every
record of a reversal (``reversal.requested``, each compensation state, a continuation, a
take-over, ``reversal.done``) is also counted log-wide, in ``log_tally``: a count and a sum
(modulo 2**256) of a hash (an HMAC with the log's key) over the record's saga and hash, written
in the same transaction as the record. Deleting, cutting off or rolling back a reversal's
records, duplicating them, or bringing in a record of another log written with the same key,
changes the count or the sum, and without the key the sum cannot be made to fit again. The sum
is order-free so that writers may keep rows of their own (PostgreSQL: the writer's shard, as
``log_heads``) and the total is their sum; the order of a saga's records is its chain's job.

Checked in full by ``verify()`` (``amends doctor --verify``, ``amends serve``'s periodic check)
and inside the transaction that claims, takes over or continues a reversal: while the tally does
not verify, no undo acts on the log. What it cannot see: the log rolled back as a whole (a
restored backup), which no record inside the log can tell from the real thing: compare the
``--anchor`` that ``amends doctor --verify`` prints (docs/security.md).

``count_in_tally`` and ``TallySeen`` are the shared SQL's (``amends._log.sql``); the rest
runs no SQL.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Literal

from .._errors import HistoryAlteredError
from .base import ChainProblem
from .database import Tx
from .integrity import shard_step, started_shard, verify_shards

__all__ = [
    "ANCHORED",
    "ANCHOR_PREFIX",
    "LOG",
    "LOG_TABLES",
    "MOD",
    "SINCE",
    "TALLY",
    "TALLY_UPSERT",
    "Tally",
    "TallySeen",
    "altered",
    "anchor_last",
    "anchor_problems",
    "anchor_text",
    "is_tally_problem",
    "stored_tally",
    "tally_of",
    "tally_problems",
    "tally_term",
]

LOG = "(log)"
_MOD = 1 << 256

ANCHORED = "(reversal_id IS NOT NULL OR kind = 'saga.started')"
"""The records the log's anchors count (a reversal's, a saga's start): the condition of the
partial index ``records_anchors``, written as is in each query that should use it."""
LOG_TABLES = ("log_heads", "log_tally")
"""The tables of the log's own anchors (rule 12): the saga shards and the reversal tally."""
SINCE = -1
"""The ``log_tally`` row that holds where the tally starts (:func:`stored_tally`)."""

Tally = tuple[int, int]
"""(count of reversal records, their sum modulo 2**256)."""


def tally_term(key: bytes | None, saga_id: str, digest: str) -> int:
    """One record's term: an HMAC (a SHA-256 without a key) over its saga and hash."""
    msg = f"tally:{len(saga_id)}:{saga_id}:{digest}".encode()
    if key:
        return int(hmac.new(key, msg, hashlib.sha256).hexdigest(), 16)
    return int(hashlib.sha256(msg).hexdigest(), 16)


def tally_of(key: bytes | None, records: Iterable[tuple[str, str | None]]) -> Tally:
    """The tally of ``(saga_id, hash)`` records."""
    n = total = 0
    for saga_id, digest in records:
        n += 1
        total += tally_term(key, saga_id, str(digest or ""))
    return n, total % _MOD


def stored_tally(rows: Iterable[tuple[int, int, str]]) -> tuple[int, Tally]:
    """``(since, tally)`` from the log's ``log_tally`` rows ``(shard, n, sum)``: the rows of
    writers hold the tally together; the row of shard :data:`SINCE` holds, as its ``n``, the
    last record written before the log kept a tally (version 6's upgrade): records up to it
    are not counted (they were written before; their chains and heads cover them as before).
    Raising ``since`` hides nothing: the stored sums still count the records above it."""
    since = n = total = 0
    for shard, count, acc in rows:
        if int(shard) == SINCE:
            since = int(count)
            continue
        n += int(count)
        total += int(str(acc or "0"), 16)
    return since, (n, total % _MOD)


_TALLY_DETAIL = "the log's tally of reversal records does not verify"
"""How the detail of a problem :func:`tally_problems` finds begins (:func:`is_tally_problem`)."""


def is_tally_problem(problem: ChainProblem) -> bool:
    """Whether ``problem`` is the log's tally not verifying (a reversal cut off or rolled back:
    no undo acts on the log), not another problem of the log as a whole (a saga deleted)."""
    return problem.saga_id == LOG and problem.detail.startswith(_TALLY_DETAIL)


def tally_problems(found: Tally, stored: Tally) -> list[ChainProblem]:
    """The log's reversal records (``found``) against the tally it holds (``stored``)."""
    if found == stored:
        return []
    (have, _), (recorded, _) = found, stored
    what: Literal["deleted", "inserted", "edited"]
    if have < recorded:
        what, how = "deleted", f"it recorded {recorded} reversal record(s) and {have} remain"
    elif have > recorded:
        what, how = "inserted", f"it holds {have} reversal record(s) and recorded {recorded}"
    else:
        what, how = "edited", f"its {have} reversal record(s) are not the ones it recorded"
    return [
        ChainProblem(LOG, None, what, (
            f"{_TALLY_DETAIL}: {how}. A saga's reversal "
            f"was cut off, deleted or rolled back to an older copy (or records of another log "
            f"were brought in), and an undo could send its compensations again: amends "
            f"refuses every undo, resume and continuation on this log until it is restored "
            f"from a backup"
        ))
    ]  # fmt: skip


TALLY_UPSERT = (
    "INSERT INTO log_tally (shard, n, acc) VALUES (?, 1, ?) ON CONFLICT (shard) "
    "DO UPDATE SET n=log_tally.n + 1, acc=excluded.acc"
)
"""How ``amends._log.sql._append`` counts a reversal's record in the writer's row (its shard
on PostgreSQL, so concurrent writers do not meet on one row; 0 on SQLite), the new sum given:
the row's sum is read once per transaction and kept in its cache under :data:`TALLY` plus the
shard (an in-memory log carries it to its next write only when nothing else changed the
database). The term and the sum are computed there, inline (issue 29: a compensation's call
budget); :func:`tally_term` is the same term."""
TALLY = "\x00tally:"
"""Prefix of a ``tx.cache`` key: the sum of the log's tally row of that shard."""
MOD = _MOD


Seen = tuple[int, int, Tally, int, int, dict[int, tuple[int, str]]]
"""What a check found: (since, last reversal record summed, their tally; last record whose
``saga.started`` was read, how many such, each shard's (count, rolling hash))."""
_NOTHING: Seen = (-1, 0, (0, 0), 0, 0, {})


class TallySeen:
    """What a log object last found of its tally and its shards (rule 12), so the check before
    each claim of a reversal hashes only the records written since (issue 29: a check over every
    record made an eval of 2,000 sagas on one log 2.5 times slower).

    Two anchors are checked: the tally of reversal records (a saga rolled back on its own) and
    the shards of the sagas' starts (a saga copied in from another log written with the same
    key: its own chain and head verify, and undoing it sent its refund a second time). The
    records read before are counted again each time: one deleted since is seen; whenever the
    quick check does not match, every record is read again before anything is refused (on
    PostgreSQL a record numbered below the last one seen may commit later). The check runs
    inside the claim's write transaction; what it found is kept (:meth:`keep`) only once that
    transaction committed, so a batch rolled back leaves nothing behind."""

    def __init__(self) -> None:
        self.state: Seen = _NOTHING

    def keep(self, state: Seen | None) -> None:
        """After the claim's transaction committed: what its check found."""
        if state is not None:
            self.state = state

    def check(self, tx: Tx, key: bytes | None, saga_id: str) -> Seen:
        """Check the log's reversal records against its tally and its sagas' starts against its
        shards, in ``tx``; returns the state to :meth:`keep` once ``tx`` commits.

        Raises:
            HistoryAlteredError: The tally or a shard does not verify.
        """
        # both tables hold at most a row per shard (and the tally one for SINCE)
        since, stored = stored_tally(tx.execute("SELECT shard, n, acc FROM log_tally"))
        heads = {int(r[0]): (int(r[1]), str(r[2])) for r in tx.execute(
            "SELECT shard, n, head FROM log_heads")}  # fmt: skip
        mine = _shard_of(tx, saga_id)
        was = self.state
        if was[0] == since and _counts(tx, since, was):
            state = _read(tx, key, was)
            if state[2] == stored and _same(state[5], heads, mine):
                return state
        state = _read(tx, key, (since, since, (0, 0), 0, 0, {}))
        if state[2] != stored:
            raise altered(saga_id, tally_problems(state[2], stored))
        if not _same(state[5], heads, mine):
            started = tx.execute(
                "SELECT saga_id, hash, body FROM records WHERE kind='saga.started' ORDER BY rec_id"
            )
            problems = verify_shards(key, [(r[0], r[1], r[2]) for r in started], heads)
            raise altered(saga_id, [p for p in problems if f"shard {mine} " in p.detail] or [
                ChainProblem(LOG, None, "edited", f"shard {mine} of the log, which saga "
                             f"{saga_id!r} started in, does not match its head")
            ])  # fmt: skip
        return state


def _shard_of(tx: Tx, saga_id: str) -> int | None:
    """The shard the saga started in (``None``: no start record; its own check says so)."""
    rows = tx.execute(
        "SELECT body FROM records WHERE saga_id=? AND kind='saga.started' ORDER BY rec_id LIMIT 1",
        (saga_id,),
    )
    return started_shard(saga_id, rows[0][0]) if rows else None


def _same(
    found: dict[int, tuple[int, str]], heads: dict[int, tuple[int, str]], mine: int | None
) -> bool:
    """The saga's shard (count, rolling hash) as the log's ``log_heads`` holds it: a saga
    deleted from another shard leaves this one's undo alone; one copied in from another log
    (its start in no shard's hash) is refused."""
    if mine is None:
        return True
    return found.get(mine, (0, "")) == heads.get(mine, (0, ""))


def _counts(tx: Tx, since: int, was: Seen) -> bool:
    """Whether the records the last check read are all still there (counted, not read)."""
    (rev,) = tx.execute(
        f"SELECT count(*) FROM records WHERE {ANCHORED} AND reversal_id IS NOT NULL "
        "AND rec_id > ? AND rec_id <= ?",
        (since, was[1]),
    )[0]
    (started,) = tx.execute(
        f"SELECT count(*) FROM records WHERE {ANCHORED} AND kind='saga.started' AND rec_id <= ?",
        (was[3],),
    )[0]
    return int(rev) == was[2][0] and int(started) == was[4]


def _read(tx: Tx, key: bytes | None, was: Seen) -> Seen:
    """``was`` with every reversal record and every ``saga.started`` record after it."""
    since, upto, (n, total), upto_s, n_s, shards = was
    for rec_id, saga_id, digest in tx.execute(
        f"SELECT rec_id, saga_id, hash FROM records WHERE {ANCHORED} AND reversal_id IS NOT NULL "
        "AND rec_id > ? ORDER BY rec_id",
        (upto,),
    ):
        # tally_term's term, inline (issue 29: a claim hashes each reversal record once, and
        # the call per record passed a compensation's call budget, 106.5 against 105)
        msg = f"tally:{len(saga_id)}:{saga_id}:{digest or ''}".encode()
        term = hmac.new(key, msg, hashlib.sha256) if key else hashlib.sha256(msg)
        n, total, upto = n + 1, total + int(term.hexdigest(), 16), int(rec_id)
    shards = dict(shards)
    for rec_id, saga_id, digest, body in tx.execute(
        f"SELECT rec_id, saga_id, hash, body FROM records WHERE {ANCHORED} AND "
        "kind='saga.started' AND rec_id > ? ORDER BY rec_id",
        (upto_s,),
    ):
        shard = started_shard(str(saga_id), body)
        if shard is None:
            shard = -1  # never a stored shard: the full check names the record
        count, rolling = shards.get(shard, (0, ""))
        shards[shard] = (count + 1, shard_step(key, shard, rolling, str(digest or "")))
        n_s, upto_s = n_s + 1, int(rec_id)
    return since, upto, (n, total % _MOD), upto_s, n_s, shards


def altered(saga_id: str, problems: list[ChainProblem]) -> HistoryAlteredError:
    """The error of a claim refused because the log's tally does not verify."""
    return HistoryAlteredError(
        f"this saga's history was altered: saga {saga_id!r} cannot be trusted: "
        f"{problems[0].detail}. Run `amends doctor --verify`",
        problems=tuple(problems),
        saga_id=saga_id,
    )


ANCHOR_PREFIX = "amends-anchor:1:"
"""How an anchor starts (:func:`anchor_text`); the version of its form follows."""


def anchor_text(key: bytes | None, last: int, records: Iterable[tuple[str, str | None]]) -> str:
    """An anchor of the log (rule 12): a hash (an HMAC with the key) over every record up to
    record ``last`` in log order, ``(saga_id, hash)`` each. Kept outside the log, it tells a
    log that grew from it (its records up to ``last`` unchanged) from one rolled back to before
    it, as a restored backup is: the one rollback that no record inside the log can show."""
    mac = hmac.new(key or b"", digestmod=hashlib.sha256) if key else hashlib.sha256()
    mac.update(f"anchor:{last}".encode())
    for saga_id, digest in records:
        mac.update(f";{len(saga_id)}:{saga_id}:{digest or ''}".encode())
    return f"{ANCHOR_PREFIX}{last}:{mac.hexdigest()[:32]}"


def anchor_last(anchor: str) -> int:
    """The record an anchor was taken at.

    Raises:
        ConfigError: ``anchor`` is not one ``amends doctor --verify`` printed.
    """
    from .._errors import ConfigError

    rest = anchor.strip().removeprefix(ANCHOR_PREFIX)
    last, _, mac = rest.partition(":")
    if (
        not anchor.strip().startswith(ANCHOR_PREFIX)
        or not (last.isascii() and last.isdigit() and len(last) <= 18)
        or len(mac) != 32
        or any(c not in "0123456789abcdef" for c in mac)
    ):
        raise ConfigError(
            f"anchor {anchor[:120]!r} is not one amends printed: an anchor reads "
            f"'{ANCHOR_PREFIX}<record>:<32 hex digits>'; copy it whole from the line "
            f"'log anchor' of `amends doctor --verify`"
        )
    return int(last)


def anchor_problems(anchor: str, found: str | None, max_rec: int) -> list[ChainProblem]:
    """The log against an anchor kept outside it: ``found`` is :func:`anchor_text` of the log's
    records up to the anchor's (``None`` when the log ends before it, at ``max_rec``)."""
    last = anchor_last(anchor)
    if found is None:
        what = (
            f"the log ends at record {max_rec}, before record {last} it held when the anchor "
            f"was taken: it was rolled back to an older copy (a restored backup, a file copied "
            f"back), so reversals done since may be missing and an undo could send their "
            f"compensations again"
        )
        return [ChainProblem(LOG, None, "deleted", what)]
    if found == anchor.strip():
        return []
    what = (
        f"the log's records up to record {last} are not those it held when the anchor was "
        f"taken: it was rolled back to an older copy or altered (or the anchor is of another "
        f"log, or was taken with another key)"
    )
    return [ChainProblem(LOG, None, "edited", what)]
