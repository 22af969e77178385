"""The approval gate: before an irreversible (or residue-leaving) call, ask the user via MCP
elicitation, saying the tool's class, who is affected, and what undo can and cannot do.

A client that cannot be asked gets the call refused with a clear error, unless the gateway is
configured ``when_no_elicitation = "allow"``. A refused call never reaches the upstream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amends import AmendsError

from .contracts import render

if TYPE_CHECKING:
    from .gateway import Exported, Gateway

__all__ = ["approval_message", "gate"]

_UNDO_SAYS = {
    "irreversible": "Undo CANNOT take this back: a person would have to follow up.",
    "compensable": "Undo can compensate this, but not without trace: residue remains.",
}


def _parties(exp: Exported, args: dict[str, Any]) -> list[str]:
    c = exp.contract
    if c is None:
        return []
    for table in (c.effects.acknowledge, c.effects.residue):
        if table is not None and "parties" in table:
            try:
                found = render(table["parties"], {"args": args}, "approval")
            except AmendsError:
                continue  # the parties come from the result: not known before the call
            if isinstance(found, list):
                return [str(p) for p in found]
    return []


def approval_message(gw: Gateway, exp: Exported, args: dict[str, Any]) -> str:
    """The question put to the user: tool, class, parties, what undo can and cannot do."""
    spec = gw.catalog.get(exp.catalog_name)
    cls = spec.reversibility.value
    label = cls if spec.explicit else "irreversible (no contract)"
    parties = _parties(exp, args)
    secret = set(exp.contract.sensitive) if exp.contract is not None else set()
    # rule 11: a sensitive argument is never shown, not even to the user being asked
    shown = ", ".join(f"{k}={'<redacted>' if k in secret else repr(v)}" for k, v in args.items())
    lines = [
        f"The agent wants to call {exp.catalog_name}({shown[:300]}).",
        f"Class: {label}. {_UNDO_SAYS.get(cls, '')}",
    ]
    if parties:
        lines.append(f"Affected: {', '.join(parties)}.")
    lines.append("Allow this call?")
    return "\n".join(lines)


APPROVAL_KEY = "amends_approval"
"""Key of the approval question in a 2026-07-28 ``InputRequiredResult``."""

_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Allow"}},
    "required": ["approve"],
}


def _verdict(exp: Exported, cls: str, answer: Any) -> str | None:
    action = getattr(answer, "action", None) or (answer or {}).get("action")
    content = getattr(answer, "content", None)
    if content is None and isinstance(answer, dict):
        content = answer.get("content")
    if action == "accept" and (content or {}).get("approve") is True:
        return None
    return (
        f"amends: the user did not approve {exp.catalog_name} ({cls}); the call was not sent "
        f"(answer: {action})"
    )


async def gate(
    gw: Gateway,
    ctx: Any,
    exp: Exported,
    args: dict[str, Any],
    input_responses: dict[str, Any] | None = None,
) -> Any:
    """Decide whether the call may go ahead.

    Returns:
        ``None`` to go ahead; a string: the reason it is refused (for the agent); or, on a
        2026-07-28 connection, an ``InputRequiredResult`` asking the client for the user's answer
        (the client retries the call with it).
    """
    mode = gw.config.approval
    if mode == "off":
        return None
    cls = gw.catalog.get(exp.catalog_name).reversibility.value
    if not (cls == "irreversible" or (mode == "residue" and cls == "compensable")):
        return None
    if input_responses and APPROVAL_KEY in input_responses:
        return _verdict(exp, cls, input_responses[APPROVAL_KEY])
    message = approval_message(gw, exp, args)
    caps = getattr(ctx.session, "client_capabilities", None)
    can_ask = caps is not None and getattr(caps, "elicitation", None) is not None
    if can_ask:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28: the server cannot call the client mid-request; it returns the question
            # and the client calls again with the user's answer.
            import mcp_types as types

            return types.InputRequiredResult(
                input_requests={
                    APPROVAL_KEY: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=message, requested_schema=_SCHEMA
                        )
                    )
                }
            )
        try:
            answer = await ctx.session.elicit_form(
                message, requested_schema=_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception:  # no back-channel on this transport: treated as "cannot ask"
            can_ask = False
        else:
            return _verdict(exp, cls, answer)
    if gw.config.when_no_elicitation == "allow":
        return None
    return (
        f"amends: {exp.catalog_name} is {cls} and this gateway asks the user before such calls, "
        f"but this client cannot be asked (no MCP elicitation support); the call was not sent. "
        f'Use a client with elicitation, or set when_no_elicitation = "allow" in [gateway].'
    )
