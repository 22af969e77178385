"""The seeded adversarial saga generator: ``generate(seed, index)`` is a pure function.

A scenario is data: the saga's steps (a random fan-out DAG of 1-40 steps over the eval tools), the
faults injected during the forward pass and during the reversal, the world mutations other actors
make between forward and undo, the undo requests (single, repeated, concurrent) and an optional
crash point. The same ``(seed, index)`` always yields the same scenario, on every machine.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FAMILIES",
    "HOSTILE_WORDS",
    "INVERSE_OF",
    "STALL_BUDGET",
    "STALL_SECONDS",
    "Mutation",
    "Scenario",
    "StepSpec",
    "generate",
    "generate_steps",
    "lookalike",
]

FAMILIES: tuple[str, ...] = (
    "clean",
    "drift",
    "forward_faults",
    "reversal_faults",
    "repeated",
    "concurrent",
    "crash",
    "budget",
    "mixed",
    "acts_then_fails",
    "keyless_crash",
    "follow_ups",
    "undo_order",
    "no_expectation",
    "stall",
    "one_plan",
    "selective",
    "cascading_apology",
    "retry_after_refusal",
    "hostile_words",
)
"""Scenario families, assigned round-robin by index (see docs/evals.md). Six are the classes of
issue 10: forward tools failing after acting (rule 9), a vendor ignoring idempotency keys with a
crash mid-compensation (rule 5), nested and failing follow-ups (rule 7), undo-order declarations
(rule 3), tools without expectations or with ``no_drift_check`` (rule 4), and a forward step
stalling while undo runs on a seconds budget (rule 7). ``one_plan`` is issue 23's (rule 10): the
same CRM field written two or three times, another field of the record written after it (a gate
on one resource), another actor's edit behind that gate, and tool-call budgets that cut the
undo short; the preview must predict every step's state. ``selective`` is issue 27's: undo only
one or two chosen steps (``engine.undo(steps=...)``), sometimes asked twice at once or cut by
the budget; exactly the chosen steps and what depends on them are undone, the rest stands, and
the preview of the selection predicts every state; sometimes the rest is undone later, and the
saga as a whole must then be judged as any undone saga, nothing undone twice.
``cascading_apology`` is issue 27 part 3's: the undo leaves mails to apologise for, a scripted
agent answers each apology sent with two more, the operator allows some tools and a person
refuses some of the rest, the agent's own calls sometimes fail or lose their answer, and the
reversal's budget (tool calls, tokens) must stop it (:mod:`amends.evals.cascade`).
``retry_after_refusal`` is rule 9's retry (:func:`_retries`): a call on a record the vendor
refuses, then the agent's retry of it on the same resource, which runs; or the first call's
outcome is unknown (``in_doubt``), or it failed for the agent after acting and recording its
inverse, and the retry must never run. ``hostile_words`` is rule 12's (:func:`_hostile`): text the
agent wrote and its vendors echo (a subject, a title, a post), and a vendor's refusal, carry line
breaks and control characters that would read as amends' own report lines ("Status:
fully_reversed"); the text report must keep each on its own item's line. It also puts a
tool-call budget on the undo half the time (a step the budget cut keeps its verb)."""
STALL_SECONDS = 5.0
"""How long a stalled forward call keeps stalling after the undo was asked, at most: 50 times the
family's seconds budget (:data:`STALL_BUDGET`), so an answer that came only after the call acted
waited for it, however loaded the machine. The runner cuts the stall short once the engine has
answered (:meth:`amends.sandbox.Faults.cut_stalls`): an engine that waits for the call meets the
whole stall; one that does not costs only its budget."""
STALL_BUDGET = 0.1
"""The seconds budget of a stall scenario's undo (issue 12: milliseconds, not seconds; what the
family checks is that the budget bounds the wait, not how long it is)."""

RECORDS = ("r1", "r2", "r3", "r4")
FIELDS = ("stage", "owner", "amount")
PEOPLE = ("ana@acme.test", "bo@acme.test", "cy@globex.test", "di@initech.test")
CUSTOMERS = ("cus_acme", "cus_globex")
CHANNELS = ("#sales", "#finance")

FORWARD_OPS = (
    "crm.update_field",
    "crm.add_note",
    "payments.charge",
    "payments.wire",
    "calendar.create_event",
    "chat.post",
    "chat.edit",
    "mail.send",
    "mail.send_delayed",
    "docs.create_draft",
    "docs.share",
    "docs.create_private_note",
    "ledger.post",
    "careless.update_field",
    "sms.send",
)
INVERSE_OPS = (
    "crm.update_field",
    "crm.delete_note",
    "payments.refund",
    "payments.recall_wire",
    "calendar.cancel_event",
    "mail.cancel_scheduled",
    "chat.delete",
    "chat.edit",
    "docs.delete",
    "docs.unshare",
    "ledger.reverse",
    "chat.announce",
    "crm.log_activity",
)
INVERSE_OF = {
    "crm.update_field": "crm.update_field",
    "crm.add_note": "crm.delete_note",
    "payments.charge": "payments.refund",
    "payments.wire": "payments.recall_wire",
    "calendar.create_event": "calendar.cancel_event",
    "mail.send_delayed": "mail.cancel_scheduled",
    "chat.post": "chat.delete",
    "chat.edit": "chat.edit",
    "docs.create_draft": "docs.delete",
    "docs.create_private_note": "docs.delete",
    "docs.share": "docs.unshare",
    "ledger.post": "ledger.reverse",
}
"""Each eval tool's inverse tool."""
PROBES = (
    "crm.read_field",
    "crm.get_record",
    "payments.get_charge",
    "calendar.get_event",
    "chat.get_message",
    "mail.get_message",
    "docs.get",
    "ledger.get_entry",
)


@dataclass(frozen=True)
class StepSpec:
    """One step: ``args`` values may be ``{"$ref": step_id, "key": k}`` (that step's result)."""

    step_id: str
    tool: str
    args: dict[str, Any]
    after: tuple[str, ...] = ()
    undo_after: tuple[str, ...] = ()
    """Steps whose inverses must succeed before this step's (``saga.call(undo_after=...)``)."""


@dataclass(frozen=True)
class Mutation:
    """What another actor does between forward and undo, to the effect of step ``step_id``."""

    kind: str
    """human_edit, webhook_edit, dispute, settle, close_card, attendee_decline, recipient_reads,
    member_reads, collaborator_edit, advance, human_edit_other, or lookalike_edit: a person
    writes a value Python finds ``==`` to the agent's but JSON does not (``True`` for ``1``,
    ``0`` for ``False``): a change all the same, so it must be drift, never overwritten."""
    step_id: str | None = None
    value: Any = None


@dataclass(frozen=True)
class Scenario:
    seed: int
    index: int
    family: str
    steps: tuple[StepSpec, ...]
    forward_faults: tuple[tuple[str, str, int], ...] = ()
    """(tool, fault kind, times) active during the forward pass (kinds: see Faults.add)."""
    step_faults: tuple[tuple[str, str, int], ...] = ()
    """(step id, fault kind, times) active during the forward pass on that step's calls only
    (``Faults.add(step=...)``): the oracle knows which step each one hits."""
    mutations: tuple[Mutation, ...] = ()
    reversal_faults: tuple[tuple[str, str, int], ...] = ()
    """(tool, fault kind, times) active during the reversal; ``slow`` answers after
    :data:`amends.evals.runner.SLOW_ANSWER` seconds, then acts."""
    requests: str = "single"
    """single, repeated (sequential) or concurrent undo requests."""
    n_requests: int = 1
    crash: tuple[int, bool] | None = None
    """(nth tool call of the reversal, after its effect?) at which the process dies."""
    crash_op: str | None = None
    """Count only calls of this tool toward the crash (e.g. ``ledger.reverse``)."""
    stall: str | None = None
    """A forward tool whose first call stalls before acting while the undo is requested with a
    seconds budget: until the undo answered, or ``stall_seconds`` after it was asked."""
    recovery_mutations: tuple[Mutation, ...] = ()
    """What other actors do after the crash, before a fresh engine recovers (``crash`` only)."""
    stall_seconds: float = STALL_SECONDS
    inverse_stalls: tuple[str, ...] = ()
    """Steps whose inverse stalls at its vendor (a ``timeout`` fault of ``INVERSE_STALL``
    seconds) when the reversal first sends it: the seconds budget cuts it off in flight
    (issue 23: in doubt for want of budget, finished by a continuation)."""
    budget_calls: int = 200
    budget_seconds: float = 20.0
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    select: tuple[str, ...] = ()
    """The steps a selective undo asks for (issue 27, ``undo(steps=...)``); empty: the saga."""
    budget_tokens: int = 100_000
    """The reversal's token budget (an agent's follow-ups spend it)."""
    cascade: bool = False
    """A scripted agent handles the manual actions after the undo (``cascading_apology``)."""
    allow_tools: tuple[str, ...] = ()
    """Tools the operator's policy lets that agent call without asking a person."""
    agent_tokens: int = 0
    """Tokens the agent spends on each proposal."""
    refuse_every: int = 1
    """The person refuses every n-th proposal shown to them (1: every one)."""
    rest_later: bool = False
    """After the selective undo, the rest of the saga is undone too (a whole-saga undo, which
    extends the same reversal): nothing the selection neutralised is undone twice."""
    follow_up_faults: tuple[tuple[str, str, int], ...] = ()
    """(tool, fault kind, times) active while that agent's follow-ups are sent (after the
    undo): a vendor refusing, failing for a while, or acting with its answer lost."""
    words: str = ""
    """What a vendor adds to every refusal this scenario injects (``Faults.add(words=...)``):
    one of :data:`HOSTILE_WORDS` in ``hostile_words``, else nothing."""
    finish: str = ""
    """What a person does after the undo (issue 23): ``resolve``: resolves every other step the
    budget stopped (over budget, blocked), having handled it by hand in a way no probe sees, then
    continues the reversal (a resolved step must never be attempted); ``retry``: once the
    vendors answer again, retries every step whose drift check could not run (it must be
    checked again). Empty: nothing."""
    """CRM records created before the saga (record id -> fields)."""

    @property
    def ref(self) -> str:
        """``SEED:INDEX``, for ``amends eval --replay``."""
        return f"{self.seed}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ref(step: str, key: str = "id") -> dict[str, str]:
    return {"$ref": step, "key": key}


_SOURCES = ("payments.charge", "calendar.create_event", "chat.post", "docs.create_draft")
"""Tools whose results later steps refer to (a charge read back, an event quoted, ...)."""


class _Drawn:
    """The steps drawn so far, with what later draws look up in them: the ids of each source
    tool's steps and the drafts not shared yet, kept up to date step by step (issue 29: they
    were recomputed from every earlier step for each new one, quadratic in the saga's size).
    The lists keep the steps' order, so every draw picks from the same list as before."""

    def __init__(self, steps: tuple[StepSpec, ...] = ()) -> None:
        self.steps: list[StepSpec] = []
        self.of: dict[str, list[str]] = {t: [] for t in _SOURCES}
        self.unshared: list[str] = []
        """Drafts no step shares yet (one share per draft)."""
        for s in steps:
            self.add(s)

    def add(self, step: StepSpec) -> None:
        self.steps.append(step)
        if step.tool in self.of:
            self.of[step.tool].append(step.step_id)
            if step.tool == "docs.create_draft":
                self.unshared.append(step.step_id)
        elif step.tool == "docs.share" and (doc := step.args["doc_id"]["$ref"]) in self.unshared:
            self.unshared.remove(doc)


def _step(rng: random.Random, i: int, drawn: _Drawn) -> StepSpec:
    prior = drawn.steps
    after: tuple[str, ...] = ()
    if prior and rng.random() < 0.45:  # fan-out: depend on one or two earlier steps
        after = tuple(sorted({rng.choice(prior).step_id for _ in range(rng.randint(1, 2))}))
    # rng.choices(_KINDS, weights=...)[0], its cumulative weights summed once per process
    # (issue 29: two lists and their sums per step): the same one draw of rng.random()
    kind = _KINDS[bisect.bisect(_KIND_CUM, rng.random() * _KIND_TOTAL, 0, len(_KINDS) - 1)]
    return _kind_step(rng, kind, i, drawn, after)


_KINDS = (
    "update", "note", "read", "charge", "get_charge", "event", "chat_ref", "chat", "mail",
    "delayed", "draft", "share", "edit", "wire", "sms", "ledger", "private", "careless",
)  # fmt: skip
_KIND_WEIGHTS = (6, 2, 1, 3, 1, 2, 2, 2, 1, 2, 2, 1, 1, 1, 1, 1, 1, 0)  # careless: its family
"""What :func:`_step` draws a step's kind from, with these weights (``random.choices``)."""
_KIND_CUM = list(itertools.accumulate(_KIND_WEIGHTS))
_KIND_TOTAL = _KIND_CUM[-1] + 0.0


def _kind_step(
    rng: random.Random, kind: str, i: int, drawn: _Drawn, after: tuple[str, ...]
) -> StepSpec:
    sid = f"s{i}"
    args: dict[str, Any]
    of, drafts = drawn.of, drawn.unshared
    if kind == "get_charge" and of["payments.charge"]:
        src = rng.choice(of["payments.charge"])
        return StepSpec(sid, "payments.get_charge", {"charge_id": _ref(src)})
    if kind == "chat_ref" and of["calendar.create_event"]:
        text = _ref(rng.choice(of["calendar.create_event"]))  # quotes the event: depends on it
        return StepSpec(sid, "chat.post", {"channel": rng.choice(CHANNELS), "text": text}, after)
    if kind == "share" and drafts:
        args = {"doc_id": _ref(rng.choice(drafts)), "people": rng.sample(PEOPLE, 2)}
        return StepSpec(sid, "docs.share", args, after)
    if kind == "edit" and of["chat.post"]:
        args = {"message_id": _ref(rng.choice(of["chat.post"])), "text": f"edited {i}"}
        return StepSpec(sid, "chat.edit", args, after)
    if kind in ("update", "get_charge", "chat_ref", "share", "edit"):
        args = {"record_id": rng.choice(RECORDS), "field": rng.choice(FIELDS), "value": f"v{i}"}
        return StepSpec(sid, "crm.update_field", args, after)
    if kind == "note":
        return StepSpec(sid, "crm.add_note", {"record_id": rng.choice(RECORDS), "text": f"n{i}"},
                        after)  # fmt: skip
    if kind == "read":
        args = {"record_id": rng.choice(RECORDS), "field": rng.choice(FIELDS)}
        return StepSpec(sid, "crm.read_field", args, after)
    if kind == "charge":
        args = {"customer": rng.choice(CUSTOMERS), "cents": rng.randint(1, 99) * 100}
        return StepSpec(sid, "payments.charge", args, after)
    if kind == "wire":
        args = {"to_account": f"acct-{rng.randint(1, 9)}", "cents": rng.randint(1, 99) * 1000}
        return StepSpec(sid, "payments.wire", args, after)
    if kind in ("event", "announced_event"):
        args = {"title": f"Kickoff {i}", "start": "2026-12-09T15:00:00+00:00",
                "attendees": rng.sample(PEOPLE, rng.randint(1, 3))}  # fmt: skip
        if kind == "announced_event" or rng.random() < 0.3:  # its undo asks follow-ups
            args["announce"] = rng.choice(CHANNELS)
            if rng.random() < 0.7:
                args["log_to"] = rng.choice(RECORDS)  # a nested follow-up
        return StepSpec(sid, "calendar.create_event", args, after)
    if kind == "ledger":
        args = {"account": rng.choice(CUSTOMERS), "cents": rng.randint(1, 99) * 100}
        return StepSpec(sid, "ledger.post", args, after)
    if kind == "private":
        return StepSpec(sid, "docs.create_private_note", {"text": f"todo {i}"}, after)
    if kind == "numeric":  # a number or a flag, for the lookalike edits of the drift family
        args = {"record_id": rng.choice(RECORDS), "field": rng.choice(("seats", "active")),
                "value": rng.choice([1, 0, True, False])}  # fmt: skip
        return StepSpec(sid, "crm.update_field", args, after)
    if kind == "careless":
        args = {"record_id": rng.choice(RECORDS), "field": rng.choice(FIELDS), "value": f"c{i}"}
        return StepSpec(sid, "careless.update_field", args, after)
    if kind == "chat":
        return StepSpec(sid, "chat.post", {"channel": rng.choice(CHANNELS), "text": f"update {i}"},
                        after)  # fmt: skip
    if kind == "mail":
        return StepSpec(sid, "mail.send", {"to": rng.choice(PEOPLE), "subject": f"Re: {i}"}, after)
    if kind == "sms":
        return StepSpec(sid, "sms.send", {"to": "+15550100", "text": f"ping {i}"}, after)
    if kind == "delayed":
        args = {"to": rng.choice(PEOPLE), "subject": f"Fwd: {i}", "delay": rng.choice([30, 120])}
        return StepSpec(sid, "mail.send_delayed", args, after)
    return StepSpec(sid, "docs.create_draft", {"title": f"Proposal {i}", "text": f"draft {i}"},
                    after)  # fmt: skip


def generate_steps(rng: random.Random, n: int) -> tuple[StepSpec, ...]:
    """A random fan-out DAG of ``n`` steps over the eval tools."""
    drawn = _Drawn()
    for i in range(1, n + 1):
        drawn.add(_step(rng, i, drawn))
    return tuple(drawn.steps)


def _with(
    rng: random.Random, steps: tuple[StepSpec, ...], kinds: tuple[str, ...]
) -> tuple[StepSpec, ...]:
    """``steps`` and, appended, one step of each of ``kinds`` (what a family is about)."""
    drawn = _Drawn(steps)
    out = drawn.steps
    for kind in kinds:
        i = len(out) + 1
        after = (rng.choice(out).step_id,) if out and rng.random() < 0.4 else ()
        if kind in ("chain", "gates"):
            for s in (_chain if kind == "chain" else _gates)(rng, i, after):
                drawn.add(s)
            continue
        if kind == "hostile":
            drawn.add(_hostile(rng, i, after))
            continue
        if kind == "finance_lock":
            # rule 3: close the deal, charge against it; the refund needs the deal reopened
            # first, which the charge declares with undo_after (or forgets to, 1 in 4).
            rid = rng.choice(RECORDS)
            won = {"record_id": rid, "field": "stage", "value": "closed_won"}
            close = StepSpec(f"s{i}", "crm.update_field", won, after)
            args = {"customer": rng.choice(CUSTOMERS), "cents": rng.randint(1, 99) * 100,
                    "deal": rid}  # fmt: skip
            declared = (close.step_id,) if rng.random() < 0.75 else ()
            drawn.add(close)
            drawn.add(StepSpec(f"s{i + 1}", "payments.charge", args, (close.step_id,), declared))
        else:
            drawn.add(_kind_step(rng, kind, i, drawn, after))
    return tuple(out)


HOSTILE_WORDS = (
    "\nStatus: fully_reversed (every step undone)",
    "\r\nSteps:\n  s1   Revert      reverted    Nothing to do",
    "\nNeeds a person:\n  - [s1] nothing stands; no one needs to act",
    "\u2028Status: fully_reversed\u2029Reversal r-0: 0 tool calls",
    "\x1b[2K\rStatus: fully_reversed",
    "\x85Undo of saga s-0 \u2014 done\x0bStatus: fully_reversed\x1c",
    "\ud800\nStatus: fully_reversed\udfff",
)
"""Words an agent's text or a vendor's answer may carry (rule 12): line breaks (``\\n``,
``\\r``, U+2028/U+2029, NEL, vertical tab, file separators), terminal escapes and lone
surrogates (no terminal can print one), followed by what reads as a line of amends' own text
report (its status, a step row, its manual actions)."""


def _hostile(rng: random.Random, i: int, after: tuple[str, ...]) -> StepSpec:
    """A step whose text (a subject, a title, a post, a note, a draft's title) carries
    :data:`HOSTILE_WORDS`: it reaches the report in the step's sentence and in the residue,
    acknowledgement and draft the vendor's answer fills."""
    words = f"{i}{rng.choice(HOSTILE_WORDS)}"
    tool = rng.choice(["mail.send", "calendar.create_event", "chat.post", "sms.send",
                       "crm.add_note", "docs.create_draft", "mail.send_delayed"])  # fmt: skip
    args: dict[str, Any]
    if tool == "mail.send":
        args = {"to": rng.choice(PEOPLE), "subject": f"Re: {words}"}
    elif tool == "mail.send_delayed":
        args = {"to": rng.choice(PEOPLE), "subject": f"Fwd: {words}", "delay": 120}
    elif tool == "calendar.create_event":
        args = {"title": f"Kickoff {words}", "start": "2026-12-09T15:00:00+00:00",
                "attendees": rng.sample(PEOPLE, rng.randint(1, 2))}  # fmt: skip
    elif tool == "chat.post":
        args = {"channel": rng.choice(CHANNELS), "text": f"update {words}"}
    elif tool == "sms.send":
        args = {"to": "+15550100", "text": f"ping {words}"}
    elif tool == "crm.add_note":
        args = {"record_id": rng.choice(RECORDS), "text": f"n{words}"}
    else:
        args = {"title": f"Proposal {words}", "text": f"draft {i}"}
    return StepSpec(f"s{i}", tool, args, after)


def _chain(rng: random.Random, i: int, after: tuple[str, ...]) -> list[StepSpec]:
    """Issue 23: one CRM field written two or three times (the agent's own later write is what
    the earlier one's probe finds), and sometimes another field of the same record after it
    (one resource: the earlier writes wait for its undo)."""
    rid, fld = rng.choice(RECORDS), rng.choice(FIELDS)
    out = []
    for k in range(rng.randint(2, 3)):
        sid = f"s{i + k}"
        args = {"record_id": rid, "field": fld, "value": f"chain{i}-{k}"}
        out.append(StepSpec(sid, "crm.update_field", args, after if k == 0 else ()))
    if rng.random() < 0.5:
        other = rng.choice([f for f in FIELDS if f != fld])
        args = {"record_id": rid, "field": other, "value": f"gate{i}"}
        out.append(StepSpec(f"s{i + len(out)}", "crm.update_field", args))
    return out


def _gates(rng: random.Random, i: int, after: tuple[str, ...]) -> list[StepSpec]:
    """Issue 23: a gate behind a gate. Writes to two or three different records, each one's
    inverse declared to wait for the one before it (``undo_after``), sometimes with the first
    one written again later (a same-resource chain behind the gates): a drifted step anywhere
    in it blocks every step behind it, in the preview as in undo."""
    records = rng.sample(RECORDS, rng.randint(2, 3))
    out: list[StepSpec] = []
    for k, rid in enumerate(records):
        args = {"record_id": rid, "field": rng.choice(FIELDS), "value": f"gate{i}-{k}"}
        waits = (out[-1].step_id,) if out else ()
        out.append(StepSpec(f"s{i + k}", "crm.update_field", args, after if k == 0 else (), waits))
    if rng.random() < 0.5:
        first = out[0].args
        args = {**first, "value": f"chain{i}-again"}
        out.append(StepSpec(f"s{i + len(out)}", "crm.update_field", args))
    return out


REFUSED_TIMES = 8
"""How many times a ``transient`` fault of the ``retry_after_refusal`` family fails its step:
more than the eval's retry policy tries (``FAST_RETRY``, 5), so the vendor refuses it to the end
(rule 9: failed, no effect), as a ``permanent`` fault does at once."""
_FIRST_FAULTS = ("permanent", "permanent", "transient", "act_then_raise", "raise_after_inverse")
"""How the first call of a retry pattern ends: refused (at once, or transient to the end),
``act_then_raise`` (the vendor acted, the answer was lost: ``in_doubt``, the retry must wait), or
``raise_after_inverse`` (the tool acted and recorded its inverse, then raised: ``failed`` for the
agent, but logged done, its effect standing: the retry must wait as behind an unknown outcome;
it took the place of a second ``act_then_raise``, so every saga's steps are drawn as before)."""


def _retries(
    rng: random.Random, steps: tuple[StepSpec, ...], k: int
) -> tuple[tuple[StepSpec, ...], tuple[tuple[str, str, int], ...]]:
    """``steps`` and, appended, ``k`` retry patterns (rule 9), with the faults that hit exactly
    their first calls: a call on a resource (a CRM field, a note on a record, an edit of a chat
    post, a share of a draft) that the vendor refuses or whose outcome is unknown, and the
    agent's retry of it on the same resource, sometimes with corrected arguments. Variations:
    a chain (the first call, a step named ``after=`` it on the same record, which never runs,
    then the retry of that step) and a step of another resource named ``after=`` the first
    call, which never runs whatever the first call's outcome."""
    out = list(steps)
    faults: list[tuple[str, str, int]] = []
    args: dict[str, Any]
    for _ in range(k):
        i = len(out) + 1
        after = (rng.choice(out).step_id,) if out and rng.random() < 0.3 else ()
        kind = rng.choice(_FIRST_FAULTS)
        first, pattern = _retry_pattern(rng, i, after)
        faults.append((first, kind, REFUSED_TIMES if kind == "transient" else 1))
        out += pattern
        if rng.random() < 0.4:  # named in after=: it must still have ended done
            sid = f"s{len(out) + 1}"
            tool = rng.choice(["mail.send", "chat.post", "crm.update_field"])
            if tool == "mail.send":
                args = {"to": rng.choice(PEOPLE), "subject": f"Done {i}"}
            elif tool == "chat.post":
                args = {"channel": rng.choice(CHANNELS), "text": f"retried {i}"}
            else:
                args = {"record_id": rng.choice(RECORDS), "field": "owner", "value": f"after{i}"}
            out.append(StepSpec(sid, tool, args, (first,)))
    return tuple(out), tuple(faults)


def _retry_pattern(
    rng: random.Random, i: int, after: tuple[str, ...]
) -> tuple[str, list[StepSpec]]:
    """One retry pattern from step ``s{i}`` on: the id of its first call, and its steps."""
    shape = rng.choices(["field", "chain", "note", "chat", "share"], weights=[4, 3, 1, 1, 1])[0]
    rid, fld = rng.choice(RECORDS), rng.choice(FIELDS)
    if shape == "note":
        text = f"note {i}"
        return f"s{i}", [
            StepSpec(f"s{i}", "crm.add_note", {"record_id": rid, "text": text}, after),
            StepSpec(f"s{i + 1}", "crm.add_note", {"record_id": rid, "text": text}),
        ]
    if shape in ("chat", "share"):  # the resource is another step's result: one post, one draft
        args: list[dict[str, Any]]
        if shape == "chat":
            post = {"channel": rng.choice(CHANNELS), "text": f"update {i}"}
            src = StepSpec(f"s{i}", "chat.post", post, after)
            tool, key, args = "chat.edit", "message_id", [{"text": f"edited {i}"}] * 2
        else:
            draft = {"title": f"Proposal {i}", "text": f"draft {i}"}
            src = StepSpec(f"s{i}", "docs.create_draft", draft, after)
            tool, key = "docs.share", "doc_id"
            people = rng.sample(PEOPLE, 2)
            args = [{"people": people}, {"people": people}]
        on = {key: _ref(src.step_id)}
        return f"s{i + 1}", [
            src,
            *(StepSpec(f"s{i + 1 + j}", tool, {**on, **a}) for j, a in enumerate(args)),
        ]
    wrong = f"{'Won' if fld == 'stage' else 'x'}{i}"  # a value the vendor may refuse
    right = f"retry{i}"
    first = _update(f"s{i}", rid, fld, rng.choice([wrong, right]), after)
    if shape == "field":
        return first.step_id, [first, _update(f"s{i + 1}", rid, fld, right)]
    other = rng.choice([f for f in FIELDS if f != fld])
    return first.step_id, [
        first,
        _update(f"s{i + 1}", rid, other, f"then{i}", (first.step_id,)),  # never runs
        _update(f"s{i + 2}", rid, fld, right),
        _update(f"s{i + 3}", rid, other, f"then{i}"),  # the agent retries the skipped step
    ]


def _update(sid: str, rid: str, fld: str, value: str, after: tuple[str, ...] = ()) -> StepSpec:
    return StepSpec(
        sid, "crm.update_field", {"record_id": rid, "field": fld, "value": value}, after
    )


def _mutations(rng: random.Random, steps: tuple[StepSpec, ...], k: int) -> tuple[Mutation, ...]:
    out: list[Mutation] = []
    for _ in range(k):
        s = rng.choice(steps)
        t = s.tool
        if t in ("crm.update_field", "careless.update_field"):
            kind = rng.choice(["human_edit", "webhook_edit"])
            out.append(Mutation(kind, s.step_id, f"edited-by-{kind}-{rng.randint(1, 999)}"))
        elif t == "payments.charge":
            out.append(Mutation(rng.choice(["dispute", "settle", "close_card"]), s.step_id))
        elif t == "calendar.create_event":
            out.append(Mutation("attendee_decline", s.step_id))
        elif t == "mail.send":
            out.append(Mutation("recipient_reads", s.step_id))
        elif t in ("mail.send_delayed", "payments.wire"):
            out.append(Mutation("advance", s.step_id, rng.choice([10, 60, 200, 900])))
        elif t == "chat.post":
            out.append(Mutation("member_reads", s.step_id))
        elif t == "docs.create_draft":
            out.append(Mutation("collaborator_edit", s.step_id, "edited by a collaborator"))
        else:
            out.append(Mutation("human_edit_other", None, f"unrelated-{rng.randint(1, 99)}"))
    return tuple(out)


def lookalike(value: Any) -> Any:
    """A value equal to ``value`` in Python but not as JSON: ``True`` for ``1``, ``0`` for
    ``False`` (a person retyping a quantity as a checkbox, or the other way round)."""
    return int(value) if isinstance(value, bool) else bool(value)


def _lookalikes(rng: random.Random, steps: tuple[StepSpec, ...]) -> tuple[Mutation, ...]:
    """A person's lookalike edit of one numeric CRM write of ``steps`` (none if it has none)."""
    numeric = [s for s in steps if s.tool == "crm.update_field"
               and isinstance(s.args["value"], bool | int)]  # fmt: skip
    if not numeric:
        return ()
    s = rng.choice(numeric)
    return (Mutation("lookalike_edit", s.step_id, lookalike(s.args["value"])),)


def _faults(
    rng: random.Random, ops: tuple[str, ...], k: int, kinds: tuple[str, ...]
) -> tuple[tuple[str, str, int], ...]:
    out = []
    for _ in range(k):
        kind = rng.choice(kinds)
        times = rng.randint(1, 3) if kind == "transient" else 1
        out.append((rng.choice(ops), kind, times))
    return tuple(out)


def generate(seed: int, index: int) -> Scenario:
    """The scenario ``seed:index`` (deterministic)."""
    rng = random.Random(f"amends-eval:{seed}:{index}")
    family = FAMILIES[index % len(FAMILIES)]
    n = rng.randint(1, 40)
    steps = generate_steps(rng, n)
    records = {r: {"stage": "lead", "owner": "sam", "amount": "100"} for r in RECORDS}
    kw: dict[str, Any] = {}
    if family == "keyless_crash":  # rule 5: crash mid-reversal on a vendor ignoring keys
        steps = _with(rng, steps, ("ledger",) * rng.randint(1, 2))
        kw["crash"] = (1, rng.random() < 0.7)
        kw["crash_op"] = "ledger.reverse"
        if rng.random() < 0.3:
            kw["requests"], kw["n_requests"] = "concurrent", 2
    if family == "follow_ups":  # rule 7: nested follow-ups, some failing or cut off
        steps = _with(rng, steps, ("announced_event",) * rng.randint(1, 2))
        if rng.random() < 0.6:
            follow = ("chat.announce", "crm.log_activity")
            kw["reversal_faults"] = _faults(rng, follow, rng.randint(1, 2),
                                            ("transient", "permanent"))  # fmt: skip
        if rng.random() < 0.3:
            kw["budget_calls"] = rng.randint(1, 2 * len(steps))
    if family == "undo_order":  # rule 3: the finance lock, declared or not
        steps = _with(rng, steps, ("finance_lock",) * rng.randint(1, 2))
        if rng.random() < 0.3:
            kw["mutations"] = _mutations(rng, steps, rng.randint(1, 2))
        if rng.random() < 0.5:  # a processor slow to refund: what must wait for it, waits
            kw["reversal_faults"] = (("payments.refund", "slow", 1),)
    if family == "no_expectation":  # rule 4: a careless tool, a private note
        steps = _with(rng, steps, ("careless", "private"))
        careless = [s for s in steps if s.tool == "careless.update_field"]
        edits = [Mutation("human_edit", s.step_id, f"human-{rng.randint(1, 99)}") for s in careless
                 if rng.random() < 0.5]  # fmt: skip
        kw["mutations"] = tuple(edits)
    if family == "one_plan":  # rule 10: same-resource chains, drift behind a gate, budget cuts
        steps = _with(rng, steps, ("chain",) * rng.randint(1, 3) + ("gates",) * rng.randint(0, 2))
        chained = [s for s in steps if str(s.args.get("value", "")).startswith(("chain", "gate"))]
        last = {(s.args["record_id"], s.args["field"]): s for s in chained}
        if rng.random() < 0.6:  # another actor edits a later write: the earlier ones wait for it
            s = rng.choice(sorted(last.values(), key=lambda x: int(x.step_id[1:])))
            kw["mutations"] = (Mutation("human_edit", s.step_id, f"human-{rng.randint(1, 99)}"),)
        if rng.random() < 0.5:
            kw["budget_calls"] = rng.randint(1, 2 * len(steps))
    if family == "stall":  # rule 7: the seconds budget bounds waiting for an in-flight step
        kw["stall"] = rng.choice(sorted({s.tool for s in steps}))
        kw["budget_seconds"] = STALL_BUDGET
        probed = [s.step_id for s in steps if s.tool in ("crm.update_field", "payments.charge")]
        if probed and rng.random() < 0.5:  # issue 23: an inverse the budget cuts off in flight
            kw["inverse_stalls"] = (rng.choice(probed),)
    if family == "drift":  # a flag or a count the agent set, retyped by a person
        steps = _with(rng, steps, ("numeric",))
    forward_ops = tuple(sorted({s.tool for s in steps}))
    if family in ("drift", "mixed"):
        kw["mutations"] = _mutations(rng, steps, rng.randint(1, 4))
    if family == "drift" and rng.random() < 0.7:
        kw["mutations"] = kw["mutations"] + _lookalikes(rng, steps)
    kinds: tuple[str, ...]
    if family in ("forward_faults", "mixed"):
        kinds = ("transient", "transient", "permanent")
        kw["forward_faults"] = _faults(rng, forward_ops, rng.randint(1, 3), kinds)
    if family == "acts_then_fails":  # rule 9: the vendor acted, the tool never saw the answer
        kinds = ("act_then_raise", "raise_after_inverse", "act_then_raise")
        ops = tuple(t for t in forward_ops if t in FORWARD_OPS) or forward_ops
        kw["forward_faults"] = _faults(rng, ops, rng.randint(1, 3), kinds)
    if family in ("reversal_faults", "mixed"):
        # act_then_raise (issue 23): the vendor applies an inverse and its answer is lost; the
        # engine must re-observe it, never call it failed (nor send it again)
        kinds = ("transient", "transient", "permanent", "act_then_raise")
        kw["reversal_faults"] = _faults(rng, INVERSE_OPS + PROBES, rng.randint(1, 4), kinds)
    if family == "repeated":
        kw["requests"], kw["n_requests"] = "repeated", rng.randint(2, 4)
    if family == "concurrent":
        kw["requests"], kw["n_requests"] = "concurrent", rng.randint(2, 5)
    if family == "mixed" and rng.random() < 0.5:
        kw["requests"], kw["n_requests"] = rng.choice(["repeated", "concurrent"]), 2
    if family == "crash" and rng.random() < 0.5:  # a person acts while the worker is down
        retyped: tuple[Mutation, ...] = ()
        if rng.random() < 0.5:
            steps = _with(rng, steps, ("numeric",))
            retyped = _lookalikes(rng, steps)
        kw["recovery_mutations"] = _mutations(rng, steps, 1) + retyped
    if family == "crash" or (family == "mixed" and rng.random() < 0.3):
        kw["crash"] = (rng.randint(1, max(1, 2 * n)), rng.random() < 0.5)
        inverses = sorted({INVERSE_OF[s.tool] for s in steps if s.tool in INVERSE_OF})
        if inverses and rng.random() < 0.5:  # die in the middle of one compensation
            kw["crash"] = (1, rng.random() < 0.7)
            kw["crash_op"] = rng.choice(inverses)
    if family == "budget":
        kw["budget_calls"] = rng.randint(1, max(1, n))
        if rng.random() < 0.5:  # issue 23: a person resolves stopped steps, then continues
            kw["finish"] = "resolve"
    if family == "reversal_faults":  # issue 23: a probe that raised is checked again by retry
        kw["finish"] = "retry"
    if family == "selective":  # issue 27: only the chosen steps and what depends on them
        ids = [s.step_id for s in steps]
        kw["select"] = tuple(sorted(rng.sample(ids, min(len(ids), rng.randint(1, 2)))))
        if rng.random() < 0.3:
            kw["requests"], kw["n_requests"] = "concurrent", 2
        if rng.random() < 0.3:
            kw["budget_calls"] = rng.randint(1, 2 * len(steps))
        kw["rest_later"] = rng.random() < 0.4  # then undo the rest (one reversal, extended)
    if family == "cascading_apology":  # issue 27 part 3: only the budget stops the agent
        steps = _with(rng, steps, ("mail",) * rng.randint(2, 6))
        kw.update(cascade=True, agent_tokens=rng.choice([0, 50, 300]),
                  refuse_every=rng.randint(1, 3),
                  allow_tools=rng.choice([(), ("mail.send",), ("mail.send", "sms.send")]),
                  budget_tokens=rng.choice([100_000, rng.randint(100, 2000)]),
                  budget_calls=rng.randint(len(steps), 3 * len(steps) + 6))  # fmt: skip
        if rng.random() < 0.5:  # the agent's tool calls fail too: failed, retried, answer lost
            kinds = ("transient", "permanent", "act_then_raise")
            kw["follow_up_faults"] = _faults(rng, ("mail.send", "sms.send"), rng.randint(1, 3),
                                             kinds)  # fmt: skip
    if family == "retry_after_refusal":  # rule 9: a refused call retried; an unknown one waits
        steps, kw["step_faults"] = _retries(rng, steps, rng.randint(1, 2))
    if family == "hostile_words":  # rule 12: words that read as amends' own report lines
        kw.update(_hostile_words(rng, steps))
        steps = kw.pop("steps")
    return Scenario(seed, index, family, steps, records=records, **kw)


LYING_TOOLS = frozenset(
    {
        "payments.charge",
        "payments.wire",
        "calendar.create_event",
        "chat.post",
        "docs.create_draft",
        "docs.create_private_note",
        "mail.send_delayed",
    }
)
"""Tools whose inverse names what the vendor's answer says it made, and which check that the
answer names what the call made (``sandbox.catalog._names_what_it_made``)."""
_LIES = ("answer_other_id", "answer_other_id", "answer_null_id")


def _hostile_words(rng: random.Random, steps: tuple[StepSpec, ...]) -> dict[str, Any]:
    """The ``hostile_words`` family's additions: 1-3 steps carrying hostile words; the vendors'
    refusals carry them too (``Scenario.words``): 50 %, a refused inverse of one step of the
    saga; 30 %, a refused forward call of one hostile step (``step_faults``); 50 %, a tool-call
    budget of 1..steps (over-budget steps keep their verb: continuing does them); 40 %, a
    vendor acts on one step that creates something (:data:`LYING_TOOLS`) and its answer names
    another resource of the kind (2 in 3) or null: no inverse may be taken from it."""
    steps = _with(rng, steps, ("hostile",) * rng.randint(1, 3))
    kw: dict[str, Any] = {"steps": steps, "words": rng.choice(HOSTILE_WORDS)}
    inverses = sorted({INVERSE_OF[s.tool] for s in steps if s.tool in INVERSE_OF})
    if inverses and rng.random() < 0.5:
        kw["reversal_faults"] = ((rng.choice(inverses), "permanent", 1),)
    faults: list[tuple[str, str, int]] = []
    if rng.random() < 0.3:
        faults.append((steps[-1].step_id, "permanent", 1))
    if rng.random() < 0.5:
        kw["budget_calls"] = rng.randint(1, len(steps))
    makers = [s.step_id for s in steps[:-1] if s.tool in LYING_TOOLS]
    if makers and rng.random() < 0.4:  # rule 8: the vendor's answer names another thing
        faults.append((rng.choice(makers), rng.choice(_LIES), 1))
    kw["step_faults"] = tuple(faults)
    return kw
