"""Rule 12 (and rule 8: what a person reads is the truth): a saga title, an argument or a
vendor's text carrying a bidi override or a terminal escape is shown on the web page as an
escape, as the text and HTML reports already showed it. Before, the page printed
``Refund \\u202egnp.exe`` raw, and the browser displayed it reversed ("Refund exe.png")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import amends

TITLE = "Refund \u202egnp.exe\u202c to bob \x1b[31m"


@pytest.mark.parametrize("page", ["/", "/ui/sagas/A"])
async def test_the_page_shows_bidi_overrides_and_escapes_as_text(tmp_path: Path, page: str) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    catalog = amends.Catalog()

    @catalog.tool("crm.note", reversibility="irreversible")
    async def note(call: amends.Call, text: str) -> Any:
        return {"ok": True}

    db = str(tmp_path / "log.db")
    engine = amends.Engine(catalog, log=db)
    async with engine.saga(TITLE, saga_id="A") as saga:
        saga.call("crm.note", text="hi \u202eevil")
    await engine.close()
    app = create_app(lambda: amends.Engine(catalog, log=db), ServerSettings(no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        got = client.get(page)
    assert got.status_code == 200
    assert "\u202e" not in got.text and "\u202c" not in got.text and "\x1b" not in got.text
    assert "Refund \\u202egnp.exe\\u202c to bob \\x1b[31m" in got.text
