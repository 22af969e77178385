"""Issue 17 item 3: `amends demo --serve` opens on a saga ready to undo -- its preview and the
button visible -- with the demo's already-undone saga beside it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from fastapi.testclient import TestClient

import amends
from amends.sandbox import demo_catalog
from amends.sandbox.demo import SELECTIVE_TITLE, run_demo
from amends.server import ServerSettings, create_app
from amends.server.demo import READY_TITLE, seed_ready_saga


def test_demo_serve_has_one_saga_ready_to_undo_beside_the_undone_one(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    result = run_demo(db)
    undone, selective = result.saga_id, result.selective_saga_id
    ready = asyncio.run(seed_ready_saga(db))
    catalog = demo_catalog(db)
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(no_auth=True))
    with TestClient(app) as client:
        home = client.get("/").text
        assert f"/ui/sagas/{ready}" in home and f"/ui/sagas/{undone}" in home
        # the list shows the headline as it stands now (issue 26): the demo's person already
        # sent one draft, so one manual action is handled, as the saga's page says
        assert (
            "8 of 12 taken back (4 compensated, leaving a trace) · 1 handled by a person · "
            "3 need your attention" in home
        )
        assert "Undo would: revert 2 · compensate 2 · ask a person about 1" in home
        # issue 27: the second request, undone only in part, is listed as such
        assert f"/ui/sagas/{selective}" in home and SELECTIVE_TITLE in home
        assert (
            "2 of 2 taken back (1 compensated, leaving a trace) · 1 other step kept as it is"
            in (home)
        )

        page = client.get(f"/ui/sagas/{ready}").text
        assert f"<h1>{READY_TITLE}</h1>" in page
        assert re.search(r'<button type="button" id="undo"[^>]*>Undo</button>', page)
        summary = re.search(r'<p class="summary" id="summary">(.*?)</p>', page)
        assert summary is not None
        assert summary.group(1) == (
            "Revert 2, Compensate 2 with residue, Acknowledge 1 — a person must follow up"
        )
        # the confirmation names who gets a cancellation notice and when the refund settles
        dialog = page[page.index('<dialog id="confirm"') :]
        assert "cancellation notice for &#39;Premium onboarding&#39;" in dialog
        assert "affects buyer@acme.example, sam@example.com" in dialog
        assert re.search(r"Refund of 2,400.00 USD .* settles \d{1,2} [A-Z][a-z]{2} \d{4}", dialog)
        assert "Yes: Revert 2, Compensate 2, Acknowledge 1" in dialog

        done = client.get(f"/ui/sagas/{undone}").text
        assert 'id="undo"' not in done
        assert '<h2 id="headline" class="headline" tabindex="-1">8 of 12 taken back' in done
        assert '<h2 id="preview-h">' not in done  # the report replaces the preview

        part = client.get(f"/ui/sagas/{selective}").text
        assert f"<h1>{SELECTIVE_TITLE}</h1>" in part
        assert "1 other step kept as it is" in part
        # the kept meeting is named by its sentence, not its step id (issue 26: no ids in
        # what people read)
        assert (
            "Kept as it is: Invite buyer@acme.example, dana@example.com to &#39;ACME admin "
            "training&#39; at 14 Dec 2026 16:00 UTC." in part
        )
        assert "Undo the rest" in part
