"""Token store and settings (fast tier: no server)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

import amends
from amends.server import ServerSettings, TokenStore, create_app, tokens_path_for


def test_tokens_are_stored_as_sha256_only(tmp_path: Path) -> None:
    path = str(tmp_path / "x.tokens")
    store = TokenStore(path)
    try:
        token = store.create("acme")
        conn = sqlite3.connect(path)
        rows = conn.execute("SELECT tenant, sha256 FROM amends_api_tokens").fetchall()
        conn.close()
        assert rows == [("acme", hashlib.sha256(token.encode()).hexdigest())]
        info = store.check(token)
        assert info is not None and info.tenant == "acme"
        assert store.check("") is None
        assert store.check(None) is None
        assert store.check("amd_" + "x" * 500) is None
    finally:
        store.close()


def test_two_tokens_of_two_tenants_are_distinct() -> None:
    store = TokenStore(":memory:")
    a, b = store.create("a"), store.create("b")
    assert a != b
    assert [store.check(t).tenant for t in (a, b)] == ["a", "b"]  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize(
    ("db", "expected"),
    [
        ("amends.db", "amends.db.tokens"),
        ("sqlite:///var/x.db", "var/x.db.tokens"),
        (":memory:", ":memory:"),
        ("postgresql://u@h/db", "amends-tokens.db"),
    ],
)
def test_token_file_sits_beside_the_log(db: str, expected: str) -> None:
    assert tokens_path_for(db) == expected


def test_empty_tenant_is_refused_with_the_value_named() -> None:
    store = TokenStore(":memory:")
    with pytest.raises(amends.ConfigError, match=r"--tenant must be a non-empty name, got ''"):
        store.create("")
    store.close()


def test_auth_without_a_token_store_is_a_config_error() -> None:
    with pytest.raises(amends.ConfigError, match="needs settings.tokens"):
        create_app(lambda: amends.Engine(amends.Catalog(), log=":memory:"), ServerSettings())
