"""An intent record's text written from its parts (issue 29), kept out of
:mod:`amends._log.records` for its size cap: byte for byte what the log's encoder gives for the
record's body (``tests/unit/test_record_texts.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._jsondata import MAX_DEPTH, may_not_keep
from .base import StepIntent
from .records import _INT, _STR, dumps, intent_text, redacted_body

__all__ = ["intent_body", "step_intent_text"]


def intent_body(intent: StepIntent) -> dict[str, Any]:
    """An intent record's body (what ``SqlSagaLog.begin_step`` logs, rule 1)."""
    args, deps, resources = intent.args, intent.deps, intent.resources
    body: dict[str, Any] = {
        "seq": intent.seq,
        "tool": intent.tool,
        "args": args if type(args) is dict else dict(args),
        "deps": deps if type(deps) is list else list(deps),
        "resources": resources if type(resources) is list else list(resources),
        "declared": intent.declared,
    }
    if not intent.explicit:  # issue 26: "not declared" is not "declared irreversible"
        body["explicit"] = False
    if intent.redacted:  # rule 12: where amends itself put a marker, inside the chain
        body["redacted"] = redacted_body(intent.redacted, ("args",))
    return body


def _ids_text(ids: Sequence[str]) -> str | None:
    """``dumps(list(ids))`` for a list or tuple of exact strs; ``None`` for anything else."""
    if not ids:
        return "[]"
    kind = type(ids)
    if kind is list or kind is tuple:
        for i in ids:
            if type(i) is not str:
                return None
        return f"[{','.join(map(_STR, ids))}]"
    return None


_NOT_EXPLICIT = ',"explicit":false'


def step_intent_text(intent: StepIntent) -> str:
    """``intent_text(intent_body(intent))``, byte for byte: the body's fixed keys written here
    in sorted order and only the arguments encoded (issue 29: one encoder call for the whole
    record cost ~20 k instructions, most of them its fixed shape). An intent with redaction
    markers, ids that are not strs, or a text that may be too deep takes the body's way. The
    usual values are written inline, not by calls (``tests/unit/test_hot_path.py``)."""
    deps, resources, declared, tool = intent.deps, intent.resources, intent.declared, intent.tool
    if (
        not intent.redacted
        and type(intent.seq) is int
        and type(declared) is str
        and type(tool) is str
        and (deps_text := "[]" if not deps else _ids_text(deps)) is not None
        and (resources_text := "[]" if not resources else _ids_text(resources)) is not None
    ):
        args = intent.args
        try:
            text = (
                f'{{"args":{dumps(args if type(args) is dict else dict(args))},"declared":'
                f'{_STR(declared)},"deps":{deps_text}{"" if intent.explicit else _NOT_EXPLICIT},'
                f'"resources":{resources_text},"seq":{_INT(intent.seq)},"tool":{_STR(tool)}}}'
            )
        except (ValueError, RecursionError):  # the body's way says which argument
            pass
        else:
            if len(text) <= 2 * MAX_DEPTH or not may_not_keep(text):  # may_not_keep's own test
                return text
    return intent_text(intent_body(intent))
