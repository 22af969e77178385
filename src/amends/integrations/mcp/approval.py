"""The approval gate: before an irreversible (or residue-leaving) call, an undo that acts on the
world, or a resolution, ask the person through MCP elicitation, saying what will happen.

An approval counts only as the answer to a question this gateway asked in this request (rule
12; issue 21, item 4): a ``2025-11-25`` client is asked with ``elicitation/create`` inside the
request; a ``2026-07-28`` client gets an ``input_required`` result carrying a single-use
``requestState`` this gateway minted for exactly this connection and this call, and only a retry
echoing it counts. ``input_responses`` nobody asked for are ignored (the question is asked).
Every approval and refusal is a logged event of the saga (``approval.granted`` /
``approval.refused``: who, what was shown, the answer, when), so ``amends show --history`` and
``amends_status`` show it. A client that cannot be asked gets the call refused, unless the
gateway is configured ``when_no_elicitation = "allow"`` (then the event says nobody was asked).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amends import AmendsError

from .._agent_parts import quoted, shown_call
from .contracts import render

if TYPE_CHECKING:
    from .ports import ExportedTool, GatewayView

__all__ = ["APPROVAL_KEY", "Answer", "Approvals", "approval_message", "call_subject"]

APPROVAL_KEY = "amends_approval"
"""Key of the approval question in a 2026-07-28 ``InputRequiredResult``."""
_TTL = 600.0
"""Seconds a question stays answerable."""
_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Allow"}},
    "required": ["approve"],
}
_UNDO_SAYS = {
    "irreversible": "Undo CANNOT take this back: a person would have to follow up.",
    "compensable": "Undo can compensate this, but not without trace: residue remains.",
}


@dataclass(frozen=True)
class Answer:
    """How the person answered (or why nobody was asked)."""

    approved: bool
    action: str
    """``accept``, ``decline``, ``cancel``, or ``not_asked`` (the client cannot be asked)."""
    shown: str
    """The question exactly as shown."""
    how: str
    """``elicitation``, ``input_required``, or ``not asked: ...``."""
    asked_at: float
    answered_at: float

    def event(self, by: str, what: dict[str, Any]) -> dict[str, Any]:
        """The data of the ``approval.*`` event recording this answer."""
        return {
            "by": by,
            "answer": self.action,
            "how": self.how,
            "shown": self.shown,
            "asked_at": self.asked_at,
            "answered_at": self.answered_at,
            **what,
        }


@dataclass(frozen=True)
class _Question:
    owner: str
    subject: str
    message: str
    asked_at: float


def _verdict(answer: Any) -> tuple[bool, str]:
    action = getattr(answer, "action", None)
    content = getattr(answer, "content", None)
    if isinstance(answer, dict):
        action, content = answer.get("action"), answer.get("content")
    approved = action == "accept" and isinstance(content, dict) and content.get("approve") is True
    return approved, str(action or "no answer")


def _can_ask(ctx: Any) -> bool:
    caps = getattr(ctx.session, "client_capabilities", None)
    return caps is not None and getattr(caps, "elicitation", None) is not None


class Approvals:
    """The questions this gateway has asked ``2026-07-28`` clients and not yet had answered."""

    def __init__(self, gw: GatewayView) -> None:
        self.gw = gw
        self._pending: dict[str, _Question] = {}

    def _take(self, state: Any, owner: str, subject: str) -> _Question | None:
        """The question ``state`` names, if this gateway asked it of ``owner`` about exactly
        ``subject`` and it is still answerable; it can be answered once."""
        now = time.time()
        for nonce in [n for n, q in self._pending.items() if now - q.asked_at > _TTL]:
            del self._pending[nonce]
        q = self._pending.get(state) if isinstance(state, str) else None
        if q is None or q.owner != owner or q.subject != subject:
            return None
        del self._pending[state]
        return q

    async def ask(
        self,
        ctx: Any,
        *,
        owner: str,
        subject: str,
        message: str,
        input_responses: dict[str, Any] | None,
        request_state: str | None,
    ) -> Answer | Any:
        """Ask the person ``message``; returns their :class:`Answer`, or (``2026-07-28``) the
        ``InputRequiredResult`` carrying the question, which the client answers by retrying."""
        now = time.time()
        if not _can_ask(ctx):
            if self.gw.config.when_no_elicitation == "allow":
                how = 'not asked: the client cannot be asked and when_no_elicitation = "allow"'
                return Answer(True, "not_asked", message, how, now, now)
            return Answer(False, "not_asked", message, "not asked: no MCP elicitation", now, now)
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            q = self._take(request_state, owner, subject)
            if q is not None and input_responses and APPROVAL_KEY in input_responses:
                approved, action = _verdict(input_responses[APPROVAL_KEY])
                return Answer(approved, action, q.message, "input_required", q.asked_at, now)
            # Unsolicited or stale answers are ignored: the question is asked now (rule 12).
            import mcp_types as types

            nonce = secrets.token_urlsafe(24)
            self._pending[nonce] = _Question(owner, subject, message, now)
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL_KEY: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=message, requested_schema=_SCHEMA
                        )
                    )
                },
                request_state=nonce,
            )
        try:
            got = await ctx.session.elicit_form(
                message, requested_schema=_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception as exc:  # no back-channel on this transport: it cannot be asked
            how = f"not asked: elicitation failed ({type(exc).__name__})"
            allow = self.gw.config.when_no_elicitation == "allow"
            return Answer(allow, "not_asked", message, how, now, time.time())
        approved, action = _verdict(got)
        return Answer(approved, action, message, "elicitation", now, time.time())


def call_subject(agent_name: str, args: dict[str, Any]) -> str:
    """What a question about one tool call is bound to: the tool and its exact arguments."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()
    return f"call:{agent_name}:{digest}"


def _parties(exp: ExportedTool, args: dict[str, Any]) -> list[str]:
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


def shown_args(exp: ExportedTool, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as amends shows and logs them: sensitive ones as ``[redacted:NAME]``."""
    secret = set(exp.contract.sensitive) if exp.contract is not None else set()
    return {k: f"[redacted:{k}]" if k in secret else v for k, v in args.items()}


def needs_approval(gw: GatewayView, exp: ExportedTool) -> bool:
    """Whether the gate asks before this tool's calls (its class and ``approval``)."""
    mode = gw.config.approval
    if mode == "off":
        return False
    cls = gw.catalog.get(exp.catalog_name).reversibility._value_  # no enum property call
    return cls == "irreversible" or (mode == "residue" and cls == "compensable")


def approval_message(gw: GatewayView, exp: ExportedTool, args: dict[str, Any]) -> str:
    """The question put to the person: tool, class, parties, what undo can and cannot do."""
    spec = gw.catalog.get(exp.catalog_name)
    cls = spec.reversibility.value
    label = cls if spec.explicit else "irreversible (no contract)"
    parties = _parties(exp, args)
    # rule 11: a sensitive argument is never shown, not even to the person being asked;
    # rule 12: every other one is, whole or saying how much was cut (shown_call)
    secret = exp.contract.sensitive if exp.contract is not None else ()
    lines = [
        f"The agent wants to call {shown_call(exp.catalog_name, args, secret)}.",
        f"Class: {label}. {_UNDO_SAYS.get(cls, '')}",
    ]
    if parties:
        lines.append(f"Affected: {quoted(', '.join(parties))}.")
    lines.append("Allow this call?")
    return "\n".join(lines)


def refusal_text(what: str, answer: Answer, gw: GatewayView) -> str:
    """What the agent is told when ``what`` was not approved (nothing was done)."""
    if answer.action == "not_asked":
        return (
            f"amends: {what} needs a person's approval on this gateway, but this client cannot "
            f"be asked (no MCP elicitation support); nothing was done. Use a client with "
            f'elicitation, or set when_no_elicitation = "allow" in [gateway].'
        )
    return f"amends: the user did not approve {what}; nothing was done (answer: {answer.action})"
