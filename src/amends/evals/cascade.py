"""The ``cascading_apology`` family (issue 27 part 3): an agent finishing a reversal's manual
actions answers each follow-up with more follow-ups, and only the reversal's budget stops it.

After the undo, a scripted agent proposes, for each open manual action, the apology its draft
holds; every apology sent makes it propose two more (a second apology by mail and an SMS). The
operator's policy allows some tools; every other proposal is shown to a scripted person, who
refuses some. Each proposal carries a unique mark (``[pN]``) in its text, so the oracle finds
what it sent in the world. The invariants (:func:`check_cascade`), on the real engine's log and
the world: tool calls and tokens never pass the caps (rule 7), and every proposal ends sent (in
the world exactly once), refused by a person, or listed as not done (never silently dropped,
never sent twice, never sent after the engine stopped the agent).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from amends import Engine, FollowUpProposal

from .generator import Scenario

__all__ = ["MAX_PROPOSALS", "CascadeRun", "check_cascade", "run_cascade"]

MAX_PROPOSALS = 60
"""The scripted agent gives up after this many proposals (so an engine that never stops it still
ends); far above any cap the family draws."""
_MARK = re.compile(r"\[p(\d+)\]")


@dataclass
class CascadeRun:
    """What the scripted agent proposed and what became of each proposal."""

    proposals: list[dict[str, Any]] = field(default_factory=list)
    """In order: ``{"n", "step_id", "tool", "tokens", "shown", "approved"}`` (``shown``: the
    gate asked the person; ``approved``: what they answered)."""
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    """:meth:`amends.FollowUpOutcome.to_dict` of each, with the proposal's ``n``."""
    left: list[int] = field(default_factory=list)
    """The ``n`` of each proposal :attr:`amends.FollowUpAgent.left` lists."""
    stopped: str | None = None
    calls_spent: int = 0
    """The reversal's tool calls, as its log record says after the agent is done."""
    tokens_spent: int = 0


def _apology(n: int, step_id: str, tool: str, to: str, text: str, tokens: int) -> FollowUpProposal:
    args = (
        {"to": to, "subject": f"Sorry [p{n}]", "body": text}
        if tool == "mail.send"
        else {"to": "+15550100", "text": f"sorry [p{n}]"}
    )
    return FollowUpProposal(step_id, tool, args, tokens)


async def run_cascade(eng: Engine, saga_id: str, sc: Scenario) -> CascadeRun:
    """Run the scripted cascading agent on ``eng``'s reversal of ``saga_id`` (in the world bound
    by the caller): the operator allows ``sc.allow_tools``, the person refuses every
    ``sc.refuse_every``-th proposal shown to them."""
    run = CascadeRun()
    shown = [0]

    def person(p: FollowUpProposal) -> bool:
        shown[0] += 1
        yes = shown[0] % sc.refuse_every != 0
        mark = _MARK.search(str(p.args.get("subject") or p.args.get("text")))
        n = int(mark.group(1)) if mark else -1
        for entry in run.proposals:
            if entry["n"] == n:
                entry.update(shown=True, approved=yes)
        return yes

    agent = eng.follow_up_agent(saga_id, by="agent:eval", allow=sc.allow_tools, approve=person)
    queue = [
        _apology(i, m.step_id, "mail.send", m.parties[0] if m.parties else "ops@acme.test",
                 m.draft or "Sorry", sc.agent_tokens)
        for i, m in enumerate(await agent.open_actions())
    ]  # fmt: skip
    made = len(queue)
    while queue and len(run.proposals) < MAX_PROPOSALS:
        p = queue.pop(0)
        n = int(_MARK.findall(str(p.args.get("subject") or p.args.get("text")))[0])
        run.proposals.append({"n": n, "step_id": p.step_id, "tool": p.tool,
                              "tokens": p.tokens, "shown": False, "approved": None})  # fmt: skip
        out = await agent.propose(p)
        run.outcomes.append({**out.to_dict(), "n": n})
        if out.state == "sent":  # the cascade: each apology sent asks for two more
            to = str(p.args.get("to", "ops@acme.test"))
            for tool in ("mail.send", "sms.send"):
                queue.append(_apology(made, p.step_id, tool, to, "Sorry again", sc.agent_tokens))
                made += 1
    run.left = [int(_MARK.findall(str(o.proposal.args))[0]) for o in agent.left]
    run.stopped = agent.stopped
    rev = await eng.log.get_reversal(saga_id=saga_id)
    if rev is not None:
        run.calls_spent, run.tokens_spent = rev.calls_spent, rev.tokens_spent
    return run


def _in_world(world: dict[str, Any]) -> Counter[int]:
    """How many messages (mail and SMS) carry each proposal's mark."""
    found: Counter[int] = Counter()
    for vendor, table, key in (("mail", "messages", "subject"), ("sms", "messages", "text")):
        for msg in world.get(vendor, {}).get(table, {}).values():
            for n in _MARK.findall(str(msg.get(key, ""))):
                found[int(n)] += 1
    return found


def check_cascade(
    sc: Scenario, run: CascadeRun, effects: list[dict[str, Any]], world: dict[str, Any]
) -> dict[str, list[str]]:
    """``bounded`` and ``honesty`` violations of one cascade (see the module)."""
    v: dict[str, list[str]] = {"bounded": [], "honesty": []}
    if run.calls_spent > sc.budget_calls:
        v["bounded"].append(f"the reversal spent {run.calls_spent} tool calls, cap "
                            f"{sc.budget_calls}")  # fmt: skip
    if run.tokens_spent > sc.budget_tokens:
        v["bounded"].append(f"the reversal spent {run.tokens_spent} tokens, cap {sc.budget_tokens}")
    # the world's own count: every effect of the reversal (inverses, follow-ups) is one call
    calls = {e.get("call") for e in effects
             if str(e.get("tag", "")).endswith((":compensate", ":follow_up"))}  # fmt: skip
    if len(calls) > sc.budget_calls:
        v["bounded"].append(f"the world saw {len(calls)} reversal calls, cap {sc.budget_calls}")
    v["honesty"] += _accounted(sc, run, _in_world(world))
    return v


def _accounted(sc: Scenario, run: CascadeRun, found: Counter[int]) -> list[str]:
    """Every proposal ends sent (once, in the world), refused by a person, or listed as not
    done: not made (``failed``: not in the world) or unknown (``in_doubt``: at most once in
    the world, and nothing sent for its manual action after it)."""
    out: list[str] = []
    by_n = {o["n"]: o for o in run.outcomes}
    if len(by_n) != len(run.proposals) or len(run.outcomes) != len(run.proposals):
        out.append(f"{len(run.proposals)} proposals, {len(run.outcomes)} outcomes")
    stopped_at = next((i for i, o in enumerate(run.outcomes) if o["state"] == "not_done"
                       and "stopped the agent" in o["detail"]), None)  # fmt: skip
    doubt: set[str] = set()
    for i, p in enumerate(run.proposals):
        o = by_n.get(p["n"])
        if o is None:
            out.append(f"proposal p{p['n']} ({p['tool']}) silently dropped")
            continue
        state, n = o["state"], p["n"]
        if state == "sent" and found[n] != 1:
            out.append(f"proposal p{n} reported sent, the world holds {found[n]} of it")
        elif state != "sent" and found[n] > (state == "in_doubt"):  # unknown: once at most
            out.append(f"proposal p{n} reported {state}, the world holds {found[n]} of it")
        if state == "refused" and not (p["shown"] and p["approved"] is False):
            out.append(f"proposal p{n} refused, but no person refused it")
        if state != "sent" and n not in run.left:
            out.append(f"proposal p{n} is {state} but not listed as left")
        if state not in ("sent", "refused", "not_done", "failed", "in_doubt"):
            out.append(f"proposal p{n} ended {state}")
        if state == "sent" and p["step_id"] in doubt:  # rule 5: never a second message
            out.append(f"proposal p{n} sent for {p['step_id']} after one in doubt")
        if state == "in_doubt":
            doubt.add(p["step_id"])
        if stopped_at is not None and i > stopped_at and state != "not_done":
            out.append(f"proposal p{n} {state} after the engine stopped the agent")
        if p["tool"] in sc.allow_tools and p["shown"]:
            out.append(f"proposal p{n}: {p['tool']} is allowed, yet a person was asked")
    return out
