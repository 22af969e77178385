"""The tools the gateway adds for the agent: ``amends_begin``, ``amends_status``,
``amends_preview``, ``amends_undo``, ``amends_resolve`` and ``amends_follow_up``.

Each answers with honest text and ``structured_content`` holding the same data (the undo report
is :meth:`amends.UndoReport.to_dict`). None of them claims more than the engine verified.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types

from amends import AmendsError, Budget, ConfigError, SagaStateError

from .._agent_parts import quoted, shown_call
from .approval import Answer, refusal_text
from .ports import GatewayView  # a base class: needed at run time
from .sessions import META_STEP

if TYPE_CHECKING:
    from .approval import Approvals
    from .sessions import Sessions

__all__ = ["AMENDS_TOOLS", "error_result", "run_amends_tool"]


class ToolsGateway(GatewayView, Protocol):
    """The gateway as the ``amends_*`` tools see it: its view, plus approvals, sessions and the
    log of an approval's answer (a Protocol, so this module does not import the gateway)."""

    @property
    def approvals(self) -> Approvals:
        """Asks the person for approval (elicitation)."""
        ...

    @property
    def sessions(self) -> Sessions:
        """Which saga an MCP session is working in, and who it is."""
        ...

    async def record_answer(
        self, ctx: Any, saga_id: str, step_id: str | None, answer: Answer, what: dict[str, Any]
    ) -> None:
        """Log an approval or refusal as an event of the saga (rule 12)."""
        ...


_SAGA = {"saga_id": {"type": "string", "description": "default: this connection's saga"}}
_SELECTION = {  # issue 27: selective undo
    "steps": {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "description": "undo only these steps and every step that depends on them; the rest "
        "of the saga is kept",
    },
    "since": {"type": "string", "description": "undo every step after this one"},
}

AMENDS_TOOLS = [
    types.Tool(
        name="amends_begin",
        description="Start a new saga (one user request) with a title; later tool calls on this "
        "connection are its steps, so amends_undo takes back exactly that request.",
        input_schema={
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    ),
    types.Tool(
        name="amends_status",
        description="The saga's steps so far: tool, state and what undo can do for each "
        "(reversible, compensable, irreversible), and the undo report if undo has run.",
        input_schema={"type": "object", "properties": dict(_SAGA)},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="amends_preview",
        description="What undo would do now, step by step (Revert, Compensate, Acknowledge), "
        "with the residue it would leave and what a person would still have to do. Dispatches "
        "nothing but read-only checks. steps/since: preview undoing only a selection.",
        input_schema={"type": "object", "properties": {**_SAGA, **_SELECTION}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="amends_undo",
        description="Undo the saga: every step is reverted, compensated or acknowledged in "
        "dependency order, never overwriting a value someone changed since (drift). Asking "
        "twice gives the same report. Optional budget: tool_calls, tokens, seconds; "
        "continue=true continues a reversal that stopped short with a new budget; "
        'steps=["s3"] undoes only s3 and what depends on it (since="s7": every step after s7), '
        'keeping the rest, which a later undo can still take back; retry=["s2"] tries failed '
        "steps (or steps whose drift check could not run) again once their cause is fixed "
        "(through the drift check again).",
        input_schema={
            "type": "object",
            "properties": {
                **_SAGA,
                **_SELECTION,
                "tool_calls": {"type": "integer", "minimum": 0},
                "tokens": {"type": "integer", "minimum": 0},
                "seconds": {"type": "number", "exclusiveMinimum": 0},
                "continue": {"type": "boolean"},
                "retry": {"type": "array", "items": {"type": "string"}},
            },
        },
        annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    ),
    types.Tool(
        name="amends_resolve",
        description="Record that a person handled a step's manual action (sent the draft, "
        "checked that an in-doubt call did not go through), with a note saying what they did. "
        "It is recorded under the gateway's principal.",
        input_schema={
            "type": "object",
            "properties": {
                **_SAGA,
                "step_id": {"type": "string"},
                "note": {"type": "string", "minLength": 1},
            },
            "required": ["step_id", "note"],
        },
        annotations=types.ToolAnnotations(idempotent_hint=True),
    ),
    types.Tool(
        name="amends_follow_up",
        description="After an undo: send one follow-up for a step's manual action (an apology, "
        "a correction) through an upstream tool. It is part of the saga's reversal: it spends "
        "the reversal's budget (tool_calls, tokens: what producing it cost you) and, sent, "
        "marks the manual action handled. When the budget is spent amends stops you and says "
        "what is left; a person must approve each call when the gateway asks for approval.",
        input_schema={
            "type": "object",
            "properties": {
                **_SAGA,
                "step_id": {"type": "string"},
                "tool": {"type": "string"},
                "args": {"type": "object"},
                "tokens": {"type": "integer", "minimum": 0},
            },
            "required": ["step_id", "tool", "args"],
        },
        annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=False),
    ),
]


def error_result(text: str, info: dict[str, Any] | None = None) -> types.CallToolResult:
    """An ``isError`` result for the agent, with amends' step information when there is one."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta={META_STEP: info} if info else None,
    )


def _ok(text: str, data: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=data
    )


def _budget(args: dict[str, Any]) -> Budget | None:
    given = {k: args[k] for k in ("tool_calls", "tokens", "seconds") if args.get(k) is not None}
    if not given:
        return None
    try:
        return Budget(**given)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"budget {given!r} is not valid: {exc}; give tool_calls and tokens as "
            f"non-negative integers and seconds as a positive number"
        ) from exc


async def run_amends_tool(
    gw: ToolsGateway,
    ctx: Any,
    name: str,
    args: dict[str, Any],
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
) -> Any:
    """Run one amends tool; an ``InputRequiredResult`` when the approval gate asks first.

    Raises:
        AmendsError: Bad arguments, a saga that is not this agent's (answered to the agent as
            an error result).
    """
    if name == "amends_begin":
        return await _begin(gw, ctx, args)
    handler = _HANDLERS.get(name)
    if handler is None:
        raise ConfigError(
            f"unknown amends tool {name!r}; the gateway offers "
            f"{', '.join(t.name for t in AMENDS_TOOLS)}"
        )
    saga_id = gw.sessions.saga_for(ctx, args.get("saga_id"))
    rec = await gw.engine.log.get_saga(saga_id)
    # A gateway with a tenant answers only for that tenant's sagas (the same "not found" as for
    # a missing id, so ids of other tenants are not revealed).
    if rec is None or (gw.config.tenant is not None and rec.tenant != gw.config.tenant):
        raise AmendsError(f"no saga {saga_id!r} in the log; check the id (amends_status)")
    return await handler(_Request(gw, ctx, saga_id, rec, args, input_responses, request_state))


@dataclass(frozen=True)
class _Request:
    """One call of an amends tool on one saga."""

    gw: ToolsGateway
    ctx: Any
    saga_id: str
    rec: Any
    args: dict[str, Any]
    input_responses: dict[str, Any] | None
    request_state: str | None

    async def approve(self, subject: str, message: str, what: dict[str, Any]) -> Any:
        """Ask the person (rule 12; issue 21 item 6); ``None`` when approved (the approval is
        logged), else the question (``InputRequiredResult``) or the refusal for the agent."""
        gw = self.gw
        asked = await gw.approvals.ask(
            self.ctx,
            owner=gw.sessions.owner(self.ctx),
            subject=subject,
            message=message,
            input_responses=self.input_responses,
            request_state=self.request_state,
        )
        if not isinstance(asked, Answer):
            return asked
        await gw.record_answer(self.ctx, self.saga_id, what.get("step_id"), asked, what)
        if asked.approved:
            return None
        return error_result(refusal_text(what["action"], asked, gw))


async def _begin(gw: ToolsGateway, ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    title = args.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ConfigError(f"amends_begin needs a title saying what was asked, got {title!r}")
    if gw.sessions.owner(ctx).startswith("stateless:") and gw.sessions.saga_key(ctx) is None:
        # rule 12: keyless stateless requests share one saga; starting another would move the
        # later steps of every such client into it
        raise ConfigError(
            "amends_begin needs a connection or a saga key: send _meta "
            '{"amends/saga": "<your key>"} with this and later calls (stateless clients '
            "without a key share one saga)"
        )
    slot = gw.sessions.slot(ctx)
    await gw.sessions.close_saga(slot)
    saga = await gw.sessions.open_saga(slot, title)
    shown = quoted(repr(title), 200)  # the agent's words, quoted as data (issue 21)
    return _ok(f"Started saga {saga.id}: {shown}", {"saga_id": saga.id, "title": title})


async def _approvals(gw: ToolsGateway, saga_id: str) -> list[dict[str, Any]]:
    """The approvals and refusals logged for a saga (who, what was shown, the answer, when)."""
    return [
        {"event": e.kind, "step_id": e.step_id, "at": e.at, **(e.data or {})}
        for e in await gw.engine.log.events(saga_id)
        if e.kind.startswith("approval.")
    ]


def _approval_lines(approvals: list[dict[str, Any]]) -> list[str]:
    lines = []
    for a in approvals:
        verb = "approved" if a["event"] == "approval.granted" else "refused"
        what = a.get("tool") or a.get("action") or ""
        lines.append(
            f"- {verb} by {quoted(str(a.get('by')))} ({a.get('how')}): {quoted(what)}"
            + (f" [step {a['step_id']}]" if a.get("step_id") else "")
        )
    return lines


async def _status(r: _Request) -> types.CallToolResult:
    steps = [
        {
            "step_id": s.step_id,
            "tool": s.tool,
            "state": s.state,
            "reversibility": s.effective or s.declared,
            "error": s.error,
            "violation": s.violation,
        }
        for s in r.rec.steps
    ]
    report = await r.gw.engine.report(r.saga_id)
    approvals = await _approvals(r.gw, r.saga_id)
    data: dict[str, Any] = {
        "saga_id": r.saga_id,
        "title": r.rec.title,
        "state": r.rec.state,
        "steps": steps,
        "report": report.to_dict() if report is not None else None,
        "approvals": approvals,
    }
    lines = [f"Saga {r.saga_id} {_title(r)} ({r.rec.state}), {len(steps)} step(s):"]
    lines += [  # rule 12: a vendor's error is quoted on its step's line, never lines of its own
        f"- {s['step_id']} {s['tool']}: {s['state']}, {s['reversibility']}"
        + (f" ({quoted(s['error'])})" if s["error"] else "")
        for s in steps
    ]
    if approvals:
        lines += ["Approvals:", *_approval_lines(approvals)]
    if report is not None:
        lines.append(f"Undo: {report.headline}")
    return _ok("\n".join(lines), data)


def _selection(r: _Request, continuing: bool = False) -> dict[str, Any]:
    """Issue 27: ``steps``/``since`` as the engine takes them (it checks them against the
    saga); refused with ``continue``, which keeps the reversal's selection."""
    chosen = {k: r.args[k] for k in ("steps", "since") if r.args.get(k) is not None}
    if chosen and continuing:
        raise ConfigError(
            "continue=true keeps the reversal's selection; call amends_undo with continue "
            "alone, or with steps/since (and no continue) to undo more"
        )
    return chosen


async def _preview(r: _Request) -> types.CallToolResult:
    pdata = (await r.gw.engine.preview(r.saga_id, **_selection(r))).to_dict()
    lines = [f"If undone now, saga {r.saga_id}:"]
    for p in pdata.get("steps", []):
        verb = p.get("verb") or p.get("action")
        # rule 12: a vendor's words (a drift's value, a residue) stay quoted on their line;
        # rule 10: what undo is predicted to do, never the plan's verb for a step that stands
        lines.append(f"- {p['step_id']} {p['tool']}: {verb} ({quoted(_outlook(p))})")
        for res in p.get("expected_residue", []):
            lines.append(f"  residue: {quoted(res['what'])}")
    return _ok("\n".join(lines), pdata)


def _outlook(p: dict[str, Any]) -> str:
    """Why, for one preview step: what undo is predicted to do to it (rule 10), as the CLI's
    preview says it; a step predicted to stand says so, never the plan's "revert with ..."."""
    if p.get("needs_review"):
        return f"needs review: {p.get('check')}"
    if p.get("predicted") in _STANDS:
        return f"will be {str(p['predicted']).replace('_', ' ')}: {p.get('detail')}"
    return str(p.get("reason", ""))


_STANDS = ("blocked", "over_budget", "failed", "in_doubt")
"""Predicted states in which a step's inverse is not sent (or not known to land) by this undo."""


_ACTS = ("reverted", "compensated")
"""Predicted states in which this undo sends the step's inverse (what the question lists)."""


async def _undo_question(r: _Request, continuing: bool) -> str | None:
    """The one question listing what the undo will do to the world, or ``None`` when it will
    call no inverse (nothing to ask: acknowledging and reporting act on nothing)."""
    preview = (await r.gw.engine.preview(r.saga_id, **_selection(r, continuing))).to_dict()
    # rule 10: what the undo is predicted to send, not what the plan would send were nothing
    # drifted or cut (a step blocked behind a drifted one, or over budget, sends nothing)
    acting = [
        p
        for p in preview.get("steps", [])
        if p.get("action") in ("revert", "compensate") and p.get("predicted") in _ACTS
    ]
    if not acting:
        return None
    lines = [
        f"The agent asks to {'continue undoing' if continuing else 'undo'} "
        f"{_title(r)} (saga {r.saga_id}). This will act on the world:"
    ]
    lines += _sends(acting)
    lines.append("Allow this undo?")
    return "\n".join(lines)


def _sends(steps: list[dict[str, Any]], verb: str | None = None) -> list[str]:
    """One question line per preview step whose inverse will be sent, with its residue."""
    lines = []
    for p in steps:
        # rule 12: the exact call each inverse sends (its arguments may come from a vendor's
        # answer), not only the contract's sentence for it
        inverse = p.get("inverse") or {}
        sent = shown_call(str(inverse.get("tool", "")), inverse.get("args") or {})
        said = p.get("inverse_description")
        what = f"{quoted(said)}, sent as {sent}" if said else sent
        v = verb or p.get("verb")
        if p.get("predicted") == "blocked":  # what it does once unblocked, not what it is now
            v = str(p.get("action", "")).capitalize()
        lines.append(f"- {v} {p['step_id']} {p['tool']}: calls {what}")
        lines += [
            f"  leaves residue: {quoted(res['what'])}" for res in p.get("expected_residue", [])
        ]
    return lines


async def _retry_question(r: _Request, steps: list[str]) -> str:
    """Rule 12: what a retry will send -- each retried step's inverse, then the inverses of
    the steps blocked behind them, which follow if it succeeds -- every argument shown."""
    preview = (await r.gw.engine.preview(r.saga_id)).to_dict()
    planned = {p["step_id"]: p for p in preview.get("steps", [])}
    retried = [planned[s] for s in steps if s in planned]
    gated = [
        p
        for p in preview.get("steps", [])
        if p.get("predicted") == "blocked"
        and p.get("action") in ("revert", "compensate")
        and set(p.get("waits_for") or ()) & set(steps)
    ]
    lines = [
        f"The agent asks to try again the undo of step(s) {quoted(', '.join(steps))} of "
        f"{_title(r)} (saga {r.saga_id}), whose inverse failed (or whose drift check could "
        f"not run) before. Each is checked for drift again and, only if unchanged, sent:"
    ]
    lines += _sends(retried, "Retry")
    if gated:
        lines.append("If it succeeds, the steps waiting for it follow, each checked first:")
        lines += _sends(gated)
    lines.append("Allow?")
    return "\n".join(lines)


def _retry_steps(r: _Request) -> list[str] | None:
    """``retry``: the failed steps to try again (engine.retry), alone: it is a continuation of
    the same reversal, with its own budget."""
    steps = r.args.get("retry")
    if steps is None:
        return None
    if not isinstance(steps, list) or not steps or not all(isinstance(x, str) for x in steps):
        raise ConfigError(f'retry must be a list of step ids such as ["s2"], got {steps!r:.200}')
    if r.args.get("continue") or _selection(r):
        raise ConfigError(
            "retry tries failed steps again as a continuation of the same reversal; call "
            "amends_undo with retry alone (and a budget, if you like), without continue, steps "
            "or since"
        )
    return steps


async def _retry(r: _Request, steps: list[str], budget: Budget | None) -> Any:
    """amends_undo ``retry``: MCP users retry failed steps without the CLI (issue 24)."""
    gw = r.gw
    if gw.config.approval != "off":
        question = await _retry_question(r, steps)
        what = {"action": f"retrying the undo of {', '.join(steps)}", "undo": r.saga_id}
        stop = await r.approve(f"retry:{r.saga_id}:{','.join(steps)}", question, what)
        if stop is not None:
            return stop
    report = await gw.engine.retry(r.saga_id, steps, budget=budget, by=gw.sessions.principal(r.ctx))
    return await _answer(r, report)


async def _answer(r: _Request, report: Any) -> Any:
    """An undo report as the agent reads it, with the saga's approvals."""
    data = report.to_dict()
    approvals = await _approvals(r.gw, r.saga_id)
    data["approvals"] = approvals
    text = report.render("text")
    if approvals:
        text += "\nApprovals:\n" + "\n".join(_approval_lines(approvals))
    return _ok(text, data)


def _title(r: _Request) -> str:
    """The saga's title in a question: the agent wrote it, so it is quoted data (rule 12)."""
    return quoted(repr(r.rec.title), 200)


_CLI_RETRY = "(amends undo {saga} --retry STEP)"


async def _undo(r: _Request) -> Any:
    gw, engine = r.gw, r.gw.engine
    budget = _budget(r.args)
    continuing = r.args.get("continue")
    if continuing not in (None, True, False):  # rule 12: "false" is not a yes
        raise ConfigError(f"continue must be true or false, got {continuing!r:.100}")
    continuing = bool(continuing)
    retry = _retry_steps(r)
    if retry is not None:
        return await _retry(r, retry, budget)
    chosen = _selection(r, continuing)
    if gw.config.approval != "off":
        question = await _undo_question(r, continuing)
        if question is not None:
            what = {"action": f"the undo of saga {r.saga_id}", "undo": r.saga_id}
            subject = f"undo:{r.saga_id}:{continuing}"
            if chosen:  # a different selection is a different question
                subject += f":{json.dumps(chosen, sort_keys=True)}"
            stop = await r.approve(subject, question, what)
            if stop is not None:
                return stop
    await gw.sessions.close_saga_id(r.saga_id)  # rule 6: no new step joins a saga being undone
    if continuing:
        try:
            report = await engine.resume(r.saga_id, budget=budget or Budget())
        except SagaStateError as exc:  # its advice, in MCP words: no CLI needed
            cli = _CLI_RETRY.format(saga=r.saga_id)
            raise SagaStateError(
                str(exc).replace(
                    cli, f'(amends_undo {{"saga_id": "{r.saga_id}", "retry": ["STEP"]}})'
                ),
                saga_id=r.saga_id,
            ) from exc
    else:
        report = await engine.undo(r.saga_id, budget=budget, **chosen)
    return await _answer(r, report)


async def _resolve(r: _Request) -> Any:
    gw = r.gw
    step_id, note = r.args.get("step_id"), r.args.get("note")
    if "by" in r.args:
        raise ConfigError(
            f"amends_resolve records who handled it as this gateway's principal "
            f"({gw.sessions.principal(r.ctx)!r}), never a name in the call (rule 12); "
            f"remove 'by' and say what was done in 'note'"
        )
    if not isinstance(step_id, str) or not isinstance(note, str) or not note.strip():
        raise ConfigError(
            f"amends_resolve needs step_id and a note saying what the person did, got "
            f"step_id={step_id!r}, note={note!r}"
        )
    by = gw.sessions.principal(r.ctx)
    if gw.config.approval != "off":
        step = next((s for s in r.rec.steps if s.step_id == step_id), None)
        question = (
            f"The agent asks to record that {by} handled step {quoted(step_id, 100)} "
            f"({step.tool if step else 'unknown step'}) of {_title(r)} (saga {r.saga_id}), "
            f"with the note: {quoted(repr(note))}. This closes its manual action. Allow?"
        )
        what = {"action": f"recording step {step_id} as handled", "step_id": step_id}
        stop = await r.approve(f"resolve:{r.saga_id}:{step_id}:{note}", question, what)
        if stop is not None:
            return stop
    result = await gw.engine.resolve(r.saga_id, step_id, by=by, note=note)
    data = result.to_dict() if hasattr(result, "to_dict") else {"saga_id": r.saga_id}
    return _ok(f"Recorded: {by} handled step {step_id} of saga {r.saga_id}.", data)


async def _follow_up(r: _Request) -> Any:
    """Issue 27: one follow-up of the reversal, behind the gateway's approval gate, inside the
    reversal's budget (the engine stops the agent at the cap: ``not_done``, nothing called)."""
    from amends import FollowUpProposal

    from .._follow_up_tools import outcome_answer

    a = r.args
    step_id, tool, call_args, tokens = (
        a.get("step_id"),
        a.get("tool"),
        a.get("args"),
        a.get("tokens", 0),
    )
    counted = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
    if not (isinstance(step_id, str) and isinstance(tool, str) and isinstance(call_args, dict)):
        counted = False
    if not counted:
        raise ConfigError(
            f"amends_follow_up needs step_id, tool, args (an object) and optionally tokens (a "
            f"non-negative integer), got step_id={step_id!r}, tool={tool!r}, "
            f"args={call_args!r:.80}, tokens={tokens!r}"
        )
    assert isinstance(step_id, str) and isinstance(tool, str) and isinstance(call_args, dict)
    by = r.gw.sessions.principal(r.ctx)
    if r.gw.config.approval != "off":
        catalog = r.gw.engine.catalog
        secret = catalog.get(tool).sensitive if tool in catalog else ()
        question = (
            f"The agent asks to send a follow-up for step {quoted(step_id, 100)} of "
            f"{_title(r)} (saga {r.saga_id}): {shown_call(tool, call_args, secret)}. A sent "
            f"message cannot be taken back. Allow?"
        )
        what = {"action": f"the follow-up {tool} for step {step_id}", "step_id": step_id}
        stop = await r.approve(
            f"follow_up:{r.saga_id}:{step_id}:{tool}:{call_args!r}", question, what
        )
        if stop is not None:
            return stop
    agent = r.gw.engine.follow_up_agent(r.saga_id, by=by, allow=[tool])  # approved above
    outcome = await agent.propose(FollowUpProposal(step_id, tool, call_args, tokens))
    data = outcome.to_dict()
    data["open_manual_actions"] = [m.to_dict() for m in await agent.open_actions()]
    # the words the framework adapters' follow-up tools use too (one text, issue 27)
    return _ok((await outcome_answer(agent, outcome)).text, data)


_HANDLERS: dict[str, Callable[[_Request], Awaitable[Any]]] = {
    "amends_status": _status,
    "amends_preview": _preview,
    "amends_undo": _undo,
    "amends_resolve": _resolve,
    "amends_follow_up": _follow_up,
}
