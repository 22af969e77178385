"""Bad input gets a clear error: ``GET /sagas?since=nan`` (or ``inf``, ``1e309``) answered 200
with an empty list, as if no saga matched; a time that is not a finite number is now a 422
naming the parameter."""

from __future__ import annotations

from pathlib import Path

import pytest

import amends


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e309"])
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_listing_time_that_is_no_finite_number_is_422(
    tmp_path: Path, name: str, value: str
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from amends.server import ServerSettings, create_app

    db = str(tmp_path / "log.db")
    app = create_app(lambda: amends.Engine(amends.Catalog(), log=db), ServerSettings(no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        got = client.get(f"/sagas?{name}={value}")
        ok = client.get(f"/sagas?{name}=0")
    assert got.status_code == 422, got.text
    body = got.json()
    assert body["error"] == "invalid_request"
    assert body["detail"][0]["loc"] == ["query", name]
    assert body["detail"][0]["type"] == "finite_number"
    assert ok.status_code == 200
