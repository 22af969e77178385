"""Plain-JSON forms of the log's records, for Temporal payloads (activity inputs and results).

Temporal stores every activity result in the workflow's history; amends' records are frozen
dataclasses with tuples, which JSON would turn into lists. These helpers keep the round trip exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from amends import (
    CompensationRecord,
    Redaction,
    Resolution,
    ReversalRecord,
    Reversibility,
    SagaRecord,
    StepRecord,
    ToolSpec,
)
from amends._secrets import redactions_from

__all__ = [
    "compensation_from_dict",
    "reversal_from_dict",
    "saga_from_dict",
    "spec_from_dict",
    "spec_to_dict",
    "to_dict",
]


def to_dict(record: Any) -> dict[str, Any]:
    """A record (saga, step, reversal, compensation) as a JSON-ready dict.

    Nested records become dicts; other values are shared, not copied (the dict is encoded to
    JSON right away). ``dataclasses.asdict`` deep-copies every value: for a 100-step saga that
    was most of the claim activity's CPU time (issue 16)."""
    return {k: _plain(v) for k, v in vars(record).items()}


_RECORDS = (SagaRecord, StepRecord, ReversalRecord, CompensationRecord, Resolution, Redaction)


def _plain(value: Any) -> Any:
    if isinstance(value, _RECORDS):
        return to_dict(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value] if value and _nested(value[0]) else value
    if isinstance(value, Mapping):
        if value and _nested(next(iter(value.values()))):
            return {k: _plain(v) for k, v in value.items()}
        return value if isinstance(value, dict) else dict(value)
    return value


def _nested(value: Any) -> bool:
    return isinstance(value, _RECORDS)


def _step_from_dict(d: Mapping[str, Any]) -> StepRecord:
    return StepRecord(
        **{
            **d,
            "deps": tuple(d.get("deps", ())),
            "resources": tuple(d.get("resources", ())),
            "residue": tuple(d.get("residue", ())),
            "redacted": redactions_from(d.get("redacted")),
        }
    )


def reversal_from_dict(d: Mapping[str, Any]) -> ReversalRecord:
    return ReversalRecord(**d)


def saga_from_dict(d: Mapping[str, Any]) -> SagaRecord:
    rev = d.get("reversal")
    fields = {f.name for f in dataclasses.fields(SagaRecord)}
    out = {
        **d,
        "steps": tuple(_step_from_dict(s) for s in d.get("steps", ())),
        "reversal": None if rev is None else reversal_from_dict(rev),
    }
    if "resolutions" in fields:
        out["resolutions"] = {
            k: Resolution.from_dict(v) for k, v in (d.get("resolutions") or {}).items()
        }
    return SagaRecord(**out)


def compensation_from_dict(d: Mapping[str, Any]) -> CompensationRecord:
    return CompensationRecord(**{**d, "redacted": redactions_from(d.get("redacted"))})


def spec_to_dict(spec: ToolSpec) -> dict[str, Any]:
    """The data of a catalog entry (everything but its functions), for the workflow's catalog."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if callable(value):
            continue  # the tool and its helper functions stay on the worker
        if isinstance(value, Reversibility):
            value = value.value
        elif isinstance(value, tuple | frozenset | set):
            value = list(value)
        out[f.name] = value
    # rule 11: the resolver stays on the worker; the workflow only needs to know there is one
    out["resolves_secrets"] = getattr(spec, "resolve_secret", None) is not None
    return out


def spec_from_dict(d: Mapping[str, Any], fn: Any) -> ToolSpec:
    """A catalog entry whose function is ``fn`` (the workflow's activity shim)."""
    names = {f.name: f for f in dataclasses.fields(ToolSpec)}
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key not in names:
            continue  # a field a newer worker knows; the workflow does without it
        if key == "reversibility":
            value = Reversibility(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return ToolSpec(fn=fn, **kwargs)
