"""The tools the gateway adds for the agent: ``amends_begin``, ``amends_status``,
``amends_preview``, ``amends_undo`` and ``amends_resolve``.

Each answers with honest text and ``structured_content`` holding the same data (the undo report
is :meth:`amends.UndoReport.to_dict`). None of them claims more than the engine verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types

from amends import AmendsError, Budget, ConfigError

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["AMENDS_TOOLS", "run_amends_tool"]

_SAGA = {"saga_id": {"type": "string", "description": "default: this connection's saga"}}

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
        "nothing but read-only checks.",
        input_schema={"type": "object", "properties": dict(_SAGA)},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="amends_undo",
        description="Undo the saga: every step is reverted, compensated or acknowledged in "
        "dependency order, never overwriting a value someone changed since (drift). Asking "
        "twice gives the same report. Optional budget: tool_calls, tokens, seconds; "
        "continue=true continues a reversal that stopped short with a new budget.",
        input_schema={
            "type": "object",
            "properties": {
                **_SAGA,
                "tool_calls": {"type": "integer", "minimum": 0},
                "tokens": {"type": "integer", "minimum": 0},
                "seconds": {"type": "number", "exclusiveMinimum": 0},
                "continue": {"type": "boolean"},
            },
        },
        annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    ),
    types.Tool(
        name="amends_resolve",
        description="Record that a person handled a step's manual action (sent the draft, "
        "checked that an in-doubt call did not go through).",
        input_schema={
            "type": "object",
            "properties": {
                **_SAGA,
                "step_id": {"type": "string"},
                "by": {"type": "string"},
                "note": {"type": "string"},
            },
            "required": ["step_id", "by"],
        },
        annotations=types.ToolAnnotations(idempotent_hint=True),
    ),
]


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
    gw: Gateway, ctx: Any, name: str, args: dict[str, Any]
) -> types.CallToolResult:
    """Run one amends tool.

    Raises:
        AmendsError: Bad arguments, unknown saga (answered to the agent as an error result).
    """
    engine = gw.engine
    if name == "amends_begin":
        title = args.get("title")
        if not isinstance(title, str) or not title.strip():
            raise ConfigError(f"amends_begin needs a title saying what was asked, got {title!r}")
        slot = gw._slot(ctx)
        await gw._close_saga(slot)
        saga = await gw._open_saga(slot, title)
        return _ok(f"Started saga {saga.id}: {title}", {"saga_id": saga.id, "title": title})
    saga_id = gw._default_saga_id(ctx, args.get("saga_id"))
    rec = await engine.log.get_saga(saga_id)
    # A gateway with a tenant answers only for that tenant's sagas (the same "not found" as for
    # a missing id, so ids of other tenants are not revealed).
    if rec is None or (gw.config.tenant is not None and rec.tenant != gw.config.tenant):
        raise AmendsError(f"no saga {saga_id!r} in the log; check the id (amends_status)")
    if name == "amends_status":
        steps = [
            {
                "step_id": s.step_id,
                "tool": s.tool,
                "state": s.state,
                "reversibility": s.effective or s.declared,
                "error": s.error,
                "violation": s.violation,
            }
            for s in rec.steps
        ]
        report = await engine.report(saga_id)
        data: dict[str, Any] = {
            "saga_id": saga_id,
            "title": rec.title,
            "state": rec.state,
            "steps": steps,
            "report": report.to_dict() if report is not None else None,
        }
        lines = [f"Saga {saga_id} '{rec.title}' ({rec.state}), {len(steps)} step(s):"]
        lines += [
            f"- {s['step_id']} {s['tool']}: {s['state']}, {s['reversibility']}"
            + (f" ({s['error']})" if s["error"] else "")
            for s in steps
        ]
        if report is not None:
            lines.append(f"Undo: {report.headline}")
        return _ok("\n".join(lines), data)
    if name == "amends_preview":
        plan = await engine.preview(saga_id)
        pdata = plan.to_dict()
        lines = [f"If undone now, saga {saga_id}:"]
        for p in pdata.get("steps", []):
            verb = p.get("verb") or p.get("action")
            lines.append(f"- {p['step_id']} {p['tool']}: {verb} ({p.get('reason', '')})")
            for r in p.get("expected_residue", []):
                lines.append(f"  residue: {r['what']}")
        return _ok("\n".join(lines), pdata)
    if name == "amends_undo":
        budget = _budget(args)
        await gw._close_saga_id(saga_id)  # rule 6: no new step joins a saga being undone
        if args.get("continue"):
            resume = getattr(engine, "resume", None)
            if resume is None:
                raise AmendsError(
                    "continuing a reversal needs an amends with Engine.resume; upgrade amends"
                )
            report = await resume(saga_id, budget=budget or Budget())
        else:
            report = await engine.undo(saga_id, budget=budget)
        return _ok(report.render("text"), report.to_dict())
    if name == "amends_resolve":
        resolve = getattr(engine, "resolve", None)
        if resolve is None:
            raise AmendsError("recording a resolution needs an amends with Engine.resolve")
        step_id, by = args.get("step_id"), args.get("by")
        if not isinstance(step_id, str) or not isinstance(by, str) or not by.strip():
            raise ConfigError(
                f"amends_resolve needs step_id and by (who handled it), got "
                f"step_id={step_id!r}, by={by!r}"
            )
        result = await resolve(saga_id, step_id, by=by, note=args.get("note") or "")
        data = result.to_dict() if hasattr(result, "to_dict") else {"saga_id": saga_id}
        return _ok(f"Recorded: {by} handled step {step_id} of saga {saga_id}.", data)
    raise ConfigError(
        f"unknown amends tool {name!r}; the gateway offers "
        f"{', '.join(t.name for t in AMENDS_TOOLS)}"
    )
