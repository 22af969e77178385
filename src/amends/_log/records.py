"""The log's records (schema v3): one append-only row per step per phase, one encoded blob each.

Current state is *derived* from the records, never written twice: a step is its intent record
plus its latest finish record; a compensation is its latest compensation record; the history that
``amends show`` prints is the records themselves. This module encodes a record once (one shared
encoder), folds records back into :class:`StepRecord` / :class:`CompensationRecord`, and keeps the
hash chain of rule 11. It runs no SQL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from .._errors import ConfigError, LogCorruptedError
from .._jsondata import (
    MAX_DEPTH,
    MAX_DETAIL,
    as_repr,
    bounded,
    bounded_words,
    may_not_keep,
    problem,
    wordy,
)
from .._secrets import Redaction, redactions_from
from .base import (
    ChainProblem,
    CompensationRecord,
    CompensationWrite,
    Resolution,
    StepFinish,
    StepRecord,
)

__all__ = [
    "COMPENSATION",
    "FINISH",
    "INTENT",
    "MAX_RESULT_BYTES",
    "RESOLVED",
    "cap_result",
    "chain_hash",
    "chain_hash_v1",
    "compensation_text",
    "dumps",
    "event_data",
    "finish_body",
    "finish_text",
    "fold_compensations",
    "fold_steps",
    "hkind",
    "intent_text",
    "loads",
    "redacted_body",
    "report_hash",
    "verify_saga",
]

# Phases of a record (the ``phase`` column). Saga- and reversal-level records have phase "".
INTENT = "i"
"""A step's intent (or its cancellation when a reversal already existed)."""
FINISH = "f"
"""A step's outcome: done, failed, in_doubt (also written by recovery), ..."""
RESOLVED = "r"
"""A person resolved the step's manual action."""
COMPENSATION = "c"
"""One state change of a step's compensation inside a reversal."""

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_DECODER = json.JSONDecoder()


def _no_default(value: Any) -> Any:
    return _ENCODER.default(value)  # raises TypeError naming the type, as json.dumps does


# issue 12 (the hot path): ``JSONEncoder.encode`` builds a new C encoder object (and a markers
# dict) on every call, which costs more than encoding a small record. One C encoder made once
# gives byte for byte the same text (the tests compare them). It keeps no circular-reference
# markers (a dict shared by the event loop and the writer thread would keep stale entries after
# an error); a circular value recurses until RecursionError, and is then encoded again by the
# checking encoder so that it fails as json.dumps fails (ValueError).
_MAKE_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None: no C accelerator
_C_ENCODE: Any = (
    _MAKE_C_ENCODER(
        None,
        _no_default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        True,
        False,
        True,
    )
    if _MAKE_C_ENCODER is not None
    else None
)


def dumps(value: Any) -> str:
    """The one encoder of the log: canonical JSON (sorted keys, no spaces)."""
    if _C_ENCODE is None or type(value) is str:
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODE(value, 0))
    except RecursionError:
        return _ENCODER.encode(value)


def loads(text: str | None) -> Any:
    return None if text is None else _DECODER.decode(text)


def chain_hash(
    key: bytes | None,
    prev: str,
    saga_id: str,
    step_id: str | None,
    reversal_id: str | None,
    kind: str,
    at: float,
    data_text: str,
    keep: bool = False,
) -> str:
    """The hash of one record, chained to the previous record of its saga (rule 11).

    SHA-256 over a header naming the record's fields and ``prev`` (the previous record's hash,
    ``""`` for a saga's first record), then the stored text's own bytes; an HMAC-SHA-256 when
    the log has a signing key, so that someone who can write the file but lacks the key cannot
    re-forge the chain after an edit. ``data_text`` is the stored text itself: what is hashed is
    byte for byte what is kept, encoded once (issue 29: it is not escaped again inside a JSON
    list, and the header is no JSON: encoding it cost more than the hash). The header reads one
    way only: each text is length-prefixed (``~`` for none) and ``at`` is its 8 IEEE-754 bytes,
    so no two records give the same message. It starts ``amends.chain.2|``; records written
    before hash a JSON list (``[``...), checked by :func:`chain_hash_v1`.

    ``keep``: a record this process appends (``sql._append``) is remembered with the fields it
    was computed from, so that rule 12's check of the saga (before its undo, its report)
    compares the row it reads with those fields instead of hashing it again (issue 29: ~5 % of a
    compensation). Only a row equal in every hashed field to what was hashed here counts
    (:func:`_hashed_here`): an edited row (any field, or its hash) is hashed again, so an edit
    is found as before. A flag, not a second function calling this one: issue 29, a Python call
    per record on the log's writer thread.
    """
    # the fields' framing inline, not through _field (issue 29: two calls per record)
    step = "~" if step_id is None else f"{len(step_id)}:{step_id}"
    rev = "~" if reversal_id is None else f"{len(reversal_id)}:{reversal_id}"
    head = (
        f"amends.chain.2|{len(prev)}:{prev}|{len(saga_id)}:{saga_id}|{step}|{rev}|"
        f"{len(kind)}:{kind}|"
    ).encode()
    # the message joined once and hashed in one call: no hash object's update, and a keyed
    # hash by OpenSSL's one-shot HMAC, not an hmac.HMAC object (issue 29, per record)
    msg = b"".join((head, _PACK_AT(float(at)), data_text.encode()))
    digest = hmac.digest(key, msg, _SHA256).hex() if key else _SHA256(msg).hexdigest()
    if not keep:
        return digest
    new = _HASHED[0]
    new[digest] = (key, prev, saga_id, step_id, reversal_id, kind, at, data_text)
    if len(new) >= _HASHED_KEPT:
        _HASHED[1:] = [new]  # the older half is dropped: its records are hashed again if read
        _HASHED[0] = {}
    return digest


_PACK_AT = struct.Struct("<d").pack
_SHA256 = hashlib.sha256


_HASHED: list[dict[str, tuple[Any, ...]]] = [{}, {}]
"""Hash -> the fields :func:`chain_hash` hashed into it with ``keep``: the newer half, then
the older. A dict's set and get are atomic, so the writer threads of file logs share it
without a lock (a race can lose an entry: that record is then only hashed again)."""
_HASHED_KEPT = 4096
"""Records per half of :data:`_HASHED` (each holds references to its record's text: a few MB
at most)."""


def _hashed_here(digest: str, fields: tuple[Any, ...]) -> bool:
    """:func:`chain_hash` with ``keep`` computed ``digest`` from exactly ``fields`` (in this
    process)."""
    new, old = _HASHED
    kept = new.get(digest)
    if kept is None:
        kept = old.get(digest)
    return kept is not None and kept == fields


def chain_hash_v1(
    key: bytes | None,
    prev: str,
    saga_id: str,
    step_id: str | None,
    reversal_id: str | None,
    kind: str,
    at: float,
    data_text: str,
) -> str:
    """The hash records written before issue 29 carry: the same fields with the stored text
    inside one JSON list (the text escaped a second time). Only :func:`verify_saga` uses it, so
    that those logs still verify; such a message starts ``[``, so it can never equal a
    :func:`chain_hash` message."""
    msg = dumps([prev, saga_id, step_id, reversal_id, kind, float(at), data_text])
    if key:
        return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()
    return hashlib.sha256(msg.encode()).hexdigest()


def hkind(kind: str, phase: str) -> str:
    """What the chain hashes for a record's kind: its phase too, since the phase decides which
    state the record feeds (editing it would change a step's state)."""
    return f"{kind}#{phase}" if phase else kind


def report_hash(key: bytes | None, report_text: str, head: str) -> str:
    """The hash a stored report carries: over its own text and the history it sums up
    (``head`` is the hash of the last record before ``reversal.done``)."""
    msg = dumps(["report", head, report_text]).encode()
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def finish_body(finish: StepFinish) -> dict[str, Any]:
    """A finish record's blob: only the fields that are set (small rows, one encode)."""
    body: dict[str, Any] = {"state": finish.state}
    if finish.effective is not None:
        body["effective"] = finish.effective
    if finish.result is not None:
        body["result"] = finish.result
    if finish.inverse is not None:
        body["inverse"] = finish.inverse
    if finish.expectation is not None:
        body["expectation"] = finish.expectation
    if finish.residue:
        body["residue"] = [dict(r) for r in finish.residue]
    if finish.acknowledgement is not None:
        body["acknowledgement"] = finish.acknowledgement
    if finish.violation:
        body["violation"] = finish.violation
    if finish.error:
        body["error"] = finish.error
    if finish.redacted:
        body["redacted"] = [r.to_dict() for r in finish.redacted]
    return body


MAX_RESULT_BYTES = 1 << 20
"""The most bytes of a step's result the log stores by default (issue 21 item 13): 1 MiB."""
_SHOWN = 1000
"""How much of a too-large result its summary keeps, in characters of its JSON text."""


def _text(value: Any) -> str:
    """``dumps(value)``; a str or an exact int without a call of the encoder (issue 29)."""
    kind = type(value)
    if kind is str:
        return _STR(value)
    if kind is int:
        return _INT(value)  # as the encoder writes it (its ValueError past the digit limit too)
    return "null" if value is None else dumps(value)


_INT = int.__repr__


def _finish_text(finish: StepFinish) -> str:
    """``dumps(finish_body(finish))``, byte for byte: the body's keys written here in sorted
    order, each value encoded on its own (issue 29: one encoder call for the whole record cost
    ~20 k instructions, most of them the sort and the keys of the record's fixed shape). The
    usual values are written inline (str, int; an inverse of the usual three fields), not by
    calls (``tests/unit/test_hot_path.py`` counts the calls of a step)."""
    f = finish
    state, result, inverse, effective = f.state, f.result, f.inverse, f.effective
    tail = f'"state":{_STR(state) if type(state) is str else _text(state)}'
    if f.violation:
        tail += f',"violation":{_text(f.violation)}'
    if result is not None:
        kind = type(result)
        said = _INT(result) if kind is int else _STR(result) if kind is str else dumps(result)
        tail = f'"result":{said},{tail}'
    if f.residue:
        tail = f'"residue":{dumps([dict(r) for r in f.residue])},{tail}'
    if f.redacted:
        tail = f'"redacted":{dumps([r.to_dict() for r in f.redacted])},{tail}'
    if inverse is not None:
        if (
            type(inverse) is dict
            and len(inverse) == 3
            and type(why := inverse.get("no_drift_check")) is str
            and type(tool := inverse.get("tool")) is str
            and "args" in inverse
        ):
            said = (
                f'{{"args":{dumps(inverse["args"])},"no_drift_check":{_STR(why)},'
                f'"tool":{_STR(tool)}}}'
            )
        else:
            said = dumps(inverse)
        tail = f'"inverse":{said},{tail}'
    if f.expectation is not None:
        tail = f'"expectation":{dumps(f.expectation)},{tail}'
    if f.error:
        tail = f'"error":{_text(f.error)},{tail}'
    if effective is not None:
        said = _STR(effective) if type(effective) is str else _text(effective)
        tail = f'"effective":{said},{tail}'
    if f.acknowledgement is not None:
        tail = f'"acknowledgement":{dumps(f.acknowledgement)},{tail}'
    return f"{{{tail}}}"


def cap_result(finish: StepFinish, limit: int | None) -> StepFinish:
    """``finish`` with a result larger than ``limit`` bytes (as JSON) replaced by a summary.

    The call happened, so the step stays done; only what the log keeps of its answer shrinks:
    its size, a SHA-256 of the full JSON text (to compare with the vendor's copy) and its first
    characters. Everything undo needs (inverse, expectation, residue) is kept whole, and the
    agent still got the full result. Redaction positions inside the result go with it (the
    summary's text was scrubbed before it was cut, rule 11).

    Issue 29: the record's blob is encoded here, once, and kept with the finish for the log
    (:func:`finish_text`): the blob holds the result's text whole and the encoder writes ASCII
    only, so a blob within ``limit`` characters has a result within ``limit`` bytes, and only a
    larger one is measured on its own.
    """
    if (
        (finish.error is not None and len(finish.error) > MAX_DETAIL)
        or (finish.violation is not None and len(finish.violation) > MAX_DETAIL)
        or (finish.residue and any(wordy(r) for r in finish.residue))
        or (finish.acknowledgement is not None and wordy(finish.acknowledgement))
    ):
        finish = _bounded_words(finish)
    try:
        text = _finish_text(finish)
        # issue 21: may be too deep for a reader to load back (_jsondata.may_not_keep, inline:
        # no call per step on the hot path)
        if len(text) > 2 * MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH:
            finish, text = _kept(finish, text)
    except (ValueError, RecursionError):  # an int too long to print, a value too deep
        finish, text = _kept(finish, None)
    if limit is None or finish.result is None or len(text) <= limit:
        return _with_text(finish, text)
    result_text = dumps(finish.result)
    size = len(result_text.encode())
    if size <= limit:
        return _with_text(finish, text)
    summary = {
        "amends_summary": (
            f"result too large ({size:,} bytes > the log's cap of {limit:,}); stored a summary"
        ),
        "bytes": size,
        "sha256": hashlib.sha256(result_text.encode()).hexdigest(),
        "start": result_text[:_SHOWN],
    }
    return dataclasses.replace(
        finish,
        result=summary,
        redacted=tuple(r for r in finish.redacted if r.at[:1] != ("result",)),
    )


def _bounded_words(finish: StepFinish) -> StepFinish:
    """``finish`` with its error and violation cut to :data:`MAX_DETAIL` characters (they were
    scrubbed already, rule 11); marker positions past the cut go with the text."""
    error = None if finish.error is None else bounded(finish.error)
    violation = None if finish.violation is None else bounded(finish.violation)
    cut = {k for k, v in (("error", error), ("violation", violation)) if v is not None}
    # rule 12: residue and an acknowledgement a contract filled from a vendor's answer too
    residue = tuple(bounded_words(r) if wordy(r) else r for r in finish.residue)
    ack = finish.acknowledgement
    if ack is not None and wordy(ack):
        ack = bounded_words(ack)
        cut.add("acknowledgement")
    if any(r is not o for r, o in zip(residue, finish.residue, strict=True)):
        cut.add("residue")
    redacted = tuple(r for r in finish.redacted if not r.at or r.at[0] not in cut)
    return dataclasses.replace(
        finish,
        error=error,
        violation=violation,
        residue=residue,
        acknowledgement=ack,
        redacted=redacted,
    )


def _kept(finish: StepFinish, text: str | None) -> tuple[StepFinish, str]:
    """``finish`` with what the log cannot keep whole (:mod:`amends._jsondata`) replaced, and
    its blob: a result by the start of its repr (the call happened; the agent got it whole); an
    inverse or expectation, which undo needs whole, by nothing: the step is then irreversible
    and the contract violation says why (rule 2), never silently dropped.

    Raises:
        ValueError: Nothing here explains why ``finish`` did not encode (``text`` is None).
    """
    changes: dict[str, Any] = {}
    why = None if finish.result is None else problem(finish.result)
    if why is not None:
        changes["result"] = as_repr(finish.result, why)
    for name in ("inverse", "expectation"):
        why = problem(getattr(finish, name))
        if why is not None:
            said = (
                f"the {name} it recorded cannot be kept in the log ({why}), so undo cannot use "
                f"it and the step is irreversible; record JSON data an inverse can use (an id "
                f"or a short value)"
            )
            changes |= {"inverse": None, "expectation": None, "effective": "irreversible"}
            changes["violation"] = f"{finish.violation}; {said}" if finish.violation else said
            break
    if not changes:
        if text is None:
            raise ValueError(f"a step's outcome record does not encode as JSON: {finish!r:.300}")
        return finish, text
    gone = {"result", "inverse", "expectation"} & set(changes)
    changes["redacted"] = tuple(r for r in finish.redacted if not r.at or r.at[0] not in gone)
    kept = dataclasses.replace(finish, **changes)
    return kept, dumps(finish_body(kept))


def intent_text(body: dict[str, Any]) -> str:
    """An intent record's blob, with each argument the log cannot keep whole (too deep, an int
    too long to print: :mod:`amends._jsondata`) as the start of its repr; the tool gets it
    whole, only the log keeps less (issue 21)."""
    try:
        text = dumps(body)
        if not may_not_keep(text):
            return text
    except (ValueError, RecursionError):
        pass
    args = {}
    for k, v in body["args"].items():
        why = problem(v)
        args[k] = v if why is None else as_repr(v, why)
    return dumps({**body, "args": args})


_TEXT = "_amends_text"
"""The attribute holding a finish's encoded blob: not a dataclass field, so a copy made with
``dataclasses.replace`` (which may change any field) never carries a stale text."""


def _with_text(finish: StepFinish, text: str) -> StepFinish:
    object.__setattr__(finish, _TEXT, text)  # frozen: the blob of exactly these fields
    return finish


def finish_text(finish: StepFinish) -> str:
    """A finish record's blob: the text :func:`cap_result` encoded, or encoded now."""
    text: str | None = getattr(finish, _TEXT, None)
    return text if text is not None else _finish_text(finish)


def redacted_body(redacted: Sequence[Redaction], prefix: tuple[str, ...] = ()) -> list[Any]:
    """Redaction positions as a record's blob keeps them (rule 12), paths under ``prefix``."""
    return [Redaction((*prefix, *r.at), r.name, r.offset).to_dict() for r in redacted]


_STR = json.encoder.encode_basestring_ascii
"""How :func:`dumps` writes a string (the C encoder's own function, when there is one)."""


def compensation_text(write: CompensationWrite) -> str:
    """A compensation record's blob: ``dumps`` of its body (sorted keys), byte for byte.

    Issue 29: written field by field in sorted order, not as a dict sorted and encoded whole
    (~10 k instructions of each record, 2 per compensation). Only exact ints and strings
    take this way; any other value encodes the dict as before, so the text never differs."""
    # read untyped: a field may hold any value (a bool, a float where an int goes), which the
    # mypyc build would refuse or turn into an int when it reads a field declared int
    w = cast(Any, write)
    attempts, calls, tokens, generation = w.attempts, w.calls_spent, w.tokens_spent, w.generation
    detail, state, data = write.detail, write.state, write.data
    if (
        type(attempts) is int
        and type(calls) is int
        and type(tokens) is int
        and type(generation) is int
        and type(state) is str
        and (detail is None or type(detail) is str)
    ):
        data_text = dumps(data if type(data) is dict else dict(data))
        said = "null" if detail is None else _STR(detail)
        redacted = f',"redacted":{dumps(redacted_body(write.redacted))}' if write.redacted else ""
        return (
            f'{{"attempts":{attempts},"calls_spent":{calls},"data":{data_text},'
            f'"detail":{said},"generation":{generation}{redacted},"state":{_STR(state)},'
            f'"tokens_spent":{tokens}}}'
        )
    body: dict[str, Any] = {
        "state": state,
        "attempts": attempts,
        "detail": detail,
        "data": dict(data),
        "generation": generation,
        "calls_spent": calls,
        "tokens_spent": tokens,
    }
    if write.redacted:  # rule 12: where amends itself put a marker in ``data``
        body["redacted"] = redacted_body(write.redacted)
    return dumps(body)


# A record as read for folding: (rec_id, step_id, reversal_id, kind, phase, at, body text)
Row = tuple[Any, ...]


def fold_steps(
    saga_id: str, rows: Iterable[Row]
) -> tuple[tuple[StepRecord, ...], dict[str, Resolution]]:
    """The saga's steps (in ``seq`` order) and resolutions, from its records in log order.

    Only the records that make the current state are decoded (once each): a step's intent, its
    latest finish record and its resolutions; superseded finish records stay undecoded.
    """
    intents: dict[str, tuple[str, float, bool]] = {}
    finishes: dict[str, tuple[str, float]] = {}
    resolved: dict[str, list[tuple[str, float]]] = {}
    for _rid, step_id, _rev, kind, phase, at, text in rows:
        if phase == INTENT:
            intents[step_id] = (text, at, kind == "step.cancelled")
        elif phase == FINISH:
            finishes[step_id] = (text, at)  # the latest wins; superseded ones stay undecoded
        elif phase == RESOLVED:
            resolved.setdefault(step_id, []).append((text, at))
    resolutions = _resolutions(resolved)
    steps = [
        _step(saga_id, step_id, intent, finishes.get(step_id, ("{}", None)))
        for step_id, intent in intents.items()
    ]
    steps.sort(key=lambda s: s.seq)
    return tuple(steps), resolutions


def _resolutions(resolved: Mapping[str, list[tuple[str, float]]]) -> dict[str, Resolution]:
    """Each step's current resolution, with the earlier ones (issue 23: a later resolution never
    erases one); none for a step whose latest record withdrew it."""
    out: dict[str, Resolution] = {}
    for step_id, recs in resolved.items():
        chain: list[Resolution] = []
        for text, at in recs:
            body = _DECODER.decode(text)
            chain.append(
                Resolution(
                    step_id,
                    body["by"],
                    body.get("note"),
                    at,
                    bool(body.get("withdrawn")),
                    tuple(chain),
                )
            )
        if not chain[-1].withdrawn:
            out[step_id] = chain[-1]
    return out


def _step(
    saga_id: str,
    step_id: str,
    intent_row: tuple[str, float, bool],
    finish_row: tuple[str, float | None],
) -> StepRecord:
    """One step from its intent record and its latest finish record (``"{}"``: none yet)."""
    intent_text, started, cancelled = intent_row
    fin_text, finished_at = finish_row
    try:
        intent = _DECODER.decode(intent_text)
        fin = _DECODER.decode(fin_text)
        state = fin.get("state") or ("cancelled" if cancelled else "intent")
        return StepRecord(
            saga_id=saga_id,
            step_id=step_id,
            seq=int(intent["seq"]),
            tool=intent["tool"],
            args=intent["args"],
            deps=tuple(intent["deps"]),
            resources=tuple(intent["resources"]),
            declared=intent["declared"],
            explicit=intent.get("explicit", True) is not False,
            effective=fin.get("effective"),
            state=state,
            result=fin.get("result"),
            inverse=fin.get("inverse"),
            expectation=fin.get("expectation"),
            residue=tuple(fin.get("residue") or ()),
            acknowledgement=fin.get("acknowledgement"),
            violation=fin.get("violation"),
            error=fin.get("error"),
            started_at=started,
            finished_at=started if cancelled and finished_at is None else finished_at,
            redacted=redactions_from(
                [*(intent.get("redacted") or ()), *(fin.get("redacted") or ())]
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError, ConfigError) as exc:
        raise LogCorruptedError(
            f"saga {saga_id!r}: the log's record of step {step_id!r} is damaged (missing or "
            f"malformed {exc}); run `amends doctor --verify` to see what was changed, and "
            f"restore the log from a backup",
            saga_id=saga_id,
            step_id=step_id,
        ) from exc


def fold_compensations(reversal_id: str, rows: Iterable[Row]) -> dict[str, CompensationRecord]:
    """Each step's latest compensation record of the reversal (rows in log order)."""
    latest: dict[str, tuple[str, float]] = {}
    for _rid, step_id, _rev, _kind, phase, at, text in rows:
        if phase == COMPENSATION:
            latest[step_id] = (text, at)
    out = {}
    for step_id, (text, at) in latest.items():
        body = _DECODER.decode(text)
        out[step_id] = CompensationRecord(
            reversal_id,
            step_id,
            body["state"],
            int(body["attempts"]),
            body.get("detail"),
            body.get("data") or {},
            int(body["generation"]),
            at,
            redactions_from(body.get("redacted")),
        )
    return out


def spent(body_text: str | None, run: int) -> tuple[int, int]:
    """(calls, tokens) spent by run ``run`` of a reversal, from its latest compensation record
    (no per-compensation update of the reversal row: issue 12)."""
    if body_text is None:
        return 0, 0
    body = _DECODER.decode(body_text)
    if int(body.get("run", 0)) != run:
        return 0, 0  # a continuation starts from 0
    return int(body.get("calls_spent", 0)), int(body.get("tokens_spent", 0))


_FINISH_KEYS = ("inverse", "violation", "error")


def event_data(kind: str, phase: str, text: str) -> dict[str, Any]:
    """What an event shows in the history, derived from its record's blob.

    Intent and finish records hold the step's full data; the history shows the same summary as
    before schema v3 (tool, args and deps; the effective class, inverse, violation, error).
    """
    body: dict[str, Any] = _DECODER.decode(text)
    if phase == INTENT:
        return {"tool": body["tool"], "args": body["args"], "deps": body["deps"]}
    if phase == FINISH:
        if "reason" in body:  # written by recovery
            return {"reason": body["reason"]}
        out: dict[str, Any] = {"effective": body.get("effective")}
        out.update((k, body[k]) for k in _FINISH_KEYS if body.get(k))
        return out
    if phase == COMPENSATION:
        return {
            "state": body["state"],
            "attempts": body["attempts"],
            "detail": body.get("detail"),
            **(body.get("data") or {}),
        }
    return body


def verify_saga(
    key: bytes | None,
    saga_id: str,
    records: Sequence[Row],
    reversal: tuple[Any, ...] | None,
    *,
    verified: int = 0,
) -> list[ChainProblem]:
    """Walk one saga's chain.

    ``records``: (rec_id, step_id, reversal_id, kind, phase, at, body, prev_hash, hash) in log
    order;
    ``reversal``: (reversal_id, report text, report_hash) or ``None``;
    ``verified``: how many leading records are, column for column, ones an earlier walk found
    intact (:class:`~amends._log.cache.SagaCache`): their hashes are not computed again.
    """
    out: list[ChainProblem] = []
    if not records:
        out.append(
            ChainProblem(
                saga_id,
                None,
                "deleted",
                f"saga {saga_id!r} has no history at all; every saga starts with saga.started",
            )
        )
    expected = ""
    seen: dict[str, int] = {}  # hash -> position in ``records``
    for pos, (rid, step, rev, kind, phase, at, data, prev, digest) in enumerate(records):
        prev = prev or ""
        if not digest:
            out.append(
                ChainProblem(
                    saga_id,
                    int(rid),
                    "inserted",
                    f"event {rid} ({kind}) carries no hash: amends did not write it",
                )
            )
            continue
        if pos < verified:
            pass  # identical to a record found intact, linked to its intact predecessor
        elif not _hashes_to(digest, (key, prev, saga_id, step, rev, hkind(kind, phase), at, data)):
            out.append(
                ChainProblem(
                    saga_id,
                    int(rid),
                    "edited",
                    f"event {rid} ({kind}) does not match its hash: it was changed after it was "
                    f"written (or the log's signing key is not the one it was written with)",
                )
            )
        elif prev != expected:
            out += _broken_link(saga_id, records, pos, seen.get(prev))
        expected = digest
        seen[digest] = pos
    if reversal is not None and reversal[1] is not None:
        out.extend(_verify_report(key, saga_id, records, reversal))
    return out


def _hashes_to(digest: str, fields: tuple[Any, ...]) -> bool:
    """The record's fields hash to ``digest`` (this format's chain or the one before it)."""
    return (
        _hashed_here(digest, fields)
        or chain_hash(*fields) == digest
        or chain_hash_v1(*fields) == digest
    )


def _broken_link(
    saga_id: str, records: Sequence[Row], pos: int, linked: int | None
) -> list[ChainProblem]:
    """The record at ``pos`` does not link to the one before it: the records between the one it
    links to (``linked``) and it are foreign, or (``None``) the ones it linked to are gone."""
    rid, kind = records[pos][0], records[pos][3]
    if linked is None:
        return [
            ChainProblem(
                saga_id,
                int(rid),
                "deleted",
                f"the event(s) just before event {rid} ({kind}) are missing: its chain "
                f"link points to an event no longer in the log",
            )
        ]
    return [
        ChainProblem(
            saga_id,
            int(other[0]),
            "inserted",
            f"event {other[0]} ({other[3]}) is outside the hash chain: the event after it "
            f"links past it",
        )
        for other in records[linked + 1 : pos]
    ]


def _verify_report(
    key: bytes | None, saga_id: str, records: Sequence[Row], reversal: tuple[Any, ...]
) -> list[ChainProblem]:
    rev_id, report_text, stored = reversal
    done = [r for r in records if r[3] == "reversal.done" and r[2] == rev_id]
    if not done:
        return [
            ChainProblem(
                saga_id,
                None,
                "deleted",
                f"reversal {rev_id} has a stored report but its reversal.done event is missing "
                f"from the history",
            )
        ]
    last = done[-1]
    claimed = (loads(last[6]) or {}).get("report_hash", stored)
    if stored != report_hash(key, report_text, last[7] or "") or claimed != stored:
        return [
            ChainProblem(
                saga_id,
                int(last[0]),
                "report mismatch",
                f"the stored report of reversal {rev_id} does not match the hash taken over it "
                f"and its history when it was written: the report was edited",
            )
        ]
    return []


def body_of(data: Mapping[str, Any] | None) -> str:
    return dumps(dict(data or {}))
