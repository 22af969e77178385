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


def test_a_token_file_that_is_not_a_database_is_refused_and_its_connection_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token file sqlite3 opens but cannot read (not a database) is a ConfigError naming the
    file, and the connection the store opened on it is closed, not left to the garbage
    collector (a long-running server retrying a bad path would keep one open file per try)."""
    from amends.server import auth

    bad = tmp_path / "tokens.db"
    bad.write_bytes(b"not a database at all" * 200)
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def tracking(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    monkeypatch.setattr(auth.sqlite3, "connect", tracking)
    with pytest.raises(amends.ConfigError, match="cannot open the token file"):
        TokenStore(str(bad))
    assert len(opened) == 1
    with pytest.raises(sqlite3.ProgrammingError):
        opened[0].execute("SELECT 1")
