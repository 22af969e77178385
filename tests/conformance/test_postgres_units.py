"""PostgresLog pieces that need no server: URL redaction, placeholders, connection errors."""

from __future__ import annotations

import socket

import pytest

import amends
from amends._log.postgres import redact, to_pyformat


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:s3cret@h:5433/db?sslmode=require") == (
        "postgresql://u:***@h:5433/db?sslmode=require"
    )
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_placeholders_are_rewritten_and_percent_escaped() -> None:
    assert to_pyformat("SELECT ? WHERE a LIKE '5%' AND b=?") == (
        "SELECT %s WHERE a LIKE '5%%' AND b=%s"
    )


def test_unreachable_server_is_a_clear_error_without_the_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://amends:topsecret@127.0.0.1:{port}/amends"
    with pytest.raises(amends._errors.LogError) as info:
        amends.PostgresLog(url, connect_timeout=1)
    msg = str(info.value)
    assert "topsecret" not in msg
    assert f"127.0.0.1:{port}" in msg and "check that the server is running" in msg


def test_a_non_postgres_url_is_a_config_error() -> None:
    with pytest.raises(amends._errors.ConfigError, match="needs a postgresql:// URL"):
        amends.PostgresLog("mysql://x@y/z")
