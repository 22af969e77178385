"""``amends mcp serve`` refuses bad input with a clear message before starting anything."""

from __future__ import annotations

import pytest

from amends import ConfigError
from amends.cli import main
from amends.integrations.mcp.cli import parse_address


def test_parse_address_accepts_host_port_and_names_the_fix() -> None:
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("8765", "127.0.0.1:", "127.0.0.1:99999", "host:port"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_address(bad)


def test_a_non_loopback_http_address_needs_allow_remote(capsys: pytest.CaptureFixture[str]) -> None:
    """The gateway has no authentication of its own: it is not exposed by accident."""
    rc = main(["mcp", "serve", "--config", "gateway.toml", "--http", "0.0.0.0:8765"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not a loopback address" in err and "--allow-remote" in err


def test_a_missing_config_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["mcp", "serve", "--config", "/nonexistent/gateway.toml"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "does not exist" in err and "Traceback" not in err
