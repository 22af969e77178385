"""Sandbox docs: drafts can be created and deleted without trace; sharing notifies collaborators.

Unsharing removes access but the "shared with you" notification was already sent. Collaborators
edit documents too.
"""

from __future__ import annotations

from typing import Any

from amends import PermanentError

from ._base import VendorWorld, atomic

__all__ = ["Docs"]

_TBL = "docs.docs"


class Docs:
    """The document vendor of a :class:`World`."""

    def __init__(self, world: VendorWorld) -> None:
        self.world = world

    @atomic
    def create_draft(
        self, title: str, text: str, *, private: bool = False, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Create a draft (no one is notified). A ``private`` one can never be shared or edited
        by anyone else."""
        w = self.world
        if (prior := w.replay("docs", idempotency_key)) is not None:
            return dict(prior)
        did = w.next_id("doc")
        doc = {
            "id": did,
            "title": title,
            "text": text,
            "status": "draft",
            "shared_with": [],
            "notified": [],
            "private": private,
        }
        return dict(
            w.commit(
                [(_TBL, did, doc)],
                [{"vendor": "docs", "op": "create", "key": did}],
                vendor="docs",
                idempotency_key=idempotency_key,
                response=doc,
            )
        )

    @atomic
    def get(self, doc_id: str) -> dict[str, Any]:
        """The document now (``status`` is ``draft`` or ``deleted``).

        Raises:
            PermanentError: No such document.
        """
        doc = self.world.get(_TBL, doc_id)
        if doc is None:
            raise PermanentError(f"docs has no document {doc_id!r}; check the id")
        return dict(doc)

    @atomic
    def delete(self, doc_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Delete a document.

        Raises:
            PermanentError: Unknown or already deleted.
        """
        w = self.world
        if (prior := w.replay("docs", idempotency_key)) is not None:
            return dict(prior)
        doc = self.get(doc_id)
        if doc["status"] == "deleted":
            raise PermanentError(f"document {doc_id!r} is already deleted")
        doc["status"] = "deleted"
        return dict(
            w.commit(
                [(_TBL, doc_id, doc)],
                [{"vendor": "docs", "op": "delete", "key": doc_id}],
                vendor="docs",
                idempotency_key=idempotency_key,
                response=doc,
            )
        )

    @atomic
    def share(
        self, doc_id: str, people: list[str], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Give ``people`` access; each gets a "shared with you" notification.

        Raises:
            PermanentError: Unknown or deleted document.
        """
        w = self.world
        if (prior := w.replay("docs", idempotency_key)) is not None:
            return dict(prior)
        doc = self.get(doc_id)
        if doc["status"] == "deleted":
            raise PermanentError(f"document {doc_id!r} is deleted; it cannot be shared")
        if doc.get("private"):
            raise PermanentError(f"document {doc_id!r} is private; it cannot be shared")
        new = [p for p in people if p not in doc["shared_with"]]
        doc["shared_with"] += new
        doc["notified"] += new
        effects = [{"vendor": "docs", "op": "share_notice", "key": doc_id, "to": p} for p in new]
        out = {"doc": doc, "added": new}
        return dict(
            w.commit(
                [(_TBL, doc_id, doc)],
                effects,
                vendor="docs",
                idempotency_key=idempotency_key,
                response=out,
            )
        )

    @atomic
    def unshare(
        self, doc_id: str, people: list[str], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Remove access for ``people`` (their notification stays in their inbox)."""
        w = self.world
        if (prior := w.replay("docs", idempotency_key)) is not None:
            return dict(prior)
        doc = self.get(doc_id)
        doc["shared_with"] = [p for p in doc["shared_with"] if p not in people]
        return dict(
            w.commit(
                [(_TBL, doc_id, doc)],
                [{"vendor": "docs", "op": "unshare", "key": doc_id, "people": list(people)}],
                vendor="docs",
                idempotency_key=idempotency_key,
                response=doc,
            )
        )

    @atomic
    def collaborator_edit(self, doc_id: str, text: str) -> None:
        """Another actor: a collaborator rewrites the document's text.

        Raises:
            PermanentError: The document is private (no one else can edit it).
        """
        doc = self.get(doc_id)
        if doc.get("private"):
            raise PermanentError(f"document {doc_id!r} is private; no collaborator can edit it")
        doc["text"] = text
        self.world.commit(
            [(_TBL, doc_id, doc)],
            [{"vendor": "docs", "op": "edit", "key": doc_id, "actor": "collaborator"}],
        )
