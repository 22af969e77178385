"""Follow-ups over HTTP (issue 27 part 2): send a manual action's draft through a catalog tool,
as a follow-up of the saga's reversal, and list what was sent (docs/follow-ups.md).

The sender is the token's identity (rule 12), never a name in the body. Sent, the answer is 200
with ``state: "sent"``; a send the vendor refused is 200 with ``state: "failed"`` (the manual
action stays open), one whose outcome is unknown 200 with ``state: "in_doubt"``; a request that
cannot be sent is 409 ``not_sendable`` and nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from amends import ConfigError, ContractError, HistoryAlteredError, SagaRecord, SagaStateError

from .api import _WRITE, SagaId, StepId, _errors, _state, load_saga, read_json
from .security import guard_write
from .state import ApiError

__all__ = ["router", "send_forms"]

router = APIRouter()

_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "title": "FollowUp",
                    "additionalProperties": False,
                    "required": ["tool", "args"],
                    "properties": {
                        "tool": {"type": "string", "minLength": 1, "maxLength": 200},
                        "args": {"type": "object"},
                    },
                }
            }
        },
    }
}


def _body(data: Any) -> tuple[str, dict[str, Any]]:
    """``{"tool": "mail.send", "args": {...}}``, checked (422 otherwise)."""
    if isinstance(data, dict) and "by" in data:
        raise ApiError(
            422,
            "invalid_follow_up",
            "'by' is not taken from the body: a follow-up records the identity of the token "
            "that sent it (rule 12); send only 'tool' and 'args'",
        )
    tool = data.get("tool") if isinstance(data, dict) else None
    args = data.get("args") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)  # a list of objects is no set of names: never a 500
        or set(data) != {"tool", "args"}
        or not isinstance(tool, str)
        or not isinstance(args, dict)
    ):
        raise ApiError(
            422,
            "invalid_follow_up",
            f'the body must be {{"tool": "mail.send", "args": {{"to": "...", "body": "..."}}}}, '
            f"got {data!r:.200}",
        )
    return tool, args


_TEXT_ARGS = ("body", "text", "message")
"""Where a message usually goes: the page pre-fills the argument the draft goes into from the
step's own arguments; the person sees it and can change it (the engine assumes nothing)."""


def send_forms(saga: SagaRecord) -> dict[str, dict[str, Any]]:
    """Per step, what the page's "Send…" form starts from: the step's own tool, the argument
    its message goes in, and its other arguments (as logged: secrets stay redacted, rule 11)."""
    out = {}
    for step in saga.steps:
        args = step.args if isinstance(step.args, dict) else {}
        text_arg = next((a for a in _TEXT_ARGS if a in args), "")
        rest = {k: v for k, v in args.items() if k != text_arg}
        out[step.step_id] = {"tool": step.tool, "text_arg": text_arg, "args": json.dumps(rest)}
    return out


@router.post(
    "/sagas/{saga_id}/steps/{step_id}/follow-up",
    summary="Send a manual action's draft through a catalog tool (engine.send_follow_up)",
    openapi_extra=_BODY,
    responses=_WRITE,
)
async def send_follow_up(
    request: Request, saga_id: str = SagaId, step_id: str = StepId
) -> dict[str, Any]:
    saga, who = await load_saga(request, saga_id)
    guard_write(request, who)
    tool, args = _body(await read_json(request, "follow-up"))
    steps = [s.step_id for s in saga.steps]
    if step_id not in steps:  # the code resolve and retry answer for an unknown step
        raise ApiError(
            404,
            "step_not_found",
            f"saga {saga.saga_id!r} has no step {step_id[:130]!r}; its steps are "
            f"{', '.join(steps) or 'none'}",
        )
    engine = _state(request).engine
    try:
        sent = await engine.send_follow_up(saga.saga_id, step_id, tool=tool, args=args, by=who.who)
    except SagaStateError as exc:
        raise ApiError(409, "not_sendable", str(exc)) from None
    except HistoryAlteredError as exc:
        raise ApiError(409, "history_does_not_verify", str(exc)) from None
    except ContractError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except ConfigError as exc:
        raise ApiError(422, "invalid_follow_up", str(exc)) from None
    return sent.to_dict()


@router.get(
    "/sagas/{saga_id}/follow-ups",
    summary="The follow-ups people sent in a saga's reversal",
    responses=_errors(401, 404, 409, 422, 429, 503),  # 409: the history does not verify
)
async def list_follow_ups(request: Request, saga_id: str = SagaId) -> list[dict[str, Any]]:
    """What people sent; 409 ``history_does_not_verify`` when the saga's log was edited (rule 12:
    an edited history is never shown as if it were the record)."""
    saga, _who = await load_saga(request, saga_id)
    try:
        sent = await _state(request).engine.follow_ups(saga.saga_id)
    except HistoryAlteredError as exc:
        raise ApiError(409, "history_does_not_verify", str(exc)) from None
    return [f.to_dict() for f in sent]
