"""The sandbox world: every simulated vendor's state in one object, its clock, faults and latency.

State lives in a small key-value store: a dict in memory, or a SQLite file (WAL) whose every write
is committed before the vendor call returns, so another process can open the same file with
``World(path)`` and see exactly what the vendors did. Every externally visible effect is appended
to an effect journal (:meth:`World.effects`). A vendor write that carries an idempotency key it has
seen before replays the first response and applies no new effect, as a real vendor does.

This module must never import the engine: the sandbox is a world, not a participant.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import json
import marshal
import os
import random
import sqlite3
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Literal, get_args

from amends import ConfigError, PermanentError, TransientError, current_call

from .._log.sqlite import switch_to_wal
from ._base import add_business_days, atomic
from .calendar import Calendar
from .chat import Chat
from .crm import Crm
from .docs import Docs
from .ledger import Ledger
from .mail import Mail
from .payments import Payments
from .sms import Sms

__all__ = [
    "EPOCH",
    "FaultKind",
    "Faults",
    "SimulatedCrash",
    "World",
    "add_business_days",
    "atomic",
    "current_world",
    "use_world",
]


class SimulatedCrash(BaseException):
    """The process dies here (an injected crash, see :meth:`Faults.arm_crash`).

    A ``BaseException``, like ``KeyboardInterrupt``: no tool or engine code may swallow it, so it
    unwinds the whole worker as a real crash would; a fresh engine on the same log recovers.
    """


FaultKind = Literal[
    "transient",
    "permanent",
    "timeout",
    "slow",
    "act_then_raise",
    "raise_after_inverse",
    "answer_other_id",
    "answer_null_id",
]

EPOCH = datetime(2026, 12, 7, 9, 0, tzinfo=UTC).timestamp()
"""Where the sandbox clock starts: Monday 7 December 2026, 09:00 UTC (dates stay reproducible)."""

_FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
_ANSWER_KINDS = frozenset({"answer_other_id", "answer_null_id", "answered"})
"""Faults that change what the vendor answers, not what it does (``answered``: one used)."""
_AFTER_ACTING = frozenset({"act_then_raise", "raise_after_inverse"}) | _ANSWER_KINDS
"""Faults that let the vendor act and fire once it has (:meth:`World.commit`, ``after_call``)."""
_CURRENT_WORLD: contextvars.ContextVar[World | None] = contextvars.ContextVar(
    "amends_sandbox_world", default=None
)
_CALL_IDS = itertools.count(1)

TABLES = (
    "calendar.events",
    "chat.channels",
    "chat.messages",
    "crm.records",
    "docs.docs",
    "ledger.entries",
    "mail.messages",
    "payments.charges",
    "payments.customers",
    "payments.refunds",
    "payments.wires",
    "sms.messages",
)
"""Every vendor table; :meth:`World.snapshot` always shows each (empty ones as ``{}``)."""
_TABLE_SET = frozenset(TABLES)
_NOT_VENDORS = frozenset(("meta", "idem"))
"""The store's own tables: counters and the clock, and the responses kept for replays."""


_Stored = bytes | tuple[Any, tuple[Any, ...] | None]
"""How an in-memory store holds a value: see :func:`_freeze`."""
_EMPTY: dict[str, _Stored] = {}
_dumps = marshal.dumps
_loads = marshal.loads
_SCALARS = frozenset((str, int, float, bool, type(None)))
_STR_KEYS = frozenset((str,))


def _freeze(value: Any) -> _Stored:
    """The private form an in-memory store keeps of ``value`` (issue 29: a marshal decode per
    read was 6 % of an eval saga's instructions, most of it for values a shallow copy restores).

    A scalar is kept as is (immutable): ``(value, None)``. A dict (str keys) or a list of
    scalars, or a dict with str keys whose values are scalars or such dicts and lists (a CRM
    record's ``fields`` and ``notes``), is kept as a private copy ``(copy, inner)``, ``inner``
    the keys whose values are containers; :func:`_thaw` copies those levels again, so nothing
    a caller holds aliases the store, and copies of the store share the entry. Anything else
    is encoded with marshal, as before (and refused by it as before). Types are exact: a str
    or int subclass is no scalar here (marshal refuses it), True stays True, 1 is not 1.0.
    """
    t = type(value)
    if t in _SCALARS:
        return (value, None)
    if t is dict:  # one pass over the items (issue 29: it was a set of types per question)
        inner: list[str] | None = None
        for k, v in value.items():
            tv = type(v)
            if type(k) is not str:
                return _dumps(value)
            if tv in _SCALARS:
                continue
            # one level more, if it is flat (_flat, inline: issue 29, a CRM record has two)
            if tv is dict:
                if not (set(map(type, v)) <= _STR_KEYS and set(map(type, v.values())) <= _SCALARS):
                    return _dumps(value)
            elif tv is not list or not set(map(type, v)) <= _SCALARS:
                return _dumps(value)
            if inner is None:
                inner = [k]
            else:
                inner.append(k)
        if inner is None:
            return (value.copy(), ())
        private = value.copy()
        for k in inner:
            private[k] = value[k].copy()
        return (private, tuple(inner))
    if _flat(value):
        return (value.copy(), ())
    return _dumps(value)


def _flat(value: Any) -> bool:
    """A dict with str keys and scalar values, or a list of scalars: one copy restores it."""
    if type(value) is dict:
        return set(map(type, value)) <= _STR_KEYS and set(map(type, value.values())) <= _SCALARS
    return type(value) is list and set(map(type, value)) <= _SCALARS


def _thaw(stored: _Stored) -> Any:
    """A caller's own copy of a value kept by :func:`_freeze`."""
    if isinstance(stored, bytes):
        return _loads(stored)
    value, inner = stored
    if inner is None:
        return value
    out = value.copy()
    for k in inner:
        out[k] = out[k].copy()
    return out


@dataclass
class _Fault:
    op: str
    kind: FaultKind
    times: int
    delay: float
    step: str | None = None
    """Only calls made for this step (``Call.step_id``); ``None``: any call of ``op``."""
    words: str = ""
    """What the vendor says when it refuses (``transient``/``permanent``), after its own words:
    text it echoes from the call or makes up, line breaks included (a hostile vendor)."""


class Faults:
    """The fault table every sandbox tool consults before acting (kept in this process only)."""

    def __init__(self) -> None:
        self._faults: list[_Fault] = []
        self._crash_at: int | None = None
        self._crash_after = False
        self._crash_op: str | None = None
        self._calls = 0
        self._cut: asyncio.Event | None = None
        self.stalled: list[str] = []
        """Steps whose call met a ``slow`` or ``timeout`` fault (the step id, or the tool)."""

    def add(
        self,
        op: str,
        kind: FaultKind,
        *,
        times: int = 1,
        delay: float = 0.0,
        step: str | None = None,
        words: str = "",
    ) -> None:
        """Make the next ``times`` calls of tool ``op`` (e.g. ``"payments.refund"``) misbehave;
        with ``step``, only the calls made for that step (its ``Call.step_id``: the forward
        call of one step of a saga that calls ``op`` many times, and its retries).

        ``transient`` raises :class:`amends.TransientError` without effect, ``permanent`` raises
        :class:`amends.PermanentError` without effect, ``timeout`` stalls ``delay`` seconds (an
        hour when 0) so the engine's timeout fires, ``slow`` sleeps ``delay`` (or until
        :meth:`cut_stalls`) and then acts.
        ``act_then_raise``: the vendor applies the effect, then the connection drops before the
        tool sees the answer (a ``ConnectionResetError``, so the tool records no inverse).
        ``raise_after_inverse``: the tool acts and records its inverse, then raises a
        ``ConnectionResetError`` (its answer is lost on the way back). ``answer_other_id``:
        the vendor acts, and its answer's ``id`` names another resource of the same kind (the
        first other one it holds, else one it does not: a confused or compromised vendor; an
        inverse taken from it would refund, delete or cancel something else);
        ``answer_null_id``: its answer's ``id`` is null (its answer changed shape).
        ``words``: what the vendor adds to a ``transient`` or ``permanent`` refusal (line
        breaks, control characters, lines that read like amends' own report: a hostile
        vendor's text).

        Raises:
            ConfigError: ``kind`` is unknown, ``times`` is not positive, ``step`` is not a
                str or ``words`` is not a str.
        """
        if kind not in _FAULT_KINDS:
            raise ConfigError(f"fault kind {kind!r} is not known; use one of {_FAULT_KINDS}")
        if not isinstance(times, int) or times < 1:
            raise ConfigError(f"fault times must be a positive int, got {times!r}")
        if step is not None and not isinstance(step, str):
            raise ConfigError(f"a fault's step must be a step id (a str) or None, got {step!r}")
        if not isinstance(words, str):
            raise ConfigError(f"a fault's words must be a str, got {words!r:.80}")
        self._faults.append(_Fault(op, kind, times, float(delay), step, words))

    def arm_crash(self, nth: int, *, after_effect: bool = False, op: str | None = None) -> None:
        """Make the process "die" (:class:`SimulatedCrash`) at the ``nth`` tool call from now
        (1-based; probes count), before that call acts or, with ``after_effect``, once it has
        acted and returned to the tool but before the engine sees the answer. With ``op``, only
        calls of that tool count (a crash in the middle of a refund, say).

        Raises:
            ConfigError: ``nth`` is not a positive int.
        """
        if not isinstance(nth, int) or nth < 1:
            raise ConfigError(f"arm_crash needs a positive call number, got {nth!r}")
        self._crash_at, self._crash_after, self._calls = nth, after_effect, 0
        self._crash_op = op

    def disarm_crash(self) -> None:
        """Forget an armed crash that has not fired."""
        self._crash_at = None

    def clear(self) -> None:
        """Remove every pending fault and any armed crash."""
        self._faults.clear()
        self._crash_at = None

    def count_call(self, op: str) -> bool:
        """Count one tool call toward an armed crash: raise :class:`SimulatedCrash` if it is due
        before acting; True if it is due after this call acts."""
        if self._crash_at is None or self._crash_op not in (None, op):
            return False
        self._calls += 1
        if self._calls != self._crash_at:
            return False
        self._crash_at = None
        if not self._crash_after:
            raise SimulatedCrash(f"simulated crash before {op} acted")
        return True

    def cut_stalls(self) -> None:
        """End every ``slow`` stall now: the stalled calls act at once. The eval cuts a stall
        once the engine has answered, since what it judges is whether the answer waited for the
        stalled call; a stall left to run would only add wall time after that."""
        if self._cut is not None:
            self._cut.set()

    async def stall(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if :meth:`cut_stalls` is called meanwhile."""
        if self._cut is None:
            self._cut = asyncio.Event()
        if self._cut.is_set():
            return
        try:
            await asyncio.wait_for(self._cut.wait(), seconds)
        except TimeoutError:
            pass

    def pending(self) -> list[dict[str, Any]]:
        """The faults not yet used up, as data (``step`` only for a fault on one step's calls)."""
        return [
            {"op": f.op, "kind": f.kind, "times": f.times, "delay": f.delay}
            | ({"step": f.step} if f.step is not None else {})
            for f in self._faults
        ]

    def take(self, op: str, step: str | None = None) -> _Fault | None:
        """The first pending fault for a call of ``op`` made for ``step`` (one used up)."""
        for fault in self._faults:
            if fault.op == op and (fault.step is None or fault.step == step):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None


class _Store:
    """Tables of JSON values keyed by string; in memory or write-through to SQLite."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        # In memory, values are kept private (_freeze: scalars and shallow JSON values as a
        # copy, anything deeper encoded with marshal, as exact about types as a copy: True is
        # not 1, 1 is not 1.0): a read returns a fresh copy (_thaw), so nothing a caller holds
        # can alias the world's state, and a copy of the world shares the kept values (issue
        # 12: the eval copies a world per saga).
        self._mem: dict[str, dict[str, _Stored]] = {}
        self._effects: list[_Stored] = []
        self._lock = threading.RLock()
        self._owned: Callable[[], bool] = self._lock._is_owned  # type: ignore[attr-defined]
        self._db: sqlite3.Connection | None = None
        self._depth = 0
        """How many :meth:`atomic` blocks of a file store are open (the outermost commits)."""
        if path is not None:
            try:
                if path != ":memory:" and not os.path.exists(path):
                    # issue 21.16: owner-only, like the saga log (its WAL and SHM follow suit)
                    with contextlib.suppress(FileExistsError):
                        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                # closed by close(), or when the store is collected: a catalog made over a world
                # (``demo_catalog``, a CLI's catalog factory) has nobody to call close()
                self._closer = weakref.finalize(self, self._db.close)
                self._db.execute("PRAGMA busy_timeout=5000")
                switch_to_wal(self._db, 5.0)  # another process may be creating the same file
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS kv (tbl TEXT NOT NULL, key TEXT NOT NULL, "
                    "value TEXT NOT NULL, PRIMARY KEY (tbl, key))"
                )
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "value TEXT NOT NULL)"
                )
            except (sqlite3.Error, OSError) as exc:
                self.close()  # never leak the file a world we refuse to open held
                raise ConfigError(
                    f"cannot open sandbox world file {path!r}: {exc}; pass a writable path "
                    f"or None for an in-memory world"
                ) from exc

    def busy(self) -> bool:
        """Whether this thread is inside a vendor operation (an :meth:`atomic` block, however
        nested): what it wrote commits only when the outermost block ends."""
        return self._owned()

    def atomic(self) -> AbstractContextManager[Any]:
        """One transaction around a whole vendor operation (read, check, write), so that two
        processes acting on the same world file never interleave inside one: ``with
        store.atomic():``. Nested blocks join the outer one. In memory it is this process's
        lock alone (issue 29: a reentrant lock is a C context manager, with nothing to begin
        or commit); for a file, this store (a class-based context manager: every vendor call
        opens one, and a generator-based one cost more than the call)."""
        return self._lock if self._db is None else self

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._depth += 1
            if self._db is not None and self._depth == 1:
                self._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._depth -= 1
            self._lock.release()
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._depth -= 1
            if self._db is not None and self._depth == 0:
                self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self._lock.release()

    def get(self, tbl: str, key: str, default: Any = None) -> Any:
        with self._lock:
            if self._db is None:
                raw = self._mem.get(tbl, _EMPTY).get(key)
                if raw is None:
                    return default
                if isinstance(raw, bytes):
                    return _loads(raw)
                value, inner = raw  # _thaw, inline (issue 29: ~160 reads per eval saga)
                if inner is None:
                    return value
                out = value.copy()
                for k in inner:
                    out[k] = out[k].copy()
                return out
            row = self._db.execute(
                "SELECT value FROM kv WHERE tbl = ? AND key = ?", (tbl, key)
            ).fetchone()
            return json.loads(row[0]) if row else default

    def items(self, tbl: str) -> list[tuple[str, Any]]:
        with self._lock:
            if self._db is None:
                return [(k, _thaw(v)) for k, v in sorted(self._mem.get(tbl, _EMPTY).items())]
            rows = self._db.execute(
                "SELECT key, value FROM kv WHERE tbl = ? ORDER BY key", (tbl,)
            ).fetchall()
            return [(k, json.loads(v)) for k, v in rows]

    def dump(self, skip: frozenset[str]) -> dict[str, dict[str, Any]]:
        """Every table but ``skip``, each as ``{key: value}`` in key order (one pass under the
        lock, for :meth:`World.snapshot`)."""
        with self._lock:
            if self._db is None:
                return {
                    tbl: {k: _thaw(v) for k, v in sorted(rows.items())}
                    for tbl, rows in self._mem.items()
                    if tbl not in skip
                }
            out: dict[str, dict[str, Any]] = {}
            rows = self._db.execute("SELECT tbl, key, value FROM kv ORDER BY tbl, key")
            for tbl, key, value in rows.fetchall():
                if tbl not in skip:
                    out.setdefault(tbl, {})[key] = json.loads(value)
            return out

    def tables(self) -> list[str]:
        with self._lock:
            if self._db is None:
                return sorted(self._mem)
            return [r[0] for r in self._db.execute("SELECT DISTINCT tbl FROM kv ORDER BY tbl")]

    def write(
        self, puts: list[tuple[str, str, Any]], effects: list[dict[str, Any]] | None = None
    ) -> None:
        """Apply ``puts`` and append ``effects`` atomically (one committed transaction).

        ``effects`` are dicts made for this call: an in-memory store keeps one of str keys and
        scalar values as it is (not copied), so the caller must not hold on to them."""
        effects = effects or []
        with self._lock:
            if self._db is None:
                mem = self._mem
                for tbl, key, value in puts:
                    # a response kept for an idempotent replay is read back only by a retry:
                    # encoding it costs less than checking it can be kept as a copy
                    kept = _dumps(value) if tbl == "idem" else _freeze(value)
                    rows = mem.get(tbl)
                    if rows is None:
                        rows = mem[tbl] = {}
                    rows[key] = kept
                kept_effects = self._effects
                for e in effects:
                    # made for this write and held by no one else (World.commit stamps a new
                    # dict per effect; a world copy decodes its own): one of str keys and
                    # scalar values is kept as it is, not copied again (issue 29)
                    if (
                        type(e) is dict
                        and set(map(type, e.values())) <= _SCALARS
                        and set(map(type, e)) <= _STR_KEYS
                    ):
                        kept_effects.append((e, ()))
                    else:
                        kept_effects.append(_freeze(e))
                return
            db = self._db
            if self._depth:  # inside atomic(): its transaction commits
                self._apply(db, puts, effects)
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                self._apply(db, puts, effects)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    @staticmethod
    def _apply(
        db: sqlite3.Connection, puts: list[tuple[str, str, Any]], effects: list[dict[str, Any]]
    ) -> None:
        db.executemany(
            "INSERT INTO kv (tbl, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value",
            [(t, k, json.dumps(v, sort_keys=True)) for t, k, v in puts],
        )
        db.executemany(
            "INSERT INTO effects (value) VALUES (?)",
            [(json.dumps(e, sort_keys=True),) for e in effects],
        )

    def effect_count(self) -> int:
        with self._lock:
            if self._db is None:
                return len(self._effects)
            return int(self._db.execute("SELECT COUNT(*) FROM effects").fetchone()[0])

    def effects(self) -> list[dict[str, Any]]:
        with self._lock:
            if self._db is None:
                return list(map(_thaw, self._effects))
            rows = self._db.execute("SELECT value FROM effects ORDER BY seq").fetchall()
            return [json.loads(r[0]) for r in rows]

    def copy(self) -> _Store:
        """An in-memory store with this one's tables and effects."""
        other = _Store(None)
        with self._lock:
            if self._db is None:  # the kept values are never handed out: share them
                other._mem = {tbl: dict(rows) for tbl, rows in self._mem.items()}
                other._effects = list(self._effects)
                return other
            puts = [(tbl, k, v) for tbl in self.tables() for k, v in self.items(tbl)]
            other.write(puts, self.effects())
        return other

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._closer()  # closes the connection, once
                self._db = None


class World:
    """All sandbox vendor state in one object.

    Args:
        path: A SQLite file for the state (WAL; every vendor mutation committed before the call
            returns, so other processes can open it with ``World(path)``), or ``None`` for an
            in-memory world (fast).
        seed: Seeds the world's randomness (when recipients read a message).
        clock: Seconds since the epoch; default a sandbox clock that starts at :data:`EPOCH` and
            moves only with :meth:`advance`. :meth:`advance` adds to either clock.

    Raises:
        ConfigError: ``path`` cannot be opened as a SQLite file.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._init(path, seed, clock, _Store(path))
        with self._store.atomic():  # two processes opening a new file seed it once
            if self._store.get("meta", "seeded") is None:
                self._seed_data()

    def _init(
        self, path: str | None, seed: int, clock: Callable[[], float] | None, store: _Store
    ) -> None:
        self.path = path
        self.seed = seed
        self._rng: random.Random | None = None
        self._clock = clock
        self._store = store
        self.txn: AbstractContextManager[Any] = store.atomic()
        """What :meth:`atomic` returns (one object per world: issue 29, every vendor call
        enters it, and asking the store each time was two calls more)."""
        self.faults = Faults()
        """Faults injected per tool; see :meth:`Faults.add`."""
        self.latency = 0.0
        """Seconds added to every vendor call (``asyncio.sleep``)."""
        self._advanced: float | None = None
        """In memory: the seconds :meth:`advance` added, as stored (``None``: read the store)."""
        self._after: dict[int, str] = {}
        """id(call) -> what happens once that call has acted (see :meth:`after_commit`)."""
        self.mail: Mail = Mail(self)
        self.calendar: Calendar = Calendar(self)
        self.crm: Crm = Crm(self)
        self.payments: Payments = Payments(self)
        self.chat: Chat = Chat(self)
        self.docs: Docs = Docs(self)
        self.sms: Sms = Sms(self)
        self.ledger: Ledger = Ledger(self)

    @property
    def rng(self) -> random.Random:
        """The world's randomness (when recipients read a message), seeded with ``seed``;
        created on first use (issue 29: seeding one per world copy cost more than most sagas'
        use of it, which is none)."""
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng

    # --- clock ----------------------------------------------------------------------------
    def now(self) -> float:
        """The sandbox time, in seconds since the epoch."""
        base = self._clock() if self._clock is not None else EPOCH
        advanced = self._advanced
        if advanced is None:  # a file another process may advance: read it each time
            advanced = self._store.get("meta", "advanced", 0.0)
            if self.path is None:  # in memory, only advance() moves it (issue 29: ~170 reads
                self._advanced = advanced  # per eval saga, each a decode under the lock)
        return float(base + advanced)

    def today(self) -> date:
        """The sandbox date (UTC)."""
        return datetime.fromtimestamp(self.now(), UTC).date()

    def iso(self, ts: float | None = None) -> str:
        """``ts`` (default now) as an ISO timestamp, to the second."""
        return _iso(self.now() if ts is None else ts)

    def advance(self, seconds: float) -> None:
        """Move the sandbox clock forward: send-delay windows expire, refunds settle, wire recall
        windows close, recipients read their mail.

        Raises:
            ConfigError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ConfigError(f"advance() moves the clock forward; got {seconds!r} seconds")
        with self._store.atomic():
            advanced = self._store.get("meta", "advanced", 0.0)
            self._write([("meta", "advanced", advanced + seconds)])
            self._advanced = None
        self.tick()

    def tick(self) -> None:
        """Apply everything that is due at the current sandbox time (the clock's effects are
        nobody's step: they are never tagged)."""
        with _Untagged():
            self.mail.tick()
            self.payments.tick()

    # --- inspection -----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The full JSON-able state, vendor by vendor (for oracles and golden files)."""
        self.tick()
        out: dict[str, Any] = {"now": self.iso()}
        stored = self._store.dump(_NOT_VENDORS)
        for tbl in sorted(stored.keys() | _TABLE_SET):
            vendor, _, kind = tbl.partition(".")
            out.setdefault(vendor, {})[kind] = stored.get(tbl, {})
        return out

    def effects(self) -> list[dict[str, Any]]:
        """Every externally visible effect ever applied, in order.

        Each is ``{"vendor", "op", "key", "idempotency_key", "at", ...}``; an idempotent replay
        applies no new effect. Effects by other actors carry ``"actor"``. An effect made by a tool
        the engine called carries ``"tag"``, ``"<step_id>:<phase>"`` (phase ``forward``,
        ``compensate``, ``follow_up``), and ``"call"``, one number per tool call, so an oracle can
        tell which step caused it and how many times an inverse was applied.
        """
        return self._store.effects()

    def effect_count(self) -> int:
        """How many effects :meth:`effects` would return (cheap: nothing is decoded)."""
        return self._store.effect_count()

    def copy(self) -> World:
        """An in-memory world with this world's state, effects and clock (faults not copied)."""
        other = World.__new__(World)
        other._init(None, self.seed, self._clock, self._store.copy())
        other.latency = self.latency
        return other

    def close(self) -> None:
        """Close the SQLite file (a no-op in memory)."""
        self._store.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = repr(self.path) if self.path else "in memory"
        return f"World({where}, seed={self.seed}, now={self.iso()!r})"

    # --- what vendors use -----------------------------------------------------------------
    def atomic(self) -> AbstractContextManager[Any]:
        """A context manager: one transaction (and this process's lock) around a vendor
        operation. Nested uses join the outer one."""
        return self.txn

    async def gate(self, op: str) -> None:
        """Latency and faults for one call of tool ``op``; called before the vendor acts
        (``sandbox_catalog()``'s tools: by their wrapper, only when latency is set or a fault
        or crash is pending, so with neither it would do nothing).

        Raises:
            TransientError: A ``transient`` fault was injected for ``op``.
            PermanentError: A ``permanent`` fault was injected for ``op``.
            SimulatedCrash: An armed crash is due before this call acts.
        """
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        faults = self.faults
        if faults._crash_at is None and not faults._faults:  # issue 29: the common case
            return
        call = current_call()
        if self.faults.count_call(op):
            self._after[id(call)] = "crash"
        fault = self.faults.take(op, call.step_id if call is not None else None)
        if fault is None:
            return
        if fault.kind in _AFTER_ACTING:
            self._after.setdefault(id(call), fault.kind)
            return
        if fault.kind in ("timeout", "slow"):
            self.faults.stalled.append(call.step_id if call is not None else op)
        if fault.kind == "transient":
            raise TransientError(
                f"{op}: the vendor is rate limiting (injected fault); retry later{fault.words}"
            )
        if fault.kind == "permanent":
            raise PermanentError(f"{op}: the vendor refused the call (injected fault){fault.words}")
        if fault.kind == "timeout":
            await asyncio.sleep(fault.delay or 3600.0)
            raise TransientError(f"{op}: the vendor did not answer (injected timeout)")
        await self.faults.stall(fault.delay)  # slow: then act

    def after_commit(self) -> None:
        """Called when a vendor operation's transaction has committed: an ``act_then_raise``
        fault of the current call fires now (the effect stands, the tool never sees the answer).

        Raises:
            ConnectionResetError: An ``act_then_raise`` fault was due for this call.
        """
        if not self._after or self._store.busy():
            return
        key = id(current_call())
        if self._after.get(key) == "acted":  # only once the call wrote: a read first is no act
            del self._after[key]
            raise ConnectionResetError(
                "the vendor applied the call, then the connection was reset before it answered "
                "(injected act_then_raise fault)"
            )

    def after_call(self, call: object) -> None:
        """Called when a tool has returned (its inverse recorded): fires a
        ``raise_after_inverse`` fault or a crash armed for after this call's effect.

        Raises:
            ConnectionResetError: A ``raise_after_inverse`` (or undelivered ``act_then_raise``)
                fault was due.
            SimulatedCrash: An armed crash was due after this call's effect.
        """
        if not self._after:  # no fault nor crash due after any call
            return
        kind = self._after.pop(id(call), None)
        if kind in _ANSWER_KINDS:
            return  # the answer was the fault (or there was no write to lie about)
        if kind == "crash":
            raise SimulatedCrash("simulated crash after the vendor acted, before the engine "
                                 "recorded the answer")  # fmt: skip
        if kind is not None:
            raise ConnectionResetError(
                "the tool's answer was lost after the vendor acted (injected "
                f"{'act_then_raise' if kind == 'acted' else kind} fault)"
            )

    def get(self, tbl: str, key: str, default: Any = None) -> Any:
        return self._store.get(tbl, key, default)

    def items(self, tbl: str) -> list[tuple[str, Any]]:
        return self._store.items(tbl)

    def next_id(self, prefix: str) -> str:
        """A fresh id such as ``ch_3`` (counters live in the store, so they survive reopening)."""
        with self._store.atomic():
            n = int(self._store.get("meta", f"counter:{prefix}", 0)) + 1
            self._store.write([("meta", f"counter:{prefix}", n)])
        return f"{prefix}_{n}"

    def replay(self, vendor: str, idempotency_key: str | None) -> Any:
        """The first response given for ``idempotency_key`` at ``vendor``, or ``None``."""
        if not idempotency_key:
            return None
        return self._store.get("idem", f"{vendor}:{idempotency_key}")

    def commit(
        self,
        puts: list[tuple[str, str, Any]],
        effects: list[dict[str, Any]] | None = None,
        *,
        vendor: str | None = None,
        idempotency_key: str | None = None,
        response: Any = None,
    ) -> Any:
        """Write state, effects and (with a key) the response to replay, in one transaction.

        Returns ``response``, so a vendor method can end with ``return world.commit(...)``.
        """
        stamped: list[dict[str, Any]] = []
        if effects:
            at = _iso(self.now())  # one transaction, one time
            stamped = [{"at": at, **e} for e in effects]
        tag, call_no = _tag()  # numbers the call even without an effect: numbering unchanged
        for e in stamped:
            e.setdefault("idempotency_key", idempotency_key)
            if tag is not None:
                e.setdefault("tag", tag)
                e.setdefault("call", call_no)
        if idempotency_key and vendor:
            puts = [*puts, ("idem", f"{vendor}:{idempotency_key}", response)]
        self._store.write(puts, stamped)
        if self._after:  # an act_then_raise fault of this call fires once this write committed
            key = id(current_call())
            kind = self._after.get(key)
            if kind == "act_then_raise":
                self._after[key] = "acted"
            elif kind in _ANSWER_KINDS and kind != "answered" and puts:
                self._after[key] = "answered"
                return self._lie(kind, puts[0], response)
        return response

    def _lie(self, kind: str, put: tuple[str, str, Any], response: Any) -> Any:
        """``response`` as a lying vendor answers it (``answer_other_id``/``answer_null_id``):
        its ``id`` another resource of the table it wrote first (one it does not hold, ``ch_0``,
        when there is no other), or null. What it stored (and replays for the same key) stays
        the truth."""
        tbl, made, _ = put
        if not isinstance(response, dict) or response.get("id") != made:
            return response  # no id of what it made in the answer: nothing to lie about
        if kind == "answer_null_id":
            return {**response, "id": None}
        other = next((k for k, _ in self._store.items(tbl) if k != made), None)
        return {**response, "id": other or f"{made.rpartition('_')[0]}_0"}  # or one unknown

    def _write(
        self, puts: list[tuple[str, str, Any]], effects: list[dict[str, Any]] | None = None
    ) -> None:
        self._store.write(puts, effects)

    def _seed_data(self) -> None:
        """The accounts, people and channels the demo and the tests start from."""
        self.crm.seed()
        self.payments.seed()
        self.chat.seed()
        self._write([("meta", "seeded", True)])


@functools.lru_cache(maxsize=1024)
def _iso(ts: float) -> str:
    # every effect is stamped; the sandbox clock moves only with advance(), so few values recur
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


# --- which step is acting, and which world ------------------------------------------------
_UNTAGGED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "amends_sandbox_untagged", default=False
)
_CALL_NO: dict[int, tuple[object, int]] = {}


def _tag() -> tuple[str | None, int]:
    """(``"<step_id>:<phase>"``, call number) of the tool the engine is running now, if any."""
    call = current_call()
    if call is None or _UNTAGGED.get():
        return None, 0
    held = _CALL_NO.get(id(call))
    if held is None or held[0] is not call:
        if len(_CALL_NO) > 4096:  # calls are short-lived; keep the table small
            _CALL_NO.clear()
        held = (call, next(_CALL_IDS))
        _CALL_NO[id(call)] = held
    return f"{call.step_id}:{call.phase}", held[1]


class _Untagged:
    """``with _Untagged():``: effects applied inside are nobody's step (the clock's).
    Class-based (issue 29: every read that ticks the clock opened one; a generator-based
    context manager cost more than the tick)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _UNTAGGED.set(True)

    def __exit__(self, *exc: object) -> None:
        _UNTAGGED.reset(self._token)


class _Binding:
    """What :func:`use_world` returns: binds a world in the current context while the
    ``with`` block runs (class-based, issue 29)."""

    __slots__ = ("_token", "_world")

    def __init__(self, world: World) -> None:
        self._world = world

    def __enter__(self) -> World:
        self._token = _CURRENT_WORLD.set(self._world)
        return self._world

    def __exit__(self, *exc: object) -> None:
        _CURRENT_WORLD.reset(self._token)


def current_world() -> World:
    """The world bound by :func:`use_world` in this task (what a shared catalog acts on).

    Raises:
        ConfigError: No world is bound here.
    """
    world = _CURRENT_WORLD.get()
    if world is None:
        raise ConfigError(
            "no sandbox world is bound in this task; run the saga inside "
            "`with amends.sandbox.use_world(world):` or build the catalog with "
            "sandbox_catalog(world)"
        )
    return world


def use_world(world: World) -> AbstractContextManager[World]:
    """Bind ``world`` for the tools of ``sandbox_catalog()`` (no argument) in this task and the
    tasks it starts, so one catalog serves many worlds at once (the eval builds it once)."""
    return _Binding(world)
