"""The seam between the contract language and the places its tools live (HTTP, MCP).

A transport makes **one call** of a tool named in a contract file and says how it went, as data:
a :class:`TransportResult` whose :attr:`~TransportResult.kind` is one of

- ``ok``: the tool answered with a result;
- ``refused``: the tool (or the transport, before sending anything) refused: no effect;
- ``transient``: refused for now, worth retrying (rate limited, busy);
- ``drift``: a compensation's compare-and-set refused the write (the world changed, rule 4);
- ``unknown``: the call may or may not have taken effect (a timeout after sending, a lost
  connection, an error the transport cannot read) -- rule 9.

The transport never raises for an answer it can judge, and never decides what the answer means
for a saga: the applier (:mod:`.applier`) reads the contract's ``[errors]`` patterns over the
error text and raises what the engine understands (:func:`raise_for`). HTTP judges by status
code (``amends._toml_catalog``), MCP by ``isError`` (``amends.integrations.mcp.contracts``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._errors import PermanentError, PreconditionFailed, ToolError, TransientError

if TYPE_CHECKING:
    from .._contracts import Expectation

__all__ = [
    "ErrorRules",
    "Kind",
    "OutcomeUnknownError",
    "Transport",
    "TransportRequest",
    "TransportResult",
    "raise_for",
    "read",
    "says",
    "strict_json",
]

Kind = Literal["ok", "refused", "transient", "drift", "unknown"]
Phase = Literal["forward", "before", "after", "compensate", "follow_up", "probe"]


class OutcomeUnknownError(ToolError):
    """A call of a contract-file tool may or may not have been acted on (a timeout or a lost
    connection after sending, an HTTP 504, an MCP error the contract does not read).

    A :class:`~amends.ToolError` that is neither transient nor permanent: the engine logs a
    forward step ``in_doubt`` (rule 9: the vendor may have acted) with this message as it is
    -- in the words of the contract's users, no advice for Python tool authors -- and an
    inverse that raises it did not verifiably land (never ``reverted``).
    """


@dataclass(frozen=True)
class TransportRequest:
    """One call a transport is asked to make (one input record, so fields can be added)."""

    tool: str
    """The tool's name in its contract file (the upstream's own name for MCP)."""
    args: Mapping[str, Any]
    """The concrete arguments (secrets included: a transport never logs them)."""
    phase: Phase
    """Why the call is made: ``forward``, ``before`` (a capture), ``after`` (an observation),
    ``compensate``, ``follow_up`` or ``probe``."""
    saga_id: str
    """The saga of the step."""
    step_id: str
    """The step the call belongs to (for compensations: the step being undone)."""
    idempotency_key: str
    """Stable per step and phase; a transport hands it to the vendor (rule 5)."""
    precondition: Expectation | None = None
    """For a compensation: the expectation, for a vendor's compare-and-set (rule 4)."""
    sensitive: tuple[str, ...] = ()
    """Arguments the contract declares secret: a transport never echoes their values (rule 11)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    """``text`` parsed as JSON as the standard defines it: ``NaN``, ``Infinity`` and
    ``-Infinity`` (which Python's parser accepts) are refused, so a vendor's answer never puts
    a value in a template, an inverse or the log that no JSON encoder can send back.

    Raises:
        ValueError: ``text`` is not JSON.
        RecursionError: ``text`` is nested too deeply to parse.
    """
    return json.loads(text, parse_constant=_no_constant)


@dataclass(frozen=True)
class TransportResult:
    """What one call did, as data."""

    kind: Kind
    """``ok``, ``refused``, ``transient``, ``drift`` or ``unknown`` (see the module doc)."""
    structured: Any = None
    """The structured result: MCP ``structuredContent``, an HTTP JSON body; ``None`` if none."""
    text: str = ""
    """The result's text (MCP text content, an HTTP body that is not JSON)."""
    error_text: str | None = None
    """The error the tool itself raised or answered, as its own words (what ``[errors]`` and
    ``absent_when`` patterns read); ``None`` for a result that is not an error."""
    detail: str = ""
    """What happened, for a person (``HTTP 302 redirect to /x; redirects are not followed``)."""
    retry_after: float | None = None
    """For ``transient``: seconds the tool asked to wait before trying again."""

    @property
    def ok(self) -> bool:
        """Whether the tool answered with a result."""
        return self.kind == "ok"

    def value(self) -> Any:
        """The result templates and the log see: :attr:`structured` when present, else the text
        parsed as a JSON object or array when it is one (issue 24: a server that returns a dict
        as text only), else the text (``None`` for an empty answer)."""
        if self.structured is not None:
            return self.structured
        text = self.text.strip()
        if not text:
            return None
        if text[:1] in ("{", "["):
            try:
                return strict_json(text)
            except (ValueError, RecursionError):  # not JSON, or nested too deep: the text
                pass
        return self.text

    def explained(self, redact: Callable[[str], str] | None = None) -> str:
        """What happened, for a message: the detail and the tool's own words (each once, the
        words cut to 500 characters only after ``redact`` replaced the call's secrets: a
        secret cut in two is recognised by no redaction, rule 11)."""
        said = (self.error_text or self.text or "").strip()
        said = (redact(said) if redact is not None else said)[:500]
        detail = self.detail or said or f"({self.kind}, no message)"
        return f"{detail}: {said}" if said and said not in detail else detail

    def answer(self) -> str:
        """The answer as text, for ``refused_answer``: the structured result as JSON
        (``{"ok": false}`` reads ``"ok": false``), else the text."""
        if self.structured is not None:
            try:
                return json.dumps(self.structured, sort_keys=True)
            except (TypeError, ValueError, RecursionError):
                return str(self.structured)
        return self.text

    def said(self) -> str:
        """The words error patterns are matched against: the tool's own error text and the
        result's text (each once)."""
        parts = [p for p in (self.error_text, self.text) if p]
        return "\n".join(dict.fromkeys(parts))


Transport = Callable[[TransportRequest], Awaitable[TransportResult]]
"""Makes one call (:class:`TransportRequest`) and says how it went (:class:`TransportResult`)."""


@dataclass(frozen=True)
class ErrorRules:
    """How a tool's errors read, by their text (``[errors]`` of a contract file). An error that
    matches none keeps the transport's own judgement (for MCP: unknown, rule 9)."""

    refused: re.Pattern[str] | None = None
    """Text of an error that means the tool refused: the call had no effect."""
    transient: re.Pattern[str] | None = None
    """Text of an error worth retrying (within the retry policy and budget)."""
    drift: re.Pattern[str] | None = None
    """Text of an error that means a compensation's precondition failed (drift, rule 4)."""
    refused_answer: re.Pattern[str] | None = None
    """Text of an answer the transport reads as ``ok`` (an HTTP 2xx, an MCP result that is not
    ``isError``) that means the tool refused: a vendor's ``200 {"ok": false, ...}``, a server's
    "Error: ..." as plain text. Matched against :meth:`TransportResult.answer`. Without it such
    an answer is a success, and an inverse that answered so would be reported reverted."""

    def judge(self, result: TransportResult, args: Mapping[str, Any] | None = None) -> Kind:
        """The kind of ``result`` once these patterns have read its words; ``args``: the call's
        arguments, whose words the tool may echo (:func:`says`)."""
        if result.ok:
            refused = self.refused_answer is not None and says(
                self.refused_answer, result.answer(), args
            )
            return "refused" if refused else "ok"
        said = result.said()
        for kind, pattern in (
            ("drift", self.drift),
            ("transient", self.transient),
            ("refused", self.refused),
        ):
            if pattern is not None and says(pattern, said, args):
                return kind  # type: ignore[return-value]
        return result.kind


def says(pattern: re.Pattern[str], said: str, args: Mapping[str, Any] | None) -> bool:
    """Whether the tool's own words in ``said`` match ``pattern``.

    Rules 9 and 12: a tool's error often echoes what it was sent ("timed out while saving note
    'Access denied: see memo'"), and an agent, or a vendor whose answer filled an inverse,
    chooses those words. A match found inside one of the call's argument values (its text, any
    case) is theirs, not the tool's verdict: it is passed over, and the error keeps the
    transport's judgement (unknown, for a write that may have landed). A verdict of the tool's
    own that the agent's text happens to contain is passed over too: unknown, the safe side.
    """
    echoed: list[str] | None = None
    for m in pattern.finditer(said):
        if echoed is None:
            echoed = [t.casefold() for t in _texts(args)] if args else []
        found = m.group().casefold()
        if not any(found in t for t in echoed):
            return True
    return False


def _texts(value: Any, depth: int = 0) -> list[str]:
    """The strings inside an argument value (keys and JSON forms included), for :func:`says`."""
    if isinstance(value, str):
        return [value, json.dumps(value)[1:-1]]
    if depth > 20:
        return []
    if isinstance(value, Mapping):
        return [t for k, v in value.items() for t in (*_texts(k, depth + 1), *_texts(v, depth + 1))]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _texts(v, depth + 1)]
    return [str(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


def read(
    rules: ErrorRules, result: TransportResult, args: Mapping[str, Any] | None = None
) -> TransportResult:
    """``result`` as ``rules`` read it: its kind judged, and an ok answer they read as a
    refusal (``refused_answer``) carried as the error it is, its answer quoted; ``args``: the
    call's arguments, whose words a tool echoes are not its verdict (:func:`says`)."""
    kind = rules.judge(result, args)
    if kind == result.kind:
        return result
    if result.ok:
        return dataclasses.replace(
            result, kind=kind, error_text=result.answer(), detail="it answered"
        )
    return dataclasses.replace(result, kind=kind)


def raise_for(
    result: TransportResult,
    rules: ErrorRules,
    tool: str,
    args: Mapping[str, Any] | None = None,
    redact: Callable[[str], str] | None = None,
) -> None:
    """Raise what the engine understands for a result that is not ``ok`` (rule 9); ``redact``
    replaces the call's secrets in the tool's words before they are cut to length.

    ``args``: the call's arguments; words of theirs a tool echoes are not its verdict
    (:func:`says`).

    Raises:
        PreconditionFailed: ``drift``: a compare-and-set refused the write.
        TransientError: ``transient``: try again.
        PermanentError: ``refused``: nothing happened.
        OutcomeUnknownError: ``unknown``: whether the call took effect is unknown.
    """
    result = read(rules, result, args)
    kind = result.kind
    if kind == "ok":
        return
    detail = result.explained(redact)
    if kind == "drift":
        raise PreconditionFailed(f"{tool}: {detail}")
    if kind == "transient":
        raise TransientError(f"{tool}: {detail}", retry_after=result.retry_after)
    if kind == "refused":
        raise PermanentError(f"{tool} refused: {detail}")
    raise OutcomeUnknownError(f"{tool}: {detail}")


def result_of(value: Any) -> TransportResult:
    """An ``ok`` result holding ``value`` (a tool reached in-process, e.g. a Python probe)."""
    return TransportResult("ok", structured=value)


def failed_as(exc: BaseException) -> TransportResult | None:
    """The result an amends tool error stands for (a Python tool used by a contract file)."""
    if isinstance(exc, PreconditionFailed):
        return TransportResult("drift", error_text=str(exc))
    if isinstance(exc, TransientError):
        return TransportResult("transient", error_text=str(exc), retry_after=exc.retry_after)
    if isinstance(exc, PermanentError):
        return TransportResult("refused", error_text=str(exc))
    return None
