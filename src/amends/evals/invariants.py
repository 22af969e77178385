"""The oracle and the invariants, checked on the WORLD (its effect log), not on step success.

The oracle derives the truth per step from the world alone: did the forward call leave an effect
(``tag == "<step>:forward"``), and was an inverse effect applied for it
(``"<step>:compensate"``)? From that it derives the true outcome of the saga, and compares it with
what each report claims. The effects are the sandbox's own journal; the oracle never reads the
saga log: the world is the truth. Which forward steps must have run it derives from the scenario
(rule 9, :func:`_forward_outcomes`), not from the engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from amends import StepOutcome, StepState, UndoReport

from .cascade import check_cascade
from .generator import PROBES, Scenario
from .runner import FAST_RETRY, UNCHECKED, SagaResult
from .words import applies, check_words

__all__ = ["INVARIANTS", "applicable", "check", "dependents", "selection_scope", "true_outcome"]

INVARIANTS: tuple[str, ...] = (
    "honesty",
    "never_worse",
    "order",
    "idempotency",
    "bounded",
    "preview",
    "forward",
    "finish",
    "words",
)
"""The invariants. ``preview`` (rule 10, issue 23): with the world unchanged between preview and
undo, every step's predicted state equals the reported one; it applies to the sagas whose world
does not change in between (:func:`applicable`). ``forward`` (rule 9): the forward pass ran
exactly the steps rule 9 lets run -- a retry after a refused call on the same resource ran, a
step behind an in-doubt one or named ``after=`` a step that did not end done never did (the
world shows no effect of it, the report says it never ran); it applies where the scenario says
which step each forward fault hits. ``finish`` (rules 6, 7, issue 23): a step still running when
undo's seconds budget ran out (the ``stall`` family) that acted since is undone by a
continuation with a new budget, never left ``in_doubt`` for good, and the world shows the
inverse the continuation reports; where a person finished the reversal (``Scenario.finish``), a
step they resolved is never attempted by the continuation, and a step whose drift check could
not run is checked again by a retry; it applies to the sagas whose reversal was continued
(``SagaResult.continued``). ``words`` (rules 6, 8, 12, :mod:`amends.evals.words`): a step the
budget cut keeps its verb, and where hostile words were injected, every line the text report
prints is amends' own; it applies to the sagas with a step over budget or hostile words."""


def applicable(r: SagaResult) -> tuple[str, ...]:
    """The invariants that apply to ``r``: all but ``preview`` when no preview was taken (the
    world may change between it and undo: a fault, a crash, a stalled step), and but
    ``forward`` when the oracle cannot derive the forward outcomes (:func:`_forward_outcomes`)."""
    skip: tuple[str, ...] = () if r.preview is not None else ("preview",)
    if _grouped(r.scenario).expected is None:
        skip += ("forward",)
    if r.continued is None:
        skip += ("finish",)
    if not applies(r.reports[:1] + r.reports[1:][-1:], bool(r.scenario.words), r.preview_cut):
        skip += ("words",)
    return tuple(i for i in INVARIANTS if i not in skip) if skip else INVARIANTS


_WITH_INVERSE = {
    "crm.update_field",
    "crm.add_note",
    "payments.charge",
    "payments.wire",
    "calendar.create_event",
    "mail.send_delayed",
    "chat.post",
    "chat.edit",
    "docs.create_draft",
    "docs.share",
    "docs.create_private_note",
    "ledger.post",
    "careless.update_field",
}
_RESIDUE = {"payments.charge", "calendar.create_event", "chat.post", "docs.share", "ledger.post"}
"""Tools whose compensation leaves residue (a pending refund, notices already sent)."""
_CONFLICTING: dict[tuple[str, str], frozenset[str]] = {
    ("crm", "update_field"): frozenset({"update_field"}),
    ("payments", "dispute"): frozenset({"refund"}),
    ("docs", "edit"): frozenset({"delete"}),
}
"""(vendor, op) of another actor's change -> the inverse ops that would overwrite or destroy it
(rule 4): writing the old CRM value back, refunding a disputed charge, deleting a document a
collaborator has since edited."""
_RESOURCES = {
    "crm.update_field": "record_id",
    "crm.add_note": "record_id",
    "careless.update_field": "record_id",
    "chat.edit": "message_id",
    "docs.share": "doc_id",
}
"""Tools declaring ``resources`` in the eval catalog -> the argument naming the resource."""
# issue 29: an enum member read (StepState.X) or hash costs ~10x a name's on CPython 3.11, and
# the honesty check makes several per step and report: the members it compares with, read once,
# compared by identity (a tuple's `in` tests identity first; a set's hashes the member)
_REVERTED, _COMPENSATED = StepState.REVERTED, StepState.COMPENSATED
_CANCELLED, _NOT_NEEDED = StepState.CANCELLED, StepState.NOT_NEEDED
_IN_DOUBT, _DRIFTED = StepState.IN_DOUBT, StepState.DRIFTED
_STANDS = (
    StepState.ACKNOWLEDGED,
    StepState.DRIFTED,
    StepState.FAILED,
    StepState.BLOCKED,
    StepState.OVER_BUDGET,
)
_TIME_SLACK = 2.0
"""Seconds a request may run past its budget's ``seconds`` (scheduling on a busy 2-core box)."""


class _Grouped:
    """What the oracle derives from a scenario's steps alone, computed once per scenario: each
    step's dependents (transitively) and the steps a selective undo must cover (issue 29: every
    check of every engine's result walked the steps again, twice)."""

    def __init__(self, sc: Scenario) -> None:
        ids = [s.step_id for s in sc.steps]
        direct: dict[str, set[str]] = {sid: set() for sid in ids}
        need: dict[str, set[str]] = {sid: set() for sid in ids}
        last: dict[str, str] = {}
        self.waits: dict[str, tuple[set[str], set[str]]] = {}
        """step -> (the steps it names in ``after=`` or whose result it uses, the steps it
        waits for only because they wrote the same resource before it)."""
        for s in sc.steps:
            deps = set(s.after)
            deps |= {v["$ref"] for v in s.args.values() if isinstance(v, dict) and "$ref" in v}
            named = set(deps)
            if s.tool in _RESOURCES:  # steps sharing a resource are ordered (rule 3)
                arg = s.args[_RESOURCES[s.tool]]
                key = arg["$ref"] if isinstance(arg, dict) else arg  # the same result: the same id
                res = f"{s.tool.split('.')[0].replace('careless', 'crm')}:{key}"
                if res in last:
                    deps.add(last[res])
                last[res] = s.step_id
            self.waits[s.step_id] = (named, deps - named)
            for d in deps:
                need[d].add(s.step_id)
                direct[d].add(s.step_id)
            need[s.step_id] |= set(s.undo_after)
        # rule 3: a step's inverse waits for those of every step depending on it, directly or
        # not; undo_after replaces the reversed forward edge between its two steps only
        waits = _descendants(ids, direct)
        if any(s.undo_after for s in sc.steps):
            for s in sc.steps:
                for first in s.undo_after:
                    waits[first].discard(s.step_id)
                    waits[s.step_id].add(first)
            self.dependents = {sid: _closure(waits, waits[sid]) for sid in ids}
        else:  # issue 29: closed already (a closure of each step's set is that set)
            self.dependents = waits
        self.tools = {s.step_id: s.tool for s in sc.steps}
        self.expected = _forward_outcomes(sc, self.waits)
        # issue 27: a chosen step with nothing to take back (a probe; a call the vendor
        # refused, or that never ran) needs nothing undone on its own account
        idle = {sid for sid in sc.select if self.tools.get(sid) in PROBES}
        if self.expected is not None:
            acted = acted_though_failed(sc)
            idle |= {sid for sid in sc.select if self.expected[sid][0] == "skipped"
                     or (self.expected[sid][0] == "failed" and sid not in acted)}  # fmt: skip
        roots = [sid for sid in sc.select if sid not in idle]
        self.scope = (_closure(need, roots) | set(sc.select)) if sc.select else set(ids)


_ENDS = {
    "permanent": "failed",
    "act_then_raise": "in_doubt",
    "raise_after_inverse": "failed",
    "answer_other_id": "in_doubt",
    "answer_null_id": "in_doubt",
}
"""A step fault's kind -> how the forward call ends for the agent (rule 9): the vendor refused
it, nothing happened (``failed``); the vendor acted and the answer was lost (``in_doubt``); the
tool acted and recorded its inverse, then raised (``failed``, yet the effect stands: see
:data:`_ACTED`); the vendor acted and its answer named another resource or null, so the tool
took no inverse from it (``in_doubt``; the generator aims these at tools that check).
``transient`` ends ``failed`` only when it outlasts the retry policy (else it is ``done``)."""
_ACTED = frozenset({"raise_after_inverse"})
"""Fault kinds whose ``failed`` step acted all the same (rule 9: it recorded its inverse first,
so it is logged done): it blocks a later step on its resource as an unknown outcome does, and
the world must show its effect."""


def acted_though_failed(sc: Scenario) -> frozenset[str]:
    """The steps of ``sc`` that end ``failed`` for the agent although their effect stands."""
    return frozenset(sid for sid, kind, _ in sc.step_faults if kind in _ACTED)


def _forward_outcomes(
    sc: Scenario, waits: dict[str, tuple[set[str], set[str]]]
) -> dict[str, tuple[str, str]] | None:
    """step -> (how its forward call must end, why), derived from the scenario alone (rule 9):
    a step runs only if every step it names in ``after=`` or whose result it uses ended
    ``done``, and every step it waits for only via a shared resource ended ``done`` or had no
    effect (refused: ``failed``; or ``skipped`` over such steps only); a step that runs ends as
    its injected fault says. ``None`` when the scenario does not say which step a fault hits
    (faults on a tool's next calls) or a step is still in flight at undo (a stall)."""
    if sc.forward_faults or sc.stall:
        return None
    faults: dict[str, str] = {}
    for sid, kind, times in sc.step_faults:
        if kind == "transient":
            faults[sid] = "failed" if times >= FAST_RETRY.max_attempts else "done"
        elif kind in _ENDS:
            faults[sid] = _ENDS[kind]
        else:
            return None  # an outcome this oracle does not derive
    out: dict[str, tuple[str, str]] = {}
    acted = acted_though_failed(sc)

    def no_effect(sid: str) -> bool:
        state = out[sid][0]
        named, shared = waits[sid]
        return (state == "failed" and sid not in acted) or (
            state == "skipped" and all(out[d][0] == "done" or no_effect(d) for d in named | shared)
        )

    for s in sc.steps:
        named, shared = waits[s.step_id]
        bad = sorted(d for d in named if out[d][0] != "done")
        if bad:
            out[s.step_id] = ("skipped", f"it names {bad[0]}, which is {out[bad[0]][0]}")
            continue
        bad = sorted(d for d in shared if out[d][0] != "done" and not no_effect(d))
        if bad:
            why = (
                f"it shares a resource with {bad[0]}, which is {out[bad[0]][0]} and may have acted"
            )
            out[s.step_id] = ("skipped", why)
            continue
        why = "nothing blocks it"
        if refused := sorted(d for d in shared if out[d][0] != "done"):
            why = f"it waits only via a shared resource for {refused[0]}, which had no effect"
        out[s.step_id] = (faults.get(s.step_id, "done"), why)
    return out


def _descendants(ids: list[str], direct: dict[str, set[str]]) -> dict[str, set[str]]:
    """``{sid: _closure(direct, direct[sid])}`` for the steps ``ids`` in order, each set built
    from those of the later steps it reaches directly (issue 29: a walk per step was a third
    of the oracle's cost); a step reaching an earlier one (not in a generated scenario) is
    walked as before."""
    out: dict[str, set[str]] = {}
    for sid in reversed(ids):
        reached = set(direct[sid])
        for d in direct[sid]:
            later = out.get(d)
            if later is None:
                reached = _closure(direct, direct[sid])
                break
            reached |= later
        out[sid] = reached
    return out


def _closure(edges: dict[str, set[str]], start: Iterable[str]) -> set[str]:
    """Every step reachable from ``start`` along ``edges`` (``start`` itself only if reached)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(edges.get(d, ()))
    return seen


_GROUPED: dict[int, tuple[Scenario, _Grouped]] = {}


def _grouped(sc: Scenario) -> _Grouped:
    """:class:`_Grouped` of ``sc``, kept while the eval checks its results (both engines run
    the same scenario object; a scenario is immutable)."""
    held = _GROUPED.get(id(sc))
    if held is None or held[0] is not sc:  # an id is reused only once its object is gone
        if len(_GROUPED) > 256:
            _GROUPED.clear()
        held = (sc, _Grouped(sc))
        _GROUPED[id(sc)] = held
    return held[1]


def dependents(sc: Scenario) -> dict[str, set[str]]:
    """step -> every step that depends on it, transitively (after=, result refs, resources)."""
    return {sid: set(d) for sid, d in _grouped(sc).dependents.items()}


def selection_scope(sc: Scenario) -> set[str]:
    """Issue 27: the steps a selective undo must cover, computed here on its own: the chosen
    steps and, transitively, every later step that depends on one (after=, a result ref, a
    shared resource) and every step a chosen inverse declared it waits for (undo_after=)."""
    return set(_grouped(sc).scope)


def _by_tag(effects: Iterable[dict[str, Any]]) -> dict[str, list[int]]:
    """tag -> the positions in the journal of its effects (issue 29: positions, where each
    effect was copied with its ``seq``: ~45 dicts per check)."""
    out: dict[str, list[int]] = {}
    for seq, e in enumerate(effects):
        tag = e.get("tag")
        if tag:
            held = out.get(tag)
            if held is None:
                out[tag] = [seq]
            else:
                held.append(seq)
    return out


def _unsure_drift(r: SagaResult, tags: dict[str, list[int]], sid: str) -> bool:
    """Rule 8: a worker crashed with the step's undo in flight, the undo did land, and another
    actor changed the same thing afterwards. The recovering engine sees neither the agent's
    value nor the undo's and cannot tell which came first: "drifted, needs review" is honest
    (as ``in_doubt`` would be), though the world's journal shows the undo landed."""
    undo = tags.get(f"{sid}:compensate")
    if not r.crashed or not undo:
        return False
    last = r.effects[undo[-1]]
    return any(
        not e.get("tag")
        and e.get("actor") not in (None, "api")
        and (e["vendor"], e["key"]) == (last["vendor"], last["key"])
        for e in r.effects[undo[-1] + 1 :]
    )


def true_outcome(r: SagaResult) -> tuple[str, dict[str, str]]:
    """(status, step -> "none" | "stands" | "undone") from the world alone."""
    scan = _Scan(r.effects)
    return _truth(r, scan.tags, _grouped(r.scenario), scan.missed)


def _truth(
    r: SagaResult,
    tags: dict[str, list[int]],
    grouped: _Grouped,
    missed: dict[str, list[str]] | None = None,
) -> tuple[str, dict[str, str]]:
    """``missed``: steps whose inverse acted on something they never made (:class:`_Scan`):
    undone only if some inverse effect of theirs was on what they made."""
    truth: dict[str, str] = {}
    scope = grouped.scope  # issue 27: a selection's outcome is over its steps
    for s in r.scenario.steps:
        if s.step_id not in scope:
            continue
        fwd = f"{s.step_id}:forward" in tags
        undo = f"{s.step_id}:compensate" in tags
        if undo and missed and s.step_id in missed:
            undo = len(missed[s.step_id]) < len(tags[f"{s.step_id}:compensate"])
        truth[s.step_id] = "undone" if fwd and undo else ("stands" if fwd else "none")
    if any(v == "stands" for v in truth.values()):
        return "cannot_undo", truth
    tools = grouped.tools
    if any(v == "undone" and tools[k] in _RESIDUE for k, v in truth.items()):
        return "partially_reversed", truth
    return "fully_reversed", truth


_MAKES = frozenset(
    {
        ("payments", "charge"),
        ("payments", "wire"),
        ("calendar", "invite"),
        ("chat", "post"),
        ("docs", "create"),
        ("mail", "schedule"),
        ("ledger", "post"),
    }
)
"""Forward effects that create a resource named by the vendor's answer: every inverse effect of
the step (a refund, a recall, a cancellation notice, a delete, a cancel, a reversing entry) is
keyed by the same resource, so one keyed otherwise acted on something the step never made."""
_GIVEN_BACK = frozenset({"refund", "reverse_entry"})
"""Ops that give money back (rule 5: once per charge or entry)."""


class _Scan:
    """What :func:`check` reads off the effect journal, in one pass over it (issue 29: five
    passes and a copy of each tagged effect were half of the oracle's cost)."""

    __slots__ = ("made", "missed", "others", "overwrote", "refunds", "tags", "writers")

    def __init__(self, effects: list[dict[str, Any]]) -> None:
        self.tags: dict[str, list[int]] = {}
        """tag -> the positions of its effects (as :func:`_by_tag`)."""
        self.overwrote: list[str] = []
        """never_worse: an inverse that overwrote another actor's change, in journal order."""
        self.refunds: dict[str, int] = {}
        """key -> how many refunds or reversing ledger entries it got (rule 5)."""
        self.writers: dict[str, set[str]] = {}
        """CRM field -> the steps whose forward call wrote it (:func:`_unrestored`)."""
        self.others: set[str] = set()
        """CRM fields written by someone other than a step."""
        self.made: dict[str, set[tuple[str, str]]] = {}
        """step -> the resources its forward call created (a charge, a post, a draft, ...)."""
        self.missed: dict[str, list[str]] = {}
        """step -> the resources its inverse acted on that its forward call did not create (an
        inverse taken from a vendor's answer naming another resource: never_worse)."""
        tags = self.tags
        conflicting: dict[tuple[str, str, str], int] = {}
        for seq, e in enumerate(effects):
            tag = e.get("tag")
            op = e["op"]
            if tag:  # a step's effect
                held = tags.get(tag)
                if held is None:
                    tags[tag] = [seq]
                else:
                    held.append(seq)
                # never worse: an inverse applied over another actor's earlier change
                if conflicting and tag.endswith(":compensate"):
                    seen = conflicting.get((e["vendor"], op, e["key"]))
                    if seen is not None and seen < seq:
                        self.overwrote.append(
                            f"{tag.split(':')[0]}: {op} overwrote another actor's change to "
                            f"{e['vendor']} {e['key']}"
                        )
                if op == "update_field" and e["vendor"] == "crm" and tag.endswith(":forward"):
                    self.writers.setdefault(e["key"], set()).add(tag.split(":")[0])
                if (e["vendor"], op) in _MAKES and tag.endswith(":forward"):
                    self.made.setdefault(tag[:-8], set()).add((e["vendor"], e["key"]))
                elif self.made and tag.endswith(":compensate"):
                    made = self.made.get(tag[:-11])
                    if made is not None and (e["vendor"], e["key"]) not in made:
                        self.missed.setdefault(tag[:-11], []).append(f"{e['vendor']} {e['key']}")
            else:  # the clock's, or another actor's
                if e.get("actor") not in (None, "agent"):
                    for other in _CONFLICTING.get((e["vendor"], op), ()):
                        conflicting.setdefault((e["vendor"], other, e["key"]), seq)
                if op == "update_field" and e["vendor"] == "crm":
                    self.others.add(e["key"])
            if op in _GIVEN_BACK:
                self.refunds[e["key"]] = self.refunds.get(e["key"], 0) + 1


def check(r: SagaResult) -> dict[str, list[str]]:
    """Invariant -> violations (empty list: the invariant holds for this saga)."""
    v: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    sc = r.scenario
    scan = _Scan(r.effects)
    tags = scan.tags
    grouped = _grouped(sc)
    status, truth = _truth(r, tags, grouped, scan.missed)
    if r.errors:
        v["honesty"].append(f"an undo request raised instead of reporting: {r.errors[0]}")
    if not r.reports:
        v["honesty"].append("no report was returned")

    # --- honesty: every report's status and step states match the world -------------------
    checked = r.reports[:1] + r.reports[1:][-1:]  # the first and the last answer
    lost_answers = any(kind == "act_then_raise" for _, kind, _ in sc.reversal_faults)
    for rep in checked:
        claimed = {o.step_id: o.state for o in rep.steps}
        unsure = any(
            o.state is _IN_DOUBT or (o.state is _DRIFTED and _unsure_drift(r, tags, o.step_id))
            for o in rep.steps
        )
        if str(rep.status) != status and not (unsure and str(rep.status) == "cannot_undo"):
            v["honesty"].append(f"report says {rep.status}, the world shows {status}")
        for sid, t in truth.items():
            st = claimed.get(sid)
            if st is None:
                if t != "none":
                    v["honesty"].append(f"{sid}: missing from the report, world: {t}")
                continue
            ok = (
                ((st is _REVERTED or st is _COMPENSATED) and t == "undone")
                or ((st is _CANCELLED or st is _NOT_NEEDED) and t == "none")
                or (st in _STANDS and t == "stands")
                # in doubt is honest when it may stand; after a worker crashed mid-call, or
                # when a vendor's answer to an inverse was lost (act_then_raise), the engine
                # cannot know whether the call took effect, so any world is consistent with
                # "unknown" (it re-observes where a probe can tell)
                or (st is _IN_DOUBT and (t != "undone" or r.crashed or lost_answers))
                or (st is _DRIFTED and _unsure_drift(r, tags, sid))
            )
            if not ok:
                v["honesty"].append(f"{sid}: report says {st.value}, world: {t}")

    # --- honesty: "undone" is the value as before the saga, not just an inverse that ran ------
    v["honesty"] += _unrestored(r, truth, scan)

    # --- honesty: a selective undo undoes its closure and nothing else (issue 27) -------------
    if sc.select:
        scope = grouped.scope
        for s in sc.steps:
            if s.step_id not in scope and f"{s.step_id}:compensate" in tags:
                v["honesty"].append(f"{s.step_id}: undone although the selection did not need it")
        for rep in checked:
            listed = {o.step_id for o in rep.steps}
            if listed != scope:
                v["honesty"].append(
                    f"the report covers {sorted(listed)}, the selection needs {sorted(scope)}"
                )

    # --- honesty: a follow-up that was not made is reported (rule 7) ------------------------
    if r.reports:
        last = r.reports[-1]
        for s in sc.steps:
            if s.tool != "calendar.create_event" or "announce" not in s.args:
                continue
            if f"{s.step_id}:compensate" not in tags:
                continue  # not cancelled: no follow-up was due
            made = {r.effects[i]["op"] for i in tags.get(f"{s.step_id}:follow_up", ())}
            wanted = [("chat.announce", "post")]
            if "log_to" in s.args and "post" in made:
                wanted.append(("crm.log_activity", "log_activity"))
            for tool, op in wanted:
                told = any(m.step_id == s.step_id and tool in m.what for m in last.manual_actions)
                if op not in made and not told:
                    v["honesty"].append(
                        f"{s.step_id}: follow-up {tool} was not made and the report does not say so"
                    )

    # --- never worse ------------------------------------------------------------------------
    v["never_worse"] += scan.overwrote  # an inverse over another actor's change (_Scan)
    for sid, keys in scan.missed.items():  # an inverse taken from an answer naming another
        v["never_worse"].append(
            f"{sid}: its inverse acted on {', '.join(sorted(set(keys)))}, which its forward "
            f"call did not make ({', '.join(sorted(' '.join(m) for m in scan.made[sid]))})"
        )
    # money given back twice: a second refund, a second reversing ledger entry (rule 5)
    for key, n in scan.refunds.items():
        if n > 1:
            v["never_worse"].append(f"{key} refunded {n} times")
    for s in sc.steps:
        if f"{s.step_id}:compensate" in tags and f"{s.step_id}:forward" not in tags:
            v["never_worse"].append(f"{s.step_id}: compensated although it never took effect")

    # --- order: an inverse ran only after every inverse it waits for succeeded --------------
    deps = grouped.dependents
    tools = grouped.tools
    for s in sc.steps:
        undo = tags.get(f"{s.step_id}:compensate")
        if not undo:
            continue
        at = undo[0]
        for d in sorted(deps[s.step_id]):
            if tools[d] not in _WITH_INVERSE or f"{d}:forward" not in tags:
                continue  # nothing to wait for: it had no effect, or nothing can take it back
            d_undo = tags.get(f"{d}:compensate")
            if not d_undo or d_undo[0] > at:
                v["order"].append(
                    f"{s.step_id} was undone before its dependent {d} "
                    + ("was undone" if d_undo else "(which never was)")
                )

    # --- idempotency ------------------------------------------------------------------------
    ids = {rep.reversal_id for rep in r.reports}
    if len(ids) > 1:
        v["idempotency"].append(f"{len(r.reports)} requests got {len(ids)} different reversals")
    # the members, not their values (issue 29: ``.value`` is a Python call per step; one
    # member per value, so the same reports differ or not alike)
    states = {tuple((o.step_id, o.state) for o in rep.steps) for rep in r.reports}
    if len(states) > 1:
        v["idempotency"].append("requests for the same reversal got different reports")
    effects = r.effects
    for tag, seqs in tags.items():
        if len(seqs) < 2 or not tag.endswith(":compensate"):
            continue  # one effect is one call
        applied = len({effects[i].get("call") for i in seqs})  # one call may emit several
        if applied > 1:
            v["idempotency"].append(f"{tag.split(':')[0]}: inverse applied {applied} times")

    # --- preview: the undo's own run, simulated (rule 10) -------------------------------------
    if r.preview is not None and r.reports:
        first = {o.step_id: o.state for o in r.reports[0].steps}  # StrEnum: equal to values
        for sid, state in first.items():
            said = r.preview.get(sid)
            if said != state:
                v["preview"].append(f"{sid}: preview predicted {said}, undo reported {state}")
        _check_preview_residue(r, v["preview"])

    # --- words: a budget-cut step keeps its verb; the text report's lines are its own ---------
    v["words"] += check_words(checked, bool(sc.words), r.preview_cut)

    # --- forward: the steps rule 9 lets run ran, the others never did -----------------------
    if grouped.expected is not None:
        _check_forward(r, grouped.expected, tags, checked, v["forward"])

    # --- every invariant, again, for the saga as a whole once its rest was undone (issue 27) -
    if r.rest is not None:
        for name, msgs in check(r.rest).items():
            v[name] += [f"after the rest was undone: {m}" for m in msgs]
        ids = {rep.reversal_id for rep in (*r.reports, *r.rest.reports)}
        if len(ids) > 1:  # rule 6: one reversal per saga, extended by the later undo
            v["idempotency"].append(f"the selection and the rest: {len(ids)} reversals")

    # --- bounded and honesty: an agent's cascade of follow-ups (issue 27 part 3, rule 7) -----
    if r.cascade is not None:
        for name, msgs in check_cascade(sc, r.cascade, r.effects, r.world).items():
            v[name] += msgs

    # --- finish: what was still running when the budget ran out is undone by a continuation ---
    if r.continued is not None:
        _check_finish(r, tags, v["finish"])

    # --- bounded ----------------------------------------------------------------------------
    for rep in r.reports:
        if rep.tool_calls > sc.budget_calls:
            v["bounded"].append(f"{rep.tool_calls} tool calls, budget {sc.budget_calls}")
            break
    if sc.stall:
        # rule 7: the seconds budget bounds waiting for a step still in flight. Judged on the
        # world, not the wall clock (a loaded machine stretches both): the answer must come
        # before the stalled call acted, i.e. the engine did not wait for it.
        for sid in r.stalled:
            if sid in sc.inverse_stalls:
                continue  # its inverse stalled, not its forward call
            landed = tags.get(f"{sid}:forward", [])
            if landed and r.answered_at and min(landed) < r.answered_at[0]:
                v["bounded"].append(
                    f"the first answer came only after the stalled step {sid} acted "
                    f"({sc.stall_seconds}s after undo was asked); budget {sc.budget_seconds}s"
                )
        return v
    for took in r.durations:
        if took > sc.budget_seconds + _TIME_SLACK:
            v["bounded"].append(f"a request took {took:.1f}s, budget {sc.budget_seconds}s")
            break
    return v


def _unrestored(r: SagaResult, truth: dict[str, str], scan: _Scan | None = None) -> list[str]:
    """Each CRM field the saga wrote whose every writer the oracle finds undone and no one else
    wrote, but whose value after the undo is not the one before the saga (compared as JSON:
    ``True`` is not ``1``): an inverse ran, yet the world is not as if the agent never acted
    (a retry's inverse restoring a refused call's value, inverses run out of order)."""
    if scan is None:
        scan = _Scan(r.effects)
    writers, others = scan.writers, scan.others
    out: list[str] = []
    records = r.world.get("crm", {}).get("records", {})
    for key, steps in writers.items():
        if key in others or any(truth.get(sid) != "undone" for sid in steps):
            continue
        rid, _, fld = key.partition(".")
        was = r.scenario.records.get(rid, {}).get(fld)
        now = records.get(rid, {}).get("fields", {}).get(fld)
        if json.dumps(now) != json.dumps(was):
            out.append(
                f"crm {key} is {now!r} after the undo, not {was!r} as before the saga, though "
                f"every step that wrote it ({', '.join(sorted(steps))}) is undone"
            )
    return out


def _check_forward(
    r: SagaResult,
    expected: dict[str, tuple[str, str]],
    tags: dict[str, list[int]],
    reports: list[UndoReport],
    out: list[str],
) -> None:
    """Rule 9 on the forward pass: each step ended as :func:`_forward_outcomes` derives; one
    that must never have run (``skipped``) or was refused (``failed``) left no effect in the
    world, and a report listing a skipped step says it never ran."""
    acted = acted_though_failed(r.scenario)
    for sid, (want, why) in expected.items():
        got = r.forward.get(sid)
        if got != want:
            out.append(f"{sid}: the forward pass left it {got}, rule 9 says {want} ({why})")
        if sid in acted and want == "failed":
            if f"{sid}:forward" not in tags:  # the fault fired after the tool acted
                out.append(f"{sid}: the world shows no effect of a call that acted, then raised")
            continue
        if want in ("skipped", "failed") and f"{sid}:forward" in tags:
            did = "never ran" if want == "skipped" else "the vendor refused"
            out.append(f"{sid}: the world shows an effect of a call that {did} ({why})")
        if want != "skipped":
            continue
        for rep in reports:
            o = next((o for o in rep.steps if o.step_id == sid), None)
            if o is not None and not o.detail.startswith("never ran"):
                said = f"{o.state.value} ({o.detail!r})"
                out.append(f"{sid}: the report says {said}, not that it never ran ({why})")


def _check_preview_residue(r: SagaResult, out: list[str]) -> None:
    """Rule 10: the residue the preview lists for a step is residue undo leaves for it, settling
    when the preview said (undo may add more: a follow-up cut short, what an inverse observed)."""
    steps = {o.step_id: o for o in r.reports[0].steps}
    for sid, dates in r.preview_residue.items():
        o = steps.get(sid)
        left = [x.settles_at for x in o.residue] if o is not None else []
        if not left:
            out.append(f"{sid}: preview listed {len(dates)} residue, undo left none")
        elif any(d not in left for d in dates):
            out.append(f"{sid}: preview said residue settles {dates}, undo said {tuple(left)}")


def _check_finished(r: SagaResult, out: list[str]) -> None:
    """Issue 23 (``Scenario.finish``): a step a person resolved is never attempted by the
    continuation (no inverse effect for it since, its state kept); a step whose drift check could
    not run, retried once the vendors answer, is checked again (not left unchecked), and its
    state agrees with the world."""
    if not isinstance(r.continued, UndoReport):
        if r.scenario.finish == "retry":  # resolving leaves nothing to continue, sometimes
            out.append(f"retrying {', '.join(r.finished)} was refused: {r.continued}")
        return
    before, after = _Scan(r.effects).tags, _Scan(r.continued_effects).tags
    was = {o.step_id: o.state for o in r.reports[-1].steps}
    for o in r.continued.steps:
        if o.step_id not in r.finished:
            if was.get(o.step_id) is StepState.OVER_BUDGET:
                _continued_cut(r.continued, o, after, out)
            continue
        sent = len(after.get(f"{o.step_id}:compensate", [])) - len(
            before.get(f"{o.step_id}:compensate", [])
        )
        if r.scenario.finish == "resolve":
            if sent or o.state is not was[o.step_id]:
                out.append(
                    f"{o.step_id} was resolved by a person, yet the continuation attempted it "
                    f"({sent} inverse effect(s), {was[o.step_id].value} -> {o.state.value})"
                )
            continue
        if o.state is StepState.DRIFTED and o.detail.startswith(UNCHECKED):
            out.append(f"{o.step_id} was retried with the vendors back, still unchecked")
        undone = bool(after.get(f"{o.step_id}:compensate"))
        if (o.state in (StepState.REVERTED, StepState.COMPENSATED)) != undone:
            out.append(f"{o.step_id}: the retry says {o.state}, world: undone={undone}")


def _continued_cut(
    report: UndoReport, o: StepOutcome, after: dict[str, list[int]], out: list[str]
) -> None:
    """Rule 6: a step the budget cut that no person resolved is attempted by the continuation
    (its verb said so: "continuing the undo does it"): not left over budget while the
    continuation's own run had calls to spare, and its state agrees with the world."""
    own = report.runs[-1]["tool_calls"] if report.runs else report.tool_calls
    if o.state is StepState.OVER_BUDGET and int(own) < int(report.budget["tool_calls"]):
        out.append(
            f"{o.step_id} was over budget; the continuation ({own} calls of "
            f"{report.budget['tool_calls']}) left it so: {o.detail!r:.120}"
        )
    undone = bool(after.get(f"{o.step_id}:compensate"))
    if (o.state in (StepState.REVERTED, StepState.COMPENSATED)) != undone:
        out.append(f"{o.step_id}: the continuation says {o.state}, world: undone={undone}")


def _check_finish(r: SagaResult, tags: dict[str, list[int]], out: list[str]) -> None:
    """Rules 6, 7 (issue 23): each stalled step that acted after undo answered, with a tool that
    records an inverse, and each step whose inverse the budget cut off in flight
    (``inverse_stalls``), was taken up by the continuation: not left in doubt, not refused."""
    if r.finished:
        _check_finished(r, out)
    tools = {s.step_id: s.tool for s in r.scenario.steps}
    acted = [s for s in r.stalled if tags.get(f"{s}:forward") and tools.get(s) in _WITH_INVERSE]
    acted += [s for s in r.scenario.inverse_stalls if tags.get(f"{s}:forward") and s not in acted]
    if not acted:
        return
    if not isinstance(r.continued, UndoReport):
        out.append(f"{acted[0]} acted after undo answered; continuing was refused: {r.continued}")
        return
    after = _Scan(r.continued_effects).tags
    for o in r.continued.steps:
        if o.step_id not in acted:
            continue
        if o.state is _IN_DOUBT:
            out.append(f"{o.step_id} acted after undo answered; the continuation left it in doubt")
        undone = bool(after.get(f"{o.step_id}:compensate"))
        if (o.state in (StepState.REVERTED, StepState.COMPENSATED)) != undone:
            out.append(f"{o.step_id}: the continuation says {o.state}, world: undone={undone}")
