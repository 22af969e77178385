"""Sandbox CRM: versioned records, compare-and-set updates, notes, and other writers.

Every write bumps the record's version and etag. ``update_field`` can be made conditional on the
version (``if_version``) or on the field's current value (``if_value``); a mismatch raises
:class:`amends.PreconditionFailed` and writes nothing. Humans and webhooks edit records too.
"""

from __future__ import annotations

from typing import Any, Final

from amends import PermanentError, PreconditionFailed

from ._base import VendorWorld, atomic

__all__ = ["ANY", "Crm"]

_TBL = "crm.records"


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Final = _Any()
"""Default of ``if_value``: no condition on the field's current value."""


def _etag(record_id: str, version: int) -> str:
    return f'W/"{record_id}-{version}"'


class Crm:
    """The CRM vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    def seed(self) -> None:
        """The records a fresh world starts with."""
        self.create_record(
            "acme",
            {
                "name": "ACME Corp",
                "stage": "negotiation",
                "amount": "10000",
                "owner": "dana@example.com",
                "renewal": "pending",
            },
        )
        self.create_record(
            "globex",
            {"name": "Globex", "stage": "prospect", "amount": "0", "owner": "sam@example.com"},
        )

    @atomic
    def create_record(self, record_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Create (or replace) record ``record_id`` with ``fields`` at version 1."""
        rec = {
            "id": record_id,
            "fields": dict(fields),
            "version": 1,
            "etag": _etag(record_id, 1),
            "notes": {},
        }
        self.world.commit([(_TBL, record_id, rec)])
        return rec

    @atomic
    def get(self, record_id: str) -> dict[str, Any]:
        """The record: ``{"id", "fields", "version", "etag", "notes"}``.

        Raises:
            PermanentError: No such record.
        """
        return self._record(record_id)

    def _record(self, record_id: str) -> dict[str, Any]:
        """:meth:`get` for a method already inside the world's transaction (issue 29: not a
        nested transaction per read)."""
        rec: dict[str, Any] | None = self.world.get(_TBL, record_id)
        if rec is None:
            raise PermanentError(f"CRM has no record {record_id!r}; check the id")
        return rec  # the world's reads are the caller's own copy: no second one (issue 29)

    @atomic
    def read_field(self, record_id: str, field: str) -> Any:
        """The current value of one field (``None`` when unset)."""
        return self._record(record_id)["fields"].get(field)

    def _bump(self, rec: dict[str, Any]) -> None:
        rec["version"] += 1
        rec["etag"] = _etag(rec["id"], rec["version"])

    @atomic
    def update_field(
        self,
        record_id: str,
        field: str,
        value: Any,
        *,
        if_version: int | None = None,
        if_value: Any = ANY,
        idempotency_key: str | None = None,
        actor: str = "api",
    ) -> dict[str, Any]:
        """Set one field, compare-and-set on the version and/or the current value.

        Returns ``{"record": ..., "old": previous value}``; replays it for a known key.

        Raises:
            PermanentError: No such record.
            PreconditionFailed: ``if_version`` or ``if_value`` does not match; nothing written.
        """
        w = self.world
        if (prior := w.replay("crm", idempotency_key)) is not None:
            return dict(prior)
        rec = self._record(record_id)
        if if_version is not None and rec["version"] != if_version:
            raise PreconditionFailed(
                f"CRM record {record_id!r} is at version {rec['version']}, not {if_version}; "
                f"someone else wrote it, re-read it before writing"
            )
        old = rec["fields"].get(field)
        if if_value is not ANY and old != if_value:
            raise PreconditionFailed(
                f"CRM field {record_id}.{field} is {old!r}, expected {if_value!r}; someone "
                f"else changed it, nothing was written"
            )
        rec["fields"][field] = value
        self._bump(rec)
        out = {"record": rec, "old": old}
        return dict(
            w.commit(
                [(_TBL, record_id, rec)],
                [
                    {
                        "vendor": "crm",
                        "op": "update_field",
                        "key": f"{record_id}.{field}",
                        "value": value,
                        "old": old,
                        "actor": actor,
                    }
                ],
                vendor="crm",
                idempotency_key=idempotency_key,
                response=out,
            )
        )

    @atomic
    def human_edit(self, record_id: str, field: str, value: Any) -> dict[str, Any]:
        """Another actor: a person edits a field in the CRM's UI."""
        return self.update_field(record_id, field, value, actor="human")["record"]  # type: ignore[no-any-return]

    @atomic
    def webhook_edit(self, record_id: str, field: str, value: Any) -> dict[str, Any]:
        """Another actor: an integration's webhook writes a field."""
        return self.update_field(record_id, field, value, actor="webhook")["record"]  # type: ignore[no-any-return]

    @atomic
    def log_activity(
        self, record_id: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Append a line to a record's activity log (what happened to the deal, for people)."""
        w = self.world
        if (prior := w.replay("crm", idempotency_key)) is not None:
            return dict(prior)
        rec = self._record(record_id)
        activity = [*rec.get("activity", []), {"text": text, "at": w.iso()}]
        # kept sorted: entries logged at the same moment by parallel branches read the same
        # whichever landed first (the effect journal keeps the real order)
        rec["activity"] = sorted(activity, key=lambda e: (e["at"], e["text"]))
        return dict(
            w.commit(
                [(_TBL, record_id, rec)],
                [{"vendor": "crm", "op": "log_activity", "key": record_id, "text": text}],
                vendor="crm",
                idempotency_key=idempotency_key,
                response={"record_id": record_id, "text": text},
            )
        )

    @atomic
    def add_note(
        self, record_id: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Attach a note to a record; returns ``{"id", "record_id", "text"}``."""
        w = self.world
        if (prior := w.replay("crm", idempotency_key)) is not None:
            return dict(prior)
        rec = self._record(record_id)
        nid = w.next_id("note")
        note = {"id": nid, "record_id": record_id, "text": text}
        rec["notes"][nid] = text
        self._bump(rec)
        return dict(
            w.commit(
                [(_TBL, record_id, rec)],
                [{"vendor": "crm", "op": "add_note", "key": nid, "record_id": record_id}],
                vendor="crm",
                idempotency_key=idempotency_key,
                response=note,
            )
        )

    @atomic
    def delete_note(
        self, record_id: str, note_id: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Remove a note.

        Raises:
            PermanentError: The record or the note does not exist.
        """
        w = self.world
        if (prior := w.replay("crm", idempotency_key)) is not None:
            return dict(prior)
        rec = self._record(record_id)
        if note_id not in rec["notes"]:
            raise PermanentError(f"CRM record {record_id!r} has no note {note_id!r}")
        del rec["notes"][note_id]
        self._bump(rec)
        out = {"deleted": note_id, "record_id": record_id}
        return dict(
            w.commit(
                [(_TBL, record_id, rec)],
                [{"vendor": "crm", "op": "delete_note", "key": note_id, "record_id": record_id}],
                vendor="crm",
                idempotency_key=idempotency_key,
                response=out,
            )
        )
